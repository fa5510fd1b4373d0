//! NVIDIA cubins (ELF64, `EM_CUDA`), both ELF ABIs: V1 (`EI_ABIVERSION` 7, ptxas <= 12.x for
//! sm <= 90) and V2 (`EI_ABIVERSION` 8, ptxas 12.8+ for sm_100+ and nvcc 13 for every arch).
//!
//! Per kernel figures must equal `cuobjdump --dump-resource-usage`: REG = `registers`, STACK =
//! `frame_size`, SHARED = `shared_bytes + reserved_shared_bytes`, LOCAL = `local_bytes`,
//! CONSTANT[0] = `const0_bytes`; `shared_bytes` equals the "bytes smem" of `ptxas -v`.

use std::collections::BTreeMap;

use object::elf;
use serde::Serialize;

use super::elf::{u16_at, u32_at, Elf};
use super::nvinfo::{self, KParamInfo, NvInfoRecord, NvInfoValue, ParamCbank};
use super::ReadError;

/// `EM_CUDA`.
pub const EM_CUDA: u16 = 190;
/// `EI_ABIVERSION` of the two cubin ELF ABIs.
pub const CUDA_ABI_V1: u8 = 7;
pub const CUDA_ABI_V2: u8 = 8;
/// `st_other` bit of kernel entry functions.
pub const STO_CUDA_ENTRY: u8 = 0x10;
/// `sh_type` of `.nv.info*` sections.
pub const SHT_CUDA_INFO: u32 = 0x7000_0000;
/// `sh_type` of `.nv.compat`.
pub const SHT_CUDA_COMPAT: u32 = 0x7000_0086;
/// V1 `e_flags` bit of arch-specific ('a') cubins.
pub const EF_CUDA_V1_ARCH_SPECIFIC: u32 = 0x800;
/// V2 `e_flags` bit of arch-specific ('a') cubins as ptxas 12.9 writes them (sm_100a, sm_103a,
/// sm_120a, sm_121a from Triton 3.6's ptxas; cuobjdump 13.5 reads them as `sm=100a`); ptxas
/// 13.5 instead records `.nv.compat` attribute 0x09 = 1 and leaves this bit clear.
pub const EF_CUDA_V2_ARCH_SPECIFIC: u32 = 0x8;
/// Shared memory the driver reserves per block on sm_90 and later (the `.nv.reservedSmem`
/// area): cuobjdump's SHARED and the `.nv.shared.<k>` section include it, `ptxas -v` does not.
/// Observed as exactly 1 KiB, whenever a kernel has a `.nv.shared.<k>` section, on sm_90,
/// sm_90a, sm_100, sm_100a, sm_103, sm_120 and sm_121 (ptxas 13.5, ABI V2) and sm_90a (ptxas
/// 12.4, ABI V1), for 4 B .. 48 KiB of static shared memory, dynamic shared memory only,
/// mbarriers and clusters. A kernel with no shared memory usually has no section (0); in a
/// module with mbarrier and cluster kernels beside it, it had a 1 KiB section and ptxas
/// reported 0 (so: 0 + 1 KiB reserved). Before sm_90 there is none.
pub const SM90_RESERVED_SHARED_BYTES: u64 = 1024;

/// A cubin: its target and its kernels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaObject {
    /// 1 or 2.
    pub elf_abi: u8,
    pub e_flags: u32,
    /// SM number: 89 for sm_89, 90 for sm_90a too.
    pub sm: u32,
    /// Arch-specific ('a'): V1 `e_flags & 0x800`, V2 `e_flags & 0x8` or `.nv.compat` attribute
    /// 0x09 = 1.
    pub arch_specific: bool,
    /// "sm_89", "sm_90a".
    pub target: String,
    /// The virtual architecture the SASS was made from (V1 `e_flags` bits 16..23, or the
    /// `.note.nv.cuinfo` note).
    pub virtual_sm: Option<u32>,
    /// Toolkit version from `.note.nv.cuinfo` (135 = CUDA 13.5).
    pub toolkit_version: Option<u32>,
    /// Module-level global memory (`.nv.global` + `.nv.global.init`): cuobjdump "GLOBAL".
    pub global_bytes: u64,
    /// Module-level constant banks other than 0 (`.nv.constant<N>`): cuobjdump "CONSTANT[N]".
    pub const_banks: Vec<(u32, u64)>,
    /// Kernels sorted by name.
    pub kernels: Vec<CudaKernel>,
}

