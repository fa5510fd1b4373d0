//! Host ELF files (objects, executables, shared libraries such as a PyTorch extension `.so`)
//! with embedded device code: `.nv_fatbin` / `__nv_relfatbin` (nvcc, a fatbin) and
//! `.hip_fatbin` (hip-clang, an offload bundle), with their registration wrappers
//! `.nvFatBinSegment` / `.hipFatBinSegment`.
//!
//! The list of sections must equal `readelf -S` (same names, same sizes).

use object::elf;
use serde::Serialize;

use super::elf::{u32_at, Elf};
use super::ReadError;

/// Sections that hold device code.
pub const DEVICE_CODE_SECTIONS: &[&str] = &[
    ".nv_fatbin",
    "__nv_relfatbin",
    ".hip_fatbin",
    ".llvm.offloading",
];
/// Magic of the `.nvFatBinSegment` wrapper (`__fatBinC_Wrapper_t`).
pub const NV_WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// Magic of the `.hipFatBinSegment` wrapper ("HIPF").
pub const HIP_WRAPPER_MAGIC: u32 = 0x4849_5046;

/// One section with embedded device code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmbeddedSection<'data> {
    pub name: String,
    /// File offset of the section.
    pub offset: u64,
    pub size: u64,
    #[serde(skip)]
    pub data: &'data [u8],
}

/// What a host ELF carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostElf<'data> {
    pub machine: u16,
    /// `ET_REL`, `ET_EXEC`, `ET_DYN` as numbers (1, 2, 3).
    pub file_type: u16,
    pub sections: Vec<EmbeddedSection<'data>>,
    /// `.nvFatBinSegment` wrapper magic and version, when present and well formed.
    pub nv_wrapper: Option<(u32, u32)>,
    /// `.hipFatBinSegment` wrapper magic and version, when present and well formed.
    pub hip_wrapper: Option<(u32, u32)>,
}

/// Finds the device-code sections of a host ELF.
pub fn read_host_elf(data: &[u8]) -> Result<HostElf<'_>, ReadError> {
    let elf = Elf::parse(data)?;
    let mut sections = Vec::new();
    let mut nv_wrapper = None;
    let mut hip_wrapper = None;
    for (_, name, s) in elf.sections() {
        let wrapper = |magic: u32| -> Result<Option<(u32, u32)>, ReadError> {
            let body = elf.section_data(name, s)?;
            Ok(u32_at(body, 0)
                .zip(u32_at(body, 4))
                .filter(|(m, _)| *m == magic))
        };
        match name {
            ".nvFatBinSegment" => nv_wrapper = wrapper(NV_WRAPPER_MAGIC)?,
            ".hipFatBinSegment" => hip_wrapper = wrapper(HIP_WRAPPER_MAGIC)?,
            n if DEVICE_CODE_SECTIONS.contains(&n) => {
                if elf.sh_type(s) == elf::SHT_NOBITS {
                    continue;
                }
                if s_flags(&elf, s) & u64::from(elf::SHF_COMPRESSED) != 0 {
                    return Err(ReadError::Unsupported {
                        what: "embedded device code section",
                        section: Some(n.to_string()),
                        offset: Some(elf.sh_offset(s)),
                        detail: "the section is ELF-compressed (SHF_COMPRESSED)".into(),
                    });
                }
                let body = elf.section_data(name, s)?;
                sections.push(EmbeddedSection {
                    name: n.to_string(),
                    offset: elf.sh_offset(s),
                    size: elf.sh_size(s),
                    data: body,
                });
            }
            _ => {}
        }
    }
    Ok(HostElf {
        machine: elf.machine(),
        file_type: object::read::elf::FileHeader::e_type(elf.header, elf.endian),
        sections,
        nv_wrapper,
        hip_wrapper,
    })
}

fn s_flags(elf: &Elf<'_>, s: &super::elf::Section) -> u64 {
    object::read::elf::SectionHeader::sh_flags(s, elf.endian)
}
