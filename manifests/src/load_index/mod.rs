//! The load index `manifest.kbi`: what the run-time loader needs from a manifest, in a
//! fixed-layout binary file it can use without parsing JSON.
//!
//! The build writes it beside `manifest.json`, after it: it is a cache of the manifest, bound
//! to the manifest's content and to its own. The header records the manifest's length,
//! mtime, ctime, inode and blake3, and the blake3 of the index's own bytes: its head (what
//! selection and loading read) and its resource blobs, each checked before it is used. A
//! loader uses the index only when its head digest holds (a damaged or edited index is never
//! trusted whole) and the manifest is the stamped file: the same length, mtime, ctime and
//! inode (any write or rename changes the ctime, and no program can set it back), or else the
//! same bytes (blake3, for a copy). Anything else: the loader reads the JSON and encodes the
//! same index in memory ([`encode`]), so that one reader serves both. Opening is on the load
//! path of every process: selecting and loading a kernel reads fixed-layout records in place:
//! no allocation, no decoding.
//!
//! Layout (little-endian). A span is `(u32 offset, u32 length)` into the string or blob
//! section; an absent optional string has offset `u32::MAX`.
//!
//! ```text
//! header      160 B  magic "KBLOADIX", u32 version (4), u32 kernels, u32 objects,
//!                    u32 entries, u32 strings length, u32 blobs length,
//!                    u64 manifest length, i64 manifest mtime (ns since the epoch),
//!                    manifest blake3 (32 bytes), i64 manifest ctime (ns), u64 manifest
//!                    inode, blake3 of the head after the header (kernels, objects,
//!                    entries, strings; 32 bytes), blake3 of the blobs (32 bytes)
//! kernels     8 B each     name span, in the manifest's kernel order
//! objects     144 B each   kernel, variant, target, path, format spans; sha256 (32 raw
//!                          bytes); u64 size; u16 PTX ISA major, u16 minor (0xffff: none);
//!                          u32 first entry, u32 entry count; resources span (blob: the
//!                          per-entry resource records as MessagePack); blake3 (32 raw
//!                          bytes); u32 flags (bit 0: the manifest records the blake3;
//!                          bit 1: the index carries launch parameters); params span
//!                          (blob: the entries' launch parameters, see below; zero when
//!                          bit 1 is clear)
//! entries     48 B each    entry-symbol span; u32 kind (0 no record, 1 CUDA, 2 AMD, 3 PTX);
//!                          u32 registers; u32 max threads (u32::MAX: none); u32 reserved;
//!                          u64 LDS bytes; u64 reserved shared bytes; u64 scratch bytes
//! strings, blobs
//! ```
//!
//! Launch parameters (version 4): per object, one MessagePack blob in the blob section, an
//! array with one item per entry in entry order: nil when the manifest records no parameters
//! for that entry, else `[hidden count, [param, ...]]` with only the caller-visible
//! parameters, each `[index, offset, size, align|nil, kind (0 pointer, 1 value, 2 unknown),
//! name|nil, type|nil]`. Hidden parameters (AMD `hidden_*`, which the runtime fills) are only
//! counted: a launch never passes them. They lie in the blobs, not the head, so that opening
//! and loading never read them; a launch decodes its entry's on first use ([`decode_params`]).
//! An object whose manifest record has no `params` (a manifest written before they were
//! recorded) has bit 1 clear.
//!
//! Version 3 (the same layout, without launch parameters: its params span is zero, bit 1
//! never set) is still read: its objects carry no parameters, so launches through it are
//! unchecked until the next build rewrites the file. Versions 1 (no blake3, no per-entry
//! figures) and 2 (no digest of its own, bound to the manifest's length and mtime only) are
//! refused with [`LoadIndexError::Version`]: a loader then reads the JSON, and the next build
//! rewrites the file.
//!
//! The reader is a pure function over `&[u8]`: section sizes are checked against the data,
//! every span is checked (and its UTF-8) when it is read, [`LoadIndex::validate`] checks them
//! all once, and a damaged file is an error, never a panic.

