//! The one compat rule table: which code object runs on which device, and how much it is
//! preferred. The loader's selection and the registry's pull call [`judge`]; the build's
//! coverage audit asks [`object_identity`] what an object built for a target must be, so build
//! and run cannot disagree.
//!
//! Sources: the CUDA compatibility guide (binary compatibility within a major, PTX JIT
//! forward), the `a`/`f` suffix rules of CUDA 12.0 / 12.9+, the PTX ISA release history (for
//! [`max_ptx_isa`]), LLVM AMDGPUUsage (target ids, xnack/sramecc, generic processors), and an
//! H200 (sm_90, driver 580 = CUDA 13.0): sm_80 and sm_89 cubins are refused (error 209), sm_90
//! and sm_90a load, PTX 9.5 (CUDA 13.5) is refused (error 222).
//!
//! ## NVIDIA (device compute capability X.Y)
//!
//! | object | runs when | rule | preference |
//! |---|---|---|---|
//! | `sm_XYa` cubin | device is exactly X.Y | [`Rule::ArchSpecific`] | 1 |
//! | `sm_XY` cubin | device is exactly X.Y | [`Rule::Exact`] | 2 |
//! | `sm_XZf` cubin | same family (X, Z ≤ Y, member list: 10.0f ⊇ 10.0/10.3, 12.0f ⊇ 12.0/12.1) | [`Rule::Family`] | 3 |
//! | `sm_XZ` cubin, Z < Y | same major X | [`Rule::SameMajorOlder`] | 4 (newest Z first) |
//! | `compute_AB` PTX | A.B ≤ X.Y and PTX ISA ≤ the driver's | [`Rule::PtxJit`] | 5 (newest AB first) |
//!
//! A cubin never runs on another major ([`Rule::OtherMajor`]) nor on an older minor
//! ([`Rule::NewerMinor`]). An `a` object (cubin or PTX) runs only on its exact CC
//! ([`Rule::ArchSpecificOther`]); an `f` object only on its family ([`Rule::FamilyOther`]).
//! PTX for a newer CC is [`Rule::PtxTooNewCc`]; PTX whose ISA is newer than the driver JITs is
//! [`Rule::PtxIsaTooNew`]. The driver version is `cuDriverGetVersion` (13000 = 13.0 → ISA 9.0).
//!
//! ## AMD (device target id `gfxNNNN[:sramecc±][:xnack±]`, from gcnArchName)
//!
//! | object | runs when | rule | preference |
//! |---|---|---|---|
//! | same processor, features equal to the device's | always | [`Rule::AmdExact`] | 1 |
//! | same processor, a feature "any" (unset in the object) | the other feature matches or is any | [`Rule::AmdFeatureAny`] | 2 |
//! | generic processor containing the device | the HIP runtime is ≥ [`GENERIC_MIN_RUNTIME`] (code object v6) or unknown | [`Rule::AmdGeneric`] | 3 |
//!
//! Rejections: another processor ([`Rule::AmdOtherProcessor`] — never aliased), a feature set
//! the other way ([`Rule::AmdFeatureMismatch`]), a generic family without the device
//! ([`Rule::GenericNotMember`]), a member on an older runtime
//! ([`Rule::GenericUnsupported`], see [`runtime_loads_generic`]). Code of the other vendor is
//! [`Rule::OtherVendor`].
//!
//! Preference across the table: arch-specific > exact > family > same-major older SASS >
//! generic > PTX; lower [`Verdict::preference`] is better, ties go to the newest object
//! ([`sort_key`]).

use std::cmp::Reverse;
use std::fmt;
use std::sync::OnceLock;

use crate::read::ObjectIdent;
use crate::target::{
    processor, suggest, CudaSuffix, Feature, ObjectKind, Processor, ProcessorKind, Target,
    TargetError, Vendor, Version, PROCESSORS,
};

/// The newest CUDA driver this catalogue knows; a simulated NVIDIA device without `--driver`
/// gets it.
pub const NEWEST_DRIVER: Version = Version(13, 5);

/// The first HIP runtime that loads generic (code object v6) objects: ROCm 6.4.
pub const GENERIC_MIN_RUNTIME: Version = Version(6, 4);

/// The newest HIP runtime that does not load generic objects (ROCm 6.3): what a simulated
/// `--no-generic` device runs.
pub const NO_GENERIC_RUNTIME: Version = Version(6, 3);

