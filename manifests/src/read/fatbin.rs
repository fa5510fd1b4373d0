//! NVIDIA fatbin containers: ELF (cubin), PTX and NVVM IR entries, plain, zstd- or
//! LZ4-compressed.
//!
//! The listing must equal `cuobjdump -lelf -lptx` (one cubin per ELF entry with its SM, one PTX
//! per PTX entry), and decompressed entries must be byte-identical to what `cuobjdump -xelf` /
//! `-xptx` extract.

use std::borrow::Cow;

use serde::Serialize;

use super::decompress;
use super::elf::{u16_at, u32_at, u64_at};
use super::{ReadError, FATBIN_MAGIC};

/// Size of the container header.
pub const CONTAINER_HEADER_SIZE: usize = 16;
/// The smallest entry header that holds every field read here.
pub const MIN_ENTRY_HEADER_SIZE: u32 = 64;

/// Entry flags (`u64` at entry offset 0x28).
pub const FLAG_64BIT: u64 = 0x1;
pub const FLAG_DEBUG: u64 = 0x2;
pub const FLAG_LINUX: u64 = 0x10;
pub const FLAG_COMPRESSED_LZ4: u64 = 0x2000;
pub const FLAG_COMPRESSED_ZSTD: u64 = 0x8000;
pub const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
pub const FLAG_FAMILY_SPECIFIC: u64 = 0x20_0000;

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    Ptx,
    Elf,
    NvvmIr,
    Other(u16),
}

impl EntryKind {
    fn from_u16(v: u16) -> Self {
        match v {
            1 => EntryKind::Ptx,
            2 => EntryKind::Elf,
            8 => EntryKind::NvvmIr,
            o => EntryKind::Other(o),
        }
    }
}

/// How an entry's payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    /// Flag 0x8000.
    Zstd,
    /// Flag 0x2000: an LZ4 block (`fatbinary --compress-mode=speed`).
    Lz4,
    /// Method 0 of a compressed clang offload bundle.
    Zlib,
}

/// One entry of a fatbin, borrowing its payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FatbinEntry<'data> {
    /// Offset of the entry header in the input.
    pub offset: u64,
    pub kind: EntryKind,
    pub version: u16,
    pub header_size: u32,
    /// Minor/major: the PTX ISA version for PTX entries (9.5), a format version for ELF ones.
    pub minor: u16,
    pub major: u16,
    pub sm: u32,
    pub flags: u64,
    pub compression: Compression,
    /// Bytes of payload actually used (the compressed size, or the payload size).
    pub stored_size: u64,
    /// Declared uncompressed size (0 when not compressed).
    pub uncompressed_size: u64,
    /// The stored bytes (compressed when `compression != None`).
    #[serde(skip)]
    pub payload: &'data [u8],
}

impl<'data> FatbinEntry<'data> {
    /// `sm_90a` for ELF entries, `compute_90` for PTX and NVVM IR, with the 'a' / 'f' suffix
    /// from the entry flags.
    pub fn target(&self) -> String {
        let suffix = if self.flags & FLAG_ARCH_SPECIFIC != 0 {
            "a"
        } else if self.flags & FLAG_FAMILY_SPECIFIC != 0 {
            "f"
        } else {
            ""
        };
        let prefix = if self.kind == EntryKind::Elf {
            "sm"
        } else {
            "compute"
        };
        format!("{prefix}_{}{suffix}", self.sm)
    }

    /// The entry's bytes, decompressed when needed (bounded by `limit`).
    pub fn data(&self, limit: u64) -> Result<Cow<'data, [u8]>, ReadError> {
        const WHAT: &str = "fatbin entry payload";
        let off = self.offset + u64::from(self.header_size);
        match self.compression {
            Compression::None => Ok(Cow::Borrowed(self.payload)),
            Compression::Zstd => {
                decompress::zstd(WHAT, off, self.payload, Some(self.uncompressed_size), limit)
                    .map(Cow::Owned)
            }
            Compression::Lz4 => {
                decompress::lz4_block(WHAT, off, self.payload, self.uncompressed_size, limit)
                    .map(Cow::Owned)
            }
            Compression::Zlib => {
                decompress::zlib(WHAT, off, self.payload, Some(self.uncompressed_size), limit)
                    .map(Cow::Owned)
            }
        }
    }
}

/// Reads every entry of one or more fatbin containers laid end to end (as in a `.nv_fatbin`
/// section); zero padding between containers is skipped.
pub fn read_fatbin(data: &[u8]) -> Result<Vec<FatbinEntry<'_>>, ReadError> {
    let mut entries = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = data.get(pos..).unwrap_or(&[]);
        if rest.iter().take(8).all(|&b| b == 0) {
            pos += rest.len().min(8);
            continue;
        }
        pos = read_container(data, pos, &mut entries)?;
    }
    if entries.is_empty() && u32_at(data, 0) != Some(FATBIN_MAGIC) {
        return Err(ReadError::at(
            "fatbin container header",
            0,
            "no fatbin magic 0xBA55ED50",
        ));
    }
    Ok(entries)
}

