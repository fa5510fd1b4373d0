//! The resource snapshot both sides of a diff are reduced to, and the committed baseline file
//! (`kbuild.resources/v1`) that is its serialised form: one line per object, stable order.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use kbuild_manifest::manifest::{self, Manifest, ManifestError};
use kbuild_manifest::params::Param;
use kbuild_manifest::resources::Resources;

/// The schema tag of a baseline file.
pub const BASELINE_SCHEMA: &str = "kbuild.resources/v1";

/// What one (kernel, variant, target) object uses: its size and the resources of each entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotObject {
    pub target: String,
    /// The Kbuild.toml kernel name.
    pub kernel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// `cubin`, `ptx` or `hsaco`.
    pub format: String,
    /// Bytes.
    pub size: u64,
    /// Per entry symbol, as in the manifest's object records.
    pub resources: BTreeMap<String, Resources>,
    /// Per entry symbol, its caller-visible launch parameters (the manifest's, less AMD's hidden
    /// arguments, which a diff does not compare); absent in baselines written before they were
    /// recorded (then no ABI change is reported).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, Vec<Param>>,
}

/// The resources of a build, free of paths, hashes and times: what a diff compares and what
/// the baseline commits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    pub schema: String,
    /// Package name.
    pub package: String,
    /// Per toolchain kind (`cuda`, `hip`): its version line. Explains drift after an upgrade.
    #[serde(default)]
    pub toolchains: BTreeMap<String, String>,
    /// Canonical target names covered.
    pub targets: Vec<String>,
    /// Sorted by (target, kernel, variant).
    pub objects: Vec<SnapshotObject>,
}

/// Why a diff input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no `schema` field; expected \"{}\" (a build manifest) or \"{BASELINE_SCHEMA}\" (a resource baseline)", manifest::SCHEMA)]
    NoSchema,
    #[error("schema \"{0}\" is neither a build manifest (\"{m}\") nor a resource baseline (\"{BASELINE_SCHEMA}\"); regenerate it with this kbuild", m = manifest::SCHEMA)]
    Schema(String),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

impl Snapshot {
    /// The resources of a build manifest.
    pub fn from_manifest(m: &Manifest) -> Snapshot {
        let mut objects: Vec<SnapshotObject> = m
            .objects
            .iter()
            .map(|o| SnapshotObject {
                target: o.target.clone(),
                kernel: o.kernel.clone(),
                variant: o.variant.clone(),
                format: o.format.clone(),
                size: o.size,
                resources: o.resources.clone(),
                params: o
                    .params
                    .iter()
                    .map(|(entry, p)| {
                        let visible = p.iter().filter(|p| !p.hidden).cloned().collect();
                        (entry.clone(), visible)
                    })
                    .collect(),
            })
            .collect();
        sort(&mut objects);
        Snapshot {
            schema: BASELINE_SCHEMA.to_string(),
            package: m.package.name.clone(),
            toolchains: m
                .provenance
                .toolchains
                .iter()
                .map(|t| (t.kind.clone(), t.version.clone()))
                .collect(),
            targets: m.targets.clone(),
            objects,
        }
    }

    /// Read a build manifest (`kbuild.manifest/v1`) or a baseline (`kbuild.resources/v1`),
    /// telling them apart by `schema` before anything else.
    pub fn from_json(data: &[u8]) -> Result<Snapshot, SnapshotError> {
        #[derive(Deserialize)]
        struct Probe {
            schema: Option<serde_json::Value>,
        }
        let probe: Probe = serde_json::from_slice(data)?;
        match probe.schema {
            None => Err(SnapshotError::NoSchema),
            Some(serde_json::Value::String(s)) if s == manifest::SCHEMA => {
                Ok(Snapshot::from_manifest(&Manifest::from_json(data)?))
            }
            Some(serde_json::Value::String(s)) if s == BASELINE_SCHEMA => {
                let mut snap: Snapshot = serde_json::from_slice(data)?;
                sort(&mut snap.objects);
                Ok(snap)
            }
            Some(serde_json::Value::String(s)) => Err(SnapshotError::Schema(s)),
            Some(other) => Err(SnapshotError::Schema(other.to_string())),
        }
    }

