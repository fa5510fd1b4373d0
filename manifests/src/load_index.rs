//! The load index `manifest.kbi`: what the run-time loader needs from a manifest, in a
//! fixed-layout binary file it can use without parsing JSON.
//!
//! The build writes it beside `manifest.json`, after it, and records the manifest's length,
//! modification time and blake3 in it: it is a cache of the manifest. A loader uses it at once
//! while the manifest has that length and mtime (any rewrite changes them); when only the mtime
//! differs (a copy that does not keep mtimes), after checking the manifest's blake3; else it
//! reads the JSON. Opening is on the load path of every process: a loader reads the header and
//! the head (everything but the resource blobs, which it reads one object at a time), with no
//! allocation per object, where scanning a 140 kB JSON manifest costs hundreds of microseconds.
//!
//! Layout (little-endian). A span is `(u32 offset, u32 length)` into the string or blob
//! section; an absent optional string has offset `u32::MAX`.
//!
//! ```text
//! header      80 B   magic "KBLOADIX", u32 version (1), u32 kernels, u32 objects,
//!                    u32 entries, u32 strings length, u32 blobs length,
//!                    u64 manifest length, i64 manifest mtime (ns since the epoch),
//!                    manifest blake3 (32 bytes)
//! kernels     8 B each     name span, in the manifest's kernel order
//! objects     108 B each   kernel, variant, target, path, format spans; sha256 (32 raw
//!                          bytes); u64 size; u16 PTX ISA major, u16 minor (0xffff: none);
//!                          u32 first entry, u32 entry count; resources span (blob: the
//!                          per-entry resource records as MessagePack); 8 reserved bytes
//! entries     8 B each     entry-symbol span
//! strings, blobs
//! ```
//!
//! The reader is a pure function over `&[u8]`: section sizes are checked against the data, the
//! string section is checked to be UTF-8 once, every span when it is read, and a damaged file
//! is an error, never a panic.

use std::collections::BTreeMap;

use crate::manifest::{Manifest, ObjectRecord};
use crate::resources::Resources;
use crate::target::Version;

/// File name of the load index, beside `manifest.json`.
pub const LOAD_INDEX_FILE: &str = "manifest.kbi";
const MAGIC: &[u8; 8] = b"KBLOADIX";
const VERSION: u32 = 1;
/// Bytes of the header, which say how long the rest is ([`head_len`]).
pub const HEADER_LEN: usize = 80;
const SPAN: usize = 8;
const OBJECT: usize = 108;
const NONE: u32 = u32::MAX;

/// Why a load index cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadIndexError {
    #[error("not a kbuild load index (no KBLOADIX magic)")]
    Magic,
    #[error("load index version {0} is not supported (this kbuild reads version {VERSION})")]
    Version(u32),
    #[error("load index is damaged: {0}")]
    Damaged(String),
    #[error("the manifest is too large for a load index ({0})")]
    TooLarge(&'static str),
}

/// The manifest file a load index was written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestStamp {
    pub len: u64,
    /// Modification time, ns since the Unix epoch.
    pub mtime_ns: i64,
    /// blake3 of the manifest's bytes.
    pub blake3: [u8; 32],
}

impl ManifestStamp {
    /// The stamp of a manifest file from its metadata and bytes.
    pub fn of(meta: &std::fs::Metadata, bytes: &[u8]) -> ManifestStamp {
        ManifestStamp {
            len: meta.len(),
            mtime_ns: mtime_ns(meta),
            blake3: *blake3::hash(bytes).as_bytes(),
        }
    }

    /// Whether `meta` is the stamped file, unchanged: same length and mtime.
    pub fn same_file(&self, meta: &std::fs::Metadata) -> bool {
        self.len == meta.len() && self.mtime_ns == mtime_ns(meta) && self.mtime_ns >= 0
    }

    /// Whether `bytes` are the stamped file's content.
    pub fn same_content(&self, bytes: &[u8]) -> bool {
        self.len == bytes.len() as u64 && *blake3::hash(bytes).as_bytes() == self.blake3
    }
}

