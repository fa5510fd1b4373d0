//! Paths handed to the reports, read: one side of a diff or a baseline's `--from`
//! ([`load_side`]) and one path of `kbuild inspect` ([`inspect_path`]). The bundle crate opens
//! bundles, the report crate parses and renders what they hold; this joins the two so the
//! report never depends on bundles.

use std::path::Path;

use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::side::{open_side, starts_like_bundle, OpenError, Side};
use kbuild_bundle::Bundle;
use kbuild_manifest::resources::BlockSize;
use kbuild_report::diff::{Snapshot, SnapshotError};
use kbuild_report::inspect::{self, Inspected};

/// Why a side could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SideError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{path}: {err}")]
    Snapshot { path: String, err: SnapshotError },
}

impl SideError {
    /// Whether the user named something that is not there (a usage error, exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, SideError::Open(e) if e.is_usage())
    }
}

/// Read one side of a diff: a build output directory (its `manifest.json`), a manifest, a
/// resource baseline, or a bundle (its manifest, the bundle verified; `limits` bound its
/// unpacked size). `which` names the argument in messages (`OLD`, `NEW`, `--from`).
pub fn load_side(path: &Path, which: &str, limits: ArchiveLimits) -> Result<Snapshot, SideError> {
    match open_side(path, which, limits)? {
        Side::Bundle(bundle) => Ok(Snapshot::from_manifest(bundle.manifest())),
        Side::Json { path, data } => {
            Snapshot::from_json(&data).map_err(|err| SideError::Snapshot {
                path: path.display().to_string(),
                err,
            })
        }
    }
}

/// Inspect one path (see [`kbuild_report::inspect::inspect_path`]); a bundle is read
/// streaming from its file (its compressed bytes never all in memory, `limits` bound what it
/// unpacks to) and each object it lists is inspected as `BUNDLE#OBJECT PATH`.
pub fn inspect_path(
    path: &Path,
    limits: ArchiveLimits,
    block_size: Option<BlockSize>,
) -> Inspected {
    if path.is_dir() || !starts_like_bundle(path) {
        return inspect::inspect_path(path, block_size);
    }
    let label = path.display().to_string();
    match Bundle::open(path, limits) {
        Ok(bundle) => inspect::inspect_objects(
            &label,
            bundle
                .manifest()
                .objects
                .iter()
                .map(|o| (o, bundle.object(&o.sha256))),
            block_size,
        ),
        Err(e) => Inspected::fail(label, format!("not a readable kbuild bundle: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_names_the_file_that_does_not_parse() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("resources.json");
        std::fs::write(&f, b"not json").expect("write");
        let e = load_side(&f, "OLD", ArchiveLimits::default()).expect_err("bad json");
        assert!(!e.is_usage());
        assert!(
            e.to_string().starts_with(&format!("{}: ", f.display())),
            "{e}"
        );
        let e =
            load_side(&dir.path().join("gone"), "NEW", ArchiveLimits::default()).expect_err("gone");
        assert!(e.is_usage());
    }

    #[test]
    fn inspect_reports_an_unreadable_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let found = inspect_path(dir.path(), ArchiveLimits::default(), None);
        assert!(found.objects.is_empty());
        assert_eq!(found.errors.len(), 1);
        assert!(found.errors[0].error.contains("without manifest.json"));
    }
}
