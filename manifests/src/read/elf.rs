//! A thin, bounds-checked view of an ELF64 file on top of the `object` crate's low-level API,
//! shared by the AMDGPU, cubin and host-ELF readers.

use object::elf;
use object::read::elf::{FileHeader, SectionHeader, SectionTable, Sym, SymbolTable};
use object::Endianness;

use super::ReadError;

pub(crate) type Header = elf::FileHeader64<Endianness>;
pub(crate) type Section = elf::SectionHeader64<Endianness>;

/// `\x7fELF`.
pub(crate) const MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// Index of the class byte in `e_ident`.
const EI_CLASS: usize = 4;

/// A parsed ELF64 file: header, section table and (optional) symbol table, all borrowing the
/// input.
pub(crate) struct Elf<'data> {
    pub data: &'data [u8],
    pub header: &'data Header,
    pub endian: Endianness,
    pub sections: SectionTable<'data, Header>,
    pub symbols: SymbolTable<'data, Header>,
}

/// One symbol, with its name resolved.
#[derive(Debug, Clone)]
pub(crate) struct SymbolInfo<'data> {
    pub index: usize,
    pub name: &'data str,
    pub value: u64,
    pub shndx: u16,
    pub st_type: u8,
    pub other: u8,
}

impl<'data> Elf<'data> {
    pub fn parse(data: &'data [u8]) -> Result<Self, ReadError> {
        if data.get(..4) != Some(&MAGIC[..]) {
            return Err(ReadError::at("ELF header", 0, "no ELF magic"));
        }
        if data.get(EI_CLASS) != Some(&elf::ELFCLASS64) {
            return Err(ReadError::unsupported(
                "ELF class",
                Some(EI_CLASS as u64),
                "only 64-bit ELF files are read",
            ));
        }
        let header = Header::parse(data).map_err(|e| ReadError::elf("ELF header", Some(0), e))?;
        let endian = header
            .endian()
            .map_err(|e| ReadError::elf("ELF header", Some(0), e))?;
        let sections = header.sections(endian, data).map_err(|e| {
            let (shoff, shnum) = (header.e_shoff(endian), header.e_shnum(endian));
            ReadError::at(
                "ELF section header table",
                shoff,
                format!(
                    "{e} ({shnum} headers at {shoff:#x}; the input is {} bytes)",
                    data.len()
                ),
            )
        })?;
        let symbols = sections
            .symbols(endian, data, elf::SHT_SYMTAB)
            .map_err(|e| ReadError::elf("ELF symbol table", None, e))?;
        Ok(Elf {
            data,
            header,
            endian,
            sections,
            symbols,
        })
    }

    pub fn machine(&self) -> u16 {
        self.header.e_machine(self.endian)
    }

    pub fn flags(&self) -> u32 {
        self.header.e_flags(self.endian)
    }

    pub fn os_abi(&self) -> u8 {
        self.header.e_ident().os_abi
    }

    pub fn abi_version(&self) -> u8 {
        self.header.e_ident().abi_version
    }

    /// Sections with their index and name (a section whose name cannot be read is named "").
    pub fn sections(&self) -> impl Iterator<Item = (usize, &'data str, &'data Section)> + '_ {
        self.sections
            .iter()
            .enumerate()
            .map(move |(i, s)| (i, self.section_name(s), s))
    }

    pub fn section_name(&self, section: &Section) -> &'data str {
        self.sections
            .section_name(self.endian, section)
            .ok()
            .and_then(|n| std::str::from_utf8(n).ok())
            .unwrap_or("")
    }

    pub fn section(&self, index: usize) -> Option<&'data Section> {
        self.sections.section(object::SectionIndex(index)).ok()
    }

    pub fn section_by_name(&self, name: &str) -> Option<(usize, &'data Section)> {
        self.sections()
            .find(|(_, n, _)| *n == name)
            .map(|(i, _, s)| (i, s))
    }

    /// The bytes of a section (empty for NOBITS), bounds-checked.
    pub fn section_data(&self, name: &str, section: &Section) -> Result<&'data [u8], ReadError> {
        section.data(self.endian, self.data).map_err(|e| {
            ReadError::in_section(
                "section contents",
                name,
                Some(section.sh_offset(self.endian)),
                e.to_string(),
            )
        })
    }

    pub fn sh_type(&self, s: &Section) -> u32 {
        s.sh_type(self.endian)
    }
    pub fn sh_size(&self, s: &Section) -> u64 {
        s.sh_size(self.endian)
    }
    pub fn sh_offset(&self, s: &Section) -> u64 {
        s.sh_offset(self.endian)
    }
    pub fn sh_info(&self, s: &Section) -> u32 {
        s.sh_info(self.endian)
    }
    pub fn sh_addr(&self, s: &Section) -> u64 {
        s.sh_addr(self.endian)
    }

    /// Symbols of `.symtab` with resolved names (symbols whose name is unreadable are skipped).
    pub fn symbols(&self) -> impl Iterator<Item = SymbolInfo<'data>> + '_ {
        self.symbols
            .iter()
            .enumerate()
            .filter_map(move |(index, sym)| {
                let name = self.symbols.symbol_name(self.endian, sym).ok()?;
                let name = std::str::from_utf8(name).ok()?;
                Some(SymbolInfo {
                    index,
                    name,
                    value: sym.st_value(self.endian),
                    shndx: sym.st_shndx(self.endian),
                    st_type: sym.st_type(),
                    other: sym.st_other(),
                })
            })
    }
}

/// Reads a little-endian u16 at `off`, if in bounds.
pub(crate) fn u16_at(data: &[u8], off: usize) -> Option<u16> {
    let b = data.get(off..off.checked_add(2)?)?;
    Some(u16::from_le_bytes(b.try_into().ok()?))
}

/// Reads a little-endian u32 at `off`, if in bounds.
pub(crate) fn u32_at(data: &[u8], off: usize) -> Option<u32> {
    let b = data.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// Reads a little-endian u64 at `off`, if in bounds.
pub(crate) fn u64_at(data: &[u8], off: usize) -> Option<u64> {
    let b = data.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}
