//! Deterministic tar+zstd archives (bundles and OCI layers) and a reader that refuses anything
//! a kbuild archive never holds.
//!
//! Writing: entries in the order given (callers sort), ustar headers with mtime 0 (or an
//! explicit `SOURCE_DATE_EPOCH`), uid/gid 0, empty owner names, mode 0644, regular files only,
//! one zstd frame at a fixed level with the content size and checksum recorded. The same
//! entries give the same bytes on any machine (single-threaded zstd is deterministic).
//!
//! Reading: regular files only (no symlinks, hard links, devices, directories), names that
//! match what kbuild writes (so no `..`, no absolute paths), no duplicates, and a hard cap on
//! the unpacked size checked against the zstd frame header, each tar header's declared size,
//! and the bytes actually streamed.

use std::cell::Cell;
use std::io::{Read, Write};
use std::rc::Rc;

use kbuild_base::env::{names, Env};

/// zstd level of every archive kbuild writes. Changing it changes every bundle's bytes.
pub const ZSTD_LEVEL: i32 = 12;

/// Default cap on the unpacked bytes of one operation (a bundle opened; every layer or part
/// of one pull together), 192 MiB: a bundle is unpacked into memory, so this bounds what any
/// bundle, honest or hostile, can make a reader hold, and keeps a reader's peak under 256 MiB
/// with its manifest and index beside it. `KBUILD_MAX_UNPACKED_BYTES` raises it for a
/// genuinely larger bundle.
pub const DEFAULT_MAX_UNPACKED: u64 = 192 << 20;

/// What a reader accepts.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveLimits {
    /// Unpacked tar-stream bytes, all entries and headers together.
    pub max_unpacked: u64,
    /// Entries.
    pub max_entries: usize,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        ArchiveLimits {
            max_unpacked: DEFAULT_MAX_UNPACKED,
            max_entries: 1 << 20,
        }
    }
}

impl ArchiveLimits {
    /// The default limits, with `KBUILD_MAX_UNPACKED_BYTES` overriding the size cap.
    pub fn from_env(env: &Env) -> ArchiveLimits {
        let mut l = ArchiveLimits::default();
        if let Some(n) = env.u64(names::KBUILD_MAX_UNPACKED_BYTES) {
            l.max_unpacked = n;
        }
        l
    }
}

/// One budget of unpacked bytes for a whole operation. A pull reads several layers or parts;
/// each was capped alone, so a 55 KB split release of many small parts unpacked to 2 GB.
/// The cap of [`ArchiveLimits`] is now on all of them together.
#[derive(Debug, Clone, Copy)]
pub struct UnpackBudget {
    limits: ArchiveLimits,
    used: u64,
}

impl UnpackBudget {
    pub fn new(limits: ArchiveLimits) -> UnpackBudget {
        UnpackBudget { limits, used: 0 }
    }

    /// The limits for the operation's next archive: what is left of the budget.
    pub fn next(&self) -> ArchiveLimits {
        ArchiveLimits {
            max_unpacked: self.limits.max_unpacked.saturating_sub(self.used),
            ..self.limits
        }
    }

    /// Count `bytes` unpacked by the operation.
    pub fn spend(&mut self, bytes: u64) {
        self.used = self.used.saturating_add(bytes);
    }

    /// An archive's error, with the whole budget named when an earlier archive of the
    /// operation had used part of it.
    pub fn explain(&self, err: ArchiveError) -> ArchiveError {
        match err {
            ArchiveError::TooLarge { what, .. } if self.used > 0 => ArchiveError::TooLarge {
                limit: self.limits.max_unpacked,
                what: format!(
                    "{what}, after {} bytes unpacked by the same operation",
                    self.used
                ),
            },
            other => other,
        }
    }
}

/// Why an archive was refused.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("not a zstd-compressed archive (bad magic); a kbuild bundle is tar+zstd")]
    NotZstd,
    #[error("corrupt or truncated archive: {0}")]
    Corrupt(String),
    #[error("archive unpacks to more than {limit} bytes ({what}); refusing it as a decompression bomb (raise KBUILD_MAX_UNPACKED_BYTES if it is genuine)")]
    TooLarge { limit: u64, what: String },
    #[error("archive has more than {0} entries")]
    TooManyEntries(usize),
    #[error("archive entry `{name}` is a {kind}; kbuild archives hold regular files only")]
    NotAFile { name: String, kind: String },
    #[error("archive entry `{0}` has a path kbuild never writes (absolute, `..`, or outside manifest.json / objects/sha256/<hex>)")]
    BadPath(String),
    #[error(
        "not a kbuild bundle: its first entry is `{0}` (a kbuild bundle starts with manifest.json)"
    )]
    NotKbuild(String),
    #[error("archive entry `{0}` appears twice")]
    Duplicate(String),
    /// An entry the reader's caller refused from its name and declared size alone.
    #[error("archive entry `{name}`: {why}")]
    Refused { name: String, why: String },
    #[error("writing archive: {0}")]
    Write(String),
}

