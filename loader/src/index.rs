//! A package's load index in memory: made from `manifest.kbi` (its head read in one or two
//! reads) or encoded from a parsed manifest, shared through a process-wide cache by manifest
//! path while the file is unchanged, and read in place ([`ObjectRef`]).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use kbuild_manifest::load_index::{
    decode_params, encode, head_len, EntryParams, IndexEntry, IndexObject, LoadIndex,
    LoadIndexError, ManifestStamp, HEADER_LEN, LOAD_INDEX_FILE,
};
use kbuild_manifest::manifest::Manifest;

use crate::error::{LoaderError, Result};

/// The stamp of an index encoded from manifest bytes that are not a file (a bundle's, a
/// parsed manifest's): it never matches a file.
pub(crate) const NOT_A_FILE: ManifestStamp = ManifestStamp {
    len: 0,
    mtime_ns: -1,
    ctime_ns: -1,
    ino: 0,
    blake3: [0; 32],
};

/// The largest `manifest.kbi` opening reads (a larger one is ignored: the JSON is read).
const MAX_INDEX_BYTES: u64 = 256 << 20;

/// What opening reads of `manifest.kbi` first: the header and, for a small package, the
/// whole head; the rest of the head follows in one more read. Only the head (what selection
/// and loading use: 30 kB of a build with 125 objects, whose file is 66 kB) is kept; resource
/// blobs are read from the file when first asked for. The open is on the first load's clock,
/// where every byte touched after the driver's work is a cache miss.
const FIRST_READ: u64 = if cfg!(test) {
    // The unit tests' indexes are small: this still reads them in two steps.
    256
} else {
    4096
};

/// Why the resource blobs of an index cannot be used (kept with the index: the first failure
/// is the answer of every later ask).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum BlobsError {
    #[error("its resource records do not match the digest in its header")]
    Digest,
    #[error("only the head of the index is in memory")]
    HeadOnly,
    #[error("reading its resource records: {0}")]
    Read(Arc<std::io::Error>),
}

/// A package's load index and what it was made from; shared by every open of the same
/// unchanged manifest, and by the modules loaded from it.
pub(crate) struct PackageIndex {
    /// The whole index, or (for a large `manifest.kbi`) its head. Validated when made and
    /// never changed.
    pub(crate) bytes: Box<[u8]>,
    /// `manifest.kbi`, open, when it was read from disk: the resource blobs are read from it
    /// when `bytes` is only the head.
    pub(crate) file: Option<(std::fs::File, PathBuf)>,
    /// The manifest file, if the package has one.
    pub(crate) manifest_path: Option<PathBuf>,
    /// The parsed manifest: set when the index was encoded from it, else parsed on first use.
    pub(crate) manifest: OnceLock<Manifest>,
    pub(crate) kernels: OnceLock<Vec<String>>,
    /// The resource blobs once checked against the header's digest: `None` when they are in
    /// `bytes` (and matched), the section read from `file` when only the head is in memory.
    /// An index encoded here needs no check.
    blobs: OnceLock<std::result::Result<Option<Box<[u8]>>, BlobsError>>,
}

impl PackageIndex {
    /// Encode `manifest` in memory (what the build writes as `manifest.kbi`).
    pub(crate) fn encode(
        manifest: Manifest,
        stamp: ManifestStamp,
        manifest_path: Option<PathBuf>,
        origin: &Path,
    ) -> Result<PackageIndex> {
        let err = |source| LoaderError::Index {
            path: origin.to_path_buf(),
            source,
        };
        let bytes = encode(&manifest, stamp).map_err(err)?;
        LoadIndex::parse(&bytes)
            .and_then(|ix| ix.validate())
            .map_err(err)?;
        Ok(PackageIndex {
            bytes: bytes.into_boxed_slice(),
            file: None,
            manifest_path,
            manifest: OnceLock::from(manifest),
            kernels: OnceLock::new(),
            blobs: OnceLock::from(Ok(None)),
        })
    }