/// Whether a HIP runtime loads generic objects. An unknown runtime (a simulated device) is
/// taken as one that does, as an unknown PTX ISA is taken as loadable: the explain trace then
/// shows the generic object a real device with a new enough ROCm would run.
pub fn runtime_loads_generic(runtime: Option<Version>) -> bool {
    runtime.is_none_or(|v| v >= GENERIC_MIN_RUNTIME)
}

/// A device to judge code objects against: detected, or simulated (`--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cuda {
        /// The plain `sm_XY` row of the device's compute capability.
        processor: &'static Processor,
        /// CUDA driver version (`cuDriverGetVersion` 13000 → 13.0).
        driver: Version,
    },
    Amd {
        /// A concrete AMD processor (never a generic one).
        processor: &'static Processor,
        /// The device's xnack mode; `Any` where the processor has no such feature or the
        /// device spec did not say.
        xnack: Feature,
        sramecc: Feature,
        /// HIP runtime version (`hipRuntimeGetVersion` 60443483 → 6.4); `None` when unknown
        /// (a simulated device), judged by [`runtime_loads_generic`].
        runtime: Option<Version>,
    },
}

impl Device {
    /// Parse a device spec: `sm_90`, `9.0` (compute capability), `gfx90a:sramecc+:xnack-`,
    /// `gfx1151`. `driver` applies to NVIDIA devices (default [`NEWEST_DRIVER`]); `runtime`
    /// (the HIP runtime version, `None` = unknown) to AMD ones.
    pub fn parse(
        spec: &str,
        driver: Option<Version>,
        runtime: Option<Version>,
    ) -> Result<Device, TargetError> {
        let spec = spec.trim();
        let unknown = |suggestion: Option<String>| TargetError::Unknown {
            name: spec.to_string(),
            suggestion,
        };
        let driver = driver.unwrap_or(NEWEST_DRIVER);
        // Compute capability `9.0` (an `a`/`f` suffix names code, not a device: ignored).
        if let Some((major, minor)) = spec.split_once('.') {
            let minor = minor.trim_end_matches(['a', 'f']);
            let (Ok(major), Ok(minor)) = (major.parse::<u32>(), minor.parse::<u32>()) else {
                return Err(unknown(None));
            };
            return cuda_processor(major, minor)
                .map(|processor| Device::Cuda { processor, driver })
                .ok_or_else(|| unknown(suggest(&format!("sm_{major}{minor}"))));
        }
        if spec.starts_with("compute_") {
            return Err(unknown(Some(spec.replacen("compute_", "sm_", 1))));
        }
        if spec.starts_with("sm_") {
            let p = processor(spec).ok_or_else(|| unknown(suggest(spec)))?;
            let ProcessorKind::Cuda { major, minor, .. } = p.kind else {
                return Err(unknown(None));
            };
            let processor = cuda_processor(major, minor).ok_or_else(|| unknown(None))?;
            return Ok(Device::Cuda { processor, driver });
        }
        let base = spec.split(':').next().unwrap_or_default();
        let target: Target = match spec.parse() {
            Ok(t) => t,
            Err(e) => match member_processor(base) {
                // A generic family member outside the catalogue (gfx1031): features as given.
                Some(p) => parse_features(spec, p)?,
                None => return Err(e),
            },
        };
        if target.processor.is_generic() {
            let first = match target.processor.kind {
                ProcessorKind::AmdGeneric { members, .. } => members.first().copied(),
                _ => None,
            };
            return Err(unknown(
                first.map(|m| format!("a processor of the family such as {m}")),
            ));
        }
        if target.vendor() != Vendor::Amd || target.ptx {
            return Err(unknown(None));
        }
        Ok(Device::Amd {
            processor: target.processor,
            xnack: target.xnack,
            sramecc: target.sramecc,
            runtime,
        })
    }

    /// Canonical name: `sm_90`, `gfx90a:sramecc+:xnack-`.
    pub fn name(&self) -> String {
        match *self {
            Device::Cuda { processor, .. } => processor.name.to_string(),
            Device::Amd {
                processor,
                xnack,
                sramecc,
                ..
            } => Target {
                processor,
                ptx: false,
                xnack,
                sramecc,
            }
            .to_string(),
        }
    }

    pub fn vendor(&self) -> Vendor {
        match self {
            Device::Cuda { .. } => Vendor::Nvidia,
            Device::Amd { .. } => Vendor::Amd,
        }
    }

