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

use std::collections::BTreeMap;

use crate::manifest::{Manifest, ObjectRecord};
use crate::params::{Param, ParamKind};
use crate::resources::Resources;
use crate::target::Version;

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

fn kind_code(k: ParamKind) -> u8 {
    match k {
        ParamKind::Pointer => 0,
        ParamKind::Value => 1,
        ParamKind::Unknown => 2,
    }
}

/// The params blob of `o`: per entry in entry order, nil or `[hidden, [param...]]`.
fn encode_params(o: &ObjectRecord) -> Result<Vec<u8>, LoadIndexError> {
    let wire: Vec<Option<(u32, Vec<WireParam>)>> = o
        .entries
        .iter()
        .map(|e| {
            o.params.get(e).map(|list| {
                let ep = EntryParams::of(list);
                let params = ep
                    .params
                    .into_iter()
                    .map(|p| {
                        (
                            p.index,
                            p.offset,
                            p.size,
                            p.align,
                            kind_code(p.kind),
                            p.name,
                            p.type_name,
                        )
                    })
                    .collect();
                (ep.hidden, params)
            })
        })
        .collect();
    rmp_serde::to_vec(&wire).map_err(|e| LoadIndexError::EncodeParams {
        path: o.path.clone(),
        cause: e.to_string(),
    })
}

/// The launch parameters of object `path`'s entries (in entry order; `None` for an entry the
/// manifest records none for) from its params blob.
pub fn decode_params(bytes: &[u8], path: &str) -> Result<Vec<Option<EntryParams>>, LoadIndexError> {
    use serde::Deserialize;
    let damaged =
        |e: String| LoadIndexError::Damaged(format!("object {path}: launch parameters: {e}"));
    // Three levels of arrays in the blob; the cap keeps a hostile blob from recursing.
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(8);
    let wire = Vec::<Option<(u32, Vec<WireParam>)>>::deserialize(&mut de)
        .map_err(|e| damaged(e.to_string()))?;
    wire.into_iter()
        .map(|entry| {
            entry
                .map(|(hidden, list)| {
                    let params = list
                        .into_iter()
                        .map(|(index, offset, size, align, kind, name, type_name)| {
                            let kind = match kind {
                                0 => ParamKind::Pointer,
                                1 => ParamKind::Value,
                                2 => ParamKind::Unknown,
                                k => return Err(damaged(format!("parameter kind {k} is unknown"))),
                            };
                            Ok(Param {
                                index,
                                offset,
                                size,
                                align,
                                kind,
                                name,
                                type_name,
                                hidden: false,
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(EntryParams { params, hidden })
                })
                .transpose()
        })
        .collect()
}

/// Encode the load index of `manifest`, whose `manifest.json` has `stamp`.
pub fn encode(manifest: &Manifest, stamp: ManifestStamp) -> Result<Vec<u8>, LoadIndexError> {
    let mut strings = StringTable::default();
    let mut blobs: Vec<u8> = Vec::new();
    let mut entries: Vec<u8> = Vec::new();
    let mut entry_count = 0usize;
    let mut kernels = Vec::with_capacity(manifest.kernels.len());
    for k in &manifest.kernels {
        kernels.push(strings.span(k)?);
    }
    let digest = |o: &ObjectRecord, field: &'static str, value: &str| {
        parse_sha256(value).ok_or_else(|| LoadIndexError::Digest {
            path: o.path.clone(),
            field,
            value: value.to_string(),
        })
    };
    let mut objects = Vec::with_capacity(manifest.objects.len() * OBJECT);
    for o in &manifest.objects {
        let sha = digest(o, "sha256", &o.sha256)?;
        let blake3 = match &o.blake3 {
            Some(b) => Some(digest(o, "blake3", b)?),
            None => None,
        };
        let first_entry = u32_of(entry_count, "entries")?;
        for e in &o.entries {
            put_span(&mut entries, strings.span(e)?);
            put_figures(&mut entries, LoadFigures::of(o.resources.get(e)));
            entry_count += 1;
        }
        let blob = rmp_serde::to_vec_named(&o.resources).map_err(|e| LoadIndexError::Encode {
            path: o.path.clone(),
            cause: e.to_string(),
        })?;
        let blob_span = [u32_of(blobs.len(), "blobs")?, u32_of(blob.len(), "blobs")?];
        blobs.extend_from_slice(&blob);
        let params_span = if o.params.is_empty() {
            [0, 0]
        } else {
            let blob = encode_params(o)?;
            let span = [u32_of(blobs.len(), "blobs")?, u32_of(blob.len(), "blobs")?];
            blobs.extend_from_slice(&blob);
            span
        };
        let ptx = crate::compat::parse_version(&ptx_isa_text(o).unwrap_or_default());
        let variant = match &o.variant {
            Some(v) => strings.span(v)?,
            None => [NONE, 0],
        };
        for span in [
            strings.span(&o.kernel)?,
            variant,
            strings.span(&o.target)?,
            strings.span(&o.path)?,
            strings.span(&o.format)?,
        ] {
            put_span(&mut objects, span);
        }
        objects.extend_from_slice(&sha);
        objects.extend_from_slice(&o.size.to_le_bytes());
        let (major, minor) = match ptx {
            Some(Version(a, b)) => (
                u16::try_from(a).unwrap_or(u16::MAX - 1),
                u16::try_from(b).unwrap_or(u16::MAX - 1),
            ),
            None => (u16::MAX, u16::MAX),
        };
        objects.extend_from_slice(&major.to_le_bytes());
        objects.extend_from_slice(&minor.to_le_bytes());
        objects.extend_from_slice(&first_entry.to_le_bytes());
        objects.extend_from_slice(&u32_of(o.entries.len(), "entries")?.to_le_bytes());
        put_span(&mut objects, blob_span);
        objects.extend_from_slice(&blake3.unwrap_or([0; 32]));
        let mut flags = if blake3.is_some() { FLAG_BLAKE3 } else { 0 };
        if !o.params.is_empty() {
            flags |= FLAG_PARAMS;
        }
        objects.extend_from_slice(&flags.to_le_bytes());
        put_span(&mut objects, params_span);
    }
    let mut out = Vec::with_capacity(
        HEADER_LEN
            + kernels.len() * SPAN
            + objects.len()
            + entries.len()
            + strings.data.len()
            + blobs.len(),
    );
    out.extend_from_slice(MAGIC);
    for n in [
        VERSION,
        u32_of(kernels.len(), "kernels")?,
        u32_of(manifest.objects.len(), "objects")?,
        u32_of(entry_count, "entries")?,
        u32_of(strings.data.len(), "strings")?,
        u32_of(blobs.len(), "blobs")?,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&stamp.len.to_le_bytes());
    out.extend_from_slice(&stamp.mtime_ns.to_le_bytes());
    out.extend_from_slice(&stamp.blake3);
    out.extend_from_slice(&stamp.ctime_ns.to_le_bytes());
    out.extend_from_slice(&stamp.ino.to_le_bytes());
    out.extend_from_slice(&[0u8; 64]);
    for k in kernels {
        put_span(&mut out, k);
    }
    out.extend_from_slice(&objects);
    out.extend_from_slice(&entries);
    out.extend_from_slice(strings.data.as_bytes());
    out.extend_from_slice(&blobs);
    let head = out.len() - blobs.len();
    let head_digest = *blake3::hash(&out[HEADER_LEN..head]).as_bytes();
    let blobs_digest = *blake3::hash(&out[head..]).as_bytes();
    out[HEAD_DIGEST_AT..HEAD_DIGEST_AT + 32].copy_from_slice(&head_digest);
    out[BLOBS_DIGEST_AT..BLOBS_DIGEST_AT + 32].copy_from_slice(&blobs_digest);
    Ok(out)
}

/// Modification time in ns since the epoch; -1 when unknown.
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_nanos()).ok())
        .unwrap_or(-1)
}

