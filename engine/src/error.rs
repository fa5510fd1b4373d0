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
    #[error("{api} failed: {message}")]
    Cuda { api: &'static str, message: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Other(String),
}