/// Encode the load index of `manifest`, whose `manifest.json` has `stamp`.
pub fn encode(manifest: &Manifest, stamp: ManifestStamp) -> Result<Vec<u8>, LoadIndexError> {
    let mut strings = StringTable::default();
    let mut blobs: Vec<u8> = Vec::new();
    let mut entries: Vec<[u32; 2]> = Vec::new();
    let mut kernels = Vec::with_capacity(manifest.kernels.len());
    for k in &manifest.kernels {
        kernels.push(strings.span(k)?);
    }
    let mut objects = Vec::with_capacity(manifest.objects.len() * OBJECT);
    for o in &manifest.objects {
        let sha = parse_sha256(&o.sha256).ok_or(LoadIndexError::Damaged(format!(
            "object {}: sha256 `{}` is not 64 hex digits",
            o.path, o.sha256
        )))?;
        let first_entry = u32_of(entries.len(), "entries")?;
        for e in &o.entries {
            entries.push(strings.span(e)?);
        }
        let blob = rmp_serde::to_vec_named(&o.resources)
            .map_err(|e| LoadIndexError::Damaged(format!("object {}: resources: {e}", o.path)))?;
        let blob_span = [u32_of(blobs.len(), "blobs")?, u32_of(blob.len(), "blobs")?];
        blobs.extend_from_slice(&blob);
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
        objects.extend_from_slice(&[0u8; 8]);
    }
    let mut out = Vec::with_capacity(
        HEADER_LEN
            + kernels.len() * SPAN
            + objects.len()
            + entries.len() * SPAN
            + strings.data.len()
            + blobs.len(),
    );
    out.extend_from_slice(MAGIC);
    for n in [
        VERSION,
        u32_of(kernels.len(), "kernels")?,
        u32_of(manifest.objects.len(), "objects")?,
        u32_of(entries.len(), "entries")?,
        u32_of(strings.data.len(), "strings")?,
        u32_of(blobs.len(), "blobs")?,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&stamp.len.to_le_bytes());
    out.extend_from_slice(&stamp.mtime_ns.to_le_bytes());
    out.extend_from_slice(&stamp.blake3);
    for k in kernels {
        put_span(&mut out, k);
    }
    out.extend_from_slice(&objects);
    for e in entries {
        put_span(&mut out, e);
    }
    out.extend_from_slice(strings.data.as_bytes());
    out.extend_from_slice(&blobs);
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

/// A load index, read in place.
#[derive(Debug, Clone, Copy)]
pub struct LoadIndex<'a> {
    data: &'a [u8],
    kernels: u32,
    objects: u32,
    entries: u32,
    stamp: ManifestStamp,
    objects_at: usize,
    entries_at: usize,
    /// The string section, checked to be UTF-8 once.
    strings: &'a str,
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
    pub size: u64,
    pub ptx_isa: Option<Version>,
    first_entry: u32,
    entry_count: u32,
    /// Offset and length of the resource blob within the blob section.
    resources: (u32, u32),
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    d.get(at..at + 4)?.try_into().ok().map(u32::from_le_bytes)
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    d.get(at..at + 8)?.try_into().ok().map(u64::from_le_bytes)
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
        if version != u64::from(VERSION) {
            return Err(LoadIndexError::Version(version as u32));
        }
        if data.len() < HEADER_LEN {
            return Err(short());
        }
        let head = HEADER_LEN as u64
            + (field(1)? + field(3)?) * SPAN as u64
            + field(2)? * OBJECT as u64
            + field(4)?;
        Ok((head, head + field(5)?))
    }

    /// Check the header and section sizes (objects are checked as they are read). `data` is
    /// the whole file, or its head ([`head_len`] bytes: everything but the resource blobs).
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
        let (kernels, objects, entries, strings_len, blobs_len) =
            (field(1), field(2), field(3), field(4), field(5));
        let range_err = || LoadIndexError::Damaged("section sizes out of range".into());
        let blake3: [u8; 32] = data
            .get(48..80)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(range_err)?;
        let stamp = ManifestStamp {
            len: u64_at(data, 32).unwrap_or(0),
            mtime_ns: u64_at(data, 40).unwrap_or(0) as i64,
            blake3,
        };
        let objects_at = HEADER_LEN + kernels as usize * SPAN;
        let entries_at = objects_at + objects as usize * OBJECT;
        let strings_at = entries_at + entries as usize * SPAN;
        let blobs_at = strings_at + strings_len as usize;
        let strings = std::str::from_utf8(data.get(strings_at..blobs_at).ok_or_else(range_err)?)
            .map_err(|e| {
                LoadIndexError::Damaged(format!("the string section is not UTF-8: {e}"))
            })?;
        Ok(LoadIndex {
            data,
            kernels,
            objects,
            entries,
            stamp,
            objects_at,
            entries_at,
            strings,
            blobs: data.get(blobs_at..).ok_or_else(range_err)?,
            blobs_at: blobs_at as u64,
            blobs_len,
        })
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
        // `get` also refuses a span that does not fall on character boundaries.
        self.strings
            .get(off as usize..off as usize + len as usize)
            .map(Some)
            .ok_or_else(damaged)
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
        let sha256: &[u8; 32] = d
            .get(at + 40..at + 72)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(damaged)?;
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
        let resources = (roff, rlen);
        Ok(IndexObject {
            kernel,
            variant,
            target,
            path,
            format,
            sha256,
            size,
            ptx_isa,
            first_entry,
            entry_count,
            resources,
        })
    }

    /// Check every kernel name, object record and entry symbol once (no allocation), so that
    /// later reads of this index cannot fail.
    pub fn validate(&self) -> Result<(), LoadIndexError> {
        for k in 0..self.kernel_count() {
            self.kernel(k)?;
        }
        for i in 0..self.object_count() {
            let o = self.object(i)?;
            for e in o.first_entry..o.first_entry + o.entry_count {
                self.string(self.entries_at + e as usize * SPAN, &|| {
                    format!("entry symbol {e}")
                })?;
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
                    .as_bytes()
                    .get(off as usize..(off as usize).saturating_add(len as usize))
                    == Some(kernel.as_bytes())
            }
            _ => false,
        }
    }

    /// The entry symbols of `o`.
    pub fn entries(&self, o: &IndexObject<'a>) -> Result<Vec<&'a str>, LoadIndexError> {
        (o.first_entry..o.first_entry + o.entry_count)
            .map(|e| {
                self.string(self.entries_at + e as usize * SPAN, &|| {
                    format!("entry symbol {e}")
                })
            })
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

    /// Where `o`'s resource records lie in the file, for a reader that read only the head
    /// (the load path reads the one record it needs later); decode them with
    /// [`decode_resources`].
    pub fn resources_at(&self, o: &IndexObject<'a>) -> std::ops::Range<u64> {
        let start = self.blobs_at + u64::from(o.resources.0);
        start..start + u64::from(o.resources.1)
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
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.sha256 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 15)]));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
                    size: 1234,
                    format: format.into(),
                    entries: vec![format!("{kernel}_f32"), format!("{kernel}_bf16")],
                    resources: [(format!("{kernel}_f32"), r)].into_iter().collect(),
                    cache_key: "k".into(),
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

    #[test]
    fn round_trip() {
        let m = sample();
        let stamp = ManifestStamp {
            len: 4242,
            mtime_ns: 1_700_000_000_123_456_789,
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
            assert_eq!(v.size, o.size);
            assert_eq!(ix.entries(&v).unwrap(), o.entries);
            assert_eq!(ix.resources(&v).unwrap(), o.resources);
        }
        // The head alone (what a loader reads at open), then one object's blob.
        let head = head_len(&bytes[..HEADER_LEN]).unwrap() as usize;
        assert!(head < bytes.len());
        let hx = LoadIndex::parse(&bytes[..head]).unwrap();
        hx.validate().unwrap();
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

    #[test]
    fn damage_is_an_error() {
        let bytes = encode(
            &sample(),
            ManifestStamp {
                len: 1,
                mtime_ns: 2,
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
            &sample(),
            ManifestStamp {
                len: 1,
                mtime_ns: 2,
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
                        }
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
