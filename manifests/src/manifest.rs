//! The build manifest (`kbuild.manifest/v1`): what a build produced, from what, with what.

use std::collections::BTreeMap;

use kbuild_base::ident::{self, IdentError};
use serde::{Deserialize, Serialize};

/// sha256 fields become blob file names (`objects/sha256/<hex>`): 64 lowercase hex digits.
fn check_sha256(field: &str, hex: &str) -> Result<(), IdentError> {
    if kbuild_base::digest::is_sha256_hex(hex) {
        Ok(())
    } else {
        Err(IdentError {
            field: field.to_string(),
            value: hex.escape_debug().take(200).collect(),
            why: "is not a sha256 (64 lowercase hex digits)",
        })
    }
}

/// The schema tag every manifest carries.
pub const SCHEMA: &str = "kbuild.manifest/v1";

/// The largest manifest.json kbuild reads (a build dir's, a bundle's first entry, the OCI
/// config blob): far above any real project's (a few MiB for thousands of kernel × target
/// records), far below what would exhaust memory when parsed into records.
pub const MAX_JSON_BYTES: u64 = 64 << 20;

/// The most a manifest may cost to read, as [`kbuild_base::json_cost::estimate`] counts it (an
/// estimate of the peak memory of reading and selecting from it): real manifests up to about
/// 50 MB of text pass (13,500 objects with their parameter tables, the largest tried, estimate
/// 231 MB and peak at 199 MB in `kbuild explain`), while a document of tiny values (22 million
/// `""` in 66 MB, 2.1 GB when it was read) is refused before it is parsed.
pub const MAX_PARSE_COST: u64 = 224 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: String,
    pub package: PackageInfo,
    pub provenance: Provenance,
    /// Canonical names of the targets built, in request order.
    pub targets: Vec<String>,
    /// Kernel names of the project, in Kbuild.toml order.
    pub kernels: Vec<String>,
    /// One record per (kernel, variant, target) object, sorted by (target, kernel, variant).
    pub objects: Vec<ObjectRecord>,
    /// Multi-target containers written by `--fat`: one fatbin per CUDA kernel (variant), one
    /// clang offload bundle per HIP kernel (variant).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerRecord>,
    /// (kernel, variant, target) jobs of this build that failed; absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<UnbuiltObject>,
    /// Jobs that never ran because the build stopped at a failure (no `--keep-going`) or was
    /// interrupted; absent when every job ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<UnbuiltObject>,
    /// Kernels of the project that Kbuild.toml keeps off a target (a kernel's `targets`, or a
    /// HIP kernel on an NVIDIA target), by target, in Kbuild.toml order; absent when it keeps
    /// none off any (and in manifests before it). A target it leaves without objects makes the
    /// build incomplete ([`Manifest::empty_targets`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub restricted: BTreeMap<String, Vec<String>>,
    /// Set by `kbuild package --allow-partial` on a build with failed or missing objects:
    /// the bundle was released knowingly incomplete. Absent (false) otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    /// Set by `kbuild build --shard I/N`: this build is one shard of a sharded build, holding
    /// only the targets of `targets` assigned to it. A shard is not a release: `kbuild package
    /// --merge` joins the shards into one. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
}

/// Which shard of a sharded build a manifest is (`kbuild build --shard I/N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// 1-based: `I` of `I/N`.
    pub index: u32,
    /// `N` of `I/N`.
    pub count: u32,
    /// The whole resolved target list the shards split, in request order (the manifest's
    /// `targets` are this shard's part of it).
    pub targets: Vec<String>,
    /// blake3 (hex) over the project's declared inputs (Kbuild.toml, every kernel source, the
    /// headers beside them and in their include dirs): shards of different sources differ.
    pub sources: String,
    /// The version of kbuild that built the shard.
    pub kbuild: String,
    /// Each target of `targets`' estimated cost (its jobs times its kind's weight,
    /// [`crate::shard::weight`]): what the assignment was computed from, so that a merge can
    /// recompute it ([`crate::shard::assign`]) and refuse a shard holding other targets.
    /// Empty in shards of a kbuild before it (a merge refuses those).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<u64>,
}

