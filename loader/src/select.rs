//! Selection: for every (kernel, variant) of a package, judge each object against the device
//! with the one compat table ([`kbuild_manifest::compat`]) and keep the whole trace
//! ([`crate::Package::select`]); the load path picks the same object without the trace.

use std::collections::HashMap;

use kbuild_manifest::compat::{judge, parse_version, sort_key, Device, Rule};
use kbuild_manifest::load_index::{IndexObject, LoadIndex};
use kbuild_manifest::manifest::ObjectRecord;
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
    /// Per kernel, why the build made no object of it for a target of the device's vendor
    /// (Kbuild.toml keeps it off, its compile failed, its job never ran), from the manifest
    /// ([`Selection::with_build_record`]); empty when the manifest was not read.
    pub absent: std::collections::BTreeMap<String, Vec<String>>,
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
            also: also_runs_here(&self.device),
            restricted: self.vendor_targets_without(choice),
            absent: self.absent.get(&choice.kernel).cloned().unwrap_or_default(),
        }
    }

    /// What the build recorded about the kernels it made no object of, for the device's
    /// vendor's targets: the no-match hint then says why each is absent instead of guessing.
    pub fn with_build_record(mut self, m: &kbuild_manifest::manifest::Manifest) -> Selection {
        let vendor = self.device.vendor();
        let of_vendor = |t: &str| t.parse::<Target>().is_ok_and(|t| t.vendor() == vendor);
        let mut absent: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (target, kernels) in m.restricted.iter().filter(|(t, _)| of_vendor(t)) {
            for k in kernels {
                absent
                    .entry(k.clone())
                    .or_default()
                    .push(format!("Kbuild.toml keeps it off {target}"));
            }
        }
        let unbuilt = m
            .failed
            .iter()
            .map(|u| (u, "its compile failed for"))
            .chain(
                m.missing
                    .iter()
                    .map(|u| (u, "its job never ran (the build stopped first) for")),
            );
        for (u, why) in unbuilt.filter(|(u, _)| of_vendor(&u.target)) {
            let what = match &u.variant {
                Some(v) => format!("{why} {} (variant {v})", u.target),
                None => format!("{why} {}", u.target),
            };
            absent.entry(u.kernel.clone()).or_default().push(what);
        }
        self.absent = absent;
        self
    }

    /// The targets of the device's vendor that other kernels of this bundle have objects for,
    /// when `choice` has none of them: the build made them but not this kernel's (its
    /// Kbuild.toml `targets` restricts it, or its compile failed there), so building the
    /// device's target would not add it either.
    fn vendor_targets_without(&self, choice: &KernelChoice) -> Vec<String> {
        let vendor = self.device.vendor();
        let of_vendor = |t: &str| t.parse::<Target>().is_ok_and(|t| t.vendor() == vendor);
        if choice.candidates.iter().any(|c| of_vendor(&c.target)) {
            return Vec::new();
        }
        let mut out: Vec<String> = Vec::new();
        for c in self.kernels.iter().flat_map(|k| &k.candidates) {
            if of_vendor(&c.target) && !out.contains(&c.target) {
                out.push(c.target.clone());
            }
        }
        out
    }

    /// Whether every kernel has a selected object.
    pub fn complete(&self) -> bool {
        self.kernels.iter().all(|k| k.selected.is_some())
    }

    /// The target of every kernel's selected object, each once, in kernel order (the
    /// targets a device needs; [`crate::pick_targets`] puts them in the manifest's order and
    /// refuses a selection with a kernel nothing runs on).
    pub fn selected_targets(&self) -> Vec<String> {
        let mut picked: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for k in &self.kernels {
            if let Some(c) = k.selected() {
                if seen.insert(c.target.as_str()) {
                    picked.push(c.target.clone());
                }
            }
        }
        picked
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

/// Targets besides [`build_target`] whose objects run on `device`, as the compat table
/// judges every catalogue target: the oldest SASS of the device's major (`sm_80` runs on
/// sm_86), the device's PTX (`compute_86`, JIT-compiled here and on newer devices) and the
/// AMD generic target whose family has the device (`gfx11-generic` for gfx1101, where the
/// runtime loads generic objects). Each with why, for the no-match hint.
pub fn also_runs_here(device: &Device) -> Vec<(String, String)> {
    use kbuild_manifest::target::{Feature, PROCESSORS};
    let mut sass: Option<(Target, (u32, u32))> = None;
    let mut out: Vec<(String, String)> = Vec::new();
    let own = build_target(device);
    for p in PROCESSORS {
        for ptx in [false, true] {
            let t = Target {
                processor: p,
                ptx,
                xnack: Feature::Any,
                sramecc: Feature::Any,
            };
            if ptx && t.vendor() != kbuild_manifest::target::Vendor::Nvidia {
                continue;
            }
            let v = judge(&t, None, device);
            match v.rule {
                Rule::SameMajorOlder => {
                    let cc = device_cc(&t);
                    if sass.is_none_or(|(_, best)| cc < best) {
                        sass = Some((t, cc));
                    }
                }
                Rule::PtxJit if p.name == own => out.push((
                    t.to_string(),
                    "PTX, JIT-compiled here and on newer devices".into(),
                )),
                Rule::AmdGeneric => out.push((
                    t.to_string(),
                    "generic: one object for every processor of its family".into(),
                )),
                _ => {}
            }
        }
    }
    if let Some((t, (major, _))) = sass {
        out.insert(
            0,
            (
                t.to_string(),
                format!("SASS that runs on every {major}.x device from it up"),
            ),
        );
    }
    out
}

/// The compute capability a CUDA target names (`(0, 0)` for another vendor's).
fn device_cc(t: &Target) -> (u32, u32) {
    match t.processor.kind {
        kbuild_manifest::target::ProcessorKind::Cuda { major, minor, .. } => (major, minor),
        _ => (0, 0),
    }
}

/// The PTX ISA of a PTX object, from its first entry's resource record.
pub fn ptx_isa(record: &ObjectRecord) -> Option<Version> {
    record.resources.values().find_map(|r| match r {
        Resources::Ptx(p) => parse_version(&p.ptx_isa),
        _ => None,
    })
}

/// The selection with its trace, over a load index: every (kernel, variant) in the manifest's
/// kernel order, each object judged with the one compat table. [`crate::Package::select`] is
/// the public way in; the load path's [`choose`] orders candidates the same way.
pub(crate) fn trace(ix: &LoadIndex<'_>, device: &Device) -> Selection {
    let mut kernels: Vec<KernelChoice> = Vec::new();
    // Linear in the objects: a slot per (kernel, variant) found through a map, the kernel
    // order looked up, never searched (a list search made 40,000 one-object kernels cost 49 s).
    let mut slots: HashMap<(String, Option<String>), usize> = HashMap::new();
    // The index was validated when it was made: no record fails to read.
    for (index, o) in (0..ix.object_count()).filter_map(|i| ix.object(i).ok().map(|o| (i, o))) {
        let candidate = judge_record(index, &o, device);
        let key = (o.kernel.to_string(), o.variant.map(str::to_string));
        match slots.get(&key) {
            Some(&k) => kernels[k].candidates.push(candidate),
            None => {
                slots.insert(key, kernels.len());
                kernels.push(KernelChoice {
                    kernel: o.kernel.to_string(),
                    variant: o.variant.map(str::to_string),
                    selected: None,
                    candidates: vec![candidate],
                });
            }
        }
    }
    let mut position: HashMap<&str, usize> = HashMap::new();
    for i in 0..ix.kernel_count() {
        if let Ok(name) = ix.kernel(i) {
            position.entry(name).or_insert(i);
        }
    }
    let order = |k: &KernelChoice| {
        position
            .get(k.kernel.as_str())
            .copied()
            .unwrap_or(usize::MAX)
    };
    kernels.sort_by(|a, b| {
        order(a)
            .cmp(&order(b))
            .then_with(|| a.kernel.cmp(&b.kernel))
            .then_with(|| variant_order(a.variant.as_deref(), b.variant.as_deref()))
    });
    for k in &mut kernels {
        k.candidates
            .sort_by(|a, b| a.key.cmp(&b.key).then_with(|| a.target.cmp(&b.target)));
        k.selected = k.candidates.first().filter(|c| c.accepted).map(|_| 0);
    }
    Selection {
        device: *device,
        kernels,
        absent: Default::default(),
    }
}

/// Variants in natural order (`rows_per_block2` before `rows_per_block10`), no variant first.
fn variant_order(a: Option<&str>, b: Option<&str>) -> std::cmp::Ordering {
    fn split(s: &str) -> (&str, u64) {
        let stem = s.trim_end_matches(|c: char| c.is_ascii_digit());
        (stem, s[stem.len()..].parse().unwrap_or(0))
    }
    match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(a), Some(b)) => split(a).cmp(&split(b)).then_with(|| a.cmp(b)),
    }
}

