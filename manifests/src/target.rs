//! The target catalogue: every device-code target kbuild knows, in one table.
//!
//! Sources: NVIDIA's CUDA toolkit release notes (first toolkit per SM), LLVM's AMDGPUUsage
//! (processors, wave sizes, xnack/sramecc support, generic families) and LLVM's `ELF.h`
//! (`EF_AMDGPU_MACH_*`). Build and run share this table so they cannot disagree.

use std::fmt;
use std::str::FromStr;

/// e_machine of AMDGPU code objects.
pub const EM_AMDGPU: u16 = 224;
/// e_machine of NVIDIA cubins.
pub const EM_CUDA: u16 = 190;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
}

impl Vendor {
    pub fn toolchain(self) -> &'static str {
        match self {
            Vendor::Nvidia => "cuda",
            Vendor::Amd => "hip",
        }
    }
}

/// A toolchain release, `major.minor` (CUDA toolkit for NVIDIA, LLVM/clang for AMD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u32, pub u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// The CUDA suffix of an SM: plain, `a` (arch-specific) or `f` (family-specific).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaSuffix {
    Plain,
    ArchSpecific,
    FamilySpecific,
}

/// What kind of processor a catalogue row names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessorKind {
    /// An NVIDIA compute capability `major.minor` with its suffix.
    Cuda {
        major: u32,
        minor: u32,
        suffix: CudaSuffix,
    },
    /// A concrete AMD processor; flags say which target-id features it supports.
    Amd {
        mach: u32,
        xnack: bool,
        sramecc: bool,
    },
    /// An AMD generic processor (code object v6) and the processors it covers.
    AmdGeneric {
        mach: u32,
        members: &'static [&'static str],
    },
}

/// One row of the catalogue.
#[derive(Debug, PartialEq, Eq)]
pub struct Processor {
    /// `sm_90a`, `gfx1100`, `gfx11-generic`.
    pub name: &'static str,
    pub kind: ProcessorKind,
    pub wave_size: u32,
    /// The oldest toolchain that builds it: CUDA toolkit for NVIDIA, LLVM for AMD.
    pub min_toolchain: Version,
    /// Marketing generation (`ampere`, `rdna3`, ...), used by groups.
    pub generation: &'static str,
}

impl Processor {
    pub fn vendor(&self) -> Vendor {
        match self.kind {
            ProcessorKind::Cuda { .. } => Vendor::Nvidia,
            _ => Vendor::Amd,
        }
    }

    /// The NVIDIA SM number (`89` for sm_89, `90` for sm_90a, `100` for sm_100f).
    pub fn sm(&self) -> Option<u32> {
        match self.kind {
            ProcessorKind::Cuda { major, minor, .. } => Some(major * 10 + minor),
            _ => None,
        }
    }

    /// The AMD `EF_AMDGPU_MACH_*` value.
    pub fn mach(&self) -> Option<u32> {
        match self.kind {
            ProcessorKind::Amd { mach, .. } | ProcessorKind::AmdGeneric { mach, .. } => Some(mach),
            ProcessorKind::Cuda { .. } => None,
        }
    }

    pub fn is_generic(&self) -> bool {
        matches!(self.kind, ProcessorKind::AmdGeneric { .. })
    }
}

const fn cuda(
    name: &'static str,
    major: u32,
    minor: u32,
    suffix: CudaSuffix,
    min: Version,
    generation: &'static str,
) -> Processor {
    Processor {
        name,
        kind: ProcessorKind::Cuda {
            major,
            minor,
            suffix,
        },
        wave_size: 32,
        min_toolchain: min,
        generation,
    }
}

const fn amd(
    name: &'static str,
    mach: u32,
    wave_size: u32,
    features: (bool, bool),
    min_llvm: u32,
    generation: &'static str,
) -> Processor {
    Processor {
        name,
        kind: ProcessorKind::Amd {
            mach,
            xnack: features.0,
            sramecc: features.1,
        },
        wave_size,
        min_toolchain: Version(min_llvm, 0),
        generation,
    }
}

