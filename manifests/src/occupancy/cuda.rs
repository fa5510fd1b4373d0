//! CUDA occupancy: NVIDIA's occupancy calculator (`cuda_occupancy.h`, CUDA 13.5), restated.
//!
//! Blocks per SM = min(register limit, shared-memory limit, warp limit, block cap, and on
//! CC >= 9 the barrier limit), each computed exactly as the header's
//! `cudaOccMaxBlocksPerSM*Limit` functions do, with the device state the runtime API uses by
//! default (no carveout preference: the maximum shared memory per SM; partitioned global
//! caching off, which is all CC >= 7 supports). The answer is in warps: blocks × warps per
//! block, against the SM's resident-warp ceiling.

use super::{first_binding, Occupancy};
use crate::target::{Processor, ProcessorKind};

/// What one kernel launch uses, as ptxas and the launch report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CudaUsage {
    /// Registers per thread (ptxas "Used N registers", `cudaFuncAttributes::numRegs`).
    pub registers: u32,
    /// Static shared memory per block as ptxas reports it ("S bytes smem"), WITHOUT the 1 KiB
    /// system reservation that CC >= 8 adds per block (the model adds it).
    pub static_shared: u32,
    /// Dynamic shared memory per block (the launch's third `<<<>>>` argument).
    pub dynamic_shared: u32,
    /// Threads per block.
    pub block_size: u32,
    /// Named barriers the kernel uses (ptxas "used N barriers"; `__syncthreads` is 1).
    pub barriers: u32,
}

/// The per-SM limits of one compute capability: the `cudaDeviceProp` fields the header reads
/// plus the header's own per-CC switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaLimits {
    pub major: u32,
    pub minor: u32,
    /// `maxThreadsPerMultiProcessor / warpSize`.
    pub warps_per_sm: u32,
    /// `cudaOccMaxBlocksPerMultiprocessor`.
    pub blocks_per_sm: u32,
    /// `sharedMemPerMultiprocessor` (the maximum carveout), bytes.
    pub shared_per_sm: u32,
    /// `sharedMemPerBlockOptin`, bytes.
    pub shared_per_block_optin: u32,
    /// `reservedSharedMemPerBlock`, bytes (the system reservation, CC >= 8).
    pub reserved_shared_per_block: u32,
    /// `cudaOccSMemAllocationGranularity`, bytes.
    pub shared_granule: u32,
    /// `cudaOccMaxBlocksPerSMBlockBarrierLimit`: barriers available = block cap × this.
    pub barriers_per_block_slot: u32,
}

/// Threads per warp.
const WARP_SIZE: u32 = 32;
/// `maxThreadsPerBlock` on every CC >= 7.
const MAX_THREADS_PER_BLOCK: u32 = 1024;
/// `regsPerMultiprocessor` and `regsPerBlock` on every CC >= 7.5 in the table.
const REGS_PER_SM: u64 = 65536;
const REGS_PER_BLOCK: u64 = 65536;
/// `cudaOccRegAllocationGranularity` (registers per warp) for CC >= 7.
const REG_GRANULE: u64 = 256;
/// `cudaOccRegAllocationMaxPerThread` for CC >= 7.
const MAX_REGS_PER_THREAD: u32 = 256;
/// `cudaOccSubPartitionsPerMultiprocessor` for CC >= 7.
const SUB_PARTITIONS: u64 = 4;

const KIB: u32 = 1024;

const fn cc(
    major: u32,
    minor: u32,
    warps_per_sm: u32,
    blocks_per_sm: u32,
    shared_kib: u32,
    barriers_per_block_slot: u32,
) -> CudaLimits {
    // CC >= 8 reserves 1 KiB per block and allocates shared memory in 128-byte granules;
    // 7.x reserves nothing and allocates 256-byte granules (cudaOccSMemAllocationGranularity).
    // The opt-in per-block maximum is the SM's shared memory less that reservation.
    let reserved = if major >= 8 { KIB } else { 0 };
    CudaLimits {
        major,
        minor,
        warps_per_sm,
        blocks_per_sm,
        shared_per_sm: shared_kib * KIB,
        shared_per_block_optin: shared_kib * KIB - reserved,
        reserved_shared_per_block: reserved,
        shared_granule: if major >= 8 { 128 } else { 256 },
        barriers_per_block_slot,
    }
}

