//! Selection: for every (kernel, variant) of a manifest, judge each object against the device
//! with the one compat table ([`kbuild_manifest::compat`]) and keep the whole trace.

use kbuild_manifest::compat::{judge, parse_version, sort_key, Device, Rule};
use kbuild_manifest::manifest::{Manifest, ObjectRecord};
use kbuild_manifest::resources::Resources;
use kbuild_manifest::target::{Target, Version};

use crate::error::{LoaderError, NoMatch};

/// One object judged for one device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Candidate {
    /// Canonical target name as the manifest has it.
    pub target: String,
    pub path: String,
    pub accepted: bool,
    /// `None` when this kbuild does not know the object's target (a newer bundle).
    pub rule: Option<Rule>,
    #[serde(skip)]
    pub preference: u32,
    pub reason: String,
    /// Index into the manifest's `objects`.
    #[serde(skip)]
    pub object: usize,
    /// [`sort_key`] of the compat table: accepted first, preference, newest.
    #[serde(skip)]
    key: SortKey,
}

type SortKey = (bool, u32, std::cmp::Reverse<(u32, u32)>);

/// The decision for one (kernel, variant): candidates best first, and the chosen one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelChoice {
    pub kernel: String,
    pub variant: Option<String>,
    /// Index into `candidates` of the selected object.
    pub selected: Option<usize>,
    pub candidates: Vec<Candidate>,
}

impl KernelChoice {
    pub fn selected(&self) -> Option<&Candidate> {
        self.selected.and_then(|i| self.candidates.get(i))
    }
}

/// The selection for a whole manifest on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub device: Device,
    pub kernels: Vec<KernelChoice>,
}

impl Selection {
    /// The choice for `kernel` (and `variant`; `None` matches a kernel without variants, or
    /// the first variant when the kernel has several).
    pub fn kernel(
        &self,
        kernel: &str,
        variant: Option<&str>,
    ) -> Result<&KernelChoice, LoaderError> {
        let mut of_kernel = self.kernels.iter().filter(|k| k.kernel == kernel);
        let found = match variant {
            Some(v) => of_kernel.find(|k| k.variant.as_deref() == Some(v)),
            None => {
                let all: Vec<&KernelChoice> = of_kernel.collect();
                all.iter()
                    .find(|k| k.variant.is_none())
                    .or_else(|| all.first())
                    .copied()
            }
        };
        found.ok_or_else(|| LoaderError::UnknownKernel {
            kernel: kernel.to_string(),
            variant: variant.map(str::to_string),
            known: self.known_kernels(),
        })
    }

    /// The selected candidate, or the no-match error naming device, targets and fix.
    pub fn require(&self, choice: &KernelChoice) -> Result<Candidate, LoaderError> {
        match choice.selected() {
            Some(c) => Ok(c.clone()),
            None => Err(LoaderError::NoMatch(Box::new(self.no_match(choice)))),
        }
    }

    /// What to say when `choice` has no selection.
    pub fn no_match(&self, choice: &KernelChoice) -> NoMatch {
        NoMatch {
            kernel: choice.kernel.clone(),
            variant: choice.variant.clone(),
            device: self.device.name(),
            available: choice.candidates.iter().map(|c| c.target.clone()).collect(),
            build_target: build_target(&self.device),
        }
    }

    /// Whether every kernel has a selected object.
    pub fn complete(&self) -> bool {
        self.kernels.iter().all(|k| k.selected.is_some())
    }

    /// The no-match errors of every kernel without a selection.
    pub fn missing(&self) -> Vec<NoMatch> {
        self.kernels
            .iter()
            .filter(|k| k.selected.is_none())
            .map(|k| self.no_match(k))
            .collect()
    }

    /// Keep only `kernel`'s choices (explain --kernel).
    pub fn only_kernel(mut self, kernel: &str) -> Result<Selection, LoaderError> {
        let known = self.known_kernels();
        self.kernels.retain(|k| k.kernel == kernel);
        if self.kernels.is_empty() {
            return Err(LoaderError::UnknownKernel {
                kernel: kernel.to_string(),
                variant: None,
                known,
            });
        }
        Ok(self)
    }