/// A (kernel, variant, target) object the build planned but did not produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnbuiltObject {
    pub kernel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    pub target: String,
    /// Why it failed (failed jobs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl UnbuiltObject {
    /// `kernel[.variant] for target`, for messages.
    pub fn label(&self) -> String {
        match &self.variant {
            Some(v) => format!("{}.{v} for {}", self.kernel, self.target),
            None => format!("{} for {}", self.kernel, self.target),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerRecord {
    pub kernel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// `fatbin` or `offload-bundle`.
    pub format: String,
    pub path: String,
    pub sha256: String,
    pub size: u64,
    /// The targets inside, canonical names.
    pub targets: Vec<String>,
}

/// How many of the project's kernels one target holds, and why the rest are absent
/// ([`Manifest::coverage`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetCoverage {
    pub target: String,
    /// The project's kernels.
    pub kernels: usize,
    /// Kernels with at least one object for the target.
    pub built: usize,
    /// Kernels Kbuild.toml keeps off the target (their `targets`, or HIP on NVIDIA).
    pub restricted: usize,
    /// Kernels whose jobs for the target failed or never ran.
    pub failed: usize,
}

impl TargetCoverage {
    /// `gfx1100: 0 of 27 kernels (27 restricted by Kbuild.toml)`.
    pub fn line(&self) -> String {
        let mut why = Vec::new();
        if self.restricted > 0 {
            why.push(format!("{} restricted by Kbuild.toml", self.restricted));
        }
        if self.failed > 0 {
            why.push(format!("{} failed", self.failed));
        }
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join(", "))
        };
        format!(
            "{}: {} of {} kernel{}{why}",
            self.target,
            self.built,
            self.kernels,
            if self.kernels == 1 { "" } else { "s" }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageInfo {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// `git rev-parse HEAD` of the project, when it is a git checkout.
    pub git_commit: Option<String>,
    /// Whether the checkout had uncommitted changes.
    pub git_dirty: Option<bool>,
    pub toolchains: Vec<ToolchainIdentity>,
    /// Flags every compile of a vendor got, before per-kernel flags.
    pub flags: BTreeMap<String, Vec<String>>,
    /// `os-arch` of the build host.
    pub host: String,
}

/// What identifies a compiler: its version text and the hash of its binaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolchainIdentity {
    /// `cuda` or `hip`.
    pub kind: String,
    pub version: String,
    pub path: String,
    /// blake3 over the version text and the compiler binaries.
    pub identity: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectRecord {
    pub kernel: String,
    /// Variant name (`rows_per_block4`), absent for kernels without a variant matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The defines that make this variant, e.g. `{"ROWS_PER_BLOCK": "4"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub defines: BTreeMap<String, String>,
    pub target: String,
    /// Path relative to the manifest's directory.
    pub path: String,
    pub sha256: String,
    /// blake3 of the same bytes (lowercase hex): what a loader checks before handing an object
    /// to the driver, at several GB/s where sha256 runs at about one. Absent in manifests
    /// written before it was recorded; those are checked by sha256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
    /// Bytes.
    pub size: u64,
    /// `cubin`, `ptx` or `hsaco`.
    pub format: String,
    /// Entry symbols the object exports (concrete names, also for a kernel whose Kbuild.toml
    /// `entries` are patterns).
    pub entries: Vec<String>,
    /// Entry symbol → its demangled C++ form (`void scale<float>(float*, int)`), for the
    /// mangled ones only. Absent in manifests written before it was recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub demangled: BTreeMap<String, String>,
    /// Per entry: what it uses (registers, shared/LDS, stack/scratch, spills, occupancy).
    #[serde(default)]
    pub resources: BTreeMap<String, crate::resources::Resources>,
    /// Per entry: its launch parameters (`crate::params::Param`), for the entries whose object
    /// records them. Absent in manifests written before they were recorded, and in records
    /// rebuilt from a load index. Written one parameter per line (see [`Manifest::to_json`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, Vec<crate::params::Param>>,
    /// The cache key that produced it (blake3).
    pub cache_key: String,
    /// The compiler arguments that made it, output paths aside and reproducible: project
    /// paths relative to the project root, `$ROCM` / `$ROCM_DEVICE_LIBS` / `$KBUILD_INCLUDE`
    /// (the written compat header) for machine paths. Absent in manifests written before it
    /// was recorded, and in records rebuilt from a load index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compile_args: Vec<String>,
    /// A Triton kernel's launch: what its object does not record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton: Option<crate::triton::TritonLaunch>,
}

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("not a JSON manifest: {0}")]
    Json(#[from] serde_json::Error),
    #[error("manifest has no `schema` field; expected \"{SCHEMA}\"")]
    NoSchema,
    #[error("manifest schema \"{found}\" is not supported (this kbuild reads \"{SCHEMA}\"); rebuild it with this kbuild")]
    Schema { found: String },
    /// A name, version, target or path that would not be safe as a file name or path.
    #[error("manifest: {0}")]
    Field(#[from] IdentError),
    #[error("manifest would cost about {cost} bytes of memory to parse ({len} bytes of JSON), over kbuild's limit of {MAX_PARSE_COST}; refusing it before parsing")]
    TooCostly { cost: u64, len: u64 },
}

impl Manifest {
    /// Parse a manifest, refusing any schema but [`SCHEMA`] before looking at the rest.
    pub fn from_json(data: &[u8]) -> Result<Self, ManifestError> {
        let cost = kbuild_base::json_cost::estimate(data);
        if cost > MAX_PARSE_COST {
            return Err(ManifestError::TooCostly {
                cost,
                len: data.len() as u64,
            });
        }
        #[derive(Deserialize)]
        struct Probe {
            schema: Option<String>,
        }
        let probe: Probe = serde_json::from_slice(data)?;
        match probe.schema {
            None => return Err(ManifestError::NoSchema),
            Some(s) if s != SCHEMA => return Err(ManifestError::Schema { found: s }),
            Some(_) => {}
        }
        let m: Manifest = serde_json::from_slice(data)?;
        m.check_fields()?;
        Ok(m)
    }

    /// `NAME VERSION` as a manifest's bytes claim them, for a message about bytes refused
    /// before they were parsed: every other value is skipped unallocated, so this costs no
    /// more memory than the two strings.
    pub fn claimed_package(data: &[u8]) -> Option<String> {
        #[derive(Deserialize)]
        struct Probe {
            package: PackageInfo,
        }
        let p: Probe = serde_json::from_slice(data).ok()?;
        (p.package.name.len() <= 128 && p.package.version.len() <= 128)
            .then(|| format!("{} {}", p.package.name, p.package.version))
    }

    /// Every string of the manifest that kbuild may turn into a file name or path: the package
    /// name and version, the targets, the object and container paths and digests. Checked on
    /// every parse, so a hostile bundle, OCI config or cache entry never reaches a path.
    pub fn check_fields(&self) -> Result<(), IdentError> {
        ident::check_package_name("package.name", &self.package.name)?;
        ident::check_version("package.version", &self.package.version)?;
        for (i, t) in self.targets.iter().enumerate() {
            ident::check_component(&format!("targets[{i}]"), t)?;
        }
        for (i, o) in self.objects.iter().enumerate() {
            ident::check_component(&format!("objects[{i}].target"), &o.target)?;
            ident::check_relative_path(&format!("objects[{i}].path"), &o.path)?;
            check_sha256(&format!("objects[{i}].sha256"), &o.sha256)?;
        }
        for (i, c) in self.containers.iter().enumerate() {
            ident::check_relative_path(&format!("containers[{i}].path"), &c.path)?;
            check_sha256(&format!("containers[{i}].sha256"), &c.sha256)?;
        }
        if let Some(shard) = &self.shard {
            for (i, t) in shard.targets.iter().enumerate() {
                ident::check_component(&format!("shard.targets[{i}]"), t)?;
            }
        }
        Ok(())
    }

    /// Whether the build left objects out: some job failed or never ran, or a target it lists
    /// holds no object at all (every kernel failed there or was restricted away from it).
    pub fn is_incomplete(&self) -> bool {
        !self.failed.is_empty() || !self.missing.is_empty() || !self.empty_targets().is_empty()
    }

    /// Per target, in `targets` order: how many of the project's kernels it holds an object
    /// of, and why the others are absent.
    pub fn coverage(&self) -> Vec<TargetCoverage> {
        self.targets
            .iter()
            .map(|t| {
                let built: std::collections::BTreeSet<&str> = self
                    .objects
                    .iter()
                    .filter(|o| o.target == *t)
                    .map(|o| o.kernel.as_str())
                    .collect();
                let restricted = self.restricted.get(t).map_or(0, |ks| {
                    ks.iter().filter(|k| !built.contains(k.as_str())).count()
                });
                let failed: std::collections::BTreeSet<&str> = self
                    .failed
                    .iter()
                    .chain(&self.missing)
                    .filter(|o| o.target == *t && !built.contains(o.kernel.as_str()))
                    .map(|o| o.kernel.as_str())
                    .collect();
                TargetCoverage {
                    target: t.clone(),
                    kernels: self.kernels.len(),
                    built: built.len(),
                    restricted,
                    failed: failed.len(),
                }
            })
            .collect()
    }

    /// The targets the manifest lists that hold no object.
    pub fn empty_targets(&self) -> Vec<TargetCoverage> {
        self.coverage()
            .into_iter()
            .filter(|c| c.built == 0)
            .collect()
    }

    /// `2 failed (a for sm_89, b for gfx1100), 1 missing (c for sm_89)`: what an incomplete
    /// build lacks, for messages; `None` when it is complete. At most 5 names per list.
    pub fn incomplete_summary(&self) -> Option<String> {
        if !self.is_incomplete() {
            return None;
        }
        let list = |what: &str, v: &[UnbuiltObject]| -> Option<String> {
            if v.is_empty() {
                return None;
            }
            let names: Vec<String> = v.iter().map(UnbuiltObject::label).collect();
            Some(format!(
                "{} {what} ({})",
                v.len(),
                kbuild_base::list::short_list(&names, 5)
            ))
        };
        let empty = self.empty_targets();
        let empty = (!empty.is_empty()).then(|| {
            let names: Vec<String> = empty.iter().map(TargetCoverage::line).collect();
            format!(
                "{} target{} without objects ({})",
                empty.len(),
                if empty.len() == 1 { "" } else { "s" },
                names.join("; ")
            )
        });
        let parts: Vec<String> = [list("failed", &self.failed), list("missing", &self.missing)]
            .into_iter()
            .flatten()
            .chain(empty)
            .collect();
        Some(parts.join(", "))
    }

    /// `PARTIAL build: 1 failed (k for sm_89)` when the manifest is marked partial or
    /// lists unbuilt objects, for pull and explain; `None` for a complete build.
    pub fn partial_note(&self) -> Option<String> {
        match (self.partial, self.incomplete_summary()) {
            (_, Some(s)) => Some(format!("PARTIAL build: {s}")),
            (true, None) => Some("PARTIAL build (marked partial when packaged)".to_string()),
            (false, None) => None,
        }
    }

    /// Pretty JSON with a trailing newline; stable field order; each launch parameter on one
    /// line (`crate::manifest_json`).
    pub fn to_json(&self) -> String {
        let mut s = crate::manifest_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut m = crate::fixtures::manifest("k", "0.1.0", vec![]);
        m.targets = vec!["sm_89".into()];
        m.kernels = vec!["rmsnorm".into()];
        m
    }

    /// A target that ends with no object makes the build incomplete, and says why (restricted
    /// by Kbuild.toml, failed); restrictions that leave objects do not; a manifest written
    /// before `restricted` existed still reads.
    #[test]
    fn a_target_without_objects_is_incomplete_and_coverage_says_why() {
        let obj = |k: &str, t: &str| crate::fixtures::object(k, t, "cubin", k.as_bytes());
        let mut m =
            crate::fixtures::manifest("k", "0.1.0", vec![obj("a", "sm_89"), obj("b", "sm_89")]);
        m.kernels.push("c".into());
        m.targets.push("gfx1100".into());
        m.failed = vec![UnbuiltObject {
            kernel: "c".into(),
            variant: None,
            target: "sm_89".into(),
            error: Some("x".into()),
        }];
        m.restricted = [
            (
                "gfx1100".to_string(),
                vec!["a".to_string(), "b".to_string()],
            ),
            ("sm_89".to_string(), vec![]),
        ]
        .into();
        m.failed.push(UnbuiltObject {
            kernel: "c".into(),
            variant: None,
            target: "gfx1100".into(),
            error: Some("x".into()),
        });
        let lines: Vec<String> = m.coverage().iter().map(TargetCoverage::line).collect();
        assert_eq!(
            lines,
            [
                "sm_89: 2 of 3 kernels (1 failed)",
                "gfx1100: 0 of 3 kernels (2 restricted by Kbuild.toml, 1 failed)"
            ]
        );
        assert_eq!(m.empty_targets().len(), 1);
        // Without the failures, the empty target alone makes it incomplete.
        m.failed.clear();
        assert!(m.is_incomplete());
        assert_eq!(
            m.incomplete_summary().unwrap(),
            "1 target without objects (gfx1100: 0 of 3 kernels (2 restricted by Kbuild.toml))"
        );
        // A restriction that leaves objects is the project's choice: complete.
        m.objects.push(obj("c", "gfx1100"));
        assert!(!m.is_incomplete(), "{:?}", m.incomplete_summary());
        assert_eq!(
            m.coverage()[1].line(),
            "gfx1100: 1 of 3 kernels (2 restricted by Kbuild.toml)"
        );
        // Written and read back; and an older manifest (no `restricted`) reads as none.
        let back = Manifest::from_json(m.to_json().as_bytes()).unwrap();
        assert_eq!(back.restricted, m.restricted);
        let mut old: serde_json::Value = serde_json::from_str(&m.to_json()).unwrap();
        old.as_object_mut().unwrap().remove("restricted");
        let old = Manifest::from_json(old.to_string().as_bytes()).unwrap();
        assert!(old.restricted.is_empty());
        assert!(
            !m.to_json().is_empty()
                && !crate::fixtures::manifest("k", "0.1.0", vec![])
                    .to_json()
                    .contains("restricted")
        );
    }

    /// Every key a manifest serialises is declared in the shipped JSON Schema (and every
    /// required key of the schema is present), walking objects, `$ref`s and `oneOf` by `kind`.
    #[test]
    fn shipped_json_schema_matches_the_serialised_manifest() {
        use crate::resources::{AmdResources, CudaResources, PtxResources, Resources};
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../schema/kbuild.manifest.v1.schema.json")).unwrap();
        let mut m = sample();
        let occ = Some(crate::occupancy::Occupancy {
            unit: "waves/SIMD".into(),
            value: 16,
            max: 16,
            limiter: "waves".into(),
            block_size: Some(256),
            block_size_from: Some("launch-bounds".into()),
        });
        let amd = Resources::Amd(AmdResources {
            vgprs: 8,
            sgprs: 10,
            agprs: 0,
            vgpr_spills: 0,
            sgpr_spills: 0,
            lds_bytes: 0,
            scratch_bytes: 0,
            wave_size: 32,
            max_threads: 256,
            kernarg_bytes: 40,
            dynamic_stack: false,
            occupancy: occ.clone(),
        });
        let cuda = Resources::Cuda(CudaResources {
            registers: 16,
            lds_bytes: 0,
            reserved_shared_bytes: 1024,
            scratch_bytes: 0,
            spill_store_bytes: None,
            spill_load_bytes: Some(0),
            const_bytes: 380,
            barriers: 1,
            max_threads: Some(256),
            occupancy: None,
            note: Some("n".into()),
        });
        let ptx = Resources::Ptx(PtxResources {
            ptx_isa: "9.5".into(),
            target: "sm_90".into(),
        });
        for (i, r) in [amd, cuda, ptx].into_iter().enumerate() {
            m.objects.push(ObjectRecord {
                kernel: "k".into(),
                variant: Some("v1".into()),
                defines: [("V".to_string(), "1".to_string())].into(),
                target: "sm_89".into(),
                path: format!("sm_89/k{i}.cubin"),
                sha256: "0".repeat(64),
                blake3: Some("1".repeat(64)),
                size: 1,
                format: "cubin".into(),
                entries: vec!["k".into()],
                demangled: Default::default(),
                params: [(
                    "k".to_string(),
                    vec![
                        crate::params::Param {
                            index: 0,
                            offset: 0,
                            size: 8,
                            align: Some(8),
                            kind: crate::params::ParamKind::Pointer,
                            name: Some("x".into()),
                            type_name: Some("float*".into()),
                            hidden: false,
                        },
                        crate::params::Param {
                            index: 1,
                            offset: 8,
                            size: 4,
                            align: None,
                            kind: crate::params::ParamKind::Value,
                            name: None,
                            type_name: None,
                            hidden: true,
                        },
                    ],
                )]
                .into(),
                resources: [("k".to_string(), r)].into(),
                cache_key: "x".into(),
                compile_args: Vec::new(),
                triton: None,
            });
        }
        m.failed = vec![UnbuiltObject {
            kernel: "k".into(),
            variant: Some("v1".into()),
            target: "sm_89".into(),
            error: Some("compiler exited with 1".into()),
        }];
        m.missing = vec![UnbuiltObject {
            kernel: "k".into(),
            variant: None,
            target: "gfx1100".into(),
            error: None,
        }];
        m.restricted = [("gfx1100".to_string(), vec!["k".to_string()])].into();
        m.partial = true;
        m.shard = Some(Shard {
            index: 1,
            count: 2,
            targets: vec!["sm_89".into(), "gfx1100".into()],
            sources: "2".repeat(64),
            kbuild: "0.1.0".into(),
            costs: vec![54, 48],
        });
        let value = serde_json::to_value(&m).unwrap();
        check(&schema, &schema, &value, "$");
        assert_eq!(Manifest::from_json(m.to_json().as_bytes()).unwrap(), m);
        assert!(
            m.to_json().contains(
                "{\"index\": 1, \"offset\": 8, \"size\": 4, \"kind\": \"value\", \"hidden\": true}"
            ),
            "{}",
            m.to_json()
        );
        assert!(m.is_incomplete());
        assert_eq!(
            m.partial_note().unwrap(),
            "PARTIAL build: 1 failed (k.v1 for sm_89), 1 missing (k for gfx1100)"
        );

        fn resolve<'a>(
            root: &'a serde_json::Value,
            s: &'a serde_json::Value,
        ) -> &'a serde_json::Value {
            match s.get("$ref").and_then(|r| r.as_str()) {
                Some(r) => root
                    .pointer(r.trim_start_matches('#'))
                    .expect("$ref resolves"),
                None => s,
            }
        }
        fn check(
            root: &serde_json::Value,
            schema: &serde_json::Value,
            v: &serde_json::Value,
            at: &str,
        ) {
            let schema = resolve(root, schema);
            if let Some(alts) = schema.get("oneOf").and_then(|a| a.as_array()) {
                let kind = v["kind"].clone();
                let alt = alts
                    .iter()
                    .find(|a| a["properties"]["kind"]["const"] == kind)
                    .unwrap_or_else(|| panic!("{at}: no oneOf for kind {kind}"));
                return check(root, alt, v, at);
            }
            match v {
                serde_json::Value::Object(map) => {
                    if let Some(props) = schema.get("properties").and_then(|p| p.as_object()) {
                        for (k, sub) in map {
                            let s = props
                                .get(k)
                                .unwrap_or_else(|| panic!("{at}.{k} is not in the schema"));
                            check(root, s, sub, &format!("{at}.{k}"));
                        }
                        for req in schema["required"].as_array().into_iter().flatten() {
                            assert!(
                                map.contains_key(req.as_str().unwrap()),
                                "{at}: required {req} missing"
                            );
                        }
                    } else if let Some(extra) =
                        schema.get("additionalProperties").filter(|a| a.is_object())
                    {
                        for (k, sub) in map {
                            check(root, extra, sub, &format!("{at}.{k}"));
                        }
                    }
                }
                serde_json::Value::Array(items) => {
                    if let Some(s) = schema.get("items") {
                        for (i, it) in items.iter().enumerate() {
                            check(root, s, it, &format!("{at}[{i}]"));
                        }
                    }
                }
                _ => {}
            }
        }
    }

    #[test]
    fn round_trip_and_schema_check() {
        let m = sample();
        assert_eq!(Manifest::from_json(m.to_json().as_bytes()).unwrap(), m);
        let old = m.to_json().replace(SCHEMA, "kbuild.manifest/v0");
        let e = Manifest::from_json(old.as_bytes()).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"kbuild.manifest/v0\" is not supported"),
            "{e}"
        );
        assert!(matches!(
            Manifest::from_json(b"{}").unwrap_err(),
            ManifestError::NoSchema
        ));
    }
}
