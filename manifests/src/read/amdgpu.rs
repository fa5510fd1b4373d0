//! AMDGPU HSA code objects (ELF64, `EM_AMDGPU`), code object v3..v6.
//!
//! Every metadata figure must equal `llvm-readobj-19 --notes` on the same file; the kernel
//! descriptor (`<kernel>.kd`, 64 bytes, layout of LLVM `AMDHSAKernelDescriptor.h`) is read as
//! a cross-check and any contradiction is recorded in [`AmdKernel::contradictions`].

use std::collections::HashMap;

use object::elf;
use serde::Serialize;

pub use super::amdgpu_meta::{AmdKernelArg, AmdKernelMetadata, AmdMetadata};
pub use super::amdgpu_target::{
    processor_mach, processor_name, strip_triple, AmdTarget, FeatureSetting,
};

use super::elf::{u16_at, u32_at, u64_at, Elf, SymbolInfo};
use super::ReadError;

/// `EM_AMDGPU`.
pub const EM_AMDGPU: u16 = 224;
/// `ELFOSABI_AMDGPU_HSA`.
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// Note type of the MessagePack metadata (owner "AMDGPU").
pub const NT_AMDGPU_METADATA: u32 = 32;
/// Size of a kernel descriptor.
pub const KERNEL_DESCRIPTOR_SIZE: usize = 64;

/// A whole HSA code object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AmdCodeObject {
    /// 3, 4, 5 or 6 (from `EI_ABIVERSION`: 1 = v3 ... 4 = v6).
    pub code_object_version: u8,
    pub e_flags: u32,
    /// Processor and features from `e_flags`.
    pub target: AmdTarget,
    /// The canonical target id, from `e_flags` (equals `amdhsa.target` less its triple).
    pub target_id: String,
    /// The metadata note; `None` when the object has none (then kernels come from `.kd`
    /// symbols alone).
    pub metadata: Option<AmdMetadata>,
    /// One per kernel, sorted by name.
    pub kernels: Vec<AmdKernel>,
    /// Object-level contradictions (e.g. `e_flags` vs `amdhsa.target`).
    pub contradictions: Vec<String>,
}

/// One kernel: the metadata record plus what its descriptor says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AmdKernel {
    pub name: String,
    /// `<name>.kd`.
    pub symbol: String,
    /// The metadata record (absent when the object has no metadata note).
    pub metadata: Option<AmdKernelMetadata>,
    /// The kernel descriptor, when the `.kd` symbol resolves to 64 bytes of the file.
    pub descriptor: Option<KernelDescriptor>,
    /// Where metadata and descriptor disagree; empty for a consistent object.
    pub contradictions: Vec<String>,
}

impl AmdKernel {
    /// Static LDS bytes: metadata `.group_segment_fixed_size`, else the descriptor's.
    pub fn group_segment_fixed_size(&self) -> Option<u64> {
        self.metadata
            .as_ref()
            .map(|m| m.group_segment_fixed_size)
            .or(self
                .descriptor
                .as_ref()
                .map(|d| u64::from(d.group_segment_fixed_size)))
    }
}

/// The fields of a kernel descriptor (LLVM `amdhsa::kernel_descriptor_t`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelDescriptor {
    /// File offset of the descriptor.
    pub offset: u64,
    pub group_segment_fixed_size: u32,
    pub private_segment_fixed_size: u32,
    pub kernarg_size: u32,
    pub kernel_code_entry_byte_offset: i64,
    pub compute_pgm_rsrc3: u32,
    pub compute_pgm_rsrc1: u32,
    pub compute_pgm_rsrc2: u32,
    pub kernel_code_properties: u16,
    pub kernarg_preload: u16,
}

impl KernelDescriptor {
    /// Parses 64 descriptor bytes.
    pub fn parse(bytes: &[u8], offset: u64) -> Result<Self, ReadError> {
        let short = || ReadError::at("kernel descriptor", offset, "shorter than 64 bytes");
        if bytes.len() < KERNEL_DESCRIPTOR_SIZE {
            return Err(short());
        }
        Ok(KernelDescriptor {
            offset,
            group_segment_fixed_size: u32_at(bytes, 0).ok_or_else(short)?,
            private_segment_fixed_size: u32_at(bytes, 4).ok_or_else(short)?,
            kernarg_size: u32_at(bytes, 8).ok_or_else(short)?,
            kernel_code_entry_byte_offset: u64_at(bytes, 16).ok_or_else(short)? as i64,
            compute_pgm_rsrc3: u32_at(bytes, 44).ok_or_else(short)?,
            compute_pgm_rsrc1: u32_at(bytes, 48).ok_or_else(short)?,
            compute_pgm_rsrc2: u32_at(bytes, 52).ok_or_else(short)?,
            kernel_code_properties: u16_at(bytes, 56).ok_or_else(short)?,
            kernarg_preload: u16_at(bytes, 58).ok_or_else(short)?,
        })
    }