    /// The verified blob section (see [`PackageIndex::blobs`]), read and checked on first use.
    fn checked_blobs(&self) -> std::result::Result<&[u8], BlobsError> {
        let ix = self.view();
        let (held, range) = ix.blobs();
        let checked = self.blobs.get_or_init(|| {
            let header = self.bytes.get(..HEADER_LEN).unwrap_or_default();
            if held.len() as u64 == range.end - range.start {
                return if kbuild_manifest::load_index::blobs_intact(header, held) {
                    Ok(None)
                } else {
                    Err(BlobsError::Digest)
                };
            }
            let Some((file, _)) = &self.file else {
                return Err(BlobsError::HeadOnly);
            };
            let bytes = read_at(file, range).map_err(|e| BlobsError::Read(Arc::new(e)))?;
            if kbuild_manifest::load_index::blobs_intact(header, &bytes) {
                Ok(Some(bytes.into_boxed_slice()))
            } else {
                Err(BlobsError::Digest)
            }
        });
        match checked {
            Ok(None) => Ok(held),
            Ok(Some(b)) => Ok(b),
            Err(e) => Err(e.clone()),
        }
    }

    /// The index, read in place (O(1)).
    pub(crate) fn view(&self) -> LoadIndex<'_> {
        // `bytes` were validated when this index was made and never change, so parsing them
        // again cannot fail; the empty index keeps that unreachable branch panic-free.
        LoadIndex::parse(&self.bytes).unwrap_or_else(|_| LoadIndex::empty())
    }

    pub(crate) fn stamp(&self) -> ManifestStamp {
        self.view().stamp()
    }

    /// What errors about the index name: `manifest.kbi`, or the manifest it was encoded from.
    pub(crate) fn path(&self, origin: &Path) -> PathBuf {
        match &self.file {
            Some((_, p)) => p.clone(),
            None => origin.to_path_buf(),
        }
    }

    /// Object `i`, or the error naming the package.
    pub(crate) fn object(&self, i: usize, origin: &Path) -> Result<ObjectRef<'_>> {
        let ix = self.view();
        if i >= ix.object_count() {
            return Err(LoaderError::UnknownObject {
                origin: origin.to_path_buf(),
                index: i,
                count: ix.object_count(),
            });
        }
        let object = ix.object(i).map_err(|source| LoaderError::Index {
            path: self.path(origin),
            source,
        })?;
        Ok(ObjectRef {
            index: i,
            object,
            ix,
        })
    }
}

impl PackageIndex {
    /// The bytes of a blob of the section at file range `at`, checked with the section.
    pub(crate) fn blob(&self, at: std::ops::Range<u64>, origin: &Path) -> Result<&[u8]> {
        let blobs = self.checked_blobs().map_err(|e| LoaderError::Package {
            path: self.path(origin),
            what: e.to_string(),
        })?;
        let (_, section) = self.view().blobs();
        let rel = (at.start - section.start) as usize..(at.end - section.start) as usize;
        blobs.get(rel).ok_or_else(|| LoaderError::Index {
            path: self.path(origin),
            source: LoadIndexError::Damaged("a record lies past the blobs".into()),
        })
    }

    /// The launch parameters of every entry of object `i` (entry order); `None` when the
    /// index carries none for it (a version 3 index, a manifest without them).
    pub(crate) fn params(
        &self,
        i: usize,
        origin: &Path,
    ) -> Result<Option<Vec<Option<EntryParams>>>> {
        let o = self.object(i, origin)?;
        let Some(at) = o.ix.params_at(&o) else {
            return Ok(None);
        };
        let bytes = self.blob(at, origin)?;
        decode_params(bytes, o.path)
            .map(Some)
            .map_err(|source| LoaderError::Index {
                path: self.path(origin),
                source,
            })
    }

    /// The launch parameters of `entry` of object `i`; `None` when the index carries none for
    /// it (or the object does not export it).
    pub(crate) fn entry_params(
        &self,
        i: usize,
        entry: &str,
        origin: &Path,
    ) -> Result<Option<EntryParams>> {
        let o = self.object(i, origin)?;
        let Some(k) = o.entries().position(|e| e == entry) else {
            return Ok(None);
        };
        Ok(self
            .params(i, origin)?
            .and_then(|mut all| all.get_mut(k).and_then(Option::take)))
    }
}

