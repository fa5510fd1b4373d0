//! Resource records: what each kernel entry of a code object uses, in the manifest's units
//! (bytes unless the name says count), from the readers plus, for CUDA, the ptxas log.

use serde::{Deserialize, Serialize};

use crate::occupancy::{amd_occupancy, cuda_occupancy, AmdUsage, CudaUsage, Occupancy};
use crate::params::{self, Param};
use crate::read::{amdgpu, cubin, detect, logs, ptx, Format, ReadError};
use crate::target::processor;

/// One entry's resources; the `kind` tag says which vendor's fields follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Resources {
    Amd(AmdResources),
    Cuda(CudaResources),
    Ptx(PtxResources),
}

/// AMD figures as `llvm-readobj-19 --notes` shows them (NT_AMDGPU_METADATA).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmdResources {
    /// `.vgpr_count` (count; on gfx90a/gfx942 the unified arch VGPR + AGPR total).
    pub vgprs: u32,
    /// `.sgpr_count` (count).
    pub sgprs: u32,
    /// `.agpr_count` (count; 0 where the processor has none).
    pub agprs: u32,
    /// `.vgpr_spill_count` (count).
    pub vgpr_spills: u32,
    /// `.sgpr_spill_count` (count).
    pub sgpr_spills: u32,
    /// `.group_segment_fixed_size`: static LDS bytes per work-group.
    pub lds_bytes: u64,
    /// `.private_segment_fixed_size`: scratch bytes per work-item (lane).
    pub scratch_bytes: u64,
    /// `.wavefront_size` (lanes).
    pub wave_size: u32,
    /// `.max_flat_workgroup_size` (threads).
    pub max_threads: u32,
    /// `.kernarg_segment_size`.
    pub kernarg_bytes: u64,
    /// `.uses_dynamic_stack`.
    pub dynamic_stack: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupancy: Option<Occupancy>,
}

/// CUDA figures as `cuobjdump --dump-resource-usage` and `ptxas -v` show them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CudaResources {
    /// REGCOUNT (count per thread).
    pub registers: u32,
    /// Static shared bytes as ptxas reports them (without the sm_90+ system reservation).
    pub lds_bytes: u64,
    /// The system shared-memory reservation the cubin adds (1 KiB on sm_90+, else 0).
    pub reserved_shared_bytes: u64,
    /// Stack frame bytes per thread (FRAME_SIZE).
    pub scratch_bytes: u64,
    /// Spill stores, bytes: from the ptxas log; `null` when only the cubin is known.
    pub spill_store_bytes: Option<u64>,
    /// Spill loads, bytes: from the ptxas log; `null` when only the cubin is known.
    pub spill_load_bytes: Option<u64>,
    /// Constant bank 0 bytes (`.nv.constant0.<kernel>`).
    pub const_bytes: u64,
    /// Named barriers (count).
    pub barriers: u32,
    /// Threads per block the kernel is limited to (`__launch_bounds__` / REQNTID), if set.
    pub max_threads: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupancy: Option<Occupancy>,
    /// Why a field is `null`, e.g. that a foreign cubin does not record spills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// PTX: what a driver needs to JIT it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtxResources {
    /// `.version`, e.g. "9.5".
    pub ptx_isa: String,
    /// `.target`, e.g. "sm_90".
    pub target: String,
}

/// A kernel entry with its resources and its launch parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelResources {
    pub name: String,
    #[serde(flatten)]
    pub resources: Resources,
    /// The launch parameters (see [`crate::params`]); `None` when the object does not record
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Vec<Param>>,
}

/// What one code object holds.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectResources {
    pub format: Format,
    /// Canonical target id of the object (`gfx1100`, `sm_90a`, PTX `.target`).
    pub target: String,
    pub kernels: Vec<KernelResources>,
}

/// The note of a cubin read without its ptxas log (a manifest may still record its spills).
pub const FOREIGN_SPILLS: &str =
    "spill bytes are not recorded in a cubin (they come from the ptxas log of the build)";

/// Threads per block for occupancy, given by the user, and by what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSize {
    pub threads: u32,
    /// [`BlockSize::FROM_CONFIG`] or [`BlockSize::FROM_FLAG`].
    pub from: &'static str,
    /// Dynamic shared memory (LDS) bytes each block is launched with, which the object does
    /// not record (a Triton kernel's); counted by occupancy beside the object's own.
    pub dynamic_shared: u32,
}

