//! AMD occupancy: LLVM 19's AMDGPU backend, restated.
//!
//! Waves per SIMD (EU) = min of
//! - `getMaxWavesPerEU`,
//! - `getNumWavesPerEUWithNumVGPRs` (VGPR file / VGPRs rounded up to the allocation granule),
//! - `getOccupancyWithNumSGPRs` (gfx8/gfx9 only),
//! - `getOccupancyWithLocalMemSize`: how many work-groups of the kernel's maximum flat size fit
//!   a CU (WGP) by LDS and by `getMaxWorkGroupsPerCU`, spread over its EUs.
//!
//! That is the "Occupancy [waves/SIMD]" of clang's `-Rpass-analysis=kernel-resource-usage`
//! (`AMDGPUMCExpr::createOccupancy` over `GCNSubtarget::computeOccupancy`); the test
//! `manifests/tests/occupancy_amd.rs` checks it for every catalogue processor clang-19 builds.
//! HIP's defaults are assumed: WGP mode on gfx10+ (not `-mcumode`), no `amdgpu-waves-per-eu`
//! upper bound.

use super::{first_binding, Occupancy};
use crate::target::{Processor, ProcessorKind};

/// What one kernel uses, as its code-object metadata says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AmdUsage {
    /// `.vgpr_count`: on gfx90a/gfx942 the unified total (arch VGPRs aligned to 4, plus AGPRs).
    pub vgprs: u32,
    /// `.agpr_count` (0 where there are none). Already inside `vgprs` on unified-file targets;
    /// the model uses `max(vgprs, agprs)`, which is also the rule where the files are split.
    pub agprs: u32,
    /// `.sgpr_count` (includes VCC, flat scratch and XNACK SGPRs).
    pub sgprs: u32,
    /// `.group_segment_fixed_size`: static LDS per work-group, bytes.
    pub lds_bytes: u32,
    /// `.max_flat_workgroup_size`: the largest work-group the kernel is launched with.
    pub block_size: u32,
    /// `.wavefront_size`; 0 (or a size the processor lacks) means the processor's own.
    pub wave_size: u32,
}

/// The occupancy facts of one AMD processor (HIP defaults: WGP mode on gfx10+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmdLimits {
    pub name: &'static str,
    /// `getMaxWavesPerEU`.
    pub max_waves_per_eu: u32,
    /// `getTotalNumVGPRs` and `getVGPRAllocGranule` in wave64.
    pub vgprs_wave64: (u32, u32),
    /// The same in wave32; `None` where there is no wave32 (gfx9).
    pub vgprs_wave32: Option<(u32, u32)>,
    /// `getLocalMemorySize`: LDS per CU, doubled per WGP in WGP mode, bytes.
    pub lds_bytes: u32,
    /// `getEUsPerCU`: SIMDs sharing one work-group's LDS (4: a gfx9 CU, a gfx10+ WGP).
    pub eus: u32,
    /// `MaxBarriers` of `getMaxWorkGroupsPerCU`: 16, or 32 in WGP mode.
    pub max_workgroups: u32,
    /// `getOccupancyWithNumSGPRs` binds (gfx8/gfx9; gfx10+ always allow the maximum).
    pub sgpr_limited: bool,
}

const KIB: u32 = 1024;

/// gfx9 CDNA (gfx90a, gfx94x, gfx950): `FeatureGFX90AInsts` → 8 waves/EU, a unified 512-entry
/// VGPR+AGPR file, granule 8; a 4-SIMD CU; SGPR-limited.
const fn cdna(name: &'static str, lds_bytes: u32) -> AmdLimits {
    AmdLimits {
        name,
        max_waves_per_eu: 8,
        vgprs_wave64: (512, 8),
        vgprs_wave32: None,
        lds_bytes,
        eus: 4,
        max_workgroups: 16,
        sgpr_limited: true,
    }
}

/// gfx10.3+ RDNA in WGP mode: 16 waves/EU; a wave32 file of 1024 VGPRs (granule 16) or, with
/// `Feature1_5xVGPRs`, 1536 (granule 24), halved in wave64; 64 KiB LDS per CU, 128 per WGP.
const fn rdna(name: &'static str, vgprs_wave32: u32) -> AmdLimits {
    let granule = vgprs_wave32 / 64;
    AmdLimits {
        name,
        max_waves_per_eu: 16,
        vgprs_wave64: (vgprs_wave32 / 2, granule / 2),
        vgprs_wave32: Some((vgprs_wave32, granule)),
        lds_bytes: 128 * KIB,
        eus: 4,
        max_workgroups: 32,
        sgpr_limited: false,
    }
}