    /// Compute capability `(major, minor)` of an NVIDIA device.
    pub fn compute_capability(&self) -> Option<(u32, u32)> {
        match self {
            Device::Cuda { processor, .. } => cc(processor),
            Device::Amd { .. } => None,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The rule that accepted or rejected an object; serialised in snake_case for explain JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    ArchSpecific,
    Exact,
    Family,
    SameMajorOlder,
    PtxJit,
    AmdExact,
    AmdFeatureAny,
    AmdGeneric,
    // Rejections.
    OtherVendor,
    OtherMajor,
    NewerMinor,
    ArchSpecificOther,
    FamilyOther,
    PtxTooNewCc,
    PtxIsaTooNew,
    AmdOtherProcessor,
    AmdFeatureMismatch,
    GenericNotMember,
    GenericUnsupported,
}

impl Rule {
    /// Whether this rule accepts the object.
    pub fn accepts(self) -> bool {
        self.preference() != REJECTED
    }

    /// Preference of an accepted object (lower is better); `u32::MAX` for rejections.
    pub fn preference(self) -> u32 {
        match self {
            Rule::ArchSpecific | Rule::AmdExact => 1,
            Rule::Exact | Rule::AmdFeatureAny => 2,
            Rule::Family | Rule::AmdGeneric => 3,
            Rule::SameMajorOlder => 4,
            Rule::PtxJit => 5,
            _ => REJECTED,
        }
    }

    /// snake_case name, as in explain JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::ArchSpecific => "arch_specific",
            Rule::Exact => "exact",
            Rule::Family => "family",
            Rule::SameMajorOlder => "same_major_older",
            Rule::PtxJit => "ptx_jit",
            Rule::AmdExact => "amd_exact",
            Rule::AmdFeatureAny => "amd_feature_any",
            Rule::AmdGeneric => "amd_generic",
            Rule::OtherVendor => "other_vendor",
            Rule::OtherMajor => "other_major",
            Rule::NewerMinor => "newer_minor",
            Rule::ArchSpecificOther => "arch_specific_other",
            Rule::FamilyOther => "family_other",
            Rule::PtxTooNewCc => "ptx_too_new_cc",
            Rule::PtxIsaTooNew => "ptx_isa_too_new",
            Rule::AmdOtherProcessor => "amd_other_processor",
            Rule::AmdFeatureMismatch => "amd_feature_mismatch",
            Rule::GenericNotMember => "generic_not_member",
            Rule::GenericUnsupported => "generic_unsupported",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const REJECTED: u32 = u32::MAX;

/// The decision about one object on one device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    pub accepted: bool,
    pub rule: Rule,
    /// Lower is better (1 = arch-specific / AMD exact); `u32::MAX` when rejected. Ties are
    /// broken by the newest object ([`sort_key`]).
    pub preference: u32,
    /// Readable: "sm_89 cubin: SASS runs only within major 8; device is 9.0".
    pub reason: String,
}

fn verdict(rule: Rule, reason: String) -> Verdict {
    Verdict {
        accepted: rule.accepts(),
        rule,
        preference: rule.preference(),
        reason,
    }
}

/// Ordering key of a judged object: accepted before rejected, then lower preference, then the
/// newest object (higher SM / CC). The best candidate has the smallest key.
pub fn sort_key(object: &Target, verdict: &Verdict) -> (bool, u32, Reverse<(u32, u32)>) {
    let newest = cc(object.processor).unwrap_or((0, 0));
    (!verdict.accepted, verdict.preference, Reverse(newest))
}

/// The newest PTX ISA a CUDA driver JIT-compiles (PTX ISA release history: CUDA 12.0 → 8.0 …
/// 12.5 → 8.5, 12.6 → 8.5, 12.7 → 8.6, 12.8 → 8.7, 12.9 → 8.8, 13.0 → 9.0 … 13.5 → 9.5).
/// Drivers newer than the table are assumed to follow the 13.x pattern (ISA = major − 4).
pub fn max_ptx_isa(driver: Version) -> Version {
    let Version(major, minor) = driver;
    match major {
        0..=9 => Version(5, 0),
        10 => Version(6, 3 + minor.min(2)),
        11 => Version(7, minor.min(8)),
        12 => match minor {
            0..=5 => Version(8, minor),
            6 => Version(8, 5),
            7 => Version(8, 6),
            8 => Version(8, 7),
            _ => Version(8, 8),
        },
        _ => Version(major - 4, minor),
    }
}

/// The CUDA version of a `cuDriverGetVersion` value (13000 → 13.0, 12080 → 12.8).
pub fn driver_version(raw: i32) -> Version {
    let raw = u32::try_from(raw).unwrap_or(0);
    Version(raw / 1000, (raw % 1000) / 10)
}

/// Parse `9.5` (a PTX ISA or driver version).
pub fn parse_version(s: &str) -> Option<Version> {
    let (a, b) = s.trim().split_once('.')?;
    Some(Version(a.parse().ok()?, b.parse().ok()?))
}

/// What a code object built for a target must identify as (see [`crate::read::identify`]):
/// the coverage audit admits an object to a build only when it [`matches`](Self::matches), and
/// selection then judges it by the target the manifest records, so an object the audit admits
/// never runs where its real target would not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectIdentity {
    /// ELF e_machine (`EM_CUDA`, `EM_AMDGPU`); 0 for PTX text.
    pub machine: u16,
    /// The SM number (cubin, PTX `.target`) or the AMD `EF_AMDGPU_MACH` value.
    pub arch: u32,
    /// The target name the object records: `gfx90a:xnack-`, `sm_90a`; PTX its `.target`
    /// (`sm_90a` for `compute_90a`).
    pub target: String,
}

impl ObjectIdentity {
    /// Whether an identified object is the one this identity requires.
    pub fn matches(&self, ident: &ObjectIdent) -> bool {
        ident.machine == self.machine && ident.arch == self.arch && ident.target == self.target
    }
}

/// The identity an object built for `target` must have; `None` when the catalogue cannot say
/// (then no object passes the audit).
pub fn object_identity(target: &Target) -> Option<ObjectIdentity> {
    if target.object_kind() == ObjectKind::Ptx {
        // The `.target` suffix matters: `sm_90a` PTX judged as `compute_90` would be
        // selected on devices newer than 9.0, where it does not JIT.
        return Some(ObjectIdentity {
            machine: 0,
            arch: target.processor.sm()?,
            target: target.processor.name.to_string(),
        });
    }
    let (machine, arch) = target.expected_elf()?;
    // A standalone cubin does not record 'f' (only fatbin entry flags do): an `sm_100f`
    // cubin reads as `sm_100`.
    let name = match target.processor.kind {
        ProcessorKind::Cuda {
            suffix: CudaSuffix::FamilySpecific,
            ..
        } => target.processor.name.trim_end_matches('f').to_string(),
        _ => target.to_string(),
    };
    Some(ObjectIdentity {
        machine,
        arch,
        target: name,
    })
}

/// Judge whether `object` runs on `device`. `ptx_isa` is the `.version` of a PTX object (from
/// its resource record); `None` when unknown, which is taken as loadable.
pub fn judge(object: &Target, ptx_isa: Option<Version>, device: &Device) -> Verdict {
    match *device {
        Device::Cuda { processor, driver } => judge_cuda(object, ptx_isa, processor, driver),
        Device::Amd {
            processor,
            xnack,
            sramecc,
            runtime,
        } => judge_amd(object, processor, xnack, sramecc, runtime),
    }
}

fn judge_cuda(
    object: &Target,
    ptx_isa: Option<Version>,
    device: &'static Processor,
    driver: Version,
) -> Verdict {
    let dev = cc(device).unwrap_or((0, 0));
    let dev_s = cc_text(dev);
    let ProcessorKind::Cuda {
        major,
        minor,
        suffix,
    } = object.processor.kind
    else {
        return verdict(
            Rule::OtherVendor,
            format!(
                "{object} code object: AMD code does not run on NVIDIA {device}",
                device = device.name
            ),
        );
    };
    let obj = (major, minor);
    let obj_s = cc_text(obj);
    let what = if object.ptx { "PTX" } else { "cubin" };
    match suffix {
        CudaSuffix::ArchSpecific if obj != dev => {
            return verdict(
                Rule::ArchSpecificOther,
                format!(
                    "{object} {what}: arch-specific code runs only on {obj_s}; device is {dev_s}"
                ),
            )
        }
        CudaSuffix::FamilySpecific if !in_family(obj, dev) => {
            return verdict(
                Rule::FamilyOther,
                format!(
                    "{object} {what}: family {obj_s}f covers only {}; device is {dev_s}",
                    family_text(obj)
                ),
            )
        }
        _ => {}
    }
    if object.ptx {
        if obj > dev {
            return verdict(
                Rule::PtxTooNewCc,
                format!("{object} PTX: needs compute capability ≥ {obj_s}; device is {dev_s}"),
            );
        }
        let max = max_ptx_isa(driver);
        return match ptx_isa {
            Some(isa) if isa > max => verdict(
                Rule::PtxIsaTooNew,
                format!(
                    "{object} PTX: ISA {isa} > {max}, the newest driver {driver} JIT-compiles"
                ),
            ),
            Some(isa) => verdict(
                Rule::PtxJit,
                format!(
                    "{object} PTX: ISA {isa} ≤ {max} (driver {driver}), JIT-compiled for {dev_s}"
                ),
            ),
            None => verdict(
                Rule::PtxJit,
                format!("{object} PTX: ISA unknown, assumed ≤ {max} (driver {driver}), JIT-compiled for {dev_s}"),
            ),
        };
    }
    match suffix {
        CudaSuffix::ArchSpecific => verdict(
            Rule::ArchSpecific,
            format!("{object} cubin: arch-specific SASS for exactly {dev_s}"),
        ),
        CudaSuffix::FamilySpecific => verdict(
            Rule::Family,
            format!(
                "{object} cubin: family {obj_s}f covers {}, device is {dev_s}",
                family_text(obj)
            ),
        ),
        CudaSuffix::Plain if obj.0 != dev.0 => verdict(
            Rule::OtherMajor,
            format!("{object} cubin: SASS runs only within major {major}; device is {dev_s}"),
        ),
        CudaSuffix::Plain if obj.1 > dev.1 => verdict(
            Rule::NewerMinor,
            format!("{object} cubin: SASS for {obj_s} does not run on the older {dev_s}"),
        ),
        CudaSuffix::Plain if obj == dev => verdict(
            Rule::Exact,
            format!("{object} cubin: SASS for exactly {dev_s}"),
        ),
        CudaSuffix::Plain => verdict(
            Rule::SameMajorOlder,
            format!("{object} cubin: SASS for {obj_s} runs on {dev_s} (same major, older minor)"),
        ),
    }
}

fn judge_amd(
    object: &Target,
    device: &'static Processor,
    xnack: Feature,
    sramecc: Feature,
    runtime: Option<Version>,
) -> Verdict {
    let dev_t = Target {
        processor: device,
        ptx: false,
        xnack,
        sramecc,
    };
    match object.processor.kind {
        ProcessorKind::Cuda { .. } => verdict(
            Rule::OtherVendor,
            format!(
                "{object} {}: NVIDIA code does not run on AMD {dev_t}",
                if object.ptx { "PTX" } else { "cubin" }
            ),
        ),
        ProcessorKind::AmdGeneric { members, .. } => {
            let list = members.join(", ");
            if !members.contains(&device.name) {
                verdict(
                    Rule::GenericNotMember,
                    format!("{object} code object: covers {list}; not {}", device.name),
                )
            } else if !runtime_loads_generic(runtime) {
                verdict(
                    Rule::GenericUnsupported,
                    format!(
                        "{object} code object: {} is a member, but the runtime does not load generic code objects (code object v6 needs ROCm ≥ {GENERIC_MIN_RUNTIME})",
                        device.name
                    ),
                )
            } else {
                verdict(
                    Rule::AmdGeneric,
                    format!("{object} code object: generic family containing {}", device.name),
                )
            }
        }
        ProcessorKind::Amd { .. } if object.processor.name != device.name => verdict(
            Rule::AmdOtherProcessor,
            format!(
                "{object} code object: runs only on {}; device is {} (processors are never aliased)",
                object.processor.name, device.name
            ),
        ),
        ProcessorKind::Amd { .. } => {
            let mut any = Vec::new();
            for (name, obj, dev) in [
                ("sramecc", object.sramecc, sramecc),
                ("xnack", object.xnack, xnack),
            ] {
                if obj == dev {
                    continue;
                }
                if obj == Feature::Any {
                    any.push(name);
                    continue;
                }
                let device_has = match dev {
                    Feature::Any => format!("{dev_t} does not report {name}"),
                    _ => format!("device is {dev_t}"),
                };
                return verdict(
                    Rule::AmdFeatureMismatch,
                    format!(
                        "{object} code object: built for {name}{}; {device_has}",
                        feature_sign(obj)
                    ),
                );
            }
            if any.is_empty() {
                verdict(
                    Rule::AmdExact,
                    format!("{object} code object: same processor and features as {dev_t}"),
                )
            } else {
                verdict(
                    Rule::AmdFeatureAny,
                    format!(
                        "{object} code object: {} any, runs on {dev_t}",
                        any.join(" and ")
                    ),
                )
            }
        }
    }
}

fn feature_sign(f: Feature) -> &'static str {
    match f {
        Feature::On => "+",
        Feature::Off => "-",
        Feature::Any => "",
    }
}