    /// The baseline file: pretty at the top level, one compact line per object, objects in
    /// (target, kernel, variant) order, keys in declaration order, a trailing newline. Same
    /// build, same bytes.
    pub fn to_baseline_json(&self) -> String {
        let mut objects = self.objects.clone();
        sort(&mut objects);
        let mut s = String::from("{\n");
        s.push_str(&format!("  \"schema\": {},\n", line(BASELINE_SCHEMA)));
        s.push_str(&format!("  \"package\": {},\n", line(&self.package)));
        s.push_str(&format!("  \"toolchains\": {},\n", line(&self.toolchains)));
        s.push_str(&format!("  \"targets\": {},\n", line(&self.targets)));
        s.push_str("  \"objects\": [");
        for (i, o) in objects.iter().enumerate() {
            s.push_str(if i == 0 { "\n    " } else { ",\n    " });
            s.push_str(&line(o));
        }
        s.push_str(if objects.is_empty() {
            "]\n}\n"
        } else {
            "\n  ]\n}\n"
        });
        s
    }

    /// Only the objects of `targets` (and only those targets listed).
    pub fn restricted_to(&self, targets: &[String]) -> Snapshot {
        let mut s = self.clone();
        s.targets.retain(|t| targets.contains(t));
        s.objects.retain(|o| targets.contains(&o.target));
        s
    }
}

/// Compact JSON of a value (maps are BTreeMaps and keys strings, so it never fails).
fn line<T: Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn sort(objects: &mut [SnapshotObject]) {
    objects.sort_by(|a, b| {
        (&a.target, &a.kernel, &a.variant).cmp(&(&b.target, &b.kernel, &b.variant))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::resources::PtxResources;

    pub(crate) fn obj(target: &str, kernel: &str, size: u64) -> SnapshotObject {
        SnapshotObject {
            target: target.into(),
            kernel: kernel.into(),
            variant: None,
            format: "ptx".into(),
            size,
            resources: [(
                kernel.to_string(),
                Resources::Ptx(PtxResources {
                    ptx_isa: "9.5".into(),
                    target: "sm_90".into(),
                }),
            )]
            .into(),
            params: BTreeMap::new(),
        }
    }

    #[test]
    fn baseline_is_one_line_per_object_sorted_and_round_trips() {
        let snap = Snapshot {
            schema: BASELINE_SCHEMA.into(),
            package: "p".into(),
            toolchains: [("cuda".to_string(), "release 13.5".to_string())].into(),
            targets: vec!["compute_90".into()],
            objects: vec![obj("compute_90", "b", 2), obj("compute_90", "a", 1)],
        };
        let text = snap.to_baseline_json();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 10, "{text}");
        assert!(lines[6].contains("\"kernel\":\"a\""), "{text}");
        assert!(lines[7].contains("\"kernel\":\"b\""), "{text}");
        let back = Snapshot::from_json(text.as_bytes()).unwrap();
        assert_eq!(back.to_baseline_json(), text);
        assert_eq!(back.objects[0].kernel, "a");
    }

    #[test]
    fn snapshots_keep_the_caller_visible_parameters_only() {
        use kbuild_manifest::params::{Param, ParamKind};
        let p = |index: u32, hidden: bool| Param {
            index,
            offset: u64::from(index) * 8,
            size: 8,
            align: None,
            kind: ParamKind::Pointer,
            name: None,
            type_name: None,
            hidden,
        };
        let mut m = kbuild_manifest::fixtures::manifest("p", "0.1.0", vec![]);
        let mut o = kbuild_manifest::fixtures::object("k", "gfx1100", "hsaco", b"x");
        o.params.insert("k".into(), vec![p(0, false), p(1, true)]);
        m.objects.push(o);
        let snap = Snapshot::from_manifest(&m);
        assert_eq!(snap.objects[0].params["k"], vec![p(0, false)]);
        let line = snap.to_baseline_json();
        assert!(line.contains("\"params\":{\"k\":[{\"index\":0,"), "{line}");
        assert_eq!(Snapshot::from_json(line.as_bytes()).unwrap(), snap);
    }

    #[test]
    fn other_schemas_are_refused_by_name() {
        let e =
            Snapshot::from_json(br#"{"schema": "kbuild.inspect/v1", "objects": []}"#).unwrap_err();
        assert!(
            e.to_string().contains("\"kbuild.inspect/v1\" is neither"),
            "{e}"
        );
        assert!(matches!(
            Snapshot::from_json(b"{}").unwrap_err(),
            SnapshotError::NoSchema
        ));
        assert!(matches!(
            Snapshot::from_json(b"[1,").unwrap_err(),
            SnapshotError::Json(_)
        ));
        let e = Snapshot::from_json(br#"{"schema": "kbuild.manifest/v0"}"#).unwrap_err();
        assert!(e.to_string().contains("kbuild.manifest/v0"), "{e}");
    }
}