const fn generic(
    name: &'static str,
    mach: u32,
    wave_size: u32,
    members: &'static [&'static str],
    min_llvm: u32,
) -> Processor {
    Processor {
        name,
        kind: ProcessorKind::AmdGeneric { mach, members },
        wave_size,
        min_toolchain: Version(min_llvm, 0),
        generation: "generic",
    }
}

use CudaSuffix::{ArchSpecific as A, FamilySpecific as F, Plain as P};

const NO_FEATURES: (bool, bool) = (false, false);
/// xnack and sramecc both supported (gfx90a and CDNA3+).
const XNACK_SRAMECC: (bool, bool) = (true, true);

/// The catalogue. NVIDIA minimum toolkits: first CUDA release that accepts `-arch=<name>`.
/// AMD minimum LLVM: first LLVM release that accepts `--offload-arch=<name>` (clang-19 was
/// checked with `--print-supported-cpus`: it lacks gfx950 and gfx9-4-generic).
pub static PROCESSORS: &[Processor] = &[
    cuda("sm_75", 7, 5, P, Version(10, 0), "turing"),
    cuda("sm_80", 8, 0, P, Version(11, 0), "ampere"),
    cuda("sm_86", 8, 6, P, Version(11, 1), "ampere"),
    cuda("sm_87", 8, 7, P, Version(11, 4), "ampere"),
    cuda("sm_89", 8, 9, P, Version(11, 8), "ada"),
    cuda("sm_90", 9, 0, P, Version(11, 8), "hopper"),
    cuda("sm_90a", 9, 0, A, Version(12, 0), "hopper"),
    cuda("sm_100", 10, 0, P, Version(12, 8), "blackwell"),
    cuda("sm_100a", 10, 0, A, Version(12, 8), "blackwell"),
    cuda("sm_100f", 10, 0, F, Version(12, 9), "blackwell"),
    cuda("sm_103", 10, 3, P, Version(12, 9), "blackwell"),
    cuda("sm_103a", 10, 3, A, Version(12, 9), "blackwell"),
    cuda("sm_103f", 10, 3, F, Version(12, 9), "blackwell"),
    cuda("sm_110", 11, 0, P, Version(13, 0), "blackwell"),
    cuda("sm_110a", 11, 0, A, Version(13, 0), "blackwell"),
    cuda("sm_110f", 11, 0, F, Version(13, 0), "blackwell"),
    cuda("sm_120", 12, 0, P, Version(12, 8), "blackwell"),
    cuda("sm_120a", 12, 0, A, Version(12, 8), "blackwell"),
    cuda("sm_120f", 12, 0, F, Version(12, 9), "blackwell"),
    cuda("sm_121", 12, 1, P, Version(12, 9), "blackwell"),
    cuda("sm_121a", 12, 1, A, Version(12, 9), "blackwell"),
    cuda("sm_121f", 12, 1, F, Version(12, 9), "blackwell"),
    amd("gfx90a", 0x3f, 64, XNACK_SRAMECC, 13, "cdna2"),
    amd("gfx942", 0x4c, 64, XNACK_SRAMECC, 16, "cdna3"),
    amd("gfx950", 0x4f, 64, XNACK_SRAMECC, 20, "cdna4"),
    amd("gfx1030", 0x36, 32, NO_FEATURES, 12, "rdna2"),
    amd("gfx1100", 0x41, 32, NO_FEATURES, 15, "rdna3"),
    amd("gfx1101", 0x46, 32, NO_FEATURES, 15, "rdna3"),
    amd("gfx1102", 0x47, 32, NO_FEATURES, 15, "rdna3"),
    amd("gfx1103", 0x44, 32, NO_FEATURES, 15, "rdna3"),
    amd("gfx1150", 0x43, 32, NO_FEATURES, 17, "rdna3"),
    amd("gfx1151", 0x4a, 32, NO_FEATURES, 17, "rdna3"),
    amd("gfx1152", 0x55, 32, NO_FEATURES, 19, "rdna3"),
    amd("gfx1200", 0x48, 32, NO_FEATURES, 18, "rdna4"),
    amd("gfx1201", 0x4e, 32, NO_FEATURES, 18, "rdna4"),
    // Triton's AMD backend builds it (its objects carry mach 0x49); no clang here does, so
    // the first LLVM release is LLVM's own record, not checked by a tool of this machine.
    amd("gfx1250", 0x49, 32, XNACK_SRAMECC, 21, "gfx12.5"),
    generic(
        "gfx9-4-generic",
        0x5f,
        64,
        &["gfx940", "gfx941", "gfx942", "gfx950"],
        20,
    ),
    generic(
        "gfx10-3-generic",
        0x53,
        32,
        &[
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
        ],
        19,
    ),
    generic(
        "gfx11-generic",
        0x54,
        32,
        &[
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ],
        19,
    ),
    generic("gfx12-generic", 0x59, 32, &["gfx1200", "gfx1201"], 19),
];

