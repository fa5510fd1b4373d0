//! Pure readers of GPU code objects and their containers.
//!
//! Every reader takes `&[u8]`, does no I/O, checks every bound, and returns a typed record or a
//! [`ReadError`] that says what is wrong and where. Which vendor tool each answer must equal is
//! written on the reader: `llvm-readobj-19 --notes` for AMDGPU code objects,
//! `cuobjdump --dump-resource-usage` and `ptxas -v` for cubins.
//!
//! - [`identify`]: format, machine, target and kernel names of one code object.
//! - [`amdgpu::read_hsaco`], [`cubin::read_cubin`], [`ptx::read_ptx`]: the full records.
//! - [`walk`]: the members of a container (fatbin, offload bundle, host ELF), recursively.
//! - [`logs::parse_ptxas_log`], [`logs::parse_clang_resource_remarks`]: compiler logs.

pub mod amdgpu;
mod amdgpu_meta;
mod amdgpu_target;
pub mod container;
pub mod cubin;
mod decompress;
mod elf;
mod error;
pub mod fatbin;
pub mod host_elf;
pub mod logs;
pub mod nvinfo;
pub mod offload_bundle;
pub mod ptx;

pub use container::{walk, walk_with, Limits, Member};
pub use error::ReadError;
pub use logs::{
    parse_clang_resource_remarks, parse_ptxas_log, ClangKernelRemarks, PtxasFunctionReport,
};

/// The kinds of input the readers know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// AMDGPU HSA code object (ELF, `EM_AMDGPU`).
    Hsaco,
    /// NVIDIA cubin (ELF, `EM_CUDA`).
    Cubin,
    /// PTX text.
    Ptx,
    /// NVIDIA fatbin container (magic 0xBA55ED50).
    Fatbin,
    /// Clang offload bundle, plain (`__CLANG_OFFLOAD_BUNDLE__`) or compressed (`CCOB`).
    OffloadBundle,
    /// Any other ELF (host object, executable, shared library), possibly with embedded
    /// `.nv_fatbin` / `.hip_fatbin`.
    HostElf,
}

/// What one code object is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectIdent {
    pub format: Format,
    /// e_machine of the ELF (224 EM_AMDGPU, 190 EM_CUDA); 0 for PTX text.
    pub machine: u16,
    /// AMD: processor field `e_flags & 0xff` (EF_AMDGPU_MACH, e.g. 0x41 gfx1100). CUDA: SM
    /// number (89 for sm_89, 90 for sm_90a too). PTX: SM number of `.target`.
    pub arch: u32,
    /// Canonical target name: "gfx1100", "gfx90a:sramecc+:xnack-" (features only when set,
    /// sramecc before xnack, as LLVM spells target ids), "gfx11-generic", "sm_89", "sm_90a"
    /// (from e_flags 'a' bit in ABI V1 or `.nv.compat` attribute 0x09 in V2), PTX: the
    /// `.target` name as written, e.g. "sm_90".
    pub target: String,
    /// Kernel entry symbols: AMD the kernel names (from the metadata note `.name`, or the `.kd`
    /// symbols), CUDA the global function symbols that are kernels (STO_CUDA_ENTRY, else
    /// `.nv.info.<name>`), PTX the `.entry` names. Sorted, deduplicated.
    pub entries: Vec<String>,
}

/// Fatbin container magic (little-endian u32 0xBA55ED50).
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// Which format the bytes are, from magic numbers and the ELF machine; `None` if unknown.
pub fn detect(data: &[u8]) -> Option<Format> {
    if data.starts_with(&elf::MAGIC) {
        let machine = elf::u16_at(data, 18)?;
        // EI_DATA 2 = big-endian: no GPU object is big-endian, treat as host ELF.
        let machine = if data.get(5) == Some(&2) {
            machine.swap_bytes()
        } else {
            machine
        };
        return Some(match machine {
            amdgpu::EM_AMDGPU => Format::Hsaco,
            cubin::EM_CUDA => Format::Cubin,
            _ => Format::HostElf,
        });
    }
    if elf::u32_at(data, 0) == Some(FATBIN_MAGIC) {
        return Some(Format::Fatbin);
    }
    if offload_bundle::is_offload_bundle(data) {
        return Some(Format::OffloadBundle);
    }
    if ptx::is_ptx(data) {
        return Some(Format::Ptx);
    }
    None
}

/// Identifies one code object (hsaco, cubin or PTX). A container gives
/// [`ReadError::Container`] naming its format; use [`walk`] for those.
pub fn identify(data: &[u8]) -> Result<ObjectIdent, ReadError> {
    match detect(data) {
        Some(Format::Hsaco) => {
            let obj = amdgpu::read_hsaco(data)?;
            Ok(ObjectIdent {
                format: Format::Hsaco,
                machine: amdgpu::EM_AMDGPU,
                arch: obj.target.mach,
                entries: obj.entries(),
                target: obj.target_id,
            })
        }
        Some(Format::Cubin) => {
            let obj = cubin::read_cubin(data)?;
            Ok(ObjectIdent {
                format: Format::Cubin,
                machine: cubin::EM_CUDA,
                arch: obj.sm,
                entries: obj.entries(),
                target: obj.target,
            })
        }
        Some(Format::Ptx) => {
            let m = ptx::read_ptx(data)?;
            Ok(ObjectIdent {
                format: Format::Ptx,
                machine: 0,
                arch: m.sm,
                target: m.target,
                entries: m.entries,
            })
        }
        Some(f) => Err(ReadError::Container(f)),
        None => Err(unrecognised(data)),
    }
}

/// The error for bytes `detect` does not know (a truncated ELF header is named as such).
pub(crate) fn unrecognised(data: &[u8]) -> ReadError {
    if data.starts_with(&elf::MAGIC) {
        return ReadError::at(
            "ELF header",
            0,
            format!(
                "truncated: the input is {} bytes, a header is 64",
                data.len()
            ),
        );
    }
    ReadError::Unrecognised(describe_unknown(data))
}

fn describe_unknown(data: &[u8]) -> String {
    if data.is_empty() {
        return "the input is empty".into();
    }
    let head: String = data
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ");
    format!("{} bytes starting {head}", data.len())
}
