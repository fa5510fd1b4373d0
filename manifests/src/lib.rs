//! kbuild's shared vocabulary: the target catalogue, the one compat rule table, the manifest
//! schema, and pure readers of GPU code objects (`&[u8]` in, typed records out, never I/O).

pub mod compat;
pub mod demangle;
// Sample manifests for the workspace's tests. Compiled always (a few small functions): behind a
// feature, the tests' build of this crate and a product's (the Python wheel, a build script)
// would differ, and every crate above it would compile twice in one test run.
#[doc(hidden)]
pub mod fixtures;
pub mod load_index;
pub mod manifest;
mod manifest_json;
pub mod occupancy;
pub mod params;
pub mod read;
pub mod resources;
pub mod shard;
pub mod target;
pub mod triton;
