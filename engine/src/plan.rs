//! Which kernel objects the engine needs for a geometry, checked against a bundle's selection
//! for a device before anything is allocated or loaded: a missing kernel, variant or entry,
//! or an object that cannot run on the device, is one error listing all of them.

use kbuild_loader::select::build_target;
use kbuild_loader::Selection;
use kbuild_manifest::manifest::Manifest;

use crate::error::{EngineError, Result};
use crate::geometry::Geometry;

pub const CONV: &str = "gdn_conv";
pub const GATES: &str = "gdn_gates";
pub const NORM: &str = "gdn_norm";
pub const STEP: &str = "gdn_step";
pub const FUSED: &str = "gdn_fused";
pub const STEP_VERIFY: &str = "gdn_step_verify";
pub const STEP_COMMIT: &str = "gdn_step_commit";
pub const FUSED_VERIFY: &str = "gdn_fused_verify";

/// The variant of an exact-T kernel (`TOKENS` axis in kernels/Kbuild.toml).
pub fn tokens_variant(t: usize) -> String {
    format!("tokens{t}")
}

/// One kernel object the engine needs and the entries it calls in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub kernel: &'static str,
    pub variant: Option<String>,
    pub entries: &'static [&'static str],
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.variant {
            Some(v) => write!(f, "{}.{v}", self.kernel),
            None => write!(f, "{}", self.kernel),
        }
    }
}

/// Everything a geometry's window needs: conv, gates, norm, and for every T in 1..=window the
/// exact-T step (verify + commit) and fused objects.
pub fn needs(geometry: &Geometry) -> Vec<Need> {
    let mut v = vec![
        Need {
            kernel: CONV,
            variant: None,
            entries: &[CONV],
        },
        Need {
            kernel: GATES,
            variant: None,
            entries: &[GATES],
        },
        Need {
            kernel: NORM,
            variant: None,
            entries: &[NORM],
        },
    ];
    for t in 1..=geometry.window {
        v.push(Need {
            kernel: STEP,
            variant: Some(tokens_variant(t)),
            entries: &[STEP_VERIFY, STEP_COMMIT],
        });
        v.push(Need {
            kernel: FUSED,
            variant: Some(tokens_variant(t)),
            entries: &[FUSED_VERIFY],
        });
    }
    v
}

