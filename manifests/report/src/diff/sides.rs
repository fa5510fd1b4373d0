//! One side of a diff read from disk: a build output directory (its `manifest.json`), a
//! manifest, a resource baseline, or a bundle (its manifest, the bundle verified).

use std::path::Path;

use kbuild_bundle::archive::Limits;
use kbuild_bundle::{Bundle, BundleError};

use super::{Snapshot, SnapshotError};

/// Why a side could not be read. `which` names the argument (`OLD`, `NEW`, `the baseline`).
#[derive(Debug, thiserror::Error)]
pub enum SideError {
    #[error("{which} `{path}` does not exist")]
    Missing { which: String, path: String },
    #[error("{path}: a directory without manifest.json; pass a build output directory (`kbuild build --out DIR`), a manifest, a bundle or a baseline")]
    NoManifest { path: String },
    #[error("reading {path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: not a readable kbuild bundle: {err}")]
    Bundle { path: String, err: BundleError },
    #[error("{path}: {err}")]
    Snapshot { path: String, err: SnapshotError },
}

impl SideError {
    /// Whether the user named something that is not there (a usage error, exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, SideError::Missing { .. })
    }
}

fn snapshot(path: &Path, data: &[u8]) -> Result<Snapshot, SideError> {
    Snapshot::from_json(data).map_err(|err| SideError::Snapshot {
        path: path.display().to_string(),
        err,
    })
}

/// Read one side; `limits` bound a bundle's unpacked size.
pub fn load_side(path: &Path, which: &str, limits: Limits) -> Result<Snapshot, SideError> {
    if !path.exists() {
        return Err(SideError::Missing {
            which: which.to_string(),
            path: path.display().to_string(),
        });
    }
    if path.is_dir() {
        let m = path.join("manifest.json");
        let data = std::fs::read(&m).map_err(|_| SideError::NoManifest {
            path: path.display().to_string(),
        })?;
        return snapshot(&m, &data);
    }
    let data = std::fs::read(path).map_err(|err| SideError::Io {
        path: path.display().to_string(),
        err,
    })?;
    if kbuild_base::looks_like_bundle(&data) {
        let bundle = Bundle::from_bytes(&data, limits).map_err(|err| SideError::Bundle {
            path: path.display().to_string(),
            err,
        })?;
        return Ok(Snapshot::from_manifest(bundle.manifest()));
    }
    snapshot(path, &data)
}