mod blobs;
mod encode;
mod read;
#[cfg(test)]
mod tests;

pub use blobs::{decode_params, decode_resources};
pub use encode::encode;
pub use read::{blobs_intact, head_intact, head_len, IndexObject, LoadIndex};

use crate::params::Param;
use crate::resources::Resources;

/// File name of the load index, beside `manifest.json`.
pub const LOAD_INDEX_FILE: &str = "manifest.kbi";
const MAGIC: &[u8; 8] = b"KBLOADIX";
/// The layout version this crate writes (and reads).
pub const VERSION: u32 = 4;
/// The oldest layout version this crate reads (version 3: no launch parameters).
pub const MIN_VERSION: u32 = 3;
/// Bytes of the header, which say how long the rest is ([`head_len`]).
pub const HEADER_LEN: usize = 160;
const SPAN: usize = 8;
const OBJECT: usize = 144;
const ENTRY: usize = 48;
const NONE: u32 = u32::MAX;
const FLAG_BLAKE3: u32 = 1;
const FLAG_PARAMS: u32 = 2;

/// Where the header records the blake3 of the head (after the header) and of the blobs.
const HEAD_DIGEST_AT: usize = 96;
const BLOBS_DIGEST_AT: usize = 128;

/// Why a load index cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadIndexError {
    #[error("not a kbuild load index (no KBLOADIX magic)")]
    Magic,
    #[error("load index version {0} is not supported (this kbuild reads versions {MIN_VERSION} to {VERSION})")]
    Version(u32),
    #[error("load index is damaged: {0}")]
    Damaged(String),
    #[error("the manifest is too large for a load index ({0})")]
    TooLarge(&'static str),
    #[error("object {path}: {field} `{value}` is not 64 hex digits")]
    Digest {
        path: String,
        field: &'static str,
        value: String,
    },
    #[error("object {path}: resource records do not encode: {cause}")]
    Encode { path: String, cause: String },
    #[error("object {path}: launch parameters do not encode: {cause}")]
    EncodeParams { path: String, cause: String },
}

/// The manifest file a load index was written for; also how the loader tells whether an
/// index it holds in memory still stands for the manifest on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestStamp {
    pub len: u64,
    /// Modification time, ns since the Unix epoch (-1: unknown).
    pub mtime_ns: i64,
    /// Status-change time, ns since the Unix epoch (-1: unknown). Every write, rename or
    /// `touch` moves it, and unlike the mtime it cannot be set back.
    pub ctime_ns: i64,
    /// Inode number (0: unknown).
    pub ino: u64,
    /// blake3 of the manifest's bytes.
    pub blake3: [u8; 32],
}

impl ManifestStamp {
    /// The stamp of a manifest file from its metadata and bytes.
    pub fn of(meta: &std::fs::Metadata, bytes: &[u8]) -> ManifestStamp {
        let (ctime_ns, ino) = ctime_ino(meta);
        ManifestStamp {
            len: meta.len(),
            mtime_ns: mtime_ns(meta),
            ctime_ns,
            ino,
            blake3: *blake3::hash(bytes).as_bytes(),
        }
    }

    /// Whether `meta` is the stamped file, unwritten since: the same length, mtime, ctime and
    /// inode, all known.
    pub fn same_file(&self, meta: &std::fs::Metadata) -> bool {
        let (ctime_ns, ino) = ctime_ino(meta);
        self.len == meta.len()
            && self.mtime_ns == mtime_ns(meta)
            && self.mtime_ns >= 0
            && self.ctime_ns == ctime_ns
            && self.ctime_ns >= 0
            && self.ino == ino
            && self.ino != 0
    }

    /// Whether `bytes` are the stamped file's content.
    pub fn same_content(&self, bytes: &[u8]) -> bool {
        self.len == bytes.len() as u64 && *blake3::hash(bytes).as_bytes() == self.blake3
    }
}

