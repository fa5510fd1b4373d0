//! What can go wrong in the engine; each variant says what and, where there is one, the fix.

use crate::geometry::GeometryError;
use crate::inputs::InputError;

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    #[error(transparent)]
    Inputs(#[from] InputError),
    /// A size of a run request that the geometry refuses (`flag`: the request's field).
    #[error("--{flag}: {source}")]
    Request {
        flag: &'static str,
        source: GeometryError,
    },
    #[error("--seeds: give at least one seed")]
    NoSeeds,
    /// Kernels the engine needs that the bundle lacks or cannot run on the device.
    #[error("{bundle}: the GDN engine needs {} kernel object(s) the bundle cannot give for {device}:\n{}\nhint: {hint}", .missing.len(), .missing.iter().map(|m| format!("  - {m}")).collect::<Vec<_>>().join("\n"))]
    MissingKernels {
        bundle: String,
        device: String,
        missing: Vec<String>,
        hint: String,
    },
    #[error("{what}: {source}")]
    Loader {
        what: String,
        #[source]
        source: kbuild_loader::LoaderError,
    },
    #[error("{what} {path}: {err}")]
    File {
        what: &'static str,
        path: String,
        err: std::io::Error,
    },
    #[error("{api} failed: {message}")]
    Cuda { api: &'static str, message: String },
    #[error("{0}")]
    Unsupported(String),
    /// A size the kernels take as a 32-bit int is larger.
    #[error("{what} = {value} does not fit a kernel int")]
    TooLarge { what: &'static str, value: usize },
    #[error("layer {layer}: the stack has {layers} layers")]
    NoSuchLayer { layer: usize, layers: usize },
    /// An input slice whose length is not the geometry's.
    #[error("{what}: {got} values, the geometry needs {want}")]
    Length {
        what: &'static str,
        got: usize,
        want: usize,
    },
    #[error("inputs ({inputs}) are for another geometry than the engine's")]
    GeometryMismatch { inputs: String },
    #[error(
        "layer {layer} has {got} token(s), layer 0 has {first}: every layer takes the same window"
    )]
    UnevenWindow {
        layer: usize,
        got: usize,
        first: usize,
    },
    #[error(
        "forward of {tokens} token(s): only {staged} are staged; hint: stage the window first"
    )]
    NotStaged { tokens: usize, staged: usize },
    #[error("recurrence of {tokens} token(s) needs the q, k, v, g, β of a forward of at least {tokens} token(s); hint: run forward first")]
    NoForward { tokens: usize },
    /// The engine holds no `kernel` kernel for this many tokens.
    #[error("no {kernel} kernel for {tokens} tokens")]
    NoKernel { kernel: &'static str, tokens: usize },
    #[error("no tokens")]
    NoTokens,
    #[error("device buffer access {offset}..{end} outside its {len} elements")]
    OutOfBounds {
        offset: usize,
        end: usize,
        len: usize,
    },
}