    /// `COMPUTE_PGM_RSRC1.GRANULATED_WORKITEM_VGPR_COUNT` (bits 5:0).
    pub fn granulated_vgprs(&self) -> u32 {
        self.compute_pgm_rsrc1 & 0x3f
    }
    /// `COMPUTE_PGM_RSRC1.GRANULATED_WAVEFRONT_SGPR_COUNT` (bits 9:6; 0 on gfx10+).
    pub fn granulated_sgprs(&self) -> u32 {
        (self.compute_pgm_rsrc1 >> 6) & 0xf
    }
    /// `KERNEL_CODE_PROPERTY_ENABLE_WAVEFRONT_SIZE32` (bit 10).
    pub fn wave32(&self) -> bool {
        self.kernel_code_properties & (1 << 10) != 0
    }
    /// `KERNEL_CODE_PROPERTY_USES_DYNAMIC_STACK` (bit 11).
    pub fn uses_dynamic_stack(&self) -> bool {
        self.kernel_code_properties & (1 << 11) != 0
    }
    /// gfx90a+: `COMPUTE_PGM_RSRC3.ACCUM_OFFSET` (bits 5:0) as a VGPR count: the first AGPR.
    pub fn accum_offset(&self) -> u32 {
        ((self.compute_pgm_rsrc3 & 0x3f) + 1) * 4
    }
}

/// Reads an HSA code object: target from `e_flags`, metadata note, kernel descriptors.
pub fn read_hsaco(data: &[u8]) -> Result<AmdCodeObject, ReadError> {
    let elf = Elf::parse(data)?;
    read_hsaco_elf(&elf)
}

pub(crate) fn read_hsaco_elf(elf: &Elf<'_>) -> Result<AmdCodeObject, ReadError> {
    if elf.machine() != EM_AMDGPU {
        return Err(ReadError::at(
            "ELF header",
            18,
            format!("e_machine is {}, not EM_AMDGPU (224)", elf.machine()),
        ));
    }
    let abi = elf.abi_version();
    if elf.os_abi() != ELFOSABI_AMDGPU_HSA || !(1..=4).contains(&abi) {
        return Err(ReadError::unsupported(
            "AMDGPU code object",
            Some(7),
            format!(
                "EI_OSABI {} / EI_ABIVERSION {abi}: only HSA code objects v3..v6 (OSABI 64, ABI version 1..4) are read",
                elf.os_abi()
            ),
        ));
    }
    let e_flags = elf.flags();
    let target = AmdTarget::from_flags(e_flags, abi);
    let target_id = target.target_id();
    let metadata = read_metadata_note(elf)?;

    let mut contradictions = Vec::new();
    if let Some(t) = metadata.as_ref().and_then(|m| m.target.as_deref()) {
        if strip_triple(t) != target_id {
            contradictions.push(format!(
                "amdhsa.target is `{t}` but e_flags ({e_flags:#x}) say `{target_id}`"
            ));
        }
    }

    let symbols: HashMap<&str, SymbolInfo<'_>> = elf.symbols().map(|s| (s.name, s)).collect();
    let mut kernels = Vec::new();
    match &metadata {
        Some(meta) => {
            for km in &meta.kernels {
                let descriptor = find_descriptor(elf, &symbols, &km.symbol)?;
                let mut k = AmdKernel {
                    name: km.name.clone(),
                    symbol: km.symbol.clone(),
                    metadata: Some(km.clone()),
                    descriptor,
                    contradictions: Vec::new(),
                };
                k.contradictions = cross_check(&target, km, k.descriptor.as_ref());
                kernels.push(k);
            }
        }
        None => {
            for sym in elf.symbols() {
                if let Some(name) = sym.name.strip_suffix(".kd") {
                    if sym.st_type != elf::STT_OBJECT || name.is_empty() {
                        continue;
                    }
                    let descriptor = find_descriptor(elf, &symbols, sym.name)?;
                    kernels.push(AmdKernel {
                        name: name.to_string(),
                        symbol: sym.name.to_string(),
                        metadata: None,
                        descriptor,
                        contradictions: Vec::new(),
                    });
                }
            }
        }
    }
    kernels.sort_by(|a, b| a.name.cmp(&b.name));
    kernels.dedup_by(|a, b| a.name == b.name);

    Ok(AmdCodeObject {
        code_object_version: abi + 2,
        e_flags,
        target,
        target_id,
        metadata,
        kernels,
        contradictions,
    })
}