/// One object of a package, read in place from its load index (no allocation).
#[derive(Debug, Clone, Copy)]
pub struct ObjectRef<'a> {
    /// Its place in the manifest's `objects` (what [`crate::Candidate::object`] names).
    pub index: usize,
    object: IndexObject<'a>,
    pub(crate) ix: LoadIndex<'a>,
}

impl<'a> std::ops::Deref for ObjectRef<'a> {
    type Target = IndexObject<'a>;
    fn deref(&self) -> &IndexObject<'a> {
        &self.object
    }
}

impl<'a> ObjectRef<'a> {
    /// The entry symbols it exports.
    pub fn entries(&self) -> impl Iterator<Item = &'a str> + 'a {
        let (ix, o) = (self.ix, self.object);
        // Validated with the index: no entry fails to read.
        (0..o.entry_count()).filter_map(move |k| ix.entry(&o, k).ok().map(|e| e.name))
    }

    /// The entry named `name` and its load figures, if the object exports it.
    pub fn entry(&self, name: &str) -> Option<IndexEntry<'a>> {
        self.ix.find_entry(&self.object, name).ok().flatten()
    }
}

/// Parsed indexes of manifests opened in this process, by path; an entry is used while the
/// manifest file still has the stamp the index records. Only the index is shared: every
/// object is still read and checked on every load.
type IndexCache = Mutex<HashMap<PathBuf, Arc<PackageIndex>>>;

pub(crate) fn index_cache() -> &'static IndexCache {
    static CACHE: OnceLock<IndexCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn read_at(file: &std::fs::File, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>> {
    // The header's sizes were not checked against the file's: do that before allocating.
    if range.end > file.metadata()?.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the resource record lies past the end of the file",
        ));
    }
    let len = usize::try_from(range.end - range.start)
        .map_err(|_| std::io::Error::other("resource record too large"))?;
    let mut buf = vec![0u8; len];
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut buf, range.start)?;
    }
    #[cfg(not(unix))]
    {
        use std::io::{Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(range.start))?;
        f.read_exact(&mut buf)?;
    }
    Ok(buf)
}

/// The load index beside `manifest_path`, when there is one, it is intact (its own digest
/// holds) and it was written for the manifest as it is now: the same file (length, mtime,
/// ctime and inode), or the same bytes (blake3, for a copy). Anything else (a damaged or
/// edited file, an index of another layout version): `None`, and the caller reads the JSON,
/// which reports any error in the manifest itself.
pub(crate) fn open_load_index(manifest_path: &Path, root: &Path) -> Option<PackageIndex> {
    let path = root.join(LOAD_INDEX_FILE);
    let mut file = std::fs::File::open(&path).ok()?;
    let len = file.metadata().ok()?.len();
    if len > MAX_INDEX_BYTES {
        return None;
    }
    // The header (and a small head) in one read, the rest of the head in a second.
    let first = usize::try_from(len.min(FIRST_READ)).ok()?;
    let mut bytes = kbuild_base::fs::read_up_to(&mut file, first).ok()?;
    if bytes.len() != first {
        return None;
    }
    let head = head_len(bytes.get(..HEADER_LEN)?).ok()?;
    if head > len {
        return None;
    }
    let head = usize::try_from(head).ok()?;
    if bytes.len() as u64 != len {
        // Only the head is kept; the blobs are read (and checked) when first asked for.
        let have = bytes.len();
        bytes.resize(head, 0);
        if head > have {
            file.read_exact(&mut bytes[have..]).ok()?;
        }
    }
    // What selection and loading read is checked now; the resource blobs on first use.
    if !kbuild_manifest::load_index::head_intact(&bytes) {
        return None;
    }
    let ix = LoadIndex::parse(&bytes).ok()?;
    let stamp = ix.stamp();
    if !stamp.same_file(&std::fs::metadata(manifest_path).ok()?)
        && !stamp.same_content(&std::fs::read(manifest_path).ok()?)
    {
        return None;
    }
    // Every record is checked once here, so the load path's reads cannot fail later.
    ix.validate().ok()?;
    Some(PackageIndex {
        bytes: bytes.into_boxed_slice(),
        file: Some((file, path)),
        manifest_path: Some(manifest_path.to_path_buf()),
        manifest: OnceLock::new(),
        kernels: OnceLock::new(),
        blobs: OnceLock::new(),
    })
}