/// CUDA families (CUDA 12.9 `f` targets): the compute capabilities an `sm_XZf` object of
/// major X covers, from which the members with minor ≥ Z are taken.
const CUDA_FAMILIES: &[(u32, &[u32])] = &[(10, &[0, 3]), (11, &[0]), (12, &[0, 1])];

fn family_members(obj: (u32, u32)) -> Vec<(u32, u32)> {
    match CUDA_FAMILIES.iter().find(|(m, _)| *m == obj.0) {
        Some((m, minors)) => minors
            .iter()
            .filter(|&&n| n >= obj.1)
            .map(|&n| (*m, n))
            .collect(),
        None => vec![obj],
    }
}

fn in_family(obj: (u32, u32), dev: (u32, u32)) -> bool {
    family_members(obj).contains(&dev)
}

fn family_text(obj: (u32, u32)) -> String {
    family_members(obj)
        .into_iter()
        .map(cc_text)
        .collect::<Vec<_>>()
        .join(", ")
}

fn cc(p: &Processor) -> Option<(u32, u32)> {
    match p.kind {
        ProcessorKind::Cuda { major, minor, .. } => Some((major, minor)),
        _ => None,
    }
}

fn cc_text((major, minor): (u32, u32)) -> String {
    format!("{major}.{minor}")
}