/// One row per compute capability of the catalogue ('a' and 'f' share their base CC).
///
/// Sources: blocks/SM, barrier multiplier and granules from `cuda_occupancy.h` of CUDA 13.5
/// (`cudaOccMaxBlocksPerMultiprocessor`, `cudaOccMaxBlocksPerSMBlockBarrierLimit`,
/// `cudaOccSMemAllocationGranularity`); warps/SM, shared memory/SM (its largest carveout, which
/// is also the top step of the header's `cudaOccAlignUpShmemSizeVoltaPlus`), per-block opt-in
/// and the 1 KiB reservation from the CUDA C++ Programming Guide, "Technical Specifications
/// per Compute Capability". sm_110's resident warps are ptxas 13.5's: it accepts
/// `__launch_bounds__(256, 6)` and ignores `(256, 7)` as out of range, as on sm_89 and sm_120.
/// Warps and blocks of every row are checked against ptxas that way (the e2e test
/// `occupancy_ptxas`); sm_90's row was checked on an H200 (docs/occupancy-sm90.jsonl).
static CUDA_LIMITS: &[CudaLimits] = &[
    //  CC      warps blocks shared-KiB barrier×
    cc(7, 5, 32, 16, 64, 2),
    cc(8, 0, 64, 32, 164, 2),
    cc(8, 6, 48, 16, 100, 1),
    cc(8, 7, 48, 16, 164, 1),
    cc(8, 9, 48, 24, 100, 1),
    cc(9, 0, 64, 32, 228, 2),
    cc(10, 0, 64, 32, 228, 2),
    cc(10, 3, 64, 32, 228, 1),
    cc(11, 0, 48, 24, 228, 1),
    cc(12, 0, 48, 24, 100, 1),
    cc(12, 1, 48, 24, 100, 1),
];

/// The limits of a CUDA catalogue processor; `None` for AMD ones (and for a CC the table
/// lacks, which the catalogue test rules out).
pub fn cuda_limits(p: &Processor) -> Option<&'static CudaLimits> {
    let ProcessorKind::Cuda { major, minor, .. } = p.kind else {
        return None;
    };
    CUDA_LIMITS
        .iter()
        .find(|l| (l.major, l.minor) == (major, minor))
}

/// Resident warps per SM of one kernel at `u.block_size`, as `cuda_occupancy.h` computes
/// `cudaOccMaxActiveBlocksPerMultiprocessor` (× warps per block).
///
/// The kernel is assumed to have opted in to the largest dynamic shared memory
/// (`cudaFuncAttributeMaxDynamicSharedMemorySize` = opt-in maximum − static), so a launch is
/// refused (0) only when it exceeds the hardware's per-block limit. The limiter is `warps` at
/// the SM's maximum; below it, the first of registers, shared, warps, blocks, barriers whose
/// limit equals the answer. `None` for non-CUDA processors.
pub fn cuda_occupancy(p: &Processor, u: &CudaUsage) -> Option<Occupancy> {
    let l = cuda_limits(p)?;
    let occupancy = |value: u64, limiter: &str| Occupancy {
        unit: "warps/SM".to_string(),
        value: u32::try_from(value).unwrap_or(u32::MAX),
        max: l.warps_per_sm,
        limiter: limiter.to_string(),
        block_size: Some(u.block_size),
        block_size_from: None,
    };
    if u.block_size == 0 {
        return Some(occupancy(0, "warps"));
    }
    let warps_per_block = u64::from(u.block_size.div_ceil(WARP_SIZE));
    let warps = if u.block_size > MAX_THREADS_PER_BLOCK {
        0
    } else {
        u64::from(l.warps_per_sm) / warps_per_block
    };
    let blocks = u64::from(l.blocks_per_sm);
    // Applied on CC >= 9 only, and only when the kernel uses a barrier.
    let barriers = if l.major >= 9 && u.barriers > 0 {
        blocks * u64::from(l.barriers_per_block_slot) / u64::from(u.barriers)
    } else {
        u64::MAX
    };
    let (limiter, per_sm) = first_binding(&[
        ("registers", register_limit(u.registers, warps_per_block)),
        ("shared", shared_limit(l, u)),
        ("warps", warps),
        ("blocks", blocks),
        ("barriers", barriers),
    ]);
    let value = per_sm.saturating_mul(warps_per_block);
    let at_max = value == u64::from(l.warps_per_sm);
    Some(occupancy(value, if at_max { "warps" } else { limiter }))
}