/// Named groups of targets. Each expands to the plain (portable) target of each member.
pub static GROUPS: &[(&str, &[&str])] = &[
    ("ampere", &["sm_80", "sm_86", "sm_87"]),
    ("ada", &["sm_89"]),
    ("hopper", &["sm_90"]),
    (
        "blackwell",
        &["sm_100", "sm_103", "sm_110", "sm_120", "sm_121"],
    ),
    (
        "rdna3",
        &[
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152",
        ],
    ),
    ("rdna4", &["gfx1200", "gfx1201"]),
    ("cdna2", &["gfx90a"]),
    ("cdna3", &["gfx942"]),
];

/// Vendor groups: every target of one vendor that `all` names (plain targets; no generic or
/// arch-specific ones). Accepted wherever a target list is (Kbuild.toml `[build] targets`, a
/// kernel's `targets`, `--targets`); like `all`, a build drops those its toolchain cannot
/// build instead of failing.
pub static VENDOR_GROUPS: &[(&str, Vendor)] = &[
    ("nvidia", Vendor::Nvidia),
    ("cuda", Vendor::Nvidia),
    ("amd", Vendor::Amd),
    ("rocm", Vendor::Amd),
];

/// The vendor a vendor group names (`nvidia`, `cuda`, `amd`, `rocm`).
pub fn vendor_group(item: &str) -> Option<Vendor> {
    VENDOR_GROUPS
        .iter()
        .find(|(g, _)| *g == item)
        .map(|(_, v)| *v)
}

/// Look up a catalogue row by exact name.
pub fn processor(name: &str) -> Option<&'static Processor> {
    PROCESSORS.iter().find(|p| p.name == name)
}

/// A target-id feature setting (`xnack`, `sramecc`): unset means "any".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Feature {
    #[default]
    Any,
    On,
    Off,
}

impl Feature {
    fn suffix(self) -> &'static str {
        match self {
            Feature::Any => "",
            Feature::On => "+",
            Feature::Off => "-",
        }
    }
}

/// What kind of code object a target produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    Cubin,
    Ptx,
    Hsaco,
}

impl ObjectKind {
    pub fn extension(self) -> &'static str {
        match self {
            ObjectKind::Cubin => "cubin",
            ObjectKind::Ptx => "ptx",
            ObjectKind::Hsaco => "hsaco",
        }
    }
}

/// A build target: a catalogue processor plus how it is built (SASS vs PTX) and, on AMD,
/// the target-id features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub processor: &'static Processor,
    /// NVIDIA only: `compute_XY` PTX instead of `sm_XY` SASS.
    pub ptx: bool,
    pub xnack: Feature,
    pub sramecc: Feature,
}

impl std::hash::Hash for Target {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.processor.name.hash(state);
        self.ptx.hash(state);
        self.xnack.hash(state);
        self.sramecc.hash(state);
    }
}