/// One archive member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub data: Vec<u8>,
}

/// tar+zstd of `entries` in the given order, one zstd frame; every header carries `mtime`
/// (the caller's `SOURCE_DATE_EPOCH`, 0 when unset).
pub fn write(entries: &[Entry], mtime: u64) -> Result<Vec<u8>, ArchiveError> {
    write_groups(&[entries], mtime)
}

/// tar+zstd of the groups' entries in order, each group compressed as its own zstd frame
/// (the tar stream runs on across frames; concatenated frames are one zstd stream to any
/// reader). A bundle puts each target's objects in their own frame, so the bundle is the sum
/// of its per-target layers and what one device pulls is its share.
pub fn write_groups(groups: &[&[Entry]], mtime: u64) -> Result<Vec<u8>, ArchiveError> {
    let werr = |e: std::io::Error| ArchiveError::Write(e.to_string());
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    let mut cuts = Vec::new();
    for group in groups {
        for e in group.iter() {
            let mut h = tar::Header::new_ustar();
            h.set_path(&e.name)
                .map_err(|err| ArchiveError::Write(format!("{}: {err}", e.name)))?;
            h.set_size(e.data.len() as u64);
            h.set_mode(0o644);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(mtime);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_cksum();
            tar.append(&h, e.data.as_slice()).map_err(werr)?;
        }
        cuts.push(tar.get_ref().len());
    }
    let raw = tar.into_inner().map_err(werr)?;
    // The end-of-archive blocks belong to the last frame.
    if let Some(last) = cuts.last_mut() {
        *last = raw.len();
    }
    let mut out = Vec::new();
    let mut start = 0;
    for end in cuts {
        if end == start && start != 0 {
            continue;
        }
        let part = &raw[start..end];
        let mut enc = zstd::stream::Encoder::new(Vec::new(), ZSTD_LEVEL).map_err(werr)?;
        enc.include_checksum(true).map_err(werr)?;
        enc.include_contentsize(true).map_err(werr)?;
        enc.set_pledged_src_size(Some(part.len() as u64))
            .map_err(werr)?;
        enc.write_all(part).map_err(werr)?;
        out.extend_from_slice(&enc.finish().map_err(werr)?);
        start = end;
    }
    Ok(out)
}

/// Whether `name` is a path kbuild writes into an archive: `manifest.json`, `targets.json`,
/// `assets.json` (an asset index, see [`crate::assets`]), or `objects/sha256/<64 hex>`.
pub fn is_kbuild_path(name: &str) -> bool {
    name == "manifest.json"
        || name == "targets.json"
        || name == "assets.json"
        || name
            .strip_prefix("objects/sha256/")
            .is_some_and(crate::digest::is_sha256_hex)
}