/// One row per AMD catalogue processor (the catalogue lacks these facts).
///
/// Source: LLVM 19 `AMDGPU.td` (which processor has `Feature1_5xVGPRs`,
/// `FeatureGFX90AInsts`, its LDS size) and `AMDGPUBaseInfo.cpp` (the numbers each feature
/// implies). Generic targets: what clang-19 computes for them (gfx11-generic has the smaller
/// 1024-VGPR file of gfx1102/gfx1103, gfx12-generic the 1536 one of gfx1200/gfx1201). gfx950
/// (160 KiB LDS) and gfx9-4-generic are from LLVM 20 and are not checked by clang-19.
static AMD_LIMITS: &[AmdLimits] = &[
    cdna("gfx90a", 64 * KIB),
    cdna("gfx942", 64 * KIB),
    cdna("gfx950", 160 * KIB),
    cdna("gfx9-4-generic", 64 * KIB),
    rdna("gfx1030", 1024),
    rdna("gfx10-3-generic", 1024),
    rdna("gfx1100", 1536),
    rdna("gfx1101", 1536),
    rdna("gfx1102", 1024),
    rdna("gfx1103", 1024),
    rdna("gfx1150", 1024),
    rdna("gfx1151", 1536),
    rdna("gfx1152", 1024),
    rdna("gfx11-generic", 1024),
    rdna("gfx1200", 1536),
    rdna("gfx1201", 1536),
    rdna("gfx12-generic", 1536),
];

/// AMD catalogue processors with no occupancy model, and why: their occupancy is reported as
/// unknown rather than guessed.
pub static AMD_WITHOUT_MODEL: &[(&str, &str)] = &[(
    "gfx1250",
    "no compiler on this build machine reports its occupancy (clang-19 lacks it), so its \
     register file and LDS per work-group are not confirmed",
)];

/// The limits of an AMD catalogue processor (concrete or generic); `None` for CUDA ones and
/// for those in [`AMD_WITHOUT_MODEL`].
pub fn amd_limits(p: &Processor) -> Option<&'static AmdLimits> {
    if !matches!(
        p.kind,
        ProcessorKind::Amd { .. } | ProcessorKind::AmdGeneric { .. }
    ) {
        return None;
    }
    AMD_LIMITS.iter().find(|l| l.name == p.name)
}

/// Waves per SIMD of one kernel, as clang-19 reports it. The limiter is `waves` at the maximum;
/// below it, the first of vgprs, sgprs, lds, waves whose limit equals the answer, where `lds`
/// counts only when LDS lowers the count below what the work-group size alone allows
/// (`waves`: wave slots and the work-group cap). A block size of 0 gives 0 (`waves`).
/// `None` for non-AMD processors.
pub fn amd_occupancy(p: &Processor, u: &AmdUsage) -> Option<Occupancy> {
    let l = amd_limits(p)?;
    let max = l.max_waves_per_eu;
    let occupancy = |value: u32, limiter: &str| Occupancy {
        unit: "waves/SIMD".to_string(),
        value,
        max,
        limiter: limiter.to_string(),
        block_size: Some(u.block_size),
        block_size_from: None,
    };
    if u.block_size == 0 {
        return Some(occupancy(0, "waves"));
    }
    let wave64 = match (u.wave_size, l.vgprs_wave32) {
        (32, Some(_)) => false,
        (64, _) | (_, None) => true,
        _ => p.wave_size == 64,
    };
    let (file, granule) = match l.vgprs_wave32 {
        Some(w32) if !wave64 => w32,
        _ => l.vgprs_wave64,
    };
    let wave_size = if wave64 { 64 } else { 32 };

    let vgprs = waves_with_vgprs(u.vgprs.max(u.agprs), file, granule, max);
    let sgprs = if l.sgpr_limited {
        waves_with_sgprs(u.sgprs).min(max)
    } else {
        max
    };
    let slots = waves_with_lds(l, 0, u.block_size, wave_size);
    let lds = waves_with_lds(l, u.lds_bytes, u.block_size, wave_size);
    let (limiter, value) = first_binding(&[
        ("vgprs", u64::from(vgprs)),
        ("sgprs", u64::from(sgprs)),
        (
            "lds",
            if lds < slots {
                u64::from(lds)
            } else {
                u64::MAX
            },
        ),
        ("waves", u64::from(slots.min(max))),
    ]);
    let value = u32::try_from(value).unwrap_or(0);
    Some(occupancy(
        value,
        if value == max { "waves" } else { limiter },
    ))
}