impl Target {
    pub fn vendor(&self) -> Vendor {
        self.processor.vendor()
    }

    pub fn object_kind(&self) -> ObjectKind {
        match (self.vendor(), self.ptx) {
            (Vendor::Nvidia, true) => ObjectKind::Ptx,
            (Vendor::Nvidia, false) => ObjectKind::Cubin,
            (Vendor::Amd, _) => ObjectKind::Hsaco,
        }
    }

    pub fn wave_size(&self) -> u32 {
        self.processor.wave_size
    }

    /// The `(e_machine, arch)` an object built for this target must carry: AMD
    /// `EF_AMDGPU_MACH`, CUDA SM number. PTX has no ELF header.
    pub fn expected_elf(&self) -> Option<(u16, u32)> {
        match self.object_kind() {
            ObjectKind::Ptx => None,
            ObjectKind::Cubin => self.processor.sm().map(|sm| (EM_CUDA, sm)),
            ObjectKind::Hsaco => self.processor.mach().map(|m| (EM_AMDGPU, m)),
        }
    }

    /// The name of the value the compiler takes (`sm_90a`, `compute_90`, `gfx90a:xnack-`).
    pub fn compiler_arch(&self) -> String {
        self.to_string()
    }

    /// The release family of the target: what `package --max-asset-size` puts in one
    /// bundle. NVIDIA: the SM major (`sm_8x` for sm_80..sm_89 and `compute_8x`, `sm_9x` for
    /// sm_90/sm_90a/compute_90, `sm_10x`, `sm_12x`); AMD: the gfx major of LLVM's
    /// `gfx<major><minor><stepping>` (`gfx9` for gfx90a/gfx942/gfx9-4-generic, `gfx10`,
    /// `gfx11` for gfx1100..gfx1152 and gfx11-generic, `gfx12`). A PTX target sits with the SASS
    /// of its own compute capability and a generic target with its member processors, so a
    /// family holds everything the compat table can pick for a device of that major other
    /// than PTX of an older major (see `compat`).
    pub fn family(&self) -> String {
        match self.processor.kind {
            ProcessorKind::Cuda { major, .. } => format!("sm_{major}x"),
            ProcessorKind::Amd { .. } | ProcessorKind::AmdGeneric { .. } => {
                let digits = self.processor.name.trim_start_matches("gfx");
                let major = match digits.split_once('-') {
                    // gfx11-generic, gfx9-4-generic, gfx10-3-generic
                    Some((major, _)) => major,
                    // gfx1100, gfx90a, gfx942: minor and stepping are one (hex) digit each.
                    None => digits
                        .get(..digits.len().saturating_sub(2))
                        .unwrap_or(digits),
                };
                format!("gfx{major}")
            }
        }
    }
}

/// The release family ([`Target::family`]) of a manifest's target name; a name outside the
/// catalogue is a family of its own (spelled with `_` for anything but `[a-z0-9._-]`).
pub fn family_of(name: &str) -> String {
    match name.parse::<Target>() {
        Ok(t) => t.family(),
        Err(_) => name
            .chars()
            .map(|c| {
                if c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect(),
    }
}

impl Target {
    /// Not PTX and no feature setting: the processor's plain target (`sm_90`, `gfx90a`).
    pub fn is_plain(&self) -> bool {
        !self.ptx && self.xnack == Feature::Any && self.sramecc == Feature::Any
    }
}

impl fmt::Display for Target {
    /// Canonical spelling: `compute_` for PTX; AMD features in LLVM's order (sramecc, xnack).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ptx {
            let rest = self
                .processor
                .name
                .strip_prefix("sm_")
                .unwrap_or(self.processor.name);
            return write!(f, "compute_{rest}");
        }
        f.write_str(self.processor.name)?;
        if self.sramecc != Feature::Any {
            write!(f, ":sramecc{}", self.sramecc.suffix())?;
        }
        if self.xnack != Feature::Any {
            write!(f, ":xnack{}", self.xnack.suffix())?;
        }
        Ok(())
    }
}