const UNKNOWN_TARGET_KEY: SortKey = (true, u32::MAX, std::cmp::Reverse((0, 0)));

fn judge_record(index: usize, o: &IndexObject<'_>, device: &Device) -> Candidate {
    match o.target.parse::<Target>() {
        Ok(target) => {
            let v = judge(&target, o.ptx_isa, device);
            Candidate {
                key: sort_key(&target, &v),
                target: o.target.to_string(),
                path: o.path.to_string(),
                accepted: v.accepted,
                rule: Some(v.rule),
                preference: v.preference,
                reason: v.reason,
                object: index,
            }
        }
        Err(e) => Candidate {
            target: o.target.to_string(),
            path: o.path.to_string(),
            accepted: false,
            rule: None,
            preference: u32::MAX,
            key: UNKNOWN_TARGET_KEY,
            reason: format!("{e}: this kbuild does not know the target (the bundle is newer?)"),
            object: index,
        },
    }
}

/// Sort keys of judged targets for one device, by (target string, PTX ISA). The compat table
/// writes a readable reason for every verdict; the load path needs only the order, so each
/// distinct target is judged once per loader and later selections allocate nothing.
pub(crate) struct Verdicts {
    device: Device,
    slots: [Option<Slot>; VERDICT_SLOTS],
}