impl BlockSize {
    /// Kbuild.toml `block-size`.
    pub const FROM_CONFIG: &'static str = "block-size";
    /// `kbuild inspect --block-size`.
    pub const FROM_FLAG: &'static str = "--block-size";
    /// The kernel's own CUDA bound (`__launch_bounds__`, REQNTID, MAXNTID).
    pub const FROM_LAUNCH_BOUNDS: &'static str = "launch-bounds";
    /// The AMD code object's `.max_flat_workgroup_size`.
    pub const FROM_MAX_FLAT_WORKGROUP_SIZE: &'static str = "max-flat-workgroup-size";
    /// A Triton kernel's launch record (`num_warps * warp_size`).
    pub const FROM_TRITON: &'static str = "triton";

    pub fn config(threads: u32) -> BlockSize {
        BlockSize {
            threads,
            from: Self::FROM_CONFIG,
            dynamic_shared: 0,
        }
    }

    /// A Triton kernel's launch: `num_warps * warp_size` threads and its dynamic shared bytes.
    pub fn triton(threads: u32, dynamic_shared: u32) -> BlockSize {
        BlockSize {
            threads,
            from: Self::FROM_TRITON,
            dynamic_shared,
        }
    }

    pub fn flag(threads: u32) -> BlockSize {
        BlockSize {
            dynamic_shared: 0,
            threads,
            from: Self::FROM_FLAG,
        }
    }
}

/// Why a CUDA kernel's occupancy is not computed.
pub const UNKNOWN_BLOCK_SIZE: &str = "occupancy unknown: no block size (set block-size in Kbuild.toml, give the kernel __launch_bounds__, or pass inspect --block-size)";

/// The occupancy record with the block size it was computed at, and where that came from.
fn stamped(o: Option<Occupancy>, b: BlockSize) -> Option<Occupancy> {
    o.map(|o| Occupancy {
        block_size: Some(b.threads),
        block_size_from: Some(b.from.to_string()),
        ..o
    })
}

/// Resource records of one code object (hsaco, cubin or PTX).
///
/// `log`: the build's ptxas `-v` output for a cubin (spills); `None` for a foreign cubin.
/// `block_size`: threads per block for occupancy (Kbuild.toml `block-size`, inspect
/// `--block-size`); else the kernel's own bound (AMD `.max_flat_workgroup_size`; CUDA
/// REQNTID / MAXNTID). A CUDA kernel with neither has no occupancy (unknown, said in its
/// `note`); no block size is assumed.
pub fn object_resources(
    data: &[u8],
    log: Option<&str>,
    block_size: Option<BlockSize>,
) -> Result<ObjectResources, ReadError> {
    object_resources_by_entry(data, log, &|_| block_size)
}

/// [`object_resources`] with a block size per entry symbol (Kbuild.toml `block-size` as a
/// table keyed by entry pattern): `block_size` answers for each kernel of the object.
pub fn object_resources_by_entry(
    data: &[u8],
    log: Option<&str>,
    block_size: &dyn Fn(&str) -> Option<BlockSize>,
) -> Result<ObjectResources, ReadError> {
    match detect(data) {
        Some(Format::Hsaco) => amd(data, block_size),
        Some(Format::Cubin) => cuda(data, log, block_size),
        Some(Format::Ptx) => {
            let m = ptx::read_ptx(data)?;
            let kernels = m
                .entries
                .iter()
                .map(|e| KernelResources {
                    name: e.clone(),
                    resources: Resources::Ptx(PtxResources {
                        ptx_isa: m.version.clone(),
                        target: m.target.clone(),
                    }),
                    params: m.params.get(e).map(|p| params::from_ptx(p)),
                })
                .collect();
            Ok(ObjectResources {
                format: Format::Ptx,
                target: m.target,
                kernels,
            })
        }
        Some(f) => Err(ReadError::Container(f)),
        None => crate::read::identify(data).map(|i| ObjectResources {
            format: i.format,
            target: i.target,
            kernels: Vec::new(),
        }),
    }
}