impl serde::Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Why a target name was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("unknown target `{name}`{}", suggestion_text(.suggestion))]
    Unknown {
        name: String,
        suggestion: Option<String>,
    },
    #[error("target `{name}`: {processor} does not support the `{feature}` feature")]
    UnsupportedFeature {
        name: String,
        processor: &'static str,
        feature: String,
    },
    #[error("target `{name}`: malformed target-id feature `{feature}` (expected xnack+, xnack-, sramecc+ or sramecc-)")]
    BadFeature { name: String, feature: String },
    #[error("empty target list")]
    Empty,
}

fn suggestion_text(s: &Option<String>) -> String {
    match s {
        Some(s) => format!(" (did you mean {s}?)"),
        None => String::new(),
    }
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let name = raw.trim();
        let mut parts = name.split(':');
        let base = parts.next().unwrap_or_default();
        let unknown = || TargetError::Unknown {
            name: name.to_string(),
            suggestion: suggest(base),
        };
        let (processor, ptx) = if let Some(rest) = base.strip_prefix("compute_") {
            let sm = format!("sm_{rest}");
            (processor(&sm).ok_or_else(unknown)?, true)
        } else {
            (processor(base).ok_or_else(unknown)?, false)
        };
        let mut target = Target {
            processor,
            ptx,
            xnack: Feature::Any,
            sramecc: Feature::Any,
        };
        for feature in parts {
            let (key, value) = match feature.split_at_checked(feature.len().saturating_sub(1)) {
                Some((k, "+")) => (k, Feature::On),
                Some((k, "-")) => (k, Feature::Off),
                _ => {
                    return Err(TargetError::BadFeature {
                        name: name.to_string(),
                        feature: feature.to_string(),
                    })
                }
            };
            let (xnack_ok, sramecc_ok) = match processor.kind {
                ProcessorKind::Amd { xnack, sramecc, .. } => (xnack, sramecc),
                _ => (false, false),
            };
            let unsupported = || TargetError::UnsupportedFeature {
                name: name.to_string(),
                processor: processor.name,
                feature: key.to_string(),
            };
            match key {
                "xnack" if xnack_ok => target.xnack = value,
                "sramecc" if sramecc_ok => target.sramecc = value,
                "xnack" | "sramecc" => return Err(unsupported()),
                _ => {
                    return Err(TargetError::BadFeature {
                        name: name.to_string(),
                        feature: feature.to_string(),
                    })
                }
            }
        }
        Ok(target)
    }
}

/// Parse a target list: names, groups and TORCH_CUDA_ARCH_LIST items (`8.0;8.9;9.0+PTX`,
/// `9.0a`), separated by commas, semicolons or whitespace. Order is kept, duplicates dropped.
/// `-ITEM` removes what ITEM names from the targets before it (`all,-gfx950`).
pub fn parse_target_list(list: &str) -> Result<Vec<Target>, TargetError> {
    let spec = parse_target_spec(list)?;
    if spec.targets.is_empty() {
        return Err(TargetError::Empty);
    }
    Ok(spec.targets)
}

/// Several target lists read as one (a repeated `--targets`, the items of Kbuild.toml's
/// `targets` array): an `-ITEM` exclusion applies to what any other item added, so emptiness
/// is judged on the whole. `None` when there is no list at all.
pub fn parse_target_lists<S: AsRef<str>>(lists: &[S]) -> Result<Option<TargetSpec>, TargetError> {
    if lists.is_empty() {
        return Ok(None);
    }
    let joined: Vec<&str> = lists.iter().map(AsRef::as_ref).collect();
    let spec = parse_target_spec(&joined.join(","))?;
    if spec.targets.is_empty() {
        return Err(TargetError::Empty);
    }
    Ok(Some(spec))
}

/// A parsed target list and whether it named `all`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// The targets, in order, exclusions applied (may be empty: `-sm_89` alone).
    pub targets: Vec<Target>,
    /// `all` or a vendor group was among the items: a build drops the targets its toolchains
    /// cannot build (with a warning) instead of failing.
    pub all: bool,
}