/// `getNumWavesPerEUWithNumVGPRs`: below one granule the maximum; otherwise the file over the
/// rounded count, at least 1.
fn waves_with_vgprs(vgprs: u32, file: u32, granule: u32, max: u32) -> u32 {
    if vgprs < granule || granule == 0 {
        return max;
    }
    let rounded = vgprs.div_ceil(granule).saturating_mul(granule);
    (file / rounded).max(1).min(max)
}

/// `getOccupancyWithNumSGPRs` for gfx8+ (before gfx10).
fn waves_with_sgprs(sgprs: u32) -> u32 {
    match sgprs {
        0..=80 => 10,
        81..=88 => 9,
        89..=100 => 8,
        _ => 7,
    }
}

/// `getOccupancyWithLocalMemSize(Bytes, F)` with `getMaxWorkGroupsPerCU`: work-groups per CU
/// are capped by wave slots (a single-wave group by those alone) and by the barrier count,
/// and by LDS (at least 1 even when the LDS does not fit); their waves are spread over the
/// EUs, rounding up.
fn waves_with_lds(l: &AmdLimits, lds_bytes: u32, block_size: u32, wave_size: u32) -> u32 {
    let max = l.max_waves_per_eu;
    let slots = max.saturating_mul(l.eus);
    let waves_per_group = block_size.div_ceil(wave_size);
    let max_groups = if waves_per_group == 1 {
        slots
    } else {
        (slots / waves_per_group).min(l.max_workgroups)
    };
    if max_groups == 0 {
        return 0;
    }
    let lds_groups = l.lds_bytes / lds_bytes.max(1);
    if lds_groups == 0 {
        return 1;
    }
    let waves = max_groups.min(lds_groups).saturating_mul(waves_per_group);
    waves.div_ceil(l.eus).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{processor, ProcessorKind, PROCESSORS};

    fn usage(vgprs: u32, sgprs: u32, lds_bytes: u32, block_size: u32) -> AmdUsage {
        AmdUsage {
            vgprs,
            agprs: 0,
            sgprs,
            lds_bytes,
            block_size,
            wave_size: 0,
        }
    }

    fn occ(name: &str, u: AmdUsage) -> (u32, String) {
        let o = amd_occupancy(processor(name).unwrap(), &u).unwrap();
        assert!(o.value <= o.max, "{name}: {o:?}");
        (o.value, o.limiter)
    }

    fn is(value: u32, limiter: &str) -> (u32, String) {
        (value, limiter.to_string())
    }

    /// Cases whose answers clang-19's remark printed (see occupancy_amd.rs for the full run).
    #[test]
    fn vgpr_file_sizes() {
        // 256 VGPRs: 1536 / 264 = 5 on 1.5x-VGPR parts, 1024 / 256 = 4 elsewhere.
        assert_eq!(occ("gfx1100", usage(256, 2, 0, 256)), is(5, "vgprs"));
        assert_eq!(occ("gfx12-generic", usage(256, 2, 0, 256)), is(5, "vgprs"));
        assert_eq!(occ("gfx1102", usage(256, 2, 0, 256)), is(4, "vgprs"));
        assert_eq!(occ("gfx11-generic", usage(256, 2, 0, 256)), is(4, "vgprs"));
        assert_eq!(occ("gfx90a", usage(256, 10, 0, 256)), is(2, "vgprs"));
        // gfx90a: 4 arch VGPRs + 256 AGPRs = 260 → 264 → 1 wave.
        assert_eq!(occ("gfx942", usage(260, 10, 0, 256)), is(1, "vgprs"));
        // Below one granule (24), or few enough: the maximum, named "waves".
        assert_eq!(occ("gfx1201", usage(23, 2, 0, 256)), is(16, "waves"));
        assert_eq!(occ("gfx1201", usage(25, 2, 0, 256)), is(16, "waves"));
        assert_eq!(occ("gfx1201", usage(97, 2, 0, 256)), is(12, "vgprs"));
    }

    #[test]
    fn wave64_on_rdna_halves_the_file() {
        let mut u = usage(128, 2, 0, 256);
        u.wave_size = 64;
        // 768 / 132 = 5 (granule 12); wave32: 1536 / 144 = 10.
        assert_eq!(occ("gfx1100", u), is(5, "vgprs"));
        u.wave_size = 32;
        assert_eq!(occ("gfx1100", u), is(10, "vgprs"));
        // gfx9 has no wave32: a stated 32 is ignored.
        assert_eq!(occ("gfx90a", u), is(4, "vgprs"));
    }

    #[test]
    fn sgprs_bind_on_gfx9_only() {
        assert_eq!(occ("gfx90a", usage(2, 104, 0, 256)), is(7, "sgprs"));
        assert_eq!(occ("gfx90a", usage(2, 100, 0, 256)), is(8, "waves"));
        assert_eq!(occ("gfx1100", usage(2, 106, 0, 256)), is(16, "waves"));
    }

    #[test]
    fn lds_and_work_group_slots() {
        // 40000 B: 1 group of 4 waves per 64 KiB CU → 1; 3 groups of 8 per 128 KiB WGP → 6.
        assert_eq!(occ("gfx90a", usage(3, 10, 40000, 256)), is(1, "lds"));
        assert_eq!(occ("gfx1100", usage(3, 2, 40000, 256)), is(6, "lds"));
        // More LDS than exists: LLVM assumes 1.
        assert_eq!(occ("gfx1030", usage(3, 2, 200_000, 256)), is(1, "lds"));
        // 448 threads = 7 waves: 32 / 7 = 4 groups = 28 waves → 7 per EU, no LDS needed.
        assert_eq!(occ("gfx90a", usage(2, 10, 0, 448)), is(7, "waves"));
        // wave32: 14 waves per group, 64 / 14 = 4 groups = 56 → 14.
        assert_eq!(occ("gfx1100", usage(2, 2, 0, 448)), is(14, "waves"));
        // The same slot limit with LDS that does not lower it further is still "waves".
        assert_eq!(occ("gfx1100", usage(2, 2, 20000, 448)), is(14, "waves"));
        // Single-wave groups are not capped by barriers.
        assert_eq!(occ("gfx90a", usage(2, 10, 0, 64)), is(8, "waves"));
        assert_eq!(occ("gfx90a", usage(2, 10, 4096, 64)), is(4, "lds"));
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(occ("gfx1100", usage(2, 2, 0, 0)), is(0, "waves"));
        assert_eq!(occ("gfx1100", usage(2, 2, 0, 4096)), is(0, "waves"));
        let all = AmdUsage {
            vgprs: u32::MAX,
            agprs: u32::MAX,
            sgprs: u32::MAX,
            lds_bytes: u32::MAX,
            block_size: u32::MAX,
            wave_size: u32::MAX,
        };
        for name in ["gfx90a", "gfx1100", "gfx11-generic"] {
            assert!(occ(name, all).0 <= 1);
        }
    }

    #[test]
    fn every_amd_catalogue_processor_has_a_row() {
        for p in PROCESSORS {
            let amd = matches!(
                p.kind,
                ProcessorKind::Amd { .. } | ProcessorKind::AmdGeneric { .. }
            );
            let unmodelled = AMD_WITHOUT_MODEL.iter().any(|(n, _)| *n == p.name);
            assert_eq!(amd_limits(p).is_some(), amd && !unmodelled, "{}", p.name);
            assert!(!unmodelled || amd, "{}", p.name);
            if let Some(l) = amd_limits(p) {
                assert_eq!(l.vgprs_wave32.is_some(), p.wave_size == 32, "{}", p.name);
            }
        }
        assert_eq!(
            AMD_LIMITS.len(),
            PROCESSORS
                .iter()
                .filter(|p| amd_limits(p).is_some())
                .count()
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_stays_in_range(
            vgprs in proptest::prelude::any::<u32>(),
            agprs in proptest::prelude::any::<u32>(),
            sgprs in proptest::prelude::any::<u32>(),
            lds_bytes in proptest::prelude::any::<u32>(),
            block_size in 0u32..5000,
            wave_size in proptest::prelude::any::<u32>(),
        ) {
            let u = AmdUsage { vgprs, agprs, sgprs, lds_bytes, block_size, wave_size };
            for p in PROCESSORS {
                if let Some(o) = amd_occupancy(p, &u) {
                    proptest::prop_assert!(o.value <= o.max);
                }
            }
        }
    }
}
