//! One path handed to a report (`kbuild diff`, `kbuild baseline --from`, `kbuild inspect`),
//! opened: a bundle (read and verified here, the one crate that reads bundles) or the JSON a
//! build writes (a build output directory's `manifest.json`, a manifest, a resource
//! baseline), which the report parses. Reports never read bundles themselves: the caller
//! hands them the bundle's manifest.

use std::path::{Path, PathBuf};

use crate::archive::ArchiveLimits;
use crate::{Bundle, BundleError};

/// What one side holds.
#[derive(Debug)]
pub enum Side {
    /// A bundle, verified (every object's sha256, nothing missing, nothing extra).
    Bundle(Box<Bundle>),
    /// JSON read from `path` (a manifest or a resource baseline), not yet parsed.
    Json { path: PathBuf, data: Vec<u8> },
}

/// Why a side could not be opened. `which` names the argument (`OLD`, `NEW`, `the baseline`).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{which} `{path}` does not exist")]
    Missing { which: String, path: String },
    #[error("{path}: a directory without manifest.json; pass a build output directory (`kbuild build --out DIR`), a manifest, a bundle or a baseline")]
    NoManifest { path: String },
    #[error("reading {path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: not a readable kbuild bundle: {err}")]
    Bundle { path: String, err: BundleError },
    /// Not there, over its size limit, or not a regular file.
    #[error(transparent)]
    Refused(kbuild_base::read::ReadError),
}

impl OpenError {
    /// Whether the user named something that is not there (a usage error, exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, OpenError::Missing { .. })
    }
}

/// Open one side: a directory's `manifest.json`, a bundle (by its magic bytes; `limits` bound
/// its unpacked size), else the file's bytes as JSON.
pub fn open_side(path: &Path, which: &str, limits: ArchiveLimits) -> Result<Side, OpenError> {
    if !path.exists() {
        return Err(OpenError::Missing {
            which: which.to_string(),
            path: path.display().to_string(),
        });
    }
    // Manifests and baselines are read through the manifest's cap; a bundle streams.
    let max = kbuild_manifest::manifest::MAX_JSON_BYTES;
    if path.is_dir() {
        let m = path.join("manifest.json");
        let data = kbuild_base::read::read_capped(&m, max, "a manifest").map_err(|e| {
            if e.is_not_found() {
                OpenError::NoManifest {
                    path: path.display().to_string(),
                }
            } else {
                OpenError::Refused(e)
            }
        })?;
        return Ok(Side::Json { path: m, data });
    }
    if starts_like_bundle(path) {
        let bundle = Bundle::open(path, limits).map_err(|err| OpenError::Bundle {
            path: path.display().to_string(),
            err,
        })?;
        return Ok(Side::Bundle(Box::new(bundle)));
    }
    let data = kbuild_base::read::read_capped(path, max, "a manifest or baseline")
        .map_err(OpenError::Refused)?;
    Ok(Side::Json {
        path: path.to_path_buf(),
        data,
    })
}

/// Whether the file at `path` starts with a bundle's magic bytes (reads 16 bytes; false for
/// what cannot be read).
pub fn starts_like_bundle(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut n = 0;
    let mut f = f.take(head.len() as u64);
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    kbuild_base::looks_like_bundle(&head[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_side_is_a_usage_error_and_a_dir_needs_a_manifest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope");
        let e = open_side(&missing, "OLD", ArchiveLimits::default()).expect_err("missing");
        assert!(e.is_usage());
        assert!(e.to_string().starts_with("OLD `"), "{e}");
        let e = open_side(dir.path(), "NEW", ArchiveLimits::default()).expect_err("no manifest");
        assert!(!e.is_usage());
        assert!(
            e.to_string().contains("a directory without manifest.json"),
            "{e}"
        );
        std::fs::write(dir.path().join("manifest.json"), b"{}").expect("write");
        match open_side(dir.path(), "NEW", ArchiveLimits::default()).expect("opens") {
            Side::Json { path, data } => {
                assert_eq!(path, dir.path().join("manifest.json"));
                assert_eq!(data, b"{}");
            }
            Side::Bundle(_) => panic!("not a bundle"),
        }
        assert!(!starts_like_bundle(&dir.path().join("manifest.json")));
        assert!(!starts_like_bundle(&missing));
    }
}