/// The plain `sm_XY` catalogue row of compute capability X.Y.
pub fn cuda_processor(major: u32, minor: u32) -> Option<&'static Processor> {
    PROCESSORS.iter().find(|p| {
        p.kind
            == ProcessorKind::Cuda {
                major,
                minor,
                suffix: CudaSuffix::Plain,
            }
    })
}

/// Rows for the members of generic families that the build catalogue does not list (gfx1031,
/// gfx940, ...): a device can be one, and a generic object can run on it. Never build targets.
fn member_processor(name: &str) -> Option<&'static Processor> {
    static MEMBERS: OnceLock<Vec<Processor>> = OnceLock::new();
    MEMBERS
        .get_or_init(|| {
            let mut out: Vec<Processor> = Vec::new();
            for g in PROCESSORS {
                let ProcessorKind::AmdGeneric { members, .. } = g.kind else {
                    continue;
                };
                for m in members {
                    if processor(m).is_some() || out.iter().any(|p| p.name == *m) {
                        continue;
                    }
                    // gfx940/941 (the gfx9-4 family) support xnack and sramecc like gfx942.
                    let features = g.wave_size == 64;
                    out.push(Processor {
                        name: m,
                        kind: ProcessorKind::Amd {
                            mach: 0,
                            xnack: features,
                            sramecc: features,
                        },
                        wave_size: g.wave_size,
                        min_toolchain: g.min_toolchain,
                        generation: "generic-member",
                    });
                }
            }
            out
        })
        .iter()
        .find(|p| p.name == name)
}

fn parse_features(spec: &str, p: &'static Processor) -> Result<Target, TargetError> {
    let mut t = Target {
        processor: p,
        ptx: false,
        xnack: Feature::Any,
        sramecc: Feature::Any,
    };
    let (xnack_ok, sramecc_ok) = match p.kind {
        ProcessorKind::Amd { xnack, sramecc, .. } => (xnack, sramecc),
        _ => (false, false),
    };
    for feature in spec.split(':').skip(1) {
        let value = match feature.as_bytes().last() {
            Some(b'+') => Feature::On,
            Some(b'-') => Feature::Off,
            _ => {
                return Err(TargetError::BadFeature {
                    name: spec.to_string(),
                    feature: feature.to_string(),
                })
            }
        };
        let key = &feature[..feature.len() - 1];
        match key {
            "xnack" if xnack_ok => t.xnack = value,
            "sramecc" if sramecc_ok => t.sramecc = value,
            "xnack" | "sramecc" => {
                return Err(TargetError::UnsupportedFeature {
                    name: spec.to_string(),
                    processor: p.name,
                    feature: key.to_string(),
                })
            }
            _ => {
                return Err(TargetError::BadFeature {
                    name: spec.to_string(),
                    feature: feature.to_string(),
                })
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests;