/// Resource usage of one kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CudaKernel {
    pub name: String,
    /// EIATTR_REGCOUNT (before sm_90 also `.text.<k>` sh_info >> 24 as a fallback).
    pub registers: u32,
    /// EIATTR_FRAME_SIZE: the stack frame in bytes.
    pub frame_size: u32,
    pub min_stack_size: Option<u32>,
    pub max_stack_size: Option<u32>,
    /// EIATTR_MAX_THREADS (`__launch_bounds__` / `.maxntid`).
    pub max_threads: Option<[u32; 3]>,
    /// EIATTR_REQNTID (`.reqntid`).
    pub reqntid: Option<[u32; 3]>,
    /// EIATTR_MAXREG_COUNT (`.maxnreg` / `-maxrregcount`; 255 when unlimited).
    pub maxreg_count: Option<u32>,
    /// EIATTR_NUM_BARRIERS (absent = 0).
    pub barriers: u32,
    pub mbarriers: u32,
    /// EIATTR_CTA_PER_CLUSTER (`__cluster_dims__`).
    pub cluster_dims: Option<[u32; 3]>,
    /// Static shared bytes as ptxas reports them (section size less the reservation).
    pub shared_bytes: u64,
    /// The sm_90+ system reservation included in `.nv.shared.<k>` (see
    /// [`SM90_RESERVED_SHARED_BYTES`]); 0 before sm_90.
    pub reserved_shared_bytes: u64,
    /// `.nv.local.<k>`.
    pub local_bytes: u64,
    /// Size of `.nv.constant0.<k>`: parameters plus driver constants.
    pub const0_bytes: u64,
    /// Kernel parameter bytes (EIATTR_CBANK_PARAM_SIZE / PARAM_CBANK).
    pub param_bytes: Option<u32>,
    /// Size of `.text.<k>`.
    pub code_bytes: u64,
    /// EIATTR_KPARAM_INFO records, sorted by ordinal (ordinals 0..n, each once); empty for a
    /// kernel without parameters, or a cubin that does not record them (then
    /// `param_bytes` is non-zero).
    pub kparams: Vec<KParamInfo>,
    /// EIATTR_PARAM_CBANK.
    pub param_cbank: Option<ParamCbank>,
    /// Why the KPARAM_INFO records do not make a parameter list (ordinals not 0..n, a
    /// parameter past the block's end); then the parameters are not known.
    pub kparams_unusable: Option<String>,
}

/// Reads a cubin.
pub fn read_cubin(data: &[u8]) -> Result<CudaObject, ReadError> {
    let elf = Elf::parse(data)?;
    read_cubin_elf(&elf)
}

/// (sm, arch-specific, virtual sm) from the header and, for V2, `.nv.compat`.
fn decode_arch(elf: &Elf<'_>) -> Result<(u8, u32, bool, Option<u32>), ReadError> {
    let f = elf.flags();
    match elf.abi_version() {
        CUDA_ABI_V1 => Ok((
            1,
            f & 0xff,
            f & EF_CUDA_V1_ARCH_SPECIFIC != 0,
            Some((f >> 16) & 0xff).filter(|v| *v != 0),
        )),
        CUDA_ABI_V2 => {
            let mut arch_specific = f & EF_CUDA_V2_ARCH_SPECIFIC != 0;
            if let Some((_, s)) = elf.section_by_name(".nv.compat") {
                let body = elf.section_data(".nv.compat", s)?;
                for r in nvinfo::NvInfoIter::at(".nv.compat", elf.sh_offset(s), body) {
                    let r = r?;
                    if r.attribute == nvinfo::COMPAT_ARCH_SPECIFIC {
                        arch_specific |= r.scalar() == Some(1);
                    }
                }
            }
            Ok((2, (f >> 8) & 0xff, arch_specific, None))
        }
        v => Err(ReadError::unsupported(
            "cubin ELF ABI",
            Some(8),
            format!("EI_ABIVERSION {v} (known: 7 = ABI V1, 8 = ABI V2)"),
        )),
    }
}

