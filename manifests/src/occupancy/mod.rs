//! Occupancy models: CUDA warps/SM and AMD waves/SIMD at a kernel's block size.
//!
//! Both are pure functions of a catalogue [`Processor`](crate::target::Processor) and the
//! resources one kernel uses, and both follow the vendor's own calculator so that their
//! answers can be checked against it:
//!
//! - [`cuda_occupancy`]: NVIDIA's `cuda_occupancy.h` (CUDA 13.5), i.e. what
//!   `cudaOccupancyMaxActiveBlocksPerMultiprocessor` answers, times warps per block.
//! - [`amd_occupancy`]: LLVM 19's AMDGPU backend, i.e. the "Occupancy [waves/SIMD]" of clang's
//!   `-Rpass-analysis=kernel-resource-usage` remark.
//!
//! Neither panics: every input, however absurd, gives an answer (or `None` for a processor of
//! the other vendor).

mod amd;
mod cuda;

pub use amd::{amd_limits, amd_occupancy, AmdLimits, AmdUsage, AMD_WITHOUT_MODEL};
pub use cuda::{cuda_limits, cuda_occupancy, CudaLimits, CudaUsage};

/// How many warps (CUDA) or waves (AMD) of one kernel can be resident at once, and why not
/// more.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Occupancy {
    /// `"warps/SM"` (CUDA) or `"waves/SIMD"` (AMD).
    pub unit: String,
    /// Resident warps per SM / waves per SIMD at the kernel's block size.
    pub value: u32,
    /// The processor's ceiling in the same unit (warps per SM / waves per EU).
    pub max: u32,
    /// The resource that binds. CUDA: `registers`, `shared`, `warps`, `blocks`, `barriers`;
    /// AMD: `vgprs`, `sgprs`, `lds`, `waves`. At `max` it is `warps` / `waves` (the hardware
    /// ceiling); below it, when several bind equally, the first of that order is named.
    pub limiter: String,
    /// Threads per block the figure is for (absent in manifests written before it was
    /// recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// Where `block_size` came from: `block-size` (Kbuild.toml), `--block-size` (inspect),
    /// `launch-bounds` (CUDA `__launch_bounds__` / REQNTID / MAXNTID) or
    /// `max-flat-workgroup-size` (AMD code object metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size_from: Option<String>,
}

impl Occupancy {
    /// `value / max` as a fraction in `0.0..=1.0` (0 when `max` is 0).
    pub fn fraction(&self) -> f64 {
        if self.max == 0 {
            0.0
        } else {
            f64::from(self.value) / f64::from(self.max)
        }
    }
}

/// Picks the first limiter (in the order given) whose limit equals the minimum.
fn first_binding(limits: &[(&'static str, u64)]) -> (&'static str, u64) {
    let min = limits.iter().map(|(_, v)| *v).min().unwrap_or(0);
    let name = limits
        .iter()
        .find(|(_, v)| *v == min)
        .map_or("", |(n, _)| *n);
    (name, min)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Vendor, PROCESSORS};

    #[test]
    fn every_catalogue_processor_has_a_model_of_its_own_vendor_only() {
        let cu = CudaUsage {
            registers: 32,
            static_shared: 0,
            dynamic_shared: 0,
            block_size: 256,
            barriers: 1,
        };
        let au = AmdUsage {
            vgprs: 32,
            agprs: 0,
            sgprs: 16,
            lds_bytes: 0,
            block_size: 256,
            wave_size: 0,
        };
        for p in PROCESSORS {
            let (c, a) = (cuda_occupancy(p, &cu), amd_occupancy(p, &au));
            match p.vendor() {
                Vendor::Nvidia => {
                    let c = c.unwrap_or_else(|| panic!("{}: no CUDA model", p.name));
                    assert_eq!(c.unit, "warps/SM");
                    assert!(c.value > 0 && c.value <= c.max, "{}: {c:?}", p.name);
                    assert!(a.is_none(), "{}", p.name);
                }
                Vendor::Amd if amd::AMD_WITHOUT_MODEL.iter().any(|(n, _)| *n == p.name) => {
                    assert!(a.is_none() && c.is_none(), "{}", p.name);
                }
                Vendor::Amd => {
                    let a = a.unwrap_or_else(|| panic!("{}: no AMD model", p.name));
                    assert_eq!(a.unit, "waves/SIMD");
                    assert!(a.value > 0 && a.value <= a.max, "{}: {a:?}", p.name);
                    assert!(c.is_none(), "{}", p.name);
                }
            }
        }
    }

    #[test]
    fn first_binding_prefers_the_earlier_name() {
        assert_eq!(first_binding(&[("a", 3), ("b", 2), ("c", 2)]), ("b", 2));
        assert_eq!(first_binding(&[]), ("", 0));
    }
}

/// The most dynamic shared memory (LDS) one block of a kernel using `static_shared` bytes of
/// its own may ask for on `p`: CUDA's opt-in per-block limit; on AMD one work-group's LDS
/// (64 KiB; 160 KiB on gfx950, whose CU holds that much). `None` for a processor the tables
/// lack.
pub fn max_dynamic_shared(p: &crate::target::Processor, static_shared: u32) -> Option<u32> {
    if let Some(l) = cuda_limits(p) {
        return Some(l.shared_per_block_optin.saturating_sub(static_shared));
    }
    let l = amd_limits(p)?;
    // CDNA (8 waves/EU) gives a work-group its CU's whole LDS; RDNA's 128 KiB is per WGP,
    // of which a work-group gets at most 64 KiB.
    let per_group = match l.max_waves_per_eu {
        8 => l.lds_bytes,
        _ => l.lds_bytes.min(64 * 1024),
    };
    Some(per_group.saturating_sub(static_shared))
}

#[cfg(test)]
mod dynamic_shared_tests {
    use super::*;
    use crate::target::Target;

    fn limit(t: &str) -> u32 {
        let t: Target = t.parse().expect("catalogue target");
        max_dynamic_shared(t.processor, 0).expect("in the tables")
    }

    #[test]
    fn per_block_limits() {
        assert_eq!(limit("sm_90a"), 227 * 1024);
        assert_eq!(limit("sm_80"), 163 * 1024);
        assert_eq!(limit("sm_89"), 99 * 1024);
        assert_eq!(limit("gfx1100"), 64 * 1024);
        assert_eq!(limit("gfx942"), 64 * 1024);
        assert_eq!(limit("gfx950"), 160 * 1024);
    }
}