fn ptx_isa_text(o: &ObjectRecord) -> Option<String> {
    o.resources.values().find_map(|r| match r {
        Resources::Ptx(p) => Some(p.ptx_isa.clone()),
        _ => None,
    })
}

fn put_span(out: &mut Vec<u8>, [off, len]: [u32; 2]) {
    out.extend_from_slice(&off.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
}

fn put_figures(out: &mut Vec<u8>, f: LoadFigures) {
    let (kind, registers, max_threads, lds, reserved, scratch) = match f {
        LoadFigures::None => (0u32, 0, None, 0, 0, 0),
        LoadFigures::Cuda {
            registers,
            lds_bytes,
            reserved_shared_bytes,
            scratch_bytes,
            max_threads,
        } => (
            1,
            registers,
            max_threads,
            lds_bytes,
            reserved_shared_bytes,
            scratch_bytes,
        ),
        LoadFigures::Amd {
            lds_bytes,
            scratch_bytes,
            max_threads,
        } => (2, 0, Some(max_threads), lds_bytes, 0, scratch_bytes),
        LoadFigures::Ptx => (3, 0, None, 0, 0, 0),
    };
    for n in [kind, registers, max_threads.unwrap_or(NONE), 0] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    for n in [lds, reserved, scratch] {
        out.extend_from_slice(&n.to_le_bytes());
    }
}

fn u32_of(n: usize, what: &'static str) -> Result<u32, LoadIndexError> {
    u32::try_from(n).map_err(|_| LoadIndexError::TooLarge(what))
}

/// Strings, each stored once.
#[derive(Default)]
struct StringTable {
    data: String,
    seen: BTreeMap<String, [u32; 2]>,
}

impl StringTable {
    fn span(&mut self, s: &str) -> Result<[u32; 2], LoadIndexError> {
        if let Some(span) = self.seen.get(s) {
            return Ok(*span);
        }
        let span = [
            u32_of(self.data.len(), "strings")?,
            u32_of(s.len(), "strings")?,
        ];
        self.data.push_str(s);
        self.seen.insert(s.to_string(), span);
        Ok(span)
    }
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

/// A load index, read in place.
#[derive(Debug, Clone, Copy)]
pub struct LoadIndex<'a> {
    data: &'a [u8],
    version: u32,
    kernels: u32,
    objects: u32,
    entries: u32,
    stamp: ManifestStamp,
    objects_at: usize,
    entries_at: usize,
    /// The string section; each span's UTF-8 is checked when it is read, so that parsing is
    /// O(1) (the loader parses on every access instead of keeping a self-borrowing view).
    strings: &'a [u8],
    /// Empty when only the head was read.
    blobs: &'a [u8],
    blobs_at: u64,
    blobs_len: u32,
}

/// One object of a [`LoadIndex`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexObject<'a> {
    pub kernel: &'a str,
    pub variant: Option<&'a str>,
    pub target: &'a str,
    pub path: &'a str,
    pub format: &'a str,
    pub sha256: &'a [u8; 32],
    /// `None` for a manifest written before objects recorded their blake3.
    pub blake3: Option<&'a [u8; 32]>,
    pub size: u64,
    pub ptx_isa: Option<Version>,
    first_entry: u32,
    entry_count: u32,
    /// Offset and length of the resource blob within the blob section.
    resources: (u32, u32),
    /// Offset and length of the launch parameters' blob within the blob section; `None` when
    /// the index carries none for this object (a version 3 index, a manifest without them).
    params: Option<(u32, u32)>,
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    d.get(at..at.checked_add(4)?)?
        .try_into()
        .ok()
        .map(u32::from_le_bytes)
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    d.get(at..at.checked_add(8)?)?
        .try_into()
        .ok()
        .map(u64::from_le_bytes)
}