/// Distinct (target, PTX ISA) pairs remembered; a package with more judges the rest anew.
const VERDICT_SLOTS: usize = 32;

#[derive(Clone, Copy)]
struct Slot {
    /// The target string's place in the index: the encoder stores each string once, so equal
    /// places are equal strings (the memo lives no longer than the index it points into).
    target: (usize, usize),
    ptx_isa: Option<Version>,
    key: SortKey,
}

impl Verdicts {
    pub(crate) fn new(device: Device) -> Verdicts {
        Verdicts {
            device,
            slots: [None; VERDICT_SLOTS],
        }
    }

    fn key(&mut self, o: &IndexObject<'_>) -> SortKey {
        let place = (o.target.as_ptr() as usize, o.target.len());
        let mut free = None;
        for (i, s) in self.slots.iter().enumerate() {
            match s {
                Some(s) if s.target == place && s.ptx_isa == o.ptx_isa => return s.key,
                Some(_) => {}
                None => {
                    free = Some(i);
                    break;
                }
            }
        }
        let key = match o.target.parse::<Target>() {
            Ok(t) => sort_key(&t, &judge(&t, o.ptx_isa, &self.device)),
            Err(_) => UNKNOWN_TARGET_KEY,
        };
        if let Some(i) = free {
            self.slots[i] = Some(Slot {
                target: place,
                ptx_isa: o.ptx_isa,
                key,
            });
        }
        key
    }
}

