//! Gated DeltaNet decode/verify/commit engine over kernels loaded from a kbuild bundle.
//!
//! * [`geometry`]: the stack's sizes and every request's validation;
//! * [`inputs`]: seeded realistic inputs or a safetensors file;
//! * [`reference`]: the fp64 CPU reference of every step, and an independent naive form;
//! * [`plan`]: which kernel objects the engine needs, checked against a bundle's selection;
//! * [`engine`]: [`GdnEngine`], device buffers, forward (verify), commit (per layer, batched),
//!   CUDA-graph capture;
//! * [`parity`], [`bench`]: the GPU parity suite and the benchmark `kbuild run gdn` prints;
//! * [`run`]: `kbuild run gdn` as one call (the request checked, then parity and bench).
//!
//! The kernels come from the bundle through kbuild-loader, never from code compiled into the
//! engine.

pub mod anchor;
pub mod bench;
pub mod device;
pub mod engine;
pub mod error;
pub mod files;
pub mod geometry;
pub mod inputs;
pub mod parity;
pub mod plan;
pub mod reference;
pub mod report;
pub mod run;

pub use engine::{CommitMode, GdnEngine, Path};
pub use error::{EngineError, Result};
pub use geometry::Geometry;
pub use inputs::Inputs;
