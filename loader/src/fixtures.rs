//! Sample objects and manifests for the unit tests (kbuild_manifest's fixtures, cut to what
//! selection needs).

use std::collections::BTreeMap;

use kbuild_manifest::manifest::{Manifest, ObjectRecord};
use kbuild_manifest::resources::{PtxResources, Resources};

/// An object of `kernel` (`variant`) for `target`; a PTX one (`compute_*`) records `isa`.
pub(crate) fn object(
    kernel: &str,
    variant: Option<&str>,
    target: &str,
    isa: Option<&str>,
) -> ObjectRecord {
    let format = if target.starts_with("compute_") {
        "ptx"
    } else if target.starts_with("sm_") {
        "cubin"
    } else {
        "hsaco"
    };
    let mut resources = BTreeMap::new();
    if let Some(isa) = isa {
        resources.insert(
            kernel.to_string(),
            Resources::Ptx(PtxResources {
                ptx_isa: isa.into(),
                target: target.replace("compute_", "sm_"),
            }),
        );
    }
    ObjectRecord {
        kernel: kernel.into(),
        variant: variant.map(str::to_string),
        defines: BTreeMap::new(),
        target: target.into(),
        path: format!(
            "{target}/{kernel}{}.{format}",
            variant.map(|v| format!(".{v}")).unwrap_or_default()
        ),
        sha256: "0".repeat(64),
        blake3: None,
        size: 1,
        format: format.into(),
        entries: vec![kernel.into()],
        demangled: Default::default(),
        params: Default::default(),
        resources,
        cache_key: String::new(),
        compile_args: Vec::new(),
        triton: None,
    }
}

/// A manifest of package `t` 0.1.0 with `objects` and no `targets` list.
pub(crate) fn manifest(objects: Vec<ObjectRecord>) -> Manifest {
    let mut m = kbuild_manifest::fixtures::manifest("t", "0.1.0", objects);
    m.targets.clear();
    m
}

/// The objects of `rmsnorm` an H200 build has (sm_80, sm_89, sm_90, sm_90a, PTX 9.5).
pub(crate) fn h200_bundle() -> Manifest {
    manifest(
        ["sm_80", "sm_89", "sm_90", "sm_90a"]
            .iter()
            .map(|t| object("rmsnorm", None, t, None))
            .chain(std::iter::once(object(
                "rmsnorm",
                None,
                "compute_90",
                Some("9.5"),
            )))
            .collect(),
    )
}
