//! Reading a load index in place: [`LoadIndex`], its objects and its integrity checks.

use std::collections::BTreeMap;

use super::blobs::{decode_params, decode_resources};
use super::{
    hex_into, EntryParams, IndexEntry, LoadFigures, LoadIndexError, ManifestStamp, BLOBS_DIGEST_AT,
    ENTRY, FLAG_BLAKE3, FLAG_PARAMS, HEADER_LEN, HEAD_DIGEST_AT, MAGIC, MIN_VERSION, NONE, OBJECT,
    SPAN, VERSION,
};
use crate::resources::Resources;
use crate::target::Version;

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
    pub(super) fn quick_check(&self) -> bool {
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
    pub(super) fn validate_records(&self) -> Result<(), LoadIndexError> {
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