/// A reader that counts what it yields and fails once past `limit`, recording that it did.
struct Capped<R> {
    inner: R,
    left: u64,
    tripped: Rc<Cell<bool>>,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.tripped.set(true);
            return Err(std::io::Error::other("unpacked size limit"));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Unpack an archive, refusing anything outside what kbuild writes (see the module docs).
pub fn read(bytes: &[u8], limits: ArchiveLimits) -> Result<Vec<Entry>, ArchiveError> {
    read_checked(bytes, limits, &mut |_, _, _| Ok(()))
}

/// Asked before an entry is inflated: (entries read so far, its name, its declared size).
pub type Admit<'a> = dyn FnMut(&[Entry], &str, u64) -> Result<(), ArchiveError> + 'a;

/// [`read`], asking `admit(entries so far, name, declared size)` before each entry's data is
/// inflated: a bundle reader refuses an entry its manifest does not declare before a byte of
/// it is in memory.
pub fn read_checked(
    bytes: &[u8],
    limits: ArchiveLimits,
    admit: &mut Admit<'_>,
) -> Result<Vec<Entry>, ArchiveError> {
    read_stream(bytes, limits, admit)
}

/// [`read_checked`] from a stream (a bundle file): the compressed bytes are never all in
/// memory, only the entries admitted, within `limits`.
pub fn read_stream(
    mut reader: impl Read,
    limits: ArchiveLimits,
    admit: &mut Admit<'_>,
) -> Result<Vec<Entry>, ArchiveError> {
    // The frame header (at most 18 bytes) first: the magic, and a declared content size.
    let mut head = [0u8; 18];
    let mut have = 0;
    while have < head.len() {
        match reader.read(&mut head[have..]) {
            Ok(0) => break,
            Ok(n) => have += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ArchiveError::Corrupt(e.to_string())),
        }
    }
    let head = &head[..have];
    if !kbuild_base::looks_like_bundle(head) {
        return Err(ArchiveError::NotZstd);
    }
    // The frame header's declared content size: refuse a bomb before inflating anything.
    if let Ok(Some(n)) = zstd::zstd_safe::get_frame_content_size(head) {
        if n > limits.max_unpacked {
            return Err(ArchiveError::TooLarge {
                limit: limits.max_unpacked,
                what: format!("the zstd frame declares {n} bytes"),
            });
        }
    }
    let tripped = Rc::new(Cell::new(false));
    let too_large = |what: &str| ArchiveError::TooLarge {
        limit: limits.max_unpacked,
        what: what.to_string(),
    };
    let decoder = zstd::stream::Decoder::new(head.chain(reader))
        .map_err(|e| ArchiveError::Corrupt(e.to_string()))?;
    let capped = Capped {
        inner: decoder,
        left: limits.max_unpacked,
        tripped: tripped.clone(),
    };
    let mut archive = tar::Archive::new(capped);
    let corrupt = |e: std::io::Error, tripped: &Rc<Cell<bool>>| {
        if tripped.get() {
            too_large("while streaming")
        } else {
            ArchiveError::Corrupt(e.to_string())
        }
    };
    let mut out: Vec<Entry> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut declared_total: u64 = 0;
    {
        let entries = archive.entries().map_err(|e| corrupt(e, &tripped))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| corrupt(e, &tripped))?;
            let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let kind = entry.header().entry_type();
            if !kind.is_file() {
                let kind = match kind {
                    tar::EntryType::Symlink => "symbolic link".to_string(),
                    tar::EntryType::Link => "hard link".to_string(),
                    tar::EntryType::Directory => "directory".to_string(),
                    tar::EntryType::Char => "character device".to_string(),
                    tar::EntryType::Block => "block device".to_string(),
                    tar::EntryType::Fifo => "FIFO".to_string(),
                    other => format!("{other:?} entry"),
                };
                return Err(ArchiveError::NotAFile { name, kind });
            }
            if !is_kbuild_path(&name) {
                let plain = !name.starts_with('/') && !name.split('/').any(|c| c == "..");
                if out.is_empty() && plain {
                    return Err(ArchiveError::NotKbuild(name));
                }
                return Err(ArchiveError::BadPath(name));
            }
            if !seen.insert(name.clone()) {
                return Err(ArchiveError::Duplicate(name));
            }
            if out.len() >= limits.max_entries {
                return Err(ArchiveError::TooManyEntries(limits.max_entries));
            }
            let size = entry.header().size().map_err(|e| corrupt(e, &tripped))?;
            admit(&out, &name, size)?;
            declared_total = declared_total.saturating_add(size);
            if declared_total > limits.max_unpacked {
                return Err(too_large(&format!("entry `{name}` declares {size} bytes")));
            }
            let mut data = Vec::with_capacity(size.min(64 << 20) as usize);
            entry
                .read_to_end(&mut data)
                .map_err(|e| corrupt(e, &tripped))?;
            if data.len() as u64 != size {
                return Err(ArchiveError::Corrupt(format!(
                    "entry `{name}` is truncated ({} of {size} bytes)",
                    data.len()
                )));
            }
            out.push(Entry { name, data });
        }
    }
    // Drain to the end of the frame so zstd checks its checksum and a truncation shows.
    let mut rest = archive.into_inner();
    std::io::copy(&mut rest, &mut std::io::sink()).map_err(|e| corrupt(e, &tripped))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, data: &[u8]) -> Entry {
        Entry {
            name: name.into(),
            data: data.to_vec(),
        }
    }

    /// A raw tar (not through `write`) so tests can make what kbuild never writes.
    fn raw_tar(members: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data, link) in members {
            let mut h = tar::Header::new_gnu();
            // set_path refuses `..`; write the name bytes directly as an attacker would.
            let nb = name.as_bytes();
            h.as_old_mut().name[..nb.len()].copy_from_slice(nb);
            h.set_size(data.len() as u64);
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            if let Some(l) = link {
                h.set_link_name(l).unwrap();
            }
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        zstd::encode_all(b.into_inner().unwrap().as_slice(), 3).unwrap()
    }

    #[test]
    fn round_trip_is_deterministic() {
        let entries = vec![e("manifest.json", b"{}"), e("targets.json", b"[]")];
        let a = write(&entries, 0).unwrap();
        let b = write(&entries, 0).unwrap();
        assert_eq!(a, b);
        assert_eq!(read(&a, ArchiveLimits::default()).unwrap(), entries);
    }

    #[test]
    fn refuses_links_dot_dot_absolute_duplicates() {
        let obj = format!("objects/sha256/{}", "a".repeat(64));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                raw_tar(&[(
                    "manifest.json",
                    tar::EntryType::Symlink,
                    b"",
                    Some("/etc/passwd"),
                )]),
                "symbolic link",
            ),
            (
                raw_tar(&[("manifest.json", tar::EntryType::Link, b"", Some("x"))]),
                "hard link",
            ),
            (
                raw_tar(&[("../manifest.json", tar::EntryType::Regular, b"{}", None)]),
                "path kbuild never writes",
            ),
            (
                raw_tar(&[("/manifest.json", tar::EntryType::Regular, b"{}", None)]),
                "path kbuild never writes",
            ),
            (
                raw_tar(&[
                    (&obj, tar::EntryType::Regular, b"1", None),
                    (&obj, tar::EntryType::Regular, b"2", None),
                ]),
                "appears twice",
            ),
        ];
        for (bytes, want) in cases {
            let err = read(&bytes, ArchiveLimits::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err} / {want}");
        }
    }

    #[test]
    fn refuses_bombs_by_frame_header_declared_size_and_stream() {
        let big = vec![0u8; 4 << 20];
        let entries = vec![e("manifest.json", &big)];
        let bytes = write(&entries, 0).unwrap();
        assert!(bytes.len() < 4096, "zeros compress: {}", bytes.len());
        let small = ArchiveLimits {
            max_unpacked: 1 << 20,
            max_entries: 10,
        };
        let err = read(&bytes, small).unwrap_err().to_string();
        assert!(err.contains("the zstd frame declares"), "{err}");
        // Without a content size in the frame header the stream itself trips the cap.
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_path("manifest.json").unwrap();
        h.set_size(big.len() as u64);
        h.set_cksum();
        tar.append(&h, big.as_slice()).unwrap();
        let raw = tar.into_inner().unwrap();
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        enc.include_contentsize(false).unwrap();
        enc.write_all(&raw).unwrap();
        let streamed = enc.finish().unwrap();
        let err = read(&streamed, small).unwrap_err().to_string();
        assert!(err.contains("decompression bomb"), "{err}");
        // A tar header declaring more than the cap is refused before reading its data.
        let mut h = tar::Header::new_ustar();
        h.set_path("manifest.json").unwrap();
        h.set_size(1 << 40);
        h.set_cksum();
        let mut raw = h.as_bytes().to_vec();
        raw.extend_from_slice(&[0u8; 4096]);
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        enc.include_contentsize(false).unwrap();
        enc.write_all(&raw).unwrap();
        let declared = enc.finish().unwrap();
        let err = read(&declared, ArchiveLimits::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("declares 1099511627776 bytes"), "{err}");
    }

    #[test]
    fn refuses_truncation_and_garbage() {
        let entries = vec![e("manifest.json", &[7u8; 10000])];
        let bytes = write(&entries, 0).unwrap();
        for cut in [5, bytes.len() / 2, bytes.len() - 1] {
            let err = read(&bytes[..cut], ArchiveLimits::default()).unwrap_err();
            assert!(
                matches!(err, ArchiveError::Corrupt(_) | ArchiveError::NotZstd),
                "{cut}: {err}"
            );
        }
        assert!(matches!(
            read(b"PK\x03\x04 not zstd", ArchiveLimits::default()).unwrap_err(),
            ArchiveError::NotZstd
        ));
    }
}