    fn known_kernels(&self) -> String {
        let mut names: Vec<&str> = self.kernels.iter().map(|k| k.kernel.as_str()).collect();
        names.dedup();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// The target a build needs to add so that `device` has an object: the plain processor (it
/// runs whatever the device's xnack/sramecc), or the plain `sm_XY` of the CC.
pub fn build_target(device: &Device) -> String {
    match device {
        Device::Cuda { processor, .. } => processor.name.to_string(),
        Device::Amd { processor, .. } => processor.name.to_string(),
    }
}

/// What selection needs to know about an object (a manifest record or an index entry).
pub trait ObjectInfo {
    fn kernel(&self) -> &str;
    fn variant(&self) -> Option<&str>;
    /// Canonical target name (`sm_90a`, `compute_90`, `gfx90a:xnack-`).
    fn target(&self) -> &str;
    fn path(&self) -> &str;
    /// `.version` of a PTX object.
    fn ptx_isa(&self) -> Option<Version>;
}

impl<T: ObjectInfo> ObjectInfo for &T {
    fn kernel(&self) -> &str {
        (**self).kernel()
    }
    fn variant(&self) -> Option<&str> {
        (**self).variant()
    }
    fn target(&self) -> &str {
        (**self).target()
    }
    fn path(&self) -> &str {
        (**self).path()
    }
    fn ptx_isa(&self) -> Option<Version> {
        (**self).ptx_isa()
    }
}

impl ObjectInfo for ObjectRecord {
    fn kernel(&self) -> &str {
        &self.kernel
    }
    fn variant(&self) -> Option<&str> {
        self.variant.as_deref()
    }
    fn target(&self) -> &str {
        &self.target
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn ptx_isa(&self) -> Option<Version> {
        ptx_isa(self)
    }
}

/// The PTX ISA of a PTX object, from its first entry's resource record.
pub fn ptx_isa(record: &ObjectRecord) -> Option<Version> {
    record.resources.values().find_map(|r| match r {
        Resources::Ptx(p) => parse_version(&p.ptx_isa),
        _ => None,
    })
}

/// Judge every object of `manifest` for `device`, grouping by (kernel, variant) in the
/// manifest's kernel order.
pub fn select(manifest: &Manifest, device: &Device) -> Selection {
    select_objects(&manifest.objects, &manifest.kernels, device)
}

/// [`select`] over any objects; `kernel_order` is the manifest's `kernels`.
pub fn select_objects<O: ObjectInfo>(
    objects: &[O],
    kernel_order: &[String],
    device: &Device,
) -> Selection {
    select_where(objects, kernel_order, device, |_| true)
}

/// [`select_objects`] for one kernel only: what loading needs, without judging the rest.
pub fn select_kernel<O: ObjectInfo>(
    objects: &[O],
    kernel_order: &[String],
    device: &Device,
    kernel: &str,
) -> Selection {
    select_where(objects, kernel_order, device, |o| o.kernel() == kernel)
}

fn select_where<O: ObjectInfo>(
    objects: &[O],
    kernel_order: &[String],
    device: &Device,
    keep: impl Fn(&O) -> bool,
) -> Selection {
    select_indexed(
        objects.iter().enumerate().filter(|(_, o)| keep(o)),
        kernel_order,
        device,
    )
}

/// Judge `(manifest index, object)` pairs, grouping by (kernel, variant) in `kernel_order`.
pub fn select_indexed<O: ObjectInfo>(
    objects: impl Iterator<Item = (usize, O)>,
    kernel_order: &[String],
    device: &Device,
) -> Selection {
    let mut kernels: Vec<KernelChoice> = Vec::new();
    for (index, record) in objects {
        let record = &record;
        let candidate = judge_record(index, record, device);
        let slot = kernels
            .iter_mut()
            .find(|k| k.kernel == record.kernel() && k.variant.as_deref() == record.variant());
        match slot {
            Some(k) => k.candidates.push(candidate),
            None => kernels.push(KernelChoice {
                kernel: record.kernel().to_string(),
                variant: record.variant().map(str::to_string),
                selected: None,
                candidates: vec![candidate],
            }),
        }
    }
    let order = |k: &KernelChoice| {
        kernel_order
            .iter()
            .position(|n| *n == k.kernel)
            .unwrap_or(usize::MAX)
    };
    kernels.sort_by(|a, b| {
        order(a)
            .cmp(&order(b))
            .then_with(|| a.kernel.cmp(&b.kernel))
            .then_with(|| variant_order(&a.variant, &b.variant))
    });
    for k in &mut kernels {
        k.candidates
            .sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.target.cmp(&b.target)));
        k.selected = k.candidates.first().filter(|c| c.accepted).map(|_| 0);
    }
    Selection {
        device: *device,
        kernels,
    }
}

/// Variants in natural order (`rows_per_block2` before `rows_per_block10`).
fn variant_order(a: &Option<String>, b: &Option<String>) -> std::cmp::Ordering {
    let key = |v: &Option<String>| {
        v.as_deref().map(|s| {
            let digits = s.len() - s.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            let (stem, num) = s.split_at(s.len() - digits);
            (
                stem.to_string(),
                num.parse::<u64>().unwrap_or(0),
                s.to_string(),
            )
        })
    };
    key(a).cmp(&key(b))
}

fn judge_record<O: ObjectInfo>(index: usize, record: &O, device: &Device) -> Candidate {
    match record.target().parse::<Target>() {
        Ok(target) => {
            let v = judge(&target, record.ptx_isa(), device);
            Candidate {
                key: sort_key(&target, &v),
                target: record.target().to_string(),
                path: record.path().to_string(),
                accepted: v.accepted,
                rule: Some(v.rule),
                preference: v.preference,
                reason: v.reason,
                object: index,
            }
        }
        Err(e) => Candidate {
            target: record.target().to_string(),
            path: record.path().to_string(),
            accepted: false,
            rule: None,
            preference: u32::MAX,
            key: (true, u32::MAX, std::cmp::Reverse((0, 0))),
            reason: format!("{e}: this kbuild does not know the target (the bundle is newer?)"),
            object: index,
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kbuild_manifest::manifest::{Package as PackageInfo, Provenance, SCHEMA};
    use kbuild_manifest::resources::PtxResources;
    use std::collections::BTreeMap;

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
            size: 1,
            format: format.into(),
            entries: vec![kernel.into()],
            resources,
            cache_key: String::new(),
        }
    }

    pub(crate) fn manifest(objects: Vec<ObjectRecord>) -> Manifest {
        let mut m = kbuild_manifest::fixtures::manifest("t", "0.1.0", objects);
        m.targets.clear();
        m
    }

    fn h200_bundle() -> Manifest {
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

    fn dev(spec: &str, driver: Option<Version>) -> Device {
        Device::parse(spec, driver, None).unwrap()
    }

    #[test]
    fn h200_selects_sm_90a_with_the_full_trace() {
        let s = select(&h200_bundle(), &dev("sm_90", Some(Version(13, 0))));
        let k = s.kernel("rmsnorm", None).unwrap();
        let order: Vec<&str> = k.candidates.iter().map(|c| c.target.as_str()).collect();
        assert_eq!(order, ["sm_90a", "sm_90", "compute_90", "sm_89", "sm_80"]);
        assert_eq!(k.selected().unwrap().target, "sm_90a");
        assert_eq!(k.candidates[2].rule, Some(Rule::PtxIsaTooNew));
        assert!(s.complete());
        assert!(s.missing().is_empty());
    }

    #[test]
    fn without_the_arch_specific_object_the_plain_one_wins() {
        let mut m = h200_bundle();
        m.objects.retain(|o| o.target != "sm_90a");
        let s = select(&m, &dev("sm_90", Some(Version(13, 0))));
        assert_eq!(
            s.kernel("rmsnorm", None)
                .unwrap()
                .selected()
                .unwrap()
                .target,
            "sm_90"
        );
        m.objects.retain(|o| o.target != "sm_90");
        let s = select(&m, &dev("sm_90", Some(Version(13, 5))));
        assert_eq!(
            s.kernel("rmsnorm", None)
                .unwrap()
                .selected()
                .unwrap()
                .target,
            "compute_90"
        );
        // On driver 13.0 the 9.5 PTX is refused too: no match.
        let s = select(&m, &dev("sm_90", Some(Version(13, 0))));
        assert!(!s.complete());
        let e = s
            .require(s.kernel("rmsnorm", None).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("runs on sm_90"), "{e}");
        assert!(
            e.contains("sm_80, sm_89") || e.contains("sm_89, sm_80"),
            "{e}"
        );
        assert!(e.contains("kbuild --targets sm_90"), "{e}");
    }

    #[test]
    fn same_major_older_prefers_the_newest() {
        let m = manifest(vec![
            object("k", None, "sm_80", None),
            object("k", None, "sm_86", None),
            object("k", None, "compute_80", Some("8.0")),
        ]);
        let s = select(&m, &dev("sm_89", None));
        let k = s.kernel("k", None).unwrap();
        assert_eq!(k.selected().unwrap().target, "sm_86");
        assert_eq!(k.candidates[1].target, "sm_80");
        assert_eq!(k.candidates[1].rule, Some(Rule::SameMajorOlder));
    }

    #[test]
    fn amd_feature_and_generic_order() {
        let m = manifest(vec![
            object("k", None, "gfx11-generic", None),
            object("k", None, "gfx90a", None),
            object("k", None, "gfx90a:xnack-", None),
            object("k", None, "gfx90a:sramecc+:xnack-", None),
            object("k", None, "gfx90a:xnack+", None),
        ]);
        let s = select(&m, &dev("gfx90a:sramecc+:xnack-", None));
        let k = s.kernel("k", None).unwrap();
        let rules: Vec<(&str, Option<Rule>)> = k
            .candidates
            .iter()
            .map(|c| (c.target.as_str(), c.rule))
            .collect();
        assert_eq!(rules[0], ("gfx90a:sramecc+:xnack-", Some(Rule::AmdExact)));
        assert_eq!(rules[1].1, Some(Rule::AmdFeatureAny));
        assert_eq!(rules[2].1, Some(Rule::AmdFeatureAny));
        assert!(rules.contains(&("gfx90a:xnack+", Some(Rule::AmdFeatureMismatch))));
        assert!(rules.contains(&("gfx11-generic", Some(Rule::GenericNotMember))));
        // gfx1151: only the generic object, which the runtime flag decides.
        let s = select(&m, &dev("gfx1151", None));
        assert_eq!(
            s.kernel("k", None).unwrap().selected().unwrap().target,
            "gfx11-generic"
        );
        let s = select(
            &m,
            &Device::parse("gfx1151", None, Some(Version(6, 3))).unwrap(),
        );
        let k = s.kernel("k", None).unwrap();
        assert!(k.selected().is_none());
        assert!(s
            .no_match(k)
            .to_string()
            .contains("kbuild --targets gfx1151"));
    }

    #[test]
    fn variants_are_chosen_independently_and_ordered_naturally() {
        let m = manifest(vec![
            object("g", Some("rows10"), "sm_90", None),
            object("g", Some("rows2"), "sm_90", None),
            object("g", Some("rows2"), "sm_80", None),
        ]);
        let s = select(&m, &dev("sm_90", None));
        let names: Vec<&str> = s
            .kernels
            .iter()
            .filter_map(|k| k.variant.as_deref())
            .collect();
        assert_eq!(names, ["rows2", "rows10"]);
        assert_eq!(s.kernel("g", Some("rows10")).unwrap().candidates.len(), 1);
        assert_eq!(
            s.kernel("g", None).unwrap().variant.as_deref(),
            Some("rows2")
        );
        let e = s.kernel("g", Some("rows3")).unwrap_err().to_string();
        assert!(
            e.contains("variant `rows3`") && e.contains("it has: g"),
            "{e}"
        );
        assert!(s.clone().only_kernel("nope").is_err());
    }

    #[test]
    fn unknown_targets_are_rejected_with_a_reason_not_a_panic() {
        let mut o = object("k", None, "sm_90", None);
        o.target = "sm_130".into();
        let s = select(&manifest(vec![o]), &dev("sm_90", None));
        let c = &s.kernel("k", None).unwrap().candidates[0];
        assert!(!c.accepted);
        assert_eq!(c.rule, None);
        assert!(
            c.reason.contains("does not know the target"),
            "{}",
            c.reason
        );
    }
}