pub(crate) fn read_cubin_elf(elf: &Elf<'_>) -> Result<CudaObject, ReadError> {
    if elf.machine() != EM_CUDA {
        return Err(ReadError::at(
            "ELF header",
            18,
            format!("e_machine is {}, not EM_CUDA (190)", elf.machine()),
        ));
    }
    let (elf_abi, sm, arch_specific, mut virtual_sm) = decode_arch(elf)?;
    let target = format!("sm_{sm}{}", if arch_specific { "a" } else { "" });

    let mut toolkit_version = None;
    if let Some((_, s)) = elf.section_by_name(".note.nv.cuinfo") {
        // Note header (12) + "NVIDIA Corp\0" (12) + u16 version, u16 virtual SM, u32 toolkit.
        let body = elf.section_data(".note.nv.cuinfo", s)?;
        if let (Some(vsm), Some(tk)) = (u16_at(body, 26), u32_at(body, 28)) {
            virtual_sm = virtual_sm.or(Some(u32::from(vsm)));
            toolkit_version = Some(tk);
        }
    }

    // Symbol index -> name for the global .nv.info records; kernel names.
    let symbols: Vec<_> = elf.symbols().collect();
    let mut by_index = BTreeMap::new();
    let mut kernels: BTreeMap<String, CudaKernel> = BTreeMap::new();
    for s in &symbols {
        by_index.insert(s.index, s.name);
        if s.st_type == elf::STT_FUNC && s.other & STO_CUDA_ENTRY != 0 && !s.name.is_empty() {
            kernels
                .entry(s.name.to_string())
                .or_insert_with(|| CudaKernel {
                    name: s.name.to_string(),
                    ..Default::default()
                });
        }
    }
    let has_entry_flags = !kernels.is_empty();

    let mut global_bytes = 0u64;
    let mut const_banks = BTreeMap::new();
    let mut per_kernel_info = Vec::new();
    for (_, name, s) in elf.sections() {
        let size = elf.sh_size(s);
        if let Some(k) = name.strip_prefix(".nv.info.") {
            if !has_entry_flags && !k.is_empty() {
                kernels.entry(k.to_string()).or_insert_with(|| CudaKernel {
                    name: k.to_string(),
                    ..Default::default()
                });
            }
            per_kernel_info.push((k, name, s));
        } else if name == ".nv.global" || name == ".nv.global.init" {
            global_bytes = global_bytes.saturating_add(size);
        } else if let Some(bank) = name
            .strip_prefix(".nv.constant")
            .and_then(|b| b.parse::<u32>().ok())
        {
            if bank != 0 {
                *const_banks.entry(bank).or_insert(0u64) += size;
            }
        }
    }

    for (_, name, s) in elf.sections() {
        let size = elf.sh_size(s);
        let sized = |prefix: &str| name.strip_prefix(prefix);
        if let Some(k) = sized(".nv.shared.").and_then(|k| kernels.get_mut(k)) {
            let reserved = if sm >= 90 {
                size.min(SM90_RESERVED_SHARED_BYTES)
            } else {
                0
            };
            k.reserved_shared_bytes = reserved;
            k.shared_bytes = size - reserved;
        } else if let Some(k) = sized(".nv.constant0.").and_then(|k| kernels.get_mut(k)) {
            k.const0_bytes = size;
        } else if let Some(k) = sized(".nv.local.").and_then(|k| kernels.get_mut(k)) {
            k.local_bytes = size;
        } else if let Some(k) = sized(".text.").and_then(|k| kernels.get_mut(k)) {
            k.code_bytes = size;
            if sm < 90 {
                k.registers = elf.sh_info(s) >> 24;
            }
        }
    }

    if let Some((_, s)) = elf.section_by_name(".nv.info") {
        let body = elf.section_data(".nv.info", s)?;
        for r in nvinfo::NvInfoIter::at(".nv.info", elf.sh_offset(s), body) {
            let r = r?;
            let (Some(sym), Some(value)) = (r.word(0), r.word(1)) else {
                continue;
            };
            let Some(k) = by_index
                .get(&(sym as usize))
                .and_then(|n| kernels.get_mut(*n))
            else {
                continue;
            };
            match r.attribute {
                nvinfo::EIATTR_REGCOUNT => k.registers = value,
                nvinfo::EIATTR_FRAME_SIZE => k.frame_size = value,
                nvinfo::EIATTR_MIN_STACK_SIZE => k.min_stack_size = Some(value),
                nvinfo::EIATTR_MAX_STACK_SIZE => k.max_stack_size = Some(value),
                _ => {}
            }
        }
    }

    for (k, name, s) in per_kernel_info {
        let Some(kernel) = kernels.get_mut(k) else {
            continue;
        };
        let body = elf.section_data(name, s)?;
        let base = elf.sh_offset(s);
        for r in nvinfo::NvInfoIter::at(name, base, body) {
            apply_kernel_record(kernel, &r?).map_err(|detail| {
                ReadError::in_section("nv.info record", name, Some(base), detail.to_string())
            })?;
        }
        kernel.kparams_unusable = check_kparams(kernel).err().map(|e| e.to_string());
    }

    Ok(CudaObject {
        elf_abi,
        e_flags: elf.flags(),
        sm,
        arch_specific,
        target,
        virtual_sm,
        toolkit_version,
        global_bytes,
        const_banks: const_banks.into_iter().collect(),
        kernels: kernels.into_values().collect(),
    })
}