/// Finds the NT_AMDGPU_METADATA note in the SHT_NOTE sections and decodes it.
fn read_metadata_note(elf: &Elf<'_>) -> Result<Option<AmdMetadata>, ReadError> {
    for (_, name, section) in elf.sections() {
        if elf.sh_type(section) != elf::SHT_NOTE {
            continue;
        }
        let base = elf.sh_offset(section);
        let data = elf.section_data(name, section)?;
        let mut off = 0usize;
        // ELF notes: namesz, descsz, type, name (4-aligned), desc (4-aligned).
        while off < data.len() {
            let bad = |d: &str| {
                ReadError::in_section("ELF note", name, Some(base + off as u64), d.to_string())
            };
            let namesz = u32_at(data, off).ok_or_else(|| bad("truncated note header"))? as usize;
            let descsz =
                u32_at(data, off + 4).ok_or_else(|| bad("truncated note header"))? as usize;
            let n_type = u32_at(data, off + 8).ok_or_else(|| bad("truncated note header"))?;
            let name_start = off + 12;
            let name_end = name_start
                .checked_add(namesz)
                .ok_or_else(|| bad("note namesz overflows"))?;
            let desc_start = align4(name_end).ok_or_else(|| bad("note namesz overflows"))?;
            let desc_end = desc_start
                .checked_add(descsz)
                .ok_or_else(|| bad("note descsz overflows"))?;
            let owner = data
                .get(name_start..name_end)
                .ok_or_else(|| bad("note name runs past the section"))?;
            let desc = data
                .get(desc_start..desc_end)
                .ok_or_else(|| bad("note descriptor runs past the section"))?;
            let owner = owner.strip_suffix(b"\0").unwrap_or(owner);
            if owner == b"AMDGPU" && n_type == NT_AMDGPU_METADATA {
                let meta = super::amdgpu_meta::decode(desc).map_err(|e| {
                    ReadError::in_section(
                        "NT_AMDGPU_METADATA MessagePack",
                        name,
                        Some(base + desc_start as u64),
                        e.to_string(),
                    )
                })?;
                return Ok(Some(meta));
            }
            off = align4(desc_end).ok_or_else(|| bad("note descsz overflows"))?;
        }
    }
    Ok(None)
}

fn align4(v: usize) -> Option<usize> {
    v.checked_add(3).map(|x| x & !3)
}

/// Resolves `<kernel>.kd` to its 64 bytes. `Ok(None)` when the symbol is absent.
fn find_descriptor(
    elf: &Elf<'_>,
    symbols: &HashMap<&str, SymbolInfo<'_>>,
    symbol: &str,
) -> Result<Option<KernelDescriptor>, ReadError> {
    let Some(sym) = symbols.get(symbol) else {
        return Ok(None);
    };
    let bad = |d: String| ReadError::Malformed {
        what: "kernel descriptor",
        section: None,
        offset: Some(sym.value),
        detail: format!("symbol `{symbol}`: {d}"),
    };
    let shndx = usize::from(sym.shndx);
    let section = elf
        .section(shndx)
        .filter(|_| shndx != 0 && sym.shndx < elf::SHN_LORESERVE)
        .ok_or_else(|| {
            bad(format!(
                "section index {shndx} is not a section of the file"
            ))
        })?;
    let sec_name = elf.section_name(section);
    let sec_data = elf.section_data(sec_name, section)?;
    // In executables/shared objects st_value is an address; in relocatables an offset.
    let rel = sym.value.checked_sub(elf.sh_addr(section)).ok_or_else(|| {
        bad(format!(
            "address {:#x} is below its section `{sec_name}`",
            sym.value
        ))
    })?;
    let start = usize::try_from(rel).map_err(|_| bad("offset out of range".into()))?;
    let bytes = start
        .checked_add(KERNEL_DESCRIPTOR_SIZE)
        .and_then(|end| sec_data.get(start..end))
        .ok_or_else(|| {
            bad(format!(
                "64 bytes at {rel:#x} run past section `{sec_name}`"
            ))
        })?;
    KernelDescriptor::parse(bytes, elf.sh_offset(section).saturating_add(rel)).map(Some)
}