/// `cudaOccMaxBlocksPerSMRegsLimit`: registers are allocated per warp in 256-register units
/// and each of the 4 sub-partitions holds whole warps; a block also must fit `regsPerBlock`
/// both as allocated and as rounded up to a multiple of 4 warps.
fn register_limit(registers: u32, warps_per_block: u64) -> u64 {
    if registers > MAX_REGS_PER_THREAD {
        return 0;
    }
    let per_warp = round_up(u64::from(registers) * u64::from(WARP_SIZE), REG_GRANULE);
    let per_block = per_warp.saturating_mul(warps_per_block);
    let assumed = per_warp.saturating_mul(round_up(warps_per_block, SUB_PARTITIONS));
    if per_block > REGS_PER_BLOCK || assumed > REGS_PER_BLOCK {
        return 0;
    }
    if per_warp == 0 {
        return u64::MAX;
    }
    let warps_per_sub_partition = REGS_PER_SM / SUB_PARTITIONS / per_warp;
    warps_per_sub_partition * SUB_PARTITIONS / warps_per_block
}

/// `cudaOccMaxBlocksPerSMSmemLimit`: static + dynamic + the per-block reservation, rounded up
/// to the granule, must fit the opt-in per-block limit (+ reservation); the SM then holds as
/// many as its maximum carveout allows.
fn shared_limit(l: &CudaLimits, u: &CudaUsage) -> u64 {
    let reserved = u64::from(l.reserved_shared_per_block);
    let total = u64::from(u.static_shared) + reserved + u64::from(u.dynamic_shared);
    let allocated = round_up(total, u64::from(l.shared_granule));
    let max_dynamic = l.shared_per_block_optin.saturating_sub(u.static_shared);
    if u.dynamic_shared > max_dynamic || allocated > u64::from(l.shared_per_block_optin) + reserved
    {
        return 0;
    }
    if allocated == 0 {
        return u64::MAX;
    }
    u64::from(l.shared_per_sm) / allocated
}