/// The object [`trace`] selects for `kernel` (`variant`; `None` as in [`Selection::kernel`]),
/// without building the trace: `None` when the kernel or variant is unknown or nothing runs
/// (the caller then builds the trace for the error).
pub(crate) fn choose(
    ix: &LoadIndex<'_>,
    verdicts: &mut Verdicts,
    kernel: &str,
    variant: Option<&str>,
) -> Option<usize> {
    // Names are compared in place; only the candidates' records are read whole.
    let of_kernel = || (0..ix.object_count()).filter(|&i| ix.object_kernel_is(i, kernel));
    // Without a variant: the kernel's objects without one, else its first variant.
    let variant = match variant {
        Some(v) => Some(v),
        None if of_kernel().any(|i| ix.object_variant_is(i, None)) => None,
        None => of_kernel()
            .filter_map(|i| ix.object_variant(i).ok())
            .min_by(|a, b| variant_order(*a, *b))?,
    };
    let mut best: Option<(SortKey, &str, usize)> = None;
    let candidates = of_kernel()
        .filter(|&i| ix.object_variant_is(i, variant))
        .filter_map(|i| ix.object(i).ok().map(|o| (i, o)));
    for (i, o) in candidates {
        let key = verdicts.key(&o);
        let better = match best {
            None => true,
            Some((k, t, _)) => (key, o.target) < (k, t),
        };
        if better {
            best = Some((key, o.target, i));
        }
    }
    // The smallest key is accepted, or nothing is.
    best.filter(|(k, _, _)| !k.0).map(|(_, _, i)| i)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures::{h200_bundle, manifest, object};
    use kbuild_manifest::manifest::Manifest;

    /// The selection of `m` through the one entry point, after checking that the load path's
    /// [`choose`] picks the same object for every kernel and variant (and for no variant).
    pub(crate) fn select(m: &Manifest, device: &Device) -> Selection {
        // The index a package makes of a manifest (not a file: a stamp that matches none).
        let stamp = kbuild_manifest::load_index::ManifestStamp {
            len: 0,
            mtime_ns: -1,
            ctime_ns: -1,
            ino: 0,
            blake3: [0; 32],
        };
        let bytes = kbuild_manifest::load_index::encode(m, stamp).unwrap();
        let ix = LoadIndex::parse(&bytes).unwrap();
        ix.validate().unwrap();
        let s = trace(&ix, device);
        let mut verdicts = Verdicts::new(*device);
        for k in &s.kernels {
            let want = k.selected().map(|c| c.object);
            let got = choose(&ix, &mut verdicts, &k.kernel, k.variant.as_deref());
            assert_eq!(got, want, "{} {:?}", k.kernel, k.variant);
            let first = s
                .kernel(&k.kernel, None)
                .unwrap()
                .selected()
                .map(|c| c.object);
            assert_eq!(choose(&ix, &mut verdicts, &k.kernel, None), first);
        }
        assert_eq!(choose(&ix, &mut verdicts, "no such kernel", None), None);
        s
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

    /// Issue 27, item 10: the no-match hint reads the compat table and the bundle: the
    /// oldest SASS of the device's major, the device's PTX, the AMD generic target; and a
    /// kernel the build skipped for the device's vendor (restricted) is not told to build it.
    #[test]
    fn no_match_hints_read_the_compat_table_and_the_bundle() {
        let m = manifest(vec![
            object("k", None, "sm_90", None),
            object("k", None, "gfx1100", None),
            object("nv_only", None, "sm_90", None),
        ]);
        let s = select(&m, &dev("sm_86", None));
        let e = s.no_match(s.kernel("k", None).unwrap()).to_string();
        assert!(
            e.contains("build it with `kbuild --targets sm_86`; also runs here: `sm_80` (SASS that runs on every 8.x device from it up), `compute_86` (PTX"),
            "{e}"
        );
        let s = select(&m, &dev("gfx1101", None));
        let e = s.no_match(s.kernel("k", None).unwrap()).to_string();
        assert!(
            e.contains("`kbuild --targets gfx1101`; also runs here: `gfx11-generic` (generic"),
            "{e}"
        );
        // A runtime that loads no generic object is not offered one.
        let old_rocm = Device::parse(
            "gfx1101",
            None,
            Some(kbuild_manifest::compat::NO_GENERIC_RUNTIME),
        )
        .unwrap();
        let s = select(&m, &old_rocm);
        let e = s.no_match(s.kernel("k", None).unwrap()).to_string();
        assert!(!e.contains("gfx11-generic"), "{e}");
        // On gfx1100 the build made gfx1100 objects, none of `nv_only`: restricted.
        let s = select(&m, &dev("gfx1100", None));
        let e = s.no_match(s.kernel("nv_only", None).unwrap()).to_string();
        assert!(
            e.contains("the build made gfx1100 for other kernels but none for this one")
                && e.contains("restricts it")
                && !e.contains("--targets gfx1100`"),
            "{e}"
        );
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
