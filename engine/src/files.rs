//! The files of `kbuild run gdn`: the inputs read from a safetensors file (or seeded), and
//! the dump of a window's inputs and fp64 reference, written atomically.

use std::path::Path;

use crate::anchor;
use crate::error::{EngineError, Result};
use crate::geometry::Geometry;
use crate::inputs::Inputs;

/// The inputs of a run: those of `file` when given, else one seeded set per seed.
pub fn run_inputs(file: Option<&Path>, seeds: &[u64], geometry: Geometry) -> Result<Vec<Inputs>> {
    let Some(p) = file else {
        return Ok(seeds.iter().map(|s| Inputs::seeded(geometry, *s)).collect());
    };
    let bytes = std::fs::read(p).map_err(|err| EngineError::File {
        what: "reading",
        path: p.display().to_string(),
        err,
    })?;
    let shown = p.display().to_string();
    Ok(vec![Inputs::from_safetensors(&shown, &bytes, geometry)?])
}

/// Write `inputs` and the fp64 reference of a full window to `path` (safetensors,
/// [`anchor::dump`]); the bytes written.
pub fn write_dump(path: &Path, inputs: &Inputs) -> Result<usize> {
    let bytes = anchor::dump(inputs)?;
    kbuild_base::fs::write_atomic(path, &bytes).map_err(|err| EngineError::File {
        what: "writing",
        path: path.display().to_string(),
        err,
    })?;
    Ok(bytes.len())
}
