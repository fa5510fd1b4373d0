//! Demangled names for reports: the demangler is the manifest crate's
//! ([`kbuild_manifest::demangle`], re-exported here); this adds the names of both sides of a diff.

use std::collections::BTreeMap;

pub use kbuild_manifest::demangle::*;

use crate::diff::Snapshot;

/// [`demangle`] over every entry name of `snaps` (both sides of a diff).
pub fn demangle_snapshots(snaps: &[&Snapshot]) -> BTreeMap<String, String> {
    demangle(
        snaps
            .iter()
            .flat_map(|s| s.objects.iter())
            .flat_map(|o| o.resources.keys()),
    )
}