fn round_up(x: u64, granule: u64) -> u64 {
    x.div_ceil(granule).saturating_mul(granule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::processor;

    fn occ(
        sm: &str,
        registers: u32,
        static_shared: u32,
        dynamic_shared: u32,
        block_size: u32,
        barriers: u32,
    ) -> (u32, String) {
        let p = processor(sm).unwrap();
        let o = cuda_occupancy(
            p,
            &CudaUsage {
                registers,
                static_shared,
                dynamic_shared,
                block_size,
                barriers,
            },
        )
        .unwrap();
        assert!(o.value <= o.max, "{sm}: {o:?}");
        (o.value, o.limiter)
    }

    fn is(value: u32, limiter: &str) -> (u32, String) {
        (value, limiter.to_string())
    }

    #[test]
    fn register_limited() {
        // 64 regs → 2048/warp → 8 warps per sub-partition → 32 warps → 4 blocks of 8.
        assert_eq!(occ("sm_90", 64, 0, 0, 256, 1), is(32, "registers"));
        // 72 regs → 2304/warp → 7 per sub-partition → 28 warps → 7 blocks of 4.
        assert_eq!(occ("sm_90a", 72, 0, 0, 128, 1), is(28, "registers"));
        // 80 regs → 2560/warp → 6 per sub-partition → 24 warps → 8 blocks of 3.
        assert_eq!(occ("sm_86", 80, 0, 0, 96, 0), is(24, "registers"));
        // 255 regs → 8192/warp: 8 warps fill the register file; 7 warps round up to 8.
        assert_eq!(occ("sm_80", 255, 0, 0, 256, 0), is(8, "registers"));
        assert_eq!(occ("sm_80", 255, 0, 0, 224, 0), is(7, "registers"));
        assert_eq!(occ("sm_80", 255, 0, 0, 288, 0), is(0, "registers"));
        // 25 warps × 2560 = 64000 fits regsPerBlock, but 28 (rounded to sub-partitions) not.
        assert_eq!(occ("sm_90", 80, 0, 0, 800, 0), is(0, "registers"));
        assert_eq!(occ("sm_90", 257, 0, 0, 32, 0), is(0, "registers"));
        // Full occupancy ties registers and warps: at the maximum the limiter is "warps".
        assert_eq!(occ("sm_90", 32, 0, 0, 256, 1), is(64, "warps"));
    }

    #[test]
    fn shared_limited() {
        // 48 KiB + 1 KiB reserved = 50176 → 233472 / 50176 = 4 blocks of 4 warps.
        assert_eq!(occ("sm_90", 32, 49152, 0, 128, 1), is(16, "shared"));
        // 100 KiB dynamic + 1 KiB: one block of 8 warps in 164 KiB.
        assert_eq!(occ("sm_80", 32, 0, 102400, 256, 1), is(8, "shared"));
        // sm_75: no reservation, 256-byte granule: 10000 → 10240 → 6 blocks of 2 warps.
        assert_eq!(occ("sm_75", 32, 10000, 0, 64, 1), is(12, "shared"));
        // 30000 + 1024 → 31104 (128-byte granule) → 3 blocks in 100 KiB.
        assert_eq!(occ("sm_120", 32, 0, 30000, 128, 1), is(12, "shared"));
        // One byte over the opt-in maximum (99 KiB + the reservation) cannot launch.
        assert_eq!(occ("sm_89", 32, 1, 99 * 1024, 128, 1), is(0, "shared"));
        assert_eq!(occ("sm_89", 32, 0, 99 * 1024, 128, 1), is(4, "shared"));
    }

    #[test]
    fn warp_block_and_barrier_limited() {
        // sm_75 holds 32 warps: one block of 1024.
        assert_eq!(occ("sm_75", 32, 0, 0, 1024, 1), is(32, "warps"));
        assert_eq!(occ("sm_90", 16, 0, 0, 1025, 1), is(0, "warps"));
        // A partial warp still takes a warp: 48 threads = 2 warps → 24 blocks on sm_86 → 16.
        assert_eq!(occ("sm_86", 16, 0, 0, 48, 0), is(32, "blocks"));
        assert_eq!(occ("sm_89", 16, 0, 0, 32, 1), is(24, "blocks"));
        assert_eq!(occ("sm_100f", 16, 0, 0, 32, 1), is(32, "blocks"));
        // 16 named barriers: 32 × 2 available / 16 = 4 blocks on sm_90; 24 / 2 = 12 on sm_120;
        // not applied before CC 9.
        assert_eq!(occ("sm_90", 16, 0, 0, 32, 16), is(4, "barriers"));
        assert_eq!(occ("sm_120", 16, 0, 0, 32, 2), is(12, "barriers"));
        assert_eq!(occ("sm_103", 16, 0, 0, 32, 2), is(16, "barriers"));
        assert_eq!(occ("sm_86", 16, 0, 0, 32, 16), is(16, "blocks"));
        // One barrier ties the block cap on sm_120: blocks is named.
        assert_eq!(occ("sm_121", 16, 0, 0, 32, 1), is(24, "blocks"));
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(occ("sm_90", 32, 0, 0, 0, 1), is(0, "warps"));
        assert_eq!(occ("sm_90", 0, 0, 0, 32, 0), is(32, "blocks"));
        let (v, _) = occ("sm_90", u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX);
        assert_eq!(v, 0);
        assert!(cuda_occupancy(processor("gfx1100").unwrap(), &CudaUsage::default()).is_none());
    }

    #[test]
    fn table_rows_are_consistent() {
        for l in CUDA_LIMITS {
            assert!(l.shared_per_block_optin <= l.shared_per_sm);
            assert!(l.warps_per_sm * WARP_SIZE >= MAX_THREADS_PER_BLOCK);
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_stays_in_range(
            registers in proptest::prelude::any::<u32>(),
            static_shared in proptest::prelude::any::<u32>(),
            dynamic_shared in proptest::prelude::any::<u32>(),
            block_size in 0u32..5000,
            barriers in 0u32..20,
        ) {
            for p in crate::target::PROCESSORS {
                let u = CudaUsage { registers, static_shared, dynamic_shared, block_size, barriers };
                if let Some(o) = cuda_occupancy(p, &u) {
                    proptest::prop_assert!(o.value <= o.max);
                }
            }
        }
    }
}
