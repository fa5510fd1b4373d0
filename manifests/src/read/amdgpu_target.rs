//! AMDGPU processor and target-id from ELF `e_flags`.
//!
//! The table is LLVM's `EF_AMDGPU_MACH_*` (llvm/BinaryFormat/ELF.h, LLVM 19, plus gfx950 and
//! gfx9-4-generic from LLVM 20 and gfx1250, whose objects Triton's AMD backend writes with mach
//! 0x49); the spelling of target ids is LLVM's (`gfx90a:sramecc+:xnack-`,
//! features only when not "any", sramecc before xnack), which is what `llvm-readobj --notes`
//! shows in `amdhsa.target`.

/// `EF_AMDGPU_MACH` values of amdgcn processors (LLVM `llvm/BinaryFormat/ELF.h`).
const PROCESSORS: &[(u32, &str)] = &[
    (0x020, "gfx600"),
    (0x021, "gfx601"),
    (0x022, "gfx700"),
    (0x023, "gfx701"),
    (0x024, "gfx702"),
    (0x025, "gfx703"),
    (0x026, "gfx704"),
    (0x028, "gfx801"),
    (0x029, "gfx802"),
    (0x02a, "gfx803"),
    (0x02b, "gfx810"),
    (0x02c, "gfx900"),
    (0x02d, "gfx902"),
    (0x02e, "gfx904"),
    (0x02f, "gfx906"),
    (0x030, "gfx908"),
    (0x031, "gfx909"),
    (0x032, "gfx90c"),
    (0x033, "gfx1010"),
    (0x034, "gfx1011"),
    (0x035, "gfx1012"),
    (0x036, "gfx1030"),
    (0x037, "gfx1031"),
    (0x038, "gfx1032"),
    (0x039, "gfx1033"),
    (0x03a, "gfx602"),
    (0x03b, "gfx705"),
    (0x03c, "gfx805"),
    (0x03d, "gfx1035"),
    (0x03e, "gfx1034"),
    (0x03f, "gfx90a"),
    (0x040, "gfx940"),
    (0x041, "gfx1100"),
    (0x042, "gfx1013"),
    (0x043, "gfx1150"),
    (0x044, "gfx1103"),
    (0x045, "gfx1036"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x048, "gfx1200"),
    (0x049, "gfx1250"),
    (0x04a, "gfx1151"),
    (0x04b, "gfx941"),
    (0x04c, "gfx942"),
    (0x04e, "gfx1201"),
    (0x04f, "gfx950"),
    (0x051, "gfx9-generic"),
    (0x052, "gfx10-1-generic"),
    (0x053, "gfx10-3-generic"),
    (0x054, "gfx11-generic"),
    (0x055, "gfx1152"),
    (0x059, "gfx12-generic"),
    (0x05f, "gfx9-4-generic"),
];

/// `e_flags & EF_AMDGPU_MACH`.
pub const EF_AMDGPU_MACH: u32 = 0xff;
/// Code object v4+: xnack selection (0 unsupported, 0x100 any, 0x200 off, 0x300 on).
pub const EF_AMDGPU_FEATURE_XNACK_V4: u32 = 0x300;
/// Code object v4+: sramecc selection (0 unsupported, 0x400 any, 0x800 off, 0xc00 on).
pub const EF_AMDGPU_FEATURE_SRAMECC_V4: u32 = 0xc00;
/// Code object v3: xnack enabled.
pub const EF_AMDGPU_FEATURE_XNACK_V3: u32 = 0x100;
/// Code object v3: sramecc enabled.
pub const EF_AMDGPU_FEATURE_SRAMECC_V3: u32 = 0x200;
/// Code object v6: generic version in bits 24..31.
pub const EF_AMDGPU_GENERIC_VERSION_SHIFT: u32 = 24;

/// The name of an `EF_AMDGPU_MACH` value ("gfx1100"), if known.
pub fn processor_name(mach: u32) -> Option<&'static str> {
    PROCESSORS.iter().find(|(m, _)| *m == mach).map(|(_, n)| *n)
}

/// The `EF_AMDGPU_MACH` value of a processor name, if known.
pub fn processor_mach(name: &str) -> Option<u32> {
    PROCESSORS.iter().find(|(_, n)| *n == name).map(|(m, _)| *m)
}

/// A target feature setting as recorded in `e_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureSetting {
    /// The processor does not have the feature.
    Unsupported,
    /// Code runs with the feature on or off ("any": omitted from the target id).
    Any,
    Off,
    On,
}

impl FeatureSetting {
    fn suffix(self) -> Option<char> {
        match self {
            FeatureSetting::On => Some('+'),
            FeatureSetting::Off => Some('-'),
            _ => None,
        }
    }
}

/// Processor and features decoded from `e_flags` of an HSA code object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AmdTarget {
    /// `e_flags & 0xff`.
    pub mach: u32,
    /// "gfx90a", "gfx11-generic"; `None` for an unknown mach value.
    pub processor: Option<&'static str>,
    pub xnack: FeatureSetting,
    pub sramecc: FeatureSetting,
    /// Code object v6 generic version (bits 24..31), for generic targets.
    pub generic_version: Option<u8>,
}