/// [`parse_target_list`] without the emptiness check, and saying whether `all` was used.
pub fn parse_target_spec(list: &str) -> Result<TargetSpec, TargetError> {
    let mut out: Vec<Target> = Vec::new();
    let mut all = false;
    for item in list
        .split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|s| !s.is_empty())
    {
        match item.strip_prefix('-') {
            Some(excluded) => {
                let gone = expand_item(excluded)?;
                out.retain(|t| !gone.contains(t));
            }
            None => {
                all |= item == "all" || vendor_group(item).is_some();
                for t in expand_item(item)? {
                    if !out.contains(&t) {
                        out.push(t);
                    }
                }
            }
        }
    }
    Ok(TargetSpec { targets: out, all })
}

/// The targets one list item names: `all`, a group, a TORCH_CUDA_ARCH_LIST item or a name.
fn expand_item(item: &str) -> Result<Vec<Target>, TargetError> {
    if item.is_empty() {
        return Err(TargetError::Empty);
    }
    let vendor = vendor_group(item);
    if item == "all" || vendor.is_some() {
        return Ok(PROCESSORS
            .iter()
            .filter(|p| vendor.is_none_or(|v| p.vendor() == v))
            .filter(|p| {
                !p.is_generic()
                    && !matches!(
                        p.kind,
                        ProcessorKind::Cuda {
                            suffix: CudaSuffix::ArchSpecific | CudaSuffix::FamilySpecific,
                            ..
                        }
                    )
            })
            .map(plain)
            .collect());
    }
    if let Some((_, members)) = GROUPS.iter().find(|(g, _)| *g == item) {
        return members.iter().map(|m| item_target(m)).collect();
    }
    if let Some(torch) = parse_torch_item(item) {
        return torch;
    }
    Ok(vec![item.parse()?])
}

fn plain(p: &'static Processor) -> Target {
    Target {
        processor: p,
        ptx: false,
        xnack: Feature::Any,
        sramecc: Feature::Any,
    }
}

fn item_target(name: &str) -> Result<Target, TargetError> {
    name.parse()
}

/// `8.9`, `9.0a`, `10.0f`, `9.0+PTX` (TORCH_CUDA_ARCH_LIST). `None` when `item` is not of
/// that shape at all.
fn parse_torch_item(item: &str) -> Option<Result<Vec<Target>, TargetError>> {
    let (cc, with_ptx) = match item.strip_suffix("+PTX") {
        Some(cc) => (cc, true),
        None => (item, false),
    };
    let (major, rest) = cc.split_once('.')?;
    if major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits_end = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (minor, suffix) = rest.split_at(digits_end);
    if minor.is_empty() || !matches!(suffix, "" | "a" | "f") {
        return None;
    }
    let sm = format!("sm_{major}{minor}{suffix}");
    Some((|| {
        let sass: Target = sm.parse().map_err(|_| TargetError::Unknown {
            name: item.to_string(),
            suggestion: suggest(&sm),
        })?;
        let mut v = vec![sass];
        if with_ptx {
            v.push(Target { ptx: true, ..sass });
        }
        Ok(v)
    })())
}

/// Every name the catalogue accepts (targets, PTX forms, groups), for suggestions and docs.
pub fn known_names() -> impl Iterator<Item = String> {
    let procs = PROCESSORS.iter().map(|p| p.name.to_string());
    let ptx = PROCESSORS
        .iter()
        .filter_map(|p| p.name.strip_prefix("sm_").map(|r| format!("compute_{r}")));
    let groups = GROUPS
        .iter()
        .map(|(g, _)| g.to_string())
        .chain(std::iter::once("all".to_string()));
    procs.chain(ptx).chain(groups)
}