/// Reads one container at `start`; returns the offset just past it.
fn read_container<'data>(
    data: &'data [u8],
    start: usize,
    out: &mut Vec<FatbinEntry<'data>>,
) -> Result<usize, ReadError> {
    const WHAT: &str = "fatbin container header";
    let at = start as u64;
    let short = || ReadError::at(WHAT, at, "truncated (16 bytes needed)");
    let magic = u32_at(data, start).ok_or_else(short)?;
    if magic != FATBIN_MAGIC {
        return Err(ReadError::at(
            WHAT,
            at,
            format!("magic is {magic:#010x}, not 0xba55ed50"),
        ));
    }
    let version = u16_at(data, start + 4).ok_or_else(short)?;
    let header_size = usize::from(u16_at(data, start + 6).ok_or_else(short)?);
    let size = u64_at(data, start + 8).ok_or_else(short)?;
    if version != 1 {
        return Err(ReadError::unsupported(
            WHAT,
            Some(at),
            format!("container version {version} (known: 1)"),
        ));
    }
    if header_size < CONTAINER_HEADER_SIZE {
        return Err(ReadError::at(
            WHAT,
            at,
            format!("header size {header_size} is below 16"),
        ));
    }
    let body_start = start.checked_add(header_size).ok_or_else(short)?;
    let end = usize::try_from(size)
        .ok()
        .and_then(|s| body_start.checked_add(s))
        .filter(|&e| e <= data.len())
        .ok_or_else(|| {
            ReadError::at(
                WHAT,
                at,
                format!(
                    "declares {size} bytes of entries, past the end of the input ({} bytes)",
                    data.len()
                ),
            )
        })?;
    let mut pos = body_start;
    while pos < end {
        let (entry, next) = read_entry(data, pos, end)?;
        out.push(entry);
        pos = next;
    }
    Ok(end)
}

fn read_entry(data: &[u8], pos: usize, end: usize) -> Result<(FatbinEntry<'_>, usize), ReadError> {
    const WHAT: &str = "fatbin entry header";
    let at = pos as u64;
    let bad = |d: String| ReadError::at(WHAT, at, d);
    let field16 = |o: usize| u16_at(data, pos + o).filter(|_| pos + o + 2 <= end);
    let field32 = |o: usize| u32_at(data, pos + o).filter(|_| pos + o + 4 <= end);
    let field64 = |o: usize| u64_at(data, pos + o).filter(|_| pos + o + 8 <= end);
    let trunc = || bad("truncated (64 bytes needed before the container end)".into());
    let kind = EntryKind::from_u16(field16(0).ok_or_else(trunc)?);
    let version = field16(2).ok_or_else(trunc)?;
    let header_size = field32(4).ok_or_else(trunc)?;
    if header_size < MIN_ENTRY_HEADER_SIZE {
        return Err(bad(format!("entry header size {header_size} is below 64")));
    }
    let payload_size = field64(8).ok_or_else(trunc)?;
    let compressed_size = field32(16).ok_or_else(trunc)?;
    let minor = field16(24).ok_or_else(trunc)?;
    let major = field16(26).ok_or_else(trunc)?;
    let sm = field32(28).ok_or_else(trunc)?;
    let flags = field64(40).ok_or_else(trunc)?;
    let uncompressed_size = field64(56).ok_or_else(trunc)?;
    let payload_start = pos
        .checked_add(header_size as usize)
        .filter(|&p| p <= end)
        .ok_or_else(|| {
            bad(format!(
                "entry header size {header_size} runs past the container end"
            ))
        })?;
    let next = usize::try_from(payload_size)
        .ok()
        .and_then(|s| payload_start.checked_add(s))
        .filter(|&n| n <= end)
        .ok_or_else(|| {
            bad(format!(
                "payload size {payload_size} runs past the container end"
            ))
        })?;
    let compression = if flags & FLAG_COMPRESSED_ZSTD != 0 {
        Compression::Zstd
    } else if flags & FLAG_COMPRESSED_LZ4 != 0 {
        Compression::Lz4
    } else {
        Compression::None
    };
    let stored_size = if compression == Compression::None || compressed_size == 0 {
        payload_size
    } else {
        u64::from(compressed_size)
    };
    if stored_size > payload_size {
        return Err(bad(format!(
            "compressed size {stored_size} is above the payload size {payload_size}"
        )));
    }
    let payload = data
        .get(payload_start..payload_start + stored_size as usize)
        .ok_or_else(trunc)?;
    let entry = FatbinEntry {
        offset: at,
        kind,
        version,
        header_size,
        minor,
        major,
        sm,
        flags,
        compression,
        stored_size,
        uncompressed_size,
        payload,
    };
    Ok((entry, next))
}