impl AmdTarget {
    /// Decodes `e_flags` for an HSA code object of the given `EI_ABIVERSION` (1 = v3, 2 = v4,
    /// 3 = v5, 4 = v6). Matches the `Flags` decoding of `llvm-readobj-19 --file-headers`.
    pub fn from_flags(e_flags: u32, abi_version: u8) -> Self {
        let mach = e_flags & EF_AMDGPU_MACH;
        let (xnack, sramecc) = if abi_version <= 1 {
            let f = |bit| {
                if e_flags & bit != 0 {
                    FeatureSetting::On
                } else {
                    FeatureSetting::Any
                }
            };
            (
                f(EF_AMDGPU_FEATURE_XNACK_V3),
                f(EF_AMDGPU_FEATURE_SRAMECC_V3),
            )
        } else {
            let x = match e_flags & EF_AMDGPU_FEATURE_XNACK_V4 {
                0x100 => FeatureSetting::Any,
                0x200 => FeatureSetting::Off,
                0x300 => FeatureSetting::On,
                _ => FeatureSetting::Unsupported,
            };
            let s = match e_flags & EF_AMDGPU_FEATURE_SRAMECC_V4 {
                0x400 => FeatureSetting::Any,
                0x800 => FeatureSetting::Off,
                0xc00 => FeatureSetting::On,
                _ => FeatureSetting::Unsupported,
            };
            (x, s)
        };
        let processor = processor_name(mach);
        let gv = (e_flags >> EF_AMDGPU_GENERIC_VERSION_SHIFT) as u8;
        let generic_version =
            (abi_version >= 4 && processor.is_some_and(|p| p.ends_with("-generic"))).then_some(gv);
        AmdTarget {
            mach,
            processor,
            xnack,
            sramecc,
            generic_version,
        }
    }

    /// The canonical target id: "gfx90a:sramecc+:xnack-", "gfx1100", "gfx11-generic";
    /// `unknown-mach-0x..` for a mach value outside the table.
    pub fn target_id(&self) -> String {
        let mut s = match self.processor {
            Some(p) => p.to_string(),
            None => format!("unknown-mach-{:#x}", self.mach),
        };
        if let Some(c) = self.sramecc.suffix() {
            s.push_str(":sramecc");
            s.push(c);
        }
        if let Some(c) = self.xnack.suffix() {
            s.push_str(":xnack");
            s.push(c);
        }
        s
    }

    /// The gfx major version (9 for gfx90a and gfx9-generic, 11 for gfx1100), if known.
    pub fn gfx_major(&self) -> Option<u32> {
        let p = self.processor?.strip_prefix("gfx")?;
        if let Some(generic) = p.strip_suffix("-generic") {
            return generic.split('-').next()?.parse().ok();
        }
        let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
        match digits.len() {
            0 => None,
            // gfx90a, gfx90c: "90" + letter; gfx900..gfx950: three digits.
            1..=3 => digits.get(..1)?.parse().ok(),
            _ => digits.get(..2)?.parse().ok(),
        }
    }

    /// Has the gfx90a instruction set (unified VGPR/AGPR file, VGPR encoding granule 8):
    /// gfx90a, gfx940, gfx941, gfx942, gfx950, gfx9-4-generic (LLVM `FeatureGFX90AInsts`).
    pub fn has_gfx90a_insts(&self) -> bool {
        matches!(
            self.processor,
            Some("gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950" | "gfx9-4-generic")
        )
    }
}

/// Strips the `amdgcn-amd-amdhsa--` prefix of an `amdhsa.target` string.
pub fn strip_triple(target: &str) -> &str {
    target.strip_prefix("amdgcn-amd-amdhsa--").unwrap_or(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_seen_in_the_wild() {
        assert_eq!(AmdTarget::from_flags(0x53f, 3).target_id(), "gfx90a");
        assert_eq!(
            AmdTarget::from_flags(0xe3f, 2).target_id(),
            "gfx90a:sramecc+:xnack-"
        );
        let g = AmdTarget::from_flags(0x0100_0054, 4);
        assert_eq!(g.target_id(), "gfx11-generic");
        assert_eq!(g.generic_version, Some(1));
        assert_eq!(g.gfx_major(), Some(11));
        assert_eq!(AmdTarget::from_flags(0x41, 3).gfx_major(), Some(11));
        assert_eq!(AmdTarget::from_flags(0x3f, 3).gfx_major(), Some(9));
        assert_eq!(AmdTarget::from_flags(0x4c, 3).gfx_major(), Some(9));
        assert_eq!(AmdTarget::from_flags(0x36, 3).gfx_major(), Some(10));
        assert_eq!(AmdTarget::from_flags(0x52, 4).gfx_major(), Some(10));
        assert_eq!(
            AmdTarget::from_flags(0xff, 3).target_id(),
            "unknown-mach-0xff"
        );
        assert_eq!(processor_mach("gfx1201"), Some(0x4e));
    }
}