/// Why a kernel's parameter records cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KParamError {
    #[error("EIATTR_KPARAM_INFO at +{offset:#x} is not a {size}-byte record")]
    Record { offset: usize, size: usize },
    #[error("kernel `{kernel}`: parameter ordinals are not 0..{count} (ordinal {ordinal} at position {position})")]
    Ordinals {
        kernel: String,
        count: usize,
        ordinal: u16,
        position: usize,
    },
    #[error("kernel `{kernel}`: parameter {index} ends at byte {end}, past the {total}-byte parameter block")]
    PastBlock {
        kernel: String,
        index: usize,
        end: u32,
        total: u32,
    },
}

fn apply_kernel_record(k: &mut CudaKernel, r: &NvInfoRecord<'_>) -> Result<(), KParamError> {
    let payload = match r.value {
        NvInfoValue::Bytes(b) => Some(b),
        _ => None,
    };
    match r.attribute {
        nvinfo::EIATTR_KPARAM_INFO => {
            let p = payload
                .and_then(KParamInfo::parse)
                .ok_or(KParamError::Record {
                    offset: r.offset,
                    size: nvinfo::KPARAM_INFO_SIZE,
                })?;
            k.kparams.push(p);
        }
        nvinfo::EIATTR_PARAM_CBANK => {
            k.param_cbank = payload.and_then(ParamCbank::parse);
            if k.param_bytes.is_none() {
                k.param_bytes = k.param_cbank.map(|c| u32::from(c.size));
            }
        }
        nvinfo::EIATTR_MAX_THREADS => k.max_threads = r.dims(),
        nvinfo::EIATTR_REQNTID => k.reqntid = r.dims(),
        nvinfo::EIATTR_MAXREG_COUNT => k.maxreg_count = r.scalar(),
        nvinfo::EIATTR_NUM_BARRIERS => k.barriers = r.scalar().unwrap_or(0),
        nvinfo::EIATTR_NUM_MBARRIERS => k.mbarriers = r.scalar().unwrap_or(0),
        nvinfo::EIATTR_CTA_PER_CLUSTER => k.cluster_dims = r.dims(),
        nvinfo::EIATTR_CBANK_PARAM_SIZE => k.param_bytes = r.scalar(),
        _ => {}
    }
    Ok(())
}

/// Sorts the parameter records by ordinal and checks that they are ordinals 0..n, each once,
/// and end within the parameter block (CBANK_PARAM_SIZE) when it is known.
pub(crate) fn check_kparams(k: &mut CudaKernel) -> Result<(), KParamError> {
    k.kparams.sort_by_key(|p| p.ordinal);
    for (i, p) in k.kparams.iter().enumerate() {
        if usize::from(p.ordinal) != i {
            return Err(KParamError::Ordinals {
                kernel: k.name.clone(),
                count: k.kparams.len(),
                ordinal: p.ordinal,
                position: i,
            });
        }
        let end = u32::from(p.offset) + u32::from(p.size);
        if let Some(total) = k.param_bytes.filter(|t| end > *t) {
            return Err(KParamError::PastBlock {
                kernel: k.name.clone(),
                index: i,
                end,
                total,
            });
        }
    }
    Ok(())
}

impl CudaObject {
    /// Kernel names, sorted and deduplicated.
    pub fn entries(&self) -> Vec<String> {
        self.kernels.iter().map(|k| k.name.clone()).collect()
    }

    pub fn kernel(&self, name: &str) -> Option<&CudaKernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
}