fn amd(
    data: &[u8],
    block_size: &dyn Fn(&str) -> Option<BlockSize>,
) -> Result<ObjectResources, ReadError> {
    let obj = amdgpu::read_hsaco(data)?;
    let proc = obj.target.processor.and_then(processor);
    let mut kernels = Vec::new();
    for k in &obj.kernels {
        let Some(m) = &k.metadata else { continue };
        let threads = block_size(&k.name).unwrap_or(BlockSize {
            dynamic_shared: 0,
            threads: m.max_flat_workgroup_size,
            from: BlockSize::FROM_MAX_FLAT_WORKGROUP_SIZE,
        });
        let occupancy = proc.and_then(|p| {
            amd_occupancy(
                p,
                &AmdUsage {
                    vgprs: m.vgpr_count,
                    agprs: m.agpr_count.unwrap_or(0),
                    sgprs: m.sgpr_count,
                    lds_bytes: u32::try_from(m.group_segment_fixed_size)
                        .unwrap_or(u32::MAX)
                        .saturating_add(threads.dynamic_shared),
                    block_size: threads.threads,
                    wave_size: m.wavefront_size,
                },
            )
        });
        let occupancy = stamped(occupancy, threads);
        kernels.push(KernelResources {
            name: k.name.clone(),
            resources: Resources::Amd(AmdResources {
                vgprs: m.vgpr_count,
                sgprs: m.sgpr_count,
                agprs: m.agpr_count.unwrap_or(0),
                vgpr_spills: m.vgpr_spill_count.unwrap_or(0),
                sgpr_spills: m.sgpr_spill_count.unwrap_or(0),
                lds_bytes: m.group_segment_fixed_size,
                scratch_bytes: m.private_segment_fixed_size,
                wave_size: m.wavefront_size,
                max_threads: m.max_flat_workgroup_size,
                kernarg_bytes: m.kernarg_segment_size,
                dynamic_stack: m.uses_dynamic_stack.unwrap_or(false),
                occupancy,
            }),
            // An object whose metadata has no `.args` but a kernarg segment does not say.
            params: (!m.args.is_empty() || m.kernarg_segment_size == 0)
                .then(|| params::from_amd(&m.args)),
        });
    }
    Ok(ObjectResources {
        format: Format::Hsaco,
        target: obj.target_id,
        kernels,
    })
}

fn cuda(
    data: &[u8],
    log: Option<&str>,
    block_size: &dyn Fn(&str) -> Option<BlockSize>,
) -> Result<ObjectResources, ReadError> {
    let obj = cubin::read_cubin(data)?;
    let reports = log.map(logs::parse_ptxas_log).unwrap_or_default();
    let proc = processor(&obj.target).or_else(|| processor(&format!("sm_{}", obj.sm)));
    let mut kernels = Vec::new();
    for k in &obj.kernels {
        let report = reports.iter().find(|r| r.function == k.name);
        let bound = k
            .reqntid
            .or(k.max_threads)
            // A hostile cubin's dimensions may overflow: saturate (no block is that large,
            // so occupancy then says the bound is out of range) instead of wrapping.
            .map(|d| d.iter().fold(1u32, |acc, &x| acc.saturating_mul(x.max(1))));
        let threads = block_size(&k.name).or(bound.map(|threads| BlockSize {
            dynamic_shared: 0,
            threads,
            from: BlockSize::FROM_LAUNCH_BOUNDS,
        }));
        let occupancy = threads.and_then(|b| {
            let o = proc.and_then(|p| {
                cuda_occupancy(
                    p,
                    &CudaUsage {
                        registers: k.registers,
                        static_shared: u32::try_from(k.shared_bytes).unwrap_or(u32::MAX),
                        dynamic_shared: b.dynamic_shared,
                        block_size: b.threads,
                        barriers: k.barriers,
                    },
                )
            });
            stamped(o, b)
        });
        let spill_note = match (log, report) {
            (None, _) => Some(FOREIGN_SPILLS.to_string()),
            (Some(_), None) => Some(format!("the ptxas log has no entry for {}", k.name)),
            _ => None,
        };
        let occupancy_note = threads.is_none().then(|| UNKNOWN_BLOCK_SIZE.to_string());
        let note = match (spill_note, occupancy_note) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        kernels.push(KernelResources {
            name: k.name.clone(),
            resources: Resources::Cuda(CudaResources {
                registers: k.registers,
                lds_bytes: k.shared_bytes,
                reserved_shared_bytes: k.reserved_shared_bytes,
                scratch_bytes: u64::from(k.frame_size),
                spill_store_bytes: report.map(|r| r.spill_stores),
                spill_load_bytes: report.map(|r| r.spill_loads),
                const_bytes: k.const0_bytes,
                barriers: k.barriers,
                max_threads: bound,
                occupancy,
                note,
            }),
            params: params::from_cubin(k),
        });
    }
    Ok(ObjectResources {
        format: Format::Cubin,
        target: obj.target,
        kernels,
    })
}