/// Where the header records the blake3 of the head (after the header) and of the blobs.
const HEAD_DIGEST_AT: usize = 96;
const BLOBS_DIGEST_AT: usize = 128;

/// Whether `head` (an index's first [`head_len`] bytes, or more) matches the head digest its
/// header records: the check that makes an index trusted only as written (a record swapped,
/// a byte flipped: refused). O(head).
pub fn head_intact(data: &[u8]) -> bool {
    let Ok(head) = head_len(data.get(..HEADER_LEN).unwrap_or_default()) else {
        return false;
    };
    let Some(body) = usize::try_from(head)
        .ok()
        .and_then(|h| data.get(HEADER_LEN..h))
    else {
        return false;
    };
    data.get(HEAD_DIGEST_AT..HEAD_DIGEST_AT + 32) == Some(blake3::hash(body).as_bytes().as_slice())
}

/// Whether `blobs` (the index's blob section) match the blob digest in `header`.
pub fn blobs_intact(header: &[u8], blobs: &[u8]) -> bool {
    header.get(BLOBS_DIGEST_AT..BLOBS_DIGEST_AT + 32)
        == Some(blake3::hash(blobs).as_bytes().as_slice())
}

fn digest_at(d: &[u8], at: usize) -> Option<&[u8; 32]> {
    d.get(at..at.checked_add(32)?)?.try_into().ok()
}

impl<'a> LoadIndex<'a> {
    /// (head length, total length) from the header.
    fn parse_header(data: &[u8]) -> Result<(u64, u64), LoadIndexError> {
        if data.get(..8) != Some(MAGIC.as_slice()) {
            return Err(LoadIndexError::Magic);
        }
        let short =
            || LoadIndexError::Damaged(format!("{} bytes is shorter than its header", data.len()));
        let field = |i: usize| u32_at(data, 8 + 4 * i).map(u64::from).ok_or_else(short);
        let version = field(0)?;
        if !(u64::from(MIN_VERSION)..=u64::from(VERSION)).contains(&version) {
            return Err(LoadIndexError::Version(version as u32));
        }
        if data.len() < HEADER_LEN {
            return Err(short());
        }
        let head = HEADER_LEN as u64
            + field(1)? * SPAN as u64
            + field(2)? * OBJECT as u64
            + field(3)? * ENTRY as u64
            + field(4)?;
        Ok((head, head + field(5)?))
    }

    /// Check the header and section sizes (records are checked as they are read, or all at
    /// once by [`Self::validate`]). `data` is the whole file, or its head ([`head_len`]
    /// bytes: everything but the resource blobs). O(1).
    pub fn parse(data: &'a [u8]) -> Result<LoadIndex<'a>, LoadIndexError> {
        let (head, total) = LoadIndex::parse_header(data)?;
        if total != data.len() as u64 && head != data.len() as u64 {
            return Err(LoadIndexError::Damaged(format!(
                "the header describes {total} bytes, the file has {}",
                data.len()
            )));
        }
        // parse_header checked that the header is all there, and `head` fits the slice, so
        // every read and offset below is in range.
        let field = |i: usize| u32_at(data, 8 + 4 * i).unwrap_or(0);
        let (version, kernels, objects, entries, strings_len, blobs_len) =
            (field(0), field(1), field(2), field(3), field(4), field(5));
        let range_err = || LoadIndexError::Damaged("section sizes out of range".into());
        let blake3 = *digest_at(data, 48).ok_or_else(range_err)?;
        let stamp = ManifestStamp {
            len: u64_at(data, 32).unwrap_or(0),
            mtime_ns: u64_at(data, 40).unwrap_or(0) as i64,
            blake3,
            ctime_ns: u64_at(data, 80).unwrap_or(0) as i64,
            ino: u64_at(data, 88).unwrap_or(0),
        };
        let objects_at = HEADER_LEN + kernels as usize * SPAN;
        let entries_at = objects_at + objects as usize * OBJECT;
        let strings_at = entries_at + entries as usize * ENTRY;
        let blobs_at = strings_at + strings_len as usize;
        Ok(LoadIndex {
            data,
            version,
            kernels,
            objects,
            entries,
            stamp,
            objects_at,
            entries_at,
            strings: data.get(strings_at..blobs_at).ok_or_else(range_err)?,
            blobs: data.get(blobs_at..).ok_or_else(range_err)?,
            blobs_at: blobs_at as u64,
            blobs_len,
        })
    }

    /// An index of nothing (no kernels, no objects).
    pub fn empty() -> LoadIndex<'static> {
        LoadIndex {
            data: &[],
            version: VERSION,
            kernels: 0,
            objects: 0,
            entries: 0,
            stamp: ManifestStamp {
                len: 0,
                mtime_ns: -1,
                ctime_ns: -1,
                ino: 0,
                blake3: [0; 32],
            },
            objects_at: HEADER_LEN,
            entries_at: HEADER_LEN,
            strings: &[],
            blobs: &[],
            blobs_at: HEADER_LEN as u64,
            blobs_len: 0,
        }
    }

    /// The layout version of the file ([`MIN_VERSION`]..=[`VERSION`]).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether objects of this index can carry launch parameters (version 4 on); a version 3
    /// index carries none, and launches through it are unchecked.
    pub fn carries_params(&self) -> bool {
        self.version >= 4
    }

    /// The manifest this index was written for.
    pub fn stamp(&self) -> ManifestStamp {
        self.stamp
    }

    pub fn object_count(&self) -> usize {
        self.objects as usize
    }

    pub fn kernel_count(&self) -> usize {
        self.kernels as usize
    }