/// The VGPR encoding granule of `COMPUTE_PGM_RSRC1` (LLVM `getVGPREncodingGranule`): 8 on
/// gfx90a-class processors and in wave32, 4 otherwise.
pub fn vgpr_encoding_granule(target: &AmdTarget, wave32: bool) -> u32 {
    if target.has_gfx90a_insts() || wave32 {
        8
    } else {
        4
    }
}

/// Descriptor vs metadata. The descriptor's granulated counts are upper bounds of the metadata
/// counts (the compiler may round up for waves-per-EU), so only "metadata needs more than the
/// descriptor allocates" is a contradiction; sizes and mode bits must match exactly.
fn cross_check(
    target: &AmdTarget,
    m: &AmdKernelMetadata,
    d: Option<&KernelDescriptor>,
) -> Vec<String> {
    let mut out = Vec::new();
    let Some(d) = d else {
        out.push(format!("descriptor symbol `{}` not found", m.symbol));
        return out;
    };
    let mut eq = |what: &str, meta: u64, desc: u64| {
        if meta != desc {
            out.push(format!(
                "{what}: metadata says {meta}, descriptor says {desc}"
            ));
        }
    };
    eq(
        "group_segment_fixed_size",
        m.group_segment_fixed_size,
        d.group_segment_fixed_size.into(),
    );
    eq(
        "private_segment_fixed_size",
        m.private_segment_fixed_size,
        d.private_segment_fixed_size.into(),
    );
    eq(
        "kernarg_segment_size",
        m.kernarg_segment_size,
        d.kernarg_size.into(),
    );
    let major = target.gfx_major().unwrap_or(0);
    if major >= 10 {
        let meta_wave32 = m.wavefront_size == 32;
        if meta_wave32 != d.wave32() {
            out.push(format!(
                "wavefront_size: metadata says {}, descriptor's ENABLE_WAVEFRONT_SIZE32 is {}",
                m.wavefront_size,
                d.wave32()
            ));
        }
    } else if major != 0 && m.wavefront_size != 64 {
        out.push(format!(
            "wavefront_size: metadata says {} on a wave64-only gfx{major} target",
            m.wavefront_size
        ));
    }
    if let Some(dynamic) = m.uses_dynamic_stack {
        if dynamic != d.uses_dynamic_stack() {
            out.push(format!(
                "uses_dynamic_stack: metadata says {dynamic}, descriptor's USES_DYNAMIC_STACK is {}",
                d.uses_dynamic_stack()
            ));
        }
    }
    let granule = vgpr_encoding_granule(target, m.wavefront_size == 32);
    let vgpr_capacity = (d.granulated_vgprs() + 1) * granule;
    if m.vgpr_count > vgpr_capacity {
        out.push(format!(
            "vgpr_count: metadata says {}, descriptor allocates at most {vgpr_capacity} (granulated {} x {granule})",
            m.vgpr_count,
            d.granulated_vgprs()
        ));
    }
    if target.has_gfx90a_insts() {
        let agprs = m.agpr_count.unwrap_or(0);
        let arch = m.vgpr_count.saturating_sub(agprs);
        if arch > d.accum_offset() {
            out.push(format!(
                "vgpr_count - agpr_count = {arch} arch VGPRs, above the descriptor's ACCUM_OFFSET {}",
                d.accum_offset()
            ));
        }
    }
    if (1..10).contains(&major) {
        let sgpr_capacity = (d.granulated_sgprs() + 1) * 8;
        if m.sgpr_count > sgpr_capacity {
            out.push(format!(
                "sgpr_count: metadata says {}, descriptor allocates at most {sgpr_capacity}",
                m.sgpr_count
            ));
        }
    }
    out
}

impl AmdCodeObject {
    /// `Err` with the first contradiction, for callers that want a strict read.
    pub fn check(&self) -> Result<(), ReadError> {
        if let Some(c) = self.contradictions.first() {
            return Err(ReadError::Contradiction {
                kernel: "(object)".into(),
                detail: c.clone(),
            });
        }
        for k in &self.kernels {
            if let Some(c) = k.contradictions.first() {
                return Err(ReadError::Contradiction {
                    kernel: k.name.clone(),
                    detail: c.clone(),
                });
            }
        }
        Ok(())
    }

    /// Kernel names, sorted and deduplicated.
    pub fn entries(&self) -> Vec<String> {
        self.kernels.iter().map(|k| k.name.clone()).collect()
    }
}