/// Check that every [`needs`] object is in `manifest`, selected for the device, and exports
/// its entries. `bundle` names the manifest/bundle in the error.
pub fn check(
    manifest: &Manifest,
    selection: &Selection,
    bundle: &str,
    geometry: &Geometry,
) -> Result<()> {
    geometry.validate_for_kernels()?;
    let mut missing = Vec::new();
    for need in needs(geometry) {
        let choice = selection
            .kernels
            .iter()
            .find(|k| k.kernel == need.kernel && k.variant == need.variant);
        let Some(choice) = choice else {
            let what = if selection.kernels.iter().any(|k| k.kernel == need.kernel) {
                "variant not in the bundle"
            } else {
                "kernel not in the bundle"
            };
            missing.push(format!("{need}: {what}"));
            continue;
        };
        let Some(candidate) = choice.selected() else {
            let nm = selection.no_match(choice);
            missing.push(format!(
                "{need}: no object runs on {} (the bundle has: {})",
                nm.device,
                if nm.available.is_empty() {
                    "none".to_string()
                } else {
                    nm.available.join(", ")
                }
            ));
            continue;
        };
        let Some(record) = manifest.objects.get(candidate.object) else {
            missing.push(format!(
                "{need}: selected object #{} is not in the manifest",
                candidate.object
            ));
            continue;
        };
        for entry in need.entries {
            if !record.entries.iter().any(|e| e == entry) {
                missing.push(format!(
                    "{need} ({}): entry `{entry}` not exported (it exports: {})",
                    record.target,
                    record.entries.join(", ")
                ));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(EngineError::MissingKernels {
        bundle: bundle.to_string(),
        device: selection.device.name(),
        missing,
        hint: format!(
            "build the GDN kernels (the [kernels.gdn_*] tables of kernels/Kbuild.toml, TOKENS = 1..{}) for the device: `kbuild --targets {}`",
            geometry.window,
            build_target(&selection.device)
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kbuild_manifest::compat::Device;
    use kbuild_manifest::manifest::{ObjectRecord, PackageInfo, Provenance};

    use super::*;

    /// The selection of `m` on the H200, through the loader's one entry point.
    fn select(m: &Manifest) -> Selection {
        kbuild_loader::Package::from_manifest(m.clone())
            .unwrap()
            .select(&h200())
    }

    fn record(
        kernel: &str,
        variant: Option<String>,
        target: &str,
        entries: &[&str],
    ) -> ObjectRecord {
        ObjectRecord {
            kernel: kernel.into(),
            variant,
            defines: BTreeMap::new(),
            target: target.into(),
            path: format!("{target}/{kernel}.cubin"),
            sha256: "0".repeat(64),
            blake3: None,
            size: 1,
            format: if target.starts_with("gfx") {
                "hsaco"
            } else {
                "cubin"
            }
            .into(),
            entries: entries.iter().map(|e| e.to_string()).collect(),
            demangled: Default::default(),
            params: Default::default(),
            resources: BTreeMap::new(),
            cache_key: String::new(),
            compile_args: Vec::new(),
            triton: None,
        }
    }

    /// A manifest with every GDN object for `targets`, minus those `skip` rejects.
    fn manifest(targets: &[&str], skip: impl Fn(&Need) -> bool) -> Manifest {
        let g = Geometry::default();
        let mut objects = Vec::new();
        for t in targets {
            for n in needs(&g) {
                if !skip(&n) {
                    objects.push(record(n.kernel, n.variant.clone(), t, n.entries));
                }
            }
        }
        Manifest {
            schema: "kbuild.manifest/v1".into(),
            package: PackageInfo {
                name: "kbuild-kernels".into(),
                version: "0.1.0".into(),
            },
            provenance: Provenance {
                git_commit: None,
                git_dirty: None,
                toolchains: Vec::new(),
                flags: BTreeMap::new(),
                host: "linux-x86_64".into(),
            },
            targets: targets.iter().map(|t| t.to_string()).collect(),
            kernels: vec![CONV, GATES, NORM, STEP, FUSED]
                .into_iter()
                .map(String::from)
                .collect(),
            objects,
            containers: Vec::new(),
            failed: Vec::new(),
            missing: Vec::new(),
            restricted: Default::default(),
            partial: false,
            shard: None,
        }
    }

    fn h200() -> Device {
        Device::parse("sm_90", None, None).unwrap()
    }

    #[test]
    fn complete_bundle_passes() {
        let m = manifest(&["sm_90", "gfx1100"], |_| false);
        let sel = select(&m);
        check(&m, &sel, "out/manifest.json", &Geometry::default()).unwrap();
        // A window of 4 needs only tokens1..4.
        let m = manifest(&["sm_90"], |n| {
            n.variant.as_deref().is_some_and(|v| v > "tokens4")
        });
        let sel = select(&m);
        check(
            &m,
            &sel,
            "b",
            &Geometry {
                window: 4,
                ..Geometry::default()
            },
        )
        .unwrap();
    }

    #[test]
    fn missing_kernel_is_a_clear_error() {
        let m = manifest(&["sm_90"], |n| n.kernel == FUSED);
        let sel = select(&m);
        let e = check(&m, &sel, "out/manifest.json", &Geometry::default()).unwrap_err();
        let s = e.to_string();
        assert!(
            s.starts_with("out/manifest.json: the GDN engine needs 8 kernel object(s)"),
            "{s}"
        );
        assert!(
            s.contains("gdn_fused.tokens1: kernel not in the bundle"),
            "{s}"
        );
        assert!(
            s.contains("hint: build the GDN kernels") && s.contains("kbuild --targets sm_90"),
            "{s}"
        );
    }

    #[test]
    fn missing_variant_entry_and_target_are_named() {
        let m = manifest(&["sm_90"], |n| {
            n.variant.as_deref() == Some("tokens8") && n.kernel == STEP
        });
        let sel = select(&m);
        let s = check(&m, &sel, "b", &Geometry::default())
            .unwrap_err()
            .to_string();
        assert!(
            s.contains("gdn_step.tokens8: variant not in the bundle"),
            "{s}"
        );

        let mut m = manifest(&["sm_90"], |_| false);
        for o in &mut m.objects {
            if o.kernel == NORM {
                o.entries = vec!["rmsnorm_f32".into()];
            }
        }
        let sel = select(&m);
        let s = check(&m, &sel, "b", &Geometry::default())
            .unwrap_err()
            .to_string();
        assert!(
            s.contains("gdn_norm (sm_90): entry `gdn_norm` not exported (it exports: rmsnorm_f32)"),
            "{s}"
        );

        let m = manifest(&["gfx1100"], |_| false);
        let sel = select(&m);
        let s = check(&m, &sel, "b", &Geometry::default())
            .unwrap_err()
            .to_string();
        assert!(
            s.contains("gdn_conv: no object runs on sm_90 (the bundle has: gfx1100)"),
            "{s}"
        );
    }

    #[test]
    fn geometry_the_kernels_cannot_run_is_refused_first() {
        let m = manifest(&["sm_90"], |_| false);
        let sel = select(&m);
        let s = check(
            &m,
            &sel,
            "b",
            &Geometry {
                dv: 64,
                ..Geometry::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(s.contains("dv = 64"), "{s}");
    }
}