    // Error messages are built only on failure: this runs for every record a load looks at.
    fn span(
        &self,
        at: usize,
        what: &dyn Fn() -> String,
    ) -> Result<Option<&'a str>, LoadIndexError> {
        let damaged =
            || LoadIndexError::Damaged(format!("{}: span at byte {at} is out of range", what()));
        let off = u32_at(self.data, at).ok_or_else(damaged)?;
        let len = u32_at(self.data, at + 4).ok_or_else(damaged)?;
        if off == NONE {
            return Ok(None);
        }
        let bytes = self
            .strings
            .get(off as usize..off as usize + len as usize)
            .ok_or_else(damaged)?;
        std::str::from_utf8(bytes).map(Some).map_err(|e| {
            LoadIndexError::Damaged(format!("{}: the string is not UTF-8: {e}", what()))
        })
    }

    fn string(&self, at: usize, what: &dyn Fn() -> String) -> Result<&'a str, LoadIndexError> {
        self.span(at, what)?
            .ok_or_else(|| LoadIndexError::Damaged(format!("{} is missing", what())))
    }

    /// Kernel `i`'s name (manifest order).
    pub fn kernel(&self, i: usize) -> Result<&'a str, LoadIndexError> {
        if i >= self.kernels as usize {
            return Err(LoadIndexError::Damaged(format!(
                "kernel {i} is out of range"
            )));
        }
        self.string(HEADER_LEN + i * SPAN, &|| format!("kernel {i} name"))
    }

    /// Object `i` (manifest order).
    pub fn object(&self, i: usize) -> Result<IndexObject<'a>, LoadIndexError> {
        if i >= self.objects as usize {
            return Err(LoadIndexError::Damaged(format!(
                "object {i} is out of range"
            )));
        }
        let at = self.objects_at + i * OBJECT;
        let d = self.data;
        let kernel = self.string(at, &|| format!("object {i} kernel"))?;
        let variant = self.span(at + 8, &|| format!("object {i} variant"))?;
        let target = self.string(at + 16, &|| format!("object {i} target"))?;
        let path = self.string(at + 24, &|| format!("object {i} path"))?;
        let format = self.string(at + 32, &|| format!("object {i} format"))?;
        let damaged = || LoadIndexError::Damaged(format!("object {i} record"));
        let sha256 = digest_at(d, at + 40).ok_or_else(damaged)?;
        let size = u64_at(d, at + 72).ok_or_else(damaged)?;
        let ptx = u32_at(d, at + 80).ok_or_else(damaged)?;
        let (major, minor) = (ptx & 0xffff, ptx >> 16);
        let ptx_isa = (major != 0xffff).then_some(Version(major, minor));
        let first_entry = u32_at(d, at + 84).ok_or_else(damaged)?;
        let entry_count = u32_at(d, at + 88).ok_or_else(damaged)?;
        if u64::from(first_entry) + u64::from(entry_count) > u64::from(self.entries) {
            return Err(LoadIndexError::Damaged(format!(
                "object {i} entries are out of range"
            )));
        }
        let (roff, rlen) = (
            u32_at(d, at + 92).ok_or_else(damaged)?,
            u32_at(d, at + 96).ok_or_else(damaged)?,
        );
        if u64::from(roff) + u64::from(rlen) > u64::from(self.blobs_len) {
            return Err(LoadIndexError::Damaged(format!(
                "object {i} resources are out of range"
            )));
        }
        let blake3 = digest_at(d, at + 100).ok_or_else(damaged)?;
        let flags = u32_at(d, at + 132).ok_or_else(damaged)?;
        let params = if self.carries_params() && flags & FLAG_PARAMS != 0 {
            let (poff, plen) = (
                u32_at(d, at + 136).ok_or_else(damaged)?,
                u32_at(d, at + 140).ok_or_else(damaged)?,
            );
            if u64::from(poff) + u64::from(plen) > u64::from(self.blobs_len) {
                return Err(LoadIndexError::Damaged(format!(
                    "object {i} launch parameters are out of range"
                )));
            }
            Some((poff, plen))
        } else {
            None
        };
        Ok(IndexObject {
            kernel,
            variant,
            target,
            path,
            format,
            sha256,
            blake3: (flags & FLAG_BLAKE3 != 0).then_some(blake3),
            size,
            ptx_isa,
            first_entry,
            entry_count,
            resources: (roff, rlen),
            params,
        })
    }

    /// Check every kernel name, object record and entry once (no allocation), so that later
    /// reads of this index cannot fail. The string table is checked as UTF-8 in one pass;
    /// then every span only needs its bounds and char boundaries (a span of a valid table
    /// that starts and ends on boundaries is valid UTF-8 itself). When anything is wrong, the
    /// record-by-record reads find it and say where.
    pub fn validate(&self) -> Result<(), LoadIndexError> {
        if self.quick_check() {
            return Ok(());
        }
        self.validate_records()?;
        // The quick check refused what every read accepts: trust neither.
        Err(LoadIndexError::Damaged(
            "the string table is not UTF-8".into(),
        ))
    }

    /// What [`Self::validate_records`] checks, without decoding a record.
    fn quick_check(&self) -> bool {
        let Ok(strings) = std::str::from_utf8(self.strings) else {
            return false;
        };
        let d = self.data;
        let span = |at: usize, required: bool| match (u32_at(d, at), u32_at(d, at + 4)) {
            (Some(NONE), Some(_)) => !required,
            (Some(off), Some(len)) => (off as usize)
                .checked_add(len as usize)
                .is_some_and(|end| strings.get(off as usize..end).is_some()),
            _ => false,
        };
        let kernels_ok = (0..self.kernels as usize).all(|k| span(HEADER_LEN + k * SPAN, true));
        kernels_ok
            && (0..self.objects as usize).all(|i| {
                let at = self.objects_at + i * OBJECT;
                let word = |off: usize| u32_at(d, at + off).map(u64::from);
                let (Some(first), Some(count), Some(roff), Some(rlen)) =
                    (word(84), word(88), word(92), word(96))
                else {
                    return false;
                };
                let params_ok = match (word(132), word(136), word(140)) {
                    (Some(flags), Some(poff), Some(plen)) => {
                        !self.carries_params()
                            || flags & u64::from(FLAG_PARAMS) == 0
                            || poff + plen <= u64::from(self.blobs_len)
                    }
                    _ => false,
                };
                params_ok
                    && span(at, true)
                    && span(at + 8, false)
                    && [16, 24, 32].iter().all(|&o| span(at + o, true))
                    && first + count <= u64::from(self.entries)
                    && roff + rlen <= u64::from(self.blobs_len)
                    && (first..first + count).all(|e| {
                        let at = self.entries_at + e as usize * ENTRY;
                        span(at, true) && u32_at(d, at + 8).is_some_and(|kind| kind <= 3)
                    })
            })
    }

    /// Read every kernel name, object record and entry once.
    fn validate_records(&self) -> Result<(), LoadIndexError> {
        for k in 0..self.kernel_count() {
            self.kernel(k)?;
        }
        for i in 0..self.object_count() {
            let o = self.object(i)?;
            for k in 0..o.entry_count() {
                self.entry(&o, k)?;
            }
        }
        Ok(())
    }

    /// Whether object `i`'s kernel is `kernel` (the load path's filter: no other field read).
    pub fn object_kernel_is(&self, i: usize, kernel: &str) -> bool {
        let at = self.objects_at + i * OBJECT;
        if i >= self.objects as usize {
            return false;
        }
        match (u32_at(self.data, at), u32_at(self.data, at + 4)) {
            (Some(off), Some(len)) => {
                self.strings
                    .get(off as usize..(off as usize).saturating_add(len as usize))
                    == Some(kernel.as_bytes())
            }
            _ => false,
        }
    }

    /// Whether object `i`'s variant is `variant`, compared in place (the load path's filter).
    pub fn object_variant_is(&self, i: usize, variant: Option<&str>) -> bool {
        let at = self.objects_at + i * OBJECT + 8;
        if i >= self.objects as usize {
            return false;
        }
        match (u32_at(self.data, at), u32_at(self.data, at + 4), variant) {
            (Some(NONE), Some(_), None) => true,
            (Some(NONE), Some(_), Some(_)) | (Some(_), Some(_), None) => false,
            (Some(off), Some(len), Some(v)) => {
                self.strings
                    .get(off as usize..(off as usize).saturating_add(len as usize))
                    == Some(v.as_bytes())
            }
            _ => false,
        }
    }

    /// Object `i`'s variant, reading that one span (the load path's filter).
    pub fn object_variant(&self, i: usize) -> Result<Option<&'a str>, LoadIndexError> {
        if i >= self.objects as usize {
            return Err(LoadIndexError::Damaged(format!(
                "object {i} is out of range"
            )));
        }
        self.span(self.objects_at + i * OBJECT + 8, &|| {
            format!("object {i} variant")
        })
    }

    /// Entry `k` of `o` (its symbol and load figures).
    pub fn entry(&self, o: &IndexObject<'a>, k: usize) -> Result<IndexEntry<'a>, LoadIndexError> {
        if k >= o.entry_count as usize {
            return Err(LoadIndexError::Damaged(format!(
                "object {}: entry {k} is out of range",
                o.path
            )));
        }
        let e = o.first_entry as usize + k;
        let at = self.entries_at + e * ENTRY;
        let name = self.string(at, &|| format!("entry symbol {e}"))?;
        let damaged = || LoadIndexError::Damaged(format!("entry {e} record"));
        let word = |off: usize| u32_at(self.data, at + off).ok_or_else(damaged);
        let long = |off: usize| u64_at(self.data, at + off).ok_or_else(damaged);
        let max_threads = Some(word(16)?).filter(|t| *t != NONE);
        let figures = match word(8)? {
            0 => LoadFigures::None,
            1 => LoadFigures::Cuda {
                registers: word(12)?,
                lds_bytes: long(24)?,
                reserved_shared_bytes: long(32)?,
                scratch_bytes: long(40)?,
                max_threads,
            },
            2 => LoadFigures::Amd {
                lds_bytes: long(24)?,
                scratch_bytes: long(40)?,
                max_threads: max_threads.unwrap_or(0),
            },
            3 => LoadFigures::Ptx,
            kind => {
                return Err(LoadIndexError::Damaged(format!(
                    "entry {e}: resource kind {kind} is unknown"
                )))
            }
        };
        Ok(IndexEntry { name, figures })
    }

    /// The entry of `o` named `name`, if it exports one.
    pub fn find_entry(
        &self,
        o: &IndexObject<'a>,
        name: &str,
    ) -> Result<Option<IndexEntry<'a>>, LoadIndexError> {
        for k in 0..o.entry_count() {
            let e = self.entry(o, k)?;
            if e.name == name {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// The entry symbols of `o`.
    pub fn entries(&self, o: &IndexObject<'a>) -> Result<Vec<&'a str>, LoadIndexError> {
        (0..o.entry_count())
            .map(|k| self.entry(o, k).map(|e| e.name))
            .collect()
    }

    /// The per-entry resource records of `o` (an index read whole; see [`Self::resources_at`]).
    pub fn resources(
        &self,
        o: &IndexObject<'a>,
    ) -> Result<BTreeMap<String, Resources>, LoadIndexError> {
        let (off, len) = o.resources;
        let bytes = self
            .blobs
            .get(off as usize..off as usize + len as usize)
            .ok_or_else(|| LoadIndexError::Damaged("only the head of the index was read".into()))?;
        decode_resources(bytes, o.path)
    }

    /// Whether the blobs are in the data this index was parsed from (not only the head).
    pub fn has_blobs(&self) -> bool {
        self.blobs.len() as u64 == u64::from(self.blobs_len)
    }

    /// Where `o`'s resource records lie in the file, for a reader that read only the head
    /// (the load path reads the one record it needs later); decode them with
    /// [`decode_resources`].
    /// The blob section as held (empty when only the head was parsed) and where it lies in
    /// the file.
    pub fn blobs(&self) -> (&'a [u8], std::ops::Range<u64>) {
        (
            self.blobs,
            self.blobs_at..self.blobs_at + u64::from(self.blobs_len),
        )
    }

    pub fn resources_at(&self, o: &IndexObject<'a>) -> std::ops::Range<u64> {
        let start = self.blobs_at + u64::from(o.resources.0);
        start..start + u64::from(o.resources.1)
    }

    /// Where `o`'s launch parameters lie in the file (decode them with [`decode_params`]);
    /// `None` when the index carries none for it.
    pub fn params_at(&self, o: &IndexObject<'a>) -> Option<std::ops::Range<u64>> {
        let (off, len) = o.params?;
        let start = self.blobs_at + u64::from(off);
        Some(start..start + u64::from(len))
    }

    /// The launch parameters of `o`'s entries (an index read whole); `Ok(None)` when the
    /// index carries none for it.
    pub fn params(
        &self,
        o: &IndexObject<'a>,
    ) -> Result<Option<Vec<Option<EntryParams>>>, LoadIndexError> {
        let Some((off, len)) = o.params else {
            return Ok(None);
        };
        let bytes = self
            .blobs
            .get(off as usize..off as usize + len as usize)
            .ok_or_else(|| LoadIndexError::Damaged("only the head of the index was read".into()))?;
        decode_params(bytes, o.path).map(Some)
    }
}

/// How many bytes of the index precede the resource blobs (the head: what selection needs),
/// from its first [`HEADER_LEN`] bytes.
pub fn head_len(header: &[u8]) -> Result<u64, LoadIndexError> {
    LoadIndex::parse_header(header).map(|(head, _)| head)
}

/// The per-entry resource records of object `path` from their blob.
pub fn decode_resources(
    bytes: &[u8],
    path: &str,
) -> Result<BTreeMap<String, Resources>, LoadIndexError> {
    use serde::Deserialize;
    // Records nest 3 levels (entry map, record, occupancy); the cap keeps a hostile blob from
    // recursing through the stack (rmp-serde's default allows 1024).
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(16);
    BTreeMap::<String, Resources>::deserialize(&mut de)
        .map_err(|e| LoadIndexError::Damaged(format!("object {path}: resource records: {e}")))
}

impl IndexObject<'_> {
    /// Lowercase hex of the sha256.
    pub fn sha256_hex(&self) -> String {
        let mut buf = [0u8; 64];
        hex_into(self.sha256, &mut buf).to_string()
    }

    /// Lowercase hex of the blake3, when the manifest records it.
    pub fn blake3_hex(&self) -> Option<String> {
        let mut buf = [0u8; 64];
        self.blake3.map(|b| hex_into(b, &mut buf).to_string())
    }

    /// How many entry symbols the object exports.
    pub fn entry_count(&self) -> usize {
        self.entry_count as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::ParamKind;
    use crate::resources::{CudaResources, PtxResources};

    fn sample() -> Manifest {
        let cuda = Resources::Cuda(CudaResources {
            registers: 32,
            lds_bytes: 32,
            reserved_shared_bytes: 1024,
            scratch_bytes: 0,
            spill_store_bytes: Some(0),
            spill_load_bytes: Some(0),
            const_bytes: 388,
            barriers: 1,
            max_threads: Some(256),
            occupancy: None,
            note: None,
        });
        let object =
            |kernel: &str, variant: Option<&str>, target: &str, format: &str, r: Resources| {
                ObjectRecord {
                    kernel: kernel.into(),
                    variant: variant.map(Into::into),
                    defines: BTreeMap::new(),
                    target: target.into(),
                    path: format!("{target}/{kernel}.{format}"),
                    sha256: format!("{:064x}", target.len() * 7 + kernel.len()),
                    blake3: (format != "ptx").then(|| format!("{:064x}", target.len() + 99)),
                    size: 1234,
                    format: format.into(),
                    entries: vec![format!("{kernel}_f32"), format!("{kernel}_bf16")],
                    demangled: Default::default(),
                    params: Default::default(),
                    resources: [(format!("{kernel}_f32"), r)].into_iter().collect(),
                    cache_key: "k".into(),
                    compile_args: Vec::new(),
                }
            };
        let ptx = Resources::Ptx(PtxResources {
            ptx_isa: "9.5".into(),
            target: "sm_90".into(),
        });
        crate::fixtures::manifest(
            "p",
            "1.0.0",
            vec![
                object("rmsnorm", None, "sm_90", "cubin", cuda.clone()),
                object("rmsnorm", None, "compute_90", "ptx", ptx),
                object("softmax", Some("rows4"), "sm_90", "cubin", cuda),
            ],
        )
    }

    impl ManifestStamp {
        fn default_for_tests() -> ManifestStamp {
            ManifestStamp {
                len: 1,
                mtime_ns: 2,
                ctime_ns: -1,
                ino: 0,
                blake3: [3; 32],
            }
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let stamp = ManifestStamp {
            len: 4242,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: -1,
            ino: 0,
            blake3: [7; 32],
        };
        let bytes = encode(&m, stamp).unwrap();
        let ix = LoadIndex::parse(&bytes).unwrap();
        assert_eq!(ix.stamp(), stamp);
        assert_eq!(ix.kernel_count(), 2);
        assert_eq!(ix.kernel(1).unwrap(), "softmax");
        assert_eq!(ix.object_count(), 3);
        for (i, o) in m.objects.iter().enumerate() {
            let v = ix.object(i).unwrap();
            assert_eq!(v.kernel, o.kernel);
            assert_eq!(v.variant, o.variant.as_deref());
            assert_eq!(v.target, o.target);
            assert_eq!(v.path, o.path);
            assert_eq!(v.format, o.format);
            assert_eq!(v.sha256_hex(), o.sha256);
            assert_eq!(v.blake3_hex(), o.blake3);
            assert_eq!(v.size, o.size);
            assert_eq!(ix.entries(&v).unwrap(), o.entries);
            assert_eq!(ix.resources(&v).unwrap(), o.resources);
            // The fixed-layout figures are the resource records' own.
            for (k, name) in o.entries.iter().enumerate() {
                let e = ix.entry(&v, k).unwrap();
                assert_eq!(e.name, name);
                assert_eq!(e.figures, LoadFigures::of(o.resources.get(name)));
                assert_eq!(ix.find_entry(&v, name).unwrap(), Some(e));
            }
            assert_eq!(ix.find_entry(&v, "nope").unwrap(), None);
        }
        let cubin = ix.object(0).unwrap();
        match ix.entry(&cubin, 0).unwrap().figures {
            LoadFigures::Cuda {
                registers,
                lds_bytes,
                reserved_shared_bytes,
                max_threads,
                ..
            } => assert_eq!(
                (registers, lds_bytes, reserved_shared_bytes, max_threads),
                (32, 32, 1024, Some(256))
            ),
            f => panic!("{f:?}"),
        }
        assert_eq!(ix.entry(&cubin, 1).unwrap().figures, LoadFigures::None);
        assert_eq!(ix.object(1).unwrap().blake3, None);
        assert_eq!(ix.object_variant(2).unwrap(), Some("rows4"));
        assert_eq!(ix.object_variant(0).unwrap(), None);
        assert!(ix.object_variant(3).is_err());
        assert!(ix.has_blobs());
        // The head alone (what a loader reads at open), then one object's blob.
        let head = head_len(&bytes[..HEADER_LEN]).unwrap() as usize;
        assert!(head < bytes.len());
        let hx = LoadIndex::parse(&bytes[..head]).unwrap();
        hx.validate().unwrap();
        assert!(!hx.has_blobs());
        for (i, o) in m.objects.iter().enumerate() {
            let v = hx.object(i).unwrap();
            assert!(hx.resources(&v).is_err());
            let r = hx.resources_at(&v);
            let blob = &bytes[r.start as usize..r.end as usize];
            assert_eq!(decode_resources(blob, v.path).unwrap(), o.resources);
        }
        assert_eq!(ix.object(1).unwrap().ptx_isa, Some(Version(9, 5)));
        assert_eq!(ix.object(0).unwrap().ptx_isa, None);
        assert!(ix.object(3).is_err());
        assert!(ix.kernel(2).is_err());
    }

    fn with_params() -> Manifest {
        let mut m = sample();
        let p = |index, offset, size, kind, name: Option<&str>, ty: Option<&str>, hidden| {
            crate::params::Param {
                index,
                offset,
                size,
                align: None,
                kind,
                name: name.map(Into::into),
                type_name: ty.map(Into::into),
                hidden,
            }
        };
        m.objects[0].params = [(
            "rmsnorm_f32".to_string(),
            vec![
                p(
                    0,
                    0,
                    8,
                    ParamKind::Pointer,
                    Some("x"),
                    Some("const float*"),
                    false,
                ),
                p(1, 8, 4, ParamKind::Value, Some("n"), Some("int"), false),
                p(2, 16, 4, ParamKind::Value, None, None, true),
                p(3, 24, 8, ParamKind::Pointer, None, None, true),
            ],
        )]
        .into();
        let mut ptx = p(0, 0, 8, ParamKind::Unknown, None, None, false);
        ptx.align = Some(8);
        m.objects[1].params = [
            ("rmsnorm_f32".to_string(), vec![ptx]),
            ("rmsnorm_bf16".to_string(), vec![]),
        ]
        .into();
        m
    }

    #[test]
    fn launch_parameters_round_trip_without_the_hidden_ones() {
        let m = with_params();
        let bytes = encode(&m, ManifestStamp::default_for_tests()).unwrap();
        let ix = LoadIndex::parse(&bytes).unwrap();
        ix.validate().unwrap();
        assert_eq!(ix.version(), VERSION);
        assert!(ix.carries_params());
        let cubin = ix.object(0).unwrap();
        let got = ix.params(&cubin).unwrap().unwrap();
        // One item per entry, in entry order: rmsnorm_f32 has a record, rmsnorm_bf16 none.
        assert_eq!(got.len(), 2);
        let f32 = got[0].as_ref().unwrap();
        assert_eq!(f32.hidden, 2);
        assert_eq!(f32.params, m.objects[0].params["rmsnorm_f32"][..2]);
        assert_eq!(got[1], None);
        let ptx = ix.params(&ix.object(1).unwrap()).unwrap().unwrap();
        assert_eq!(ptx[0].as_ref().unwrap().params[0].align, Some(8));
        assert_eq!(ptx[1], Some(EntryParams::default()));
        // An object whose manifest records no parameters carries none.
        let softmax = ix.object(2).unwrap();
        assert_eq!(ix.params(&softmax).unwrap(), None);
        assert_eq!(ix.params_at(&softmax), None);
        // Read from the head and the blob, as the loader does.
        let r = ix.params_at(&cubin).unwrap();
        let blob = &bytes[r.start as usize..r.end as usize];
        assert_eq!(decode_params(blob, cubin.path).unwrap(), got);
        assert!(decode_params(
            &[0x91, 0x92, 0x00, 0x91, 0x97, 0, 0, 8, 0xc0, 9, 0xc0, 0xc0],
            "x"
        )
        .unwrap_err()
        .to_string()
        .contains("parameter kind 9 is unknown"));
        // The parameters add little to the file: no hidden ones, small integers.
        let plain = encode(&sample(), ManifestStamp::default_for_tests()).unwrap();
        assert!(
            bytes.len() - plain.len() < 64,
            "{}",
            bytes.len() - plain.len()
        );
    }

    #[test]
    fn a_version_3_index_opens_without_launch_parameters() {
        // Version 3 is this layout with the params span zero and flag bit 1 never set; one
        // with stray bits there is read as version 3 all the same.
        let mut bytes = encode(&with_params(), ManifestStamp::default_for_tests()).unwrap();
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        let ix = LoadIndex::parse(&bytes).unwrap();
        ix.validate().unwrap();
        assert_eq!(ix.version(), 3);
        assert!(!ix.carries_params());
        for i in 0..ix.object_count() {
            let o = ix.object(i).unwrap();
            assert_eq!(ix.params(&o).unwrap(), None);
            assert_eq!(ix.entries(&o).unwrap().len(), 2);
        }
        // A head edited to point the parameters past the blobs is caught by the reads.
        let mut bad = encode(&with_params(), ManifestStamp::default_for_tests()).unwrap();
        let at = HEADER_LEN + 2 * SPAN + 136;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let ix = LoadIndex::parse(&bad).unwrap();
        assert!(ix
            .object(0)
            .unwrap_err()
            .to_string()
            .contains("launch parameters"));
        assert!(ix.validate().is_err());
    }

    #[test]
    fn damage_is_an_error() {
        let bytes = encode(
            &sample(),
            ManifestStamp {
                len: 1,
                mtime_ns: 2,
                ctime_ns: -1,
                ino: 0,
                blake3: [3; 32],
            },
        )
        .unwrap();
        assert_eq!(
            LoadIndex::parse(b"{\"schema\"").unwrap_err(),
            LoadIndexError::Magic
        );
        let mut v = bytes.clone();
        v[8] = 9;
        assert_eq!(
            LoadIndex::parse(&v).unwrap_err(),
            LoadIndexError::Version(9)
        );
        let e = LoadIndex::parse(&bytes[..bytes.len() - 1])
            .unwrap_err()
            .to_string();
        assert!(e.contains("the header describes"), "{e}");
        // A span pointing past the strings.
        let mut v = bytes.clone();
        let at = HEADER_LEN + 2 * SPAN + 24;
        v[at..at + 4].copy_from_slice(&u32::MAX.wrapping_sub(1).to_le_bytes());
        let ix = LoadIndex::parse(&v).unwrap();
        let e = ix.object(0).unwrap_err().to_string();
        assert!(e.contains("object 0 path"), "{e}");
        assert!(ix.validate().is_err());
        // An index of the previous layout (no blake3, no figures) is refused, not misread.
        let mut v1 = bytes.clone();
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            LoadIndex::parse(&v1).unwrap_err(),
            LoadIndexError::Version(1)
        );
        assert_eq!(head_len(&v1[..HEADER_LEN]), Err(LoadIndexError::Version(1)));
        // A digest that is not hex is refused when encoding, naming the object.
        let mut m = sample();
        m.objects[0].blake3 = Some("xyz".into());
        let stamp = ManifestStamp {
            len: 0,
            mtime_ns: -1,
            ctime_ns: -1,
            ino: 0,
            blake3: [0; 32],
        };
        let e = encode(&m, stamp).unwrap_err().to_string();
        assert!(
            e.contains("sm_90/rmsnorm.cubin") && e.contains("blake3"),
            "{e}"
        );
    }

    #[test]
    fn deep_messagepack_is_an_error() {
        let mut deep = vec![0x81, 0xa1, b'k'];
        deep.extend(std::iter::repeat_n(0x91u8, 100_000));
        let e = decode_resources(&deep, "x.cubin").unwrap_err().to_string();
        assert!(e.contains("x.cubin"), "{e}");
    }

    #[test]
    fn no_input_panics() {
        let bytes = encode(
            &with_params(),
            ManifestStamp {
                len: 1,
                mtime_ns: 2,
                ctime_ns: -1,
                ino: 0,
                blake3: [3; 32],
            },
        )
        .unwrap();
        // Every single-byte change and every truncation: errors or values, never a panic.
        for i in 0..bytes.len() {
            for x in [0u8, 0xff, 0x80] {
                let mut v = bytes.clone();
                v[i] = x;
                if let Ok(ix) = LoadIndex::parse(&v) {
                    for o in 0..ix.object_count().min(8) {
                        if let Ok(obj) = ix.object(o) {
                            let _ = ix.entries(&obj);
                            let _ = ix.resources(&obj);
                            let _ = ix.params(&obj);
                            for k in 0..obj.entry_count().min(8) {
                                let _ = ix.entry(&obj, k);
                            }
                            let _ = ix.find_entry(&obj, "rmsnorm_f32");
                        }
                        // The one-pass check and the record-by-record reads agree.
                        assert_eq!(
                            ix.quick_check(),
                            ix.validate_records().is_ok(),
                            "byte {i} = {x:#x}"
                        );
                        let _ = ix.validate();
                    }
                    for k in 0..ix.kernel_count().min(8) {
                        let _ = ix.kernel(k);
                    }
                }
            }
            let _ = LoadIndex::parse(&bytes[..i]);
        }
    }
}