/// The nearest known name by edit distance, if it is close enough to be a plausible typo.
pub fn suggest(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    known_names()
        .map(|k| (edit_distance(&lower, &k), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &str) -> Vec<String> {
        parse_target_list(list)
            .unwrap()
            .iter()
            .map(|t| t.to_string())
            .collect()
    }

    #[test]
    fn families_group_by_major_with_ptx_and_generic_beside_their_processors() {
        let fam = |n: &str| family_of(n);
        for (names, family) in [
            (
                &["sm_80", "sm_86", "sm_89", "compute_80", "compute_89"][..],
                "sm_8x",
            ),
            (&["sm_90", "sm_90a", "compute_90"][..], "sm_9x"),
            (&["sm_100", "sm_100a", "sm_100f", "sm_103"][..], "sm_10x"),
            (
                &["sm_120", "sm_120f", "sm_121", "compute_120"][..],
                "sm_12x",
            ),
            (&["sm_75"][..], "sm_7x"),
            (
                &[
                    "gfx90a",
                    "gfx90a:xnack-",
                    "gfx942",
                    "gfx950",
                    "gfx9-4-generic",
                ][..],
                "gfx9",
            ),
            (&["gfx1030", "gfx10-3-generic"][..], "gfx10"),
            (
                &["gfx1100", "gfx1151", "gfx1152", "gfx11-generic"][..],
                "gfx11",
            ),
            (&["gfx1200", "gfx1201", "gfx12-generic"][..], "gfx12"),
        ] {
            for n in names {
                assert_eq!(fam(n), family, "{n}");
            }
        }
        // Every catalogue row has a family that is a plain file-name component.
        for p in PROCESSORS {
            let f = fam(p.name);
            assert!(
                f.len() >= 4 && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{f}"
            );
        }
        assert_eq!(fam("Weird:Name/1"), "_eird__ame_1");
    }

    #[test]
    fn names_groups_and_torch_syntax() {
        assert_eq!(names("gfx1100,sm_89"), ["gfx1100", "sm_89"]);
        assert_eq!(
            names("8.0;8.9;9.0+PTX"),
            ["sm_80", "sm_89", "sm_90", "compute_90"]
        );
        assert_eq!(names("9.0a 10.0f"), ["sm_90a", "sm_100f"]);
        assert_eq!(names("ampere,ada"), ["sm_80", "sm_86", "sm_87", "sm_89"]);
        assert_eq!(names("rdna4,gfx1200"), ["gfx1200", "gfx1201"]);
        assert!(names("all").contains(&"gfx950".to_string()));
        assert!(!names("all").contains(&"sm_90a".to_string()));
    }

    #[test]
    fn exclusions_remove_what_came_before() {
        let all = names("all");
        let without = names("all,-gfx950");
        assert_eq!(without.len(), all.len() - 1);
        assert!(!without.contains(&"gfx950".to_string()));
        assert_eq!(names("ada,sm_90,-sm_89"), ["sm_90"]);
        assert_eq!(names("sm_89,gfx1100,-rdna3"), ["sm_89"]);
        assert!(parse_target_spec("all,-gfx950").unwrap().all);
        assert!(!parse_target_spec("sm_89").unwrap().all);
        assert_eq!(parse_target_spec("-sm_89").unwrap().targets, vec![]);
        assert!(matches!(
            parse_target_list("sm_89,-sm_89"),
            Err(TargetError::Empty)
        ));
        assert!(parse_target_list("all,-gfx95").is_err());
    }

    #[test]
    fn amd_features_are_canonical_and_checked() {
        assert_eq!(names("gfx90a:xnack-:sramecc+"), ["gfx90a:sramecc+:xnack-"]);
        assert!(matches!(
            "gfx1100:xnack-".parse::<Target>(),
            Err(TargetError::UnsupportedFeature { .. })
        ));
        assert!(matches!(
            "gfx90a:xnack".parse::<Target>(),
            Err(TargetError::BadFeature { .. })
        ));
    }

    #[test]
    fn unknown_names_suggest_the_nearest() {
        let e = "sm89".parse::<Target>().unwrap_err();
        assert_eq!(e.to_string(), "unknown target `sm89` (did you mean sm_89?)");
        let e = parse_target_list("gfx110").unwrap_err();
        assert!(e.to_string().contains("did you mean gfx1100?"), "{e}");
        let e = parse_target_list("8.8").unwrap_err();
        assert!(e.to_string().contains("unknown target `8.8`"), "{e}");
        let e = "banana".parse::<Target>().unwrap_err();
        assert_eq!(e.to_string(), "unknown target `banana`");
    }

    #[test]
    fn catalogue_facts() {
        let t: Target = "gfx90a".parse().unwrap();
        assert_eq!(t.wave_size(), 64);
        assert_eq!(t.expected_elf(), Some((EM_AMDGPU, 0x3f)));
        let t: Target = "sm_90a".parse().unwrap();
        assert_eq!(t.expected_elf(), Some((EM_CUDA, 90)));
        let t: Target = "compute_90".parse().unwrap();
        assert_eq!(t.object_kind(), ObjectKind::Ptx);
        assert_eq!(t.expected_elf(), None);
        for p in PROCESSORS {
            assert!(processor(p.name).is_some());
            if let ProcessorKind::AmdGeneric { members, .. } = p.kind {
                assert!(!members.is_empty());
            }
        }
        for (_, members) in GROUPS {
            for m in *members {
                assert!(processor(m).is_some(), "{m}");
            }
        }
    }

    #[test]
    fn several_lists_read_as_one() {
        let spec = parse_target_lists(&["all", "-gfx950"]).unwrap().unwrap();
        assert!(spec.all);
        assert!(!spec.targets.iter().any(|t| t.to_string() == "gfx950"));
        assert!(matches!(
            parse_target_lists(&["sm_89", "-sm_89"]),
            Err(TargetError::Empty)
        ));
        assert_eq!(parse_target_lists::<&str>(&[]).unwrap(), None);
    }

    #[test]
    fn vendor_groups_name_every_target_of_one_vendor() {
        let all = parse_target_spec("all").unwrap().targets;
        for (group, vendor) in VENDOR_GROUPS {
            let spec = parse_target_lists(&[*group]).unwrap().unwrap();
            assert!(
                spec.all,
                "{group} drops what the toolchain cannot build, as all does"
            );
            let want: Vec<Target> = all
                .iter()
                .filter(|t| t.vendor() == *vendor)
                .copied()
                .collect();
            assert_eq!(spec.targets, want, "{group}");
            assert!(spec
                .targets
                .iter()
                .all(|t| !t.ptx && !t.processor.is_generic()));
        }
        let nv = parse_target_list("nvidia").unwrap();
        assert!(nv.iter().any(|t| t.to_string() == "sm_89"));
        assert!(nv.iter().any(|t| t.to_string() == "sm_90"));
        assert!(!nv.iter().any(|t| t.to_string() == "sm_90a"));
        assert_eq!(parse_target_list("cuda").unwrap(), nv);
        let amd = parse_target_list("rocm").unwrap();
        assert!(amd.iter().any(|t| t.to_string() == "gfx1100"));
        assert_eq!(parse_target_list("amd").unwrap(), amd);
        // Both together are `all`; exclusions and other items mix as with any group.
        let both = parse_target_lists(&["nvidia", "amd"]).unwrap().unwrap();
        assert_eq!(both.targets.len(), all.len());
        let spec = parse_target_lists(&["amd", "-gfx950", "sm_89"])
            .unwrap()
            .unwrap();
        assert!(!spec.targets.iter().any(|t| t.to_string() == "gfx950"));
        assert_eq!(
            spec.targets.last().map(Target::to_string).as_deref(),
            Some("sm_89")
        );
        assert!(matches!(
            parse_target_lists(&["nvidia", "-cuda"]),
            Err(TargetError::Empty)
        ));
        // A plain target list does not turn into `all`.
        assert!(!parse_target_spec("sm_89,gfx1100").unwrap().all);
    }
}