/// One inspected object, as `kbuild inspect` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InspectedObject {
    /// The file, or `file#member` for an object inside a container.
    pub path: String,
    pub format: Format,
    pub target: String,
    pub kernels: Vec<KernelResources>,
}

/// The `kbuild.inspect/v1` document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InspectReport {
    pub schema: &'static str,
    pub objects: Vec<InspectedObject>,
    /// Every file (or object of a build or bundle) that could not be read, with why; empty
    /// when all were read.
    pub errors: Vec<InspectFailure>,
}

/// A file `kbuild inspect` was given (or an object a build or bundle lists) that it could not
/// read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InspectFailure {
    /// As given, or `bundle#object path` / the object's file for a build's object.
    pub path: String,
    pub error: String,
}

pub const INSPECT_SCHEMA: &str = "kbuild.inspect/v1";

/// Every code object in `data` (itself, or the members of a fatbin, offload bundle or host
/// ELF, recursively) with its resources. `label` is the file name members are named under
/// (`label#member`); `log` is the ptxas log of a lone cubin, when known.
/// `block_size`: threads per block for occupancy (`--block-size`), as in [`object_resources`].
pub fn inspect(
    label: &str,
    data: &[u8],
    log: Option<&str>,
    block_size: Option<BlockSize>,
) -> Result<Vec<InspectedObject>, ReadError> {
    let mut out = Vec::new();
    for m in crate::read::walk(data)? {
        if !matches!(m.format, Some(Format::Hsaco | Format::Cubin | Format::Ptx)) {
            continue;
        }
        let path = if m.path.is_empty() {
            label.to_string()
        } else {
            format!("{label}#{}", m.path.trim_start_matches('#'))
        };
        let member_log = if m.path.is_empty() { log } else { None };
        let r = object_resources(&m.data, member_log, block_size)?;
        out.push(InspectedObject {
            path,
            format: r.format,
            target: r.target,
            kernels: r.kernels,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occupancy_block(r: &ObjectResources, name: &str) -> Option<(u32, String)> {
        let k = r.kernels.iter().find(|k| k.name == name)?;
        let o = match &k.resources {
            Resources::Cuda(c) => c.occupancy.clone(),
            Resources::Amd(a) => a.occupancy.clone(),
            Resources::Ptx(_) => None,
        }?;
        Some((o.block_size?, o.block_size_from?))
    }

    /// Issue 27, item 11: a block size per entry of one object; the entries it names none for
    /// keep their own bound (or none), on both vendors.
    #[test]
    fn block_sizes_per_entry_reach_each_kernels_occupancy() {
        let per_entry = |name: &str| match name {
            "vadd" => Some(BlockSize::config(512)),
            "fixed_block" => Some(BlockSize::config(32)),
            _ => None,
        };
        let cubin = include_bytes!("../tests/fixtures/kern_sm89.cubin");
        let log = include_str!("../tests/fixtures/kern_sm89.ptxas.log");
        let r = object_resources_by_entry(cubin, Some(log), &per_entry).unwrap();
        assert_eq!(
            occupancy_block(&r, "vadd"),
            Some((512, "block-size".into()))
        );
        assert_eq!(
            occupancy_block(&r, "fixed_block"),
            Some((32, "block-size".into()))
        );
        assert_eq!(
            occupancy_block(&r, "reduce_smem"),
            Some((256, "launch-bounds".into()))
        );
        let hsaco = include_bytes!("../tests/fixtures/kern_gfx1100.hsaco");
        let r = object_resources_by_entry(hsaco, None, &per_entry).unwrap();
        assert_eq!(
            occupancy_block(&r, "vadd"),
            Some((512, "block-size".into()))
        );
        assert_eq!(
            occupancy_block(&r, "reqd64"),
            Some((64, "max-flat-workgroup-size".into()))
        );
        // One size for all: the old form is the same function.
        let r = object_resources(cubin, Some(log), Some(BlockSize::config(64))).unwrap();
        assert_eq!(occupancy_block(&r, "vadd"), Some((64, "block-size".into())));
        assert_eq!(
            occupancy_block(&r, "reduce_smem"),
            Some((64, "block-size".into()))
        );
    }
}