#[cfg(unix)]
fn ctime_ino(meta: &std::fs::Metadata) -> (i64, u64) {
    use std::os::unix::fs::MetadataExt;
    let ns = meta
        .ctime()
        .checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(meta.ctime_nsec()))
        .filter(|n| *n >= 0)
        .unwrap_or(-1);
    (ns, meta.ino())
}

#[cfg(not(unix))]
fn ctime_ino(_: &std::fs::Metadata) -> (i64, u64) {
    (-1, 0)
}

/// What the loader compares with the runtime's figures after loading an entry, as the
/// manifest's resource record says (the fixed-layout copy in the index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadFigures {
    /// No resource record for the entry.
    #[default]
    None,
    Cuda {
        registers: u32,
        lds_bytes: u64,
        reserved_shared_bytes: u64,
        scratch_bytes: u64,
        max_threads: Option<u32>,
    },
    Amd {
        lds_bytes: u64,
        scratch_bytes: u64,
        max_threads: u32,
    },
    /// PTX: JIT-compiled by the driver, no build-time figures.
    Ptx,
}

impl LoadFigures {
    /// The figures of a resource record.
    pub fn of(record: Option<&Resources>) -> LoadFigures {
        match record {
            None => LoadFigures::None,
            Some(Resources::Cuda(r)) => LoadFigures::Cuda {
                registers: r.registers,
                lds_bytes: r.lds_bytes,
                reserved_shared_bytes: r.reserved_shared_bytes,
                scratch_bytes: r.scratch_bytes,
                max_threads: r.max_threads,
            },
            Some(Resources::Amd(r)) => LoadFigures::Amd {
                lds_bytes: r.lds_bytes,
                scratch_bytes: r.scratch_bytes,
                max_threads: r.max_threads,
            },
            Some(Resources::Ptx(_)) => LoadFigures::Ptx,
        }
    }

    /// The manifest's launch bound, when it has one.
    pub fn max_threads(&self) -> Option<u32> {
        match *self {
            LoadFigures::Cuda { max_threads, .. } => max_threads,
            LoadFigures::Amd { max_threads, .. } => Some(max_threads),
            LoadFigures::None | LoadFigures::Ptx => None,
        }
    }
}

/// One entry symbol of an object and its figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry<'a> {
    pub name: &'a str,
    pub figures: LoadFigures,
}

/// The launch parameters of one entry as the index carries them: the caller-visible ones, in
/// order, and how many hidden ones the runtime passes after them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntryParams {
    /// What a caller passes (never `hidden`).
    pub params: Vec<Param>,
    /// Arguments the runtime fills (AMDGPU `hidden_*`): counted, not carried.
    pub hidden: u32,
}

impl EntryParams {
    /// The caller-visible parameters of a manifest's list, and the count of the hidden ones.
    pub fn of(params: &[Param]) -> EntryParams {
        EntryParams {
            params: params.iter().filter(|p| !p.hidden).cloned().collect(),
            hidden: u32::try_from(params.iter().filter(|p| p.hidden).count()).unwrap_or(u32::MAX),
        }
    }
}

/// One parameter on the wire: index, offset, size, align, kind, name, type.
type WireParam = (
    u32,
    u64,
    u64,
    Option<u64>,
    u8,
    Option<String>,
    Option<String>,
);

/// Modification time in ns since the epoch; -1 when unknown.
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .unwrap_or(-1)
}

/// 64 hex digits → 32 bytes.
pub fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let b = hex.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let nib = |c: u8| (c as char).to_digit(16);
        out[i] = u8::try_from(nib(pair[0])? * 16 + nib(pair[1])?).ok()?;
    }
    Some(out)
}

/// Lowercase hex of a 32-byte digest, into `buf` (no allocation: the load path passes the
/// sha256 to its object source this way).
pub fn hex_into<'b>(digest: &[u8; 32], buf: &'b mut [u8; 64]) -> &'b str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in digest.iter().enumerate() {
        buf[2 * i] = HEX[usize::from(b >> 4)];
        buf[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    // Only ASCII hex digits were written.
    std::str::from_utf8(buf).unwrap_or_default()
}
