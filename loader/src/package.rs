//! Where code objects come from: a build directory (`manifest.json` beside the objects), a
//! manifest file, or any [`ObjectSource`] (a bundle or a pulled cache entry of the registry).
//!
//! A package works on one representation only: the load index of
//! [`kbuild_manifest::load_index`]. Opening a build directory reads the head of its
//! `manifest.kbi` in one read while that matches `manifest.json`: no JSON is parsed on the
//! load path. Without one (or when the manifest changed since), the manifest is parsed and
//! encoded into the same index in memory, which is reused while the manifest file is unchanged
//! (the index's own [`ManifestStamp`] is the file identity). Every accessor reads that index.
//!
//! Every object is checked before anyone sees its bytes: by the blake3 the manifest records,
//! or, for a manifest written before objects recorded one, by its sha256.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use kbuild_manifest::compat::Device;
use kbuild_manifest::load_index::{
    decode_params, decode_resources, encode, head_len, hex_into, EntryParams, IndexEntry,
    IndexObject, LoadIndex, LoadIndexError, ManifestStamp, HEADER_LEN, LOAD_INDEX_FILE,
};
use kbuild_manifest::manifest::{Manifest, ObjectRecord};
use kbuild_manifest::resources::Resources;
use sha2::{Digest, Sha256};

use crate::error::{LoaderError, Result};
use crate::select::{choose, trace, Selection, Verdicts};

/// Something that hands out the bytes of a manifest's objects.
pub trait ObjectSource: Send + Sync {
    /// The bytes of the object at `path` (manifest-relative) with digest `sha256`,
    /// unverified (the [`Package`] checks them).
    fn read(&self, path: &str, sha256: &str) -> Result<Vec<u8>>;
    /// [`ObjectSource::read`] of an object the manifest says is `size` bytes: a source may
    /// read exactly that many (what it returns is verified either way).
    fn read_sized(&self, path: &str, sha256: &str, size: u64) -> Result<Vec<u8>> {
        let _ = size;
        self.read(path, sha256)
    }
    /// For messages: the directory or bundle file.
    fn describe(&self) -> String;
}

/// Objects stored as files relative to a directory (a build's `--out` dir).
pub struct DirSource {
    root: PathBuf,
}

impl DirSource {
    pub fn new(root: impl Into<PathBuf>) -> DirSource {
        DirSource { root: root.into() }
    }

    /// The object file at manifest-relative `path`, which must stay inside the directory.
    fn file(&self, path: &str) -> Result<PathBuf> {
        kbuild_base::ident::confined(&self.root, "object path", path).map_err(|e| {
            LoaderError::Package {
                path: self.root.join("manifest.json"),
                what: e.to_string(),
            }
        })
    }
}

impl ObjectSource for DirSource {
    fn read(&self, path: &str, _sha256: &str) -> Result<Vec<u8>> {
        let full = self.file(path)?;
        std::fs::read(&full).map_err(|e| LoaderError::io(full, "reading the code object", e))
    }

    fn read_sized(&self, path: &str, _sha256: &str, size: u64) -> Result<Vec<u8>> {
        let full = self.file(path)?;
        // The size the manifest records: open and one read (no stat, no probe for the end).
        // Only these bytes are verified and handed on, so a longer file changes nothing; a
        // shorter one fails its digest.
        let io = |e| LoaderError::io(&full, "reading the code object", e);
        let want = usize::try_from(size).map_err(|_| {
            io(std::io::Error::other(
                "the manifest's size does not fit in memory",
            ))
        })?;
        let mut file = std::fs::File::open(&full).map_err(io)?;
        kbuild_base::fs::read_up_to(&mut file, want).map_err(io)
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

/// The source of a package made from a manifest alone: it selects and explains, and reads
/// nothing.
struct NoObjects {
    origin: PathBuf,
}

impl ObjectSource for NoObjects {
    fn read(&self, path: &str, _sha256: &str) -> Result<Vec<u8>> {
        Err(LoaderError::NoObjects {
            origin: self.origin.clone(),
            path: path.to_string(),
        })
    }

    fn describe(&self) -> String {
        self.origin.display().to_string()
    }
}

/// The stamp of an index encoded from manifest bytes that are not a file (a bundle's, a
/// parsed manifest's): it never matches a file.
const NOT_A_FILE: ManifestStamp = ManifestStamp {
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

/// A package's load index and what it was made from; shared by every open of the same
/// unchanged manifest, and by the modules loaded from it.
pub(crate) struct Index {
    /// The whole index, or (for a large `manifest.kbi`) its head. Validated when made and
    /// never changed.
    bytes: Box<[u8]>,
    /// `manifest.kbi`, open, when it was read from disk: the resource blobs are read from it
    /// when `bytes` is only the head.
    file: Option<(std::fs::File, PathBuf)>,
    /// The manifest file, if the package has one.
    manifest_path: Option<PathBuf>,
    /// The parsed manifest: set when the index was encoded from it, else parsed on first use.
    manifest: OnceLock<Manifest>,
    kernels: OnceLock<Vec<String>>,
    /// The resource blobs once checked against the header's digest: `None` when they are in
    /// `bytes` (and matched), the section read from `file` when only the head is in memory.
    /// An index encoded here needs no check.
    blobs: OnceLock<std::result::Result<Option<Box<[u8]>>, String>>,
}

impl Index {
    /// Encode `manifest` in memory (what the build writes as `manifest.kbi`).
    fn encode(
        manifest: Manifest,
        stamp: ManifestStamp,
        manifest_path: Option<PathBuf>,
        origin: &Path,
    ) -> Result<Index> {
        let err = |source| LoaderError::Index {
            path: origin.to_path_buf(),
            source,
        };
        let bytes = encode(&manifest, stamp).map_err(err)?;
        LoadIndex::parse(&bytes)
            .and_then(|ix| ix.validate())
            .map_err(err)?;
        Ok(Index {
            bytes: bytes.into_boxed_slice(),
            file: None,
            manifest_path,
            manifest: OnceLock::from(manifest),
            kernels: OnceLock::new(),
            blobs: OnceLock::from(Ok(None)),
        })
    }

    /// The verified blob section (see [`Index::blobs`]), read and checked on first use.
    fn checked_blobs(&self) -> std::result::Result<&[u8], String> {
        let ix = self.view();
        let (held, range) = ix.blobs();
        let checked = self.blobs.get_or_init(|| {
            let header = self.bytes.get(..HEADER_LEN).unwrap_or_default();
            if held.len() as u64 == range.end - range.start {
                return if kbuild_manifest::load_index::blobs_intact(header, held) {
                    Ok(None)
                } else {
                    Err("its resource records do not match the digest in its header".into())
                };
            }
            let Some((file, _)) = &self.file else {
                return Err("only the head of the index is in memory".into());
            };
            let bytes =
                read_at(file, range).map_err(|e| format!("reading its resource records: {e}"))?;
            if kbuild_manifest::load_index::blobs_intact(header, &bytes) {
                Ok(Some(bytes.into_boxed_slice()))
            } else {
                Err("its resource records do not match the digest in its header".into())
            }
        });
        match checked {
            Ok(None) => Ok(held),
            Ok(Some(b)) => Ok(b),
            Err(e) => Err(e.clone()),
        }
    }

    /// The index, read in place (O(1)).
    fn view(&self) -> LoadIndex<'_> {
        // `bytes` were validated when this Index was made and never change, so parsing them
        // again cannot fail; the empty index keeps that unreachable branch panic-free.
        LoadIndex::parse(&self.bytes).unwrap_or_else(|_| LoadIndex::empty())
    }

    fn stamp(&self) -> ManifestStamp {
        self.view().stamp()
    }

    /// What errors about the index name: `manifest.kbi`, or the manifest it was encoded from.
    fn path(&self, origin: &Path) -> PathBuf {
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

impl Index {
    /// The bytes of a blob of the section at file range `at`, checked with the section.
    fn blob(&self, at: std::ops::Range<u64>, origin: &Path) -> Result<&[u8]> {
        let blobs = self.checked_blobs().map_err(|what| LoaderError::Package {
            path: self.path(origin),
            what,
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
    ix: LoadIndex<'a>,
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
type IndexCache = Mutex<HashMap<PathBuf, Arc<Index>>>;

fn index_cache() -> &'static IndexCache {
    static CACHE: OnceLock<IndexCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A manifest and the source of its objects.
pub struct Package {
    index: Arc<Index>,
    source: Box<dyn ObjectSource>,
    origin: PathBuf,
    /// What the signature policy said when a bundle or pulled entry was opened; `None` for
    /// a build directory or manifest (local and unsigned).
    trust: Option<String>,
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("origin", &self.origin)
            .field("objects", &self.object_count())
            .finish_non_exhaustive()
    }
}

impl Package {
    /// Open a build directory (holding `manifest.json`), a manifest file or a bundle: through
    /// the load index `manifest.kbi` when that matches the manifest, else from the JSON, whose
    /// in-memory index is reused while the manifest file is unchanged (same length and mtime);
    /// [`Package::open_uncached`] always reads and parses the JSON.
    pub fn open(path: &Path) -> Result<Package> {
        Package::open_with(path, true)
    }

    /// [`Package::open`] from the JSON alone: no load index file, no process-wide cache.
    pub fn open_uncached(path: &Path) -> Result<Package> {
        Package::open_with(path, false)
    }

    fn open_with(path: &Path, cached: bool) -> Result<Package> {
        let dir_package = |index| Package {
            index,
            source: Box::new(DirSource::new(path)),
            origin: path.join("manifest.json"),
            trust: None,
        };
        // A build directory with its load index, the common case on the load path of every
        // process, costs no stat: `DIR/manifest.kbi` opens only when DIR is a directory.
        if cached {
            if let Some(index) = open_load_index(&path.join("manifest.json"), path) {
                return Ok(dir_package(Arc::new(index)));
            }
        }
        let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
        #[cfg(feature = "registry")]
        if !is_dir && starts_like_bundle(path) {
            // The default policy (`warn`, no keys): see [`Package::open_trusted`].
            return Package::open_bundle(path, &crate::bundle::Trust::default());
        }
        let (manifest_path, root) = if is_dir {
            (path.join("manifest.json"), path.to_path_buf())
        } else {
            let root = path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            (path.to_path_buf(), root)
        };
        let package = |index| Package {
            index,
            source: Box::new(DirSource::new(&root)),
            origin: manifest_path.clone(),
            trust: None,
        };
        if cached && !is_dir {
            if let Some(index) = open_load_index(&manifest_path, &root) {
                return Ok(package(Arc::new(index)));
            }
        }
        let read_err = |e| {
            let what = if is_dir {
                "reading the manifest (is this a kbuild --out directory?)"
            } else {
                "reading the manifest"
            };
            LoaderError::io(&manifest_path, what, e)
        };
        // The metadata and the bytes of one open file make the in-memory index's stamp.
        let mut file = std::fs::File::open(&manifest_path).map_err(read_err)?;
        let meta = file.metadata().map_err(read_err)?;
        if cached {
            let hit = index_cache().lock().ok().and_then(|c| {
                c.get(&manifest_path)
                    .filter(|ix| ix.stamp().same_file(&meta))
                    .map(Arc::clone)
            });
            if let Some(index) = hit {
                return Ok(package(index));
            }
        }
        let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.read_to_end(&mut data).map_err(read_err)?;
        let stamp = ManifestStamp::of(&meta, &data);
        let manifest = parse_manifest(&data, &manifest_path)?;
        let index = Arc::new(Index::encode(
            manifest,
            stamp,
            Some(manifest_path.clone()),
            &manifest_path,
        )?);
        if cached {
            if let Ok(mut c) = index_cache().lock() {
                c.insert(manifest_path.clone(), Arc::clone(&index));
            }
        }
        Ok(package(index))
    }

    /// A package from manifest JSON and the source of its objects.
    pub fn from_json(
        data: Vec<u8>,
        source: Box<dyn ObjectSource>,
        origin: PathBuf,
    ) -> Result<Package> {
        let manifest = parse_manifest(&data, &origin)?;
        Package::from_parts(manifest, source, origin)
    }

    /// A package from a parsed manifest and any source of its objects (a bundle, a cache
    /// entry of the registry).
    pub fn from_parts(
        manifest: Manifest,
        source: Box<dyn ObjectSource>,
        origin: PathBuf,
    ) -> Result<Package> {
        Ok(Package {
            index: Arc::new(Index::encode(manifest, NOT_A_FILE, None, &origin)?),
            source,
            origin,
            trust: None,
        })
    }

    /// A package from a manifest alone, to select and explain (reading an object is an
    /// error).
    pub fn from_manifest(manifest: Manifest) -> Result<Package> {
        let origin = PathBuf::from(format!(
            "{}-{} (manifest)",
            manifest.package.name, manifest.package.version
        ));
        let source = Box::new(NoObjects {
            origin: origin.clone(),
        });
        Package::from_parts(manifest, source, origin)
    }

    /// Every object, in manifest order.
    pub fn objects(&self) -> Vec<ObjectRef<'_>> {
        (0..self.object_count())
            .filter_map(|i| self.object(i).ok())
            .collect()
    }

    /// How many objects the package has.
    pub fn object_count(&self) -> usize {
        self.index.view().object_count()
    }

    /// Object `index`, read in place (the load path: no allocation).
    pub fn object(&self, index: usize) -> Result<ObjectRef<'_>> {
        self.index.object(index, &self.origin)
    }

    /// Whether this package was opened through its load index file (`manifest.kbi`); else
    /// its index was encoded in memory from the manifest.
    pub fn has_load_index(&self) -> bool {
        self.index.file.is_some()
    }

    /// The load index the package serves.
    #[cfg(test)]
    pub(crate) fn load_index(&self) -> LoadIndex<'_> {
        self.index.view()
    }

    pub(crate) fn shared_index(&self) -> Arc<Index> {
        Arc::clone(&self.index)
    }

    /// Kernel names in Kbuild.toml order.
    pub fn kernels(&self) -> &[String] {
        self.index.kernels.get_or_init(|| {
            let ix = self.index.view();
            (0..ix.kernel_count())
                .filter_map(|k| ix.kernel(k).ok().map(str::to_string))
                .collect()
        })
    }

    /// The whole manifest (read and parsed on first call when the package was opened through
    /// `manifest.kbi`).
    pub fn manifest(&self) -> Result<&Manifest> {
        if let Some(m) = self.index.manifest.get() {
            return Ok(m);
        }
        let Some(path) = &self.index.manifest_path else {
            return Err(LoaderError::Package {
                path: self.origin.clone(),
                what: "the package has no manifest to read".into(),
            });
        };
        let data =
            std::fs::read(path).map_err(|e| LoaderError::io(path, "reading the manifest", e))?;
        let m = parse_manifest(&data, path)?;
        Ok(self.index.manifest.get_or_init(|| m))
    }

    /// Judge every object for `device`, with the whole trace (explain). The one selection:
    /// [`crate::Loader`] loads the object it selects.
    pub fn select(&self, device: &Device) -> Selection {
        trace(&self.index.view(), device)
    }

    /// The object `select` chooses for `kernel` (`variant`), without the trace; `None` when
    /// there is none (the caller builds the trace for the error).
    pub(crate) fn choose(
        &self,
        verdicts: &mut Verdicts,
        kernel: &str,
        variant: Option<&str>,
    ) -> Option<usize> {
        choose(&self.index.view(), verdicts, kernel, variant)
    }

    /// The manifest file or bundle this package was opened from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// Object `index` as a full manifest record (resources decoded; `defines` and
    /// `cache_key` are not in the index and come back empty).
    pub fn record(&self, index: usize) -> Result<ObjectRecord> {
        let o = self.object(index)?;
        Ok(ObjectRecord {
            kernel: o.kernel.to_string(),
            variant: o.variant.map(str::to_string),
            defines: BTreeMap::new(),
            target: o.target.to_string(),
            path: o.path.to_string(),
            sha256: o.sha256_hex(),
            blake3: o.blake3_hex(),
            size: o.size,
            format: o.format.to_string(),
            entries: o.entries().map(str::to_string).collect(),
            demangled: Default::default(),
            params: Default::default(),
            resources: self.resources(index)?,
            cache_key: String::new(),
            compile_args: Vec::new(),
        })
    }

    /// The resource records of object `index`, per entry.
    pub fn resources(&self, index: usize) -> Result<BTreeMap<String, Resources>> {
        let o = self.object(index)?;
        let index_err = |source| LoaderError::Index {
            path: self.index.path(&self.origin),
            source,
        };
        let bytes = self.index.blob(o.ix.resources_at(&o), &self.origin)?;
        decode_resources(bytes, o.path).map_err(index_err)
    }

    /// The launch parameters of object `index`'s entries, in entry order (the caller-visible
    /// ones and the count of hidden ones; `None` for an entry the manifest records none for).
    /// `None` when the index carries none for the object: a `manifest.kbi` of version 3, or a
    /// manifest written before parameters were recorded. Launches are then unchecked.
    pub fn params(&self, index: usize) -> Result<Option<Vec<Option<EntryParams>>>> {
        self.index.params(index, &self.origin)
    }

    /// The bytes of object `index`, after checking them against the manifest's blake3 (or
    /// sha256, for a manifest without blake3).
    pub fn read_verified(&self, index: usize) -> Result<Vec<u8>> {
        let o = self.object(index)?;
        self.read_object(&o)
    }

    /// [`Package::read_verified`] of an object already looked up.
    pub fn read_object(&self, o: &IndexObject<'_>) -> Result<Vec<u8>> {
        let mut hex = [0u8; 64];
        let bytes = self
            .source
            .read_sized(o.path, hex_into(o.sha256, &mut hex), o.size)?;
        verify(o, &bytes)?;
        Ok(bytes)
    }

    pub fn source(&self) -> &dyn ObjectSource {
        self.source.as_ref()
    }

    /// Keep only the objects whose sha256 passes `keep` (a subset bundle's present ones): the
    /// index is encoded again from the manifest without the others, so indices, selection
    /// and [`Package::manifest`] agree.
    #[cfg(feature = "registry")]
    pub(crate) fn retain_objects(&mut self, keep: impl Fn(&str) -> bool) {
        let Ok(manifest) = self.manifest() else {
            // Only packages made from a manifest are retained (bundles): it is in memory.
            return;
        };
        let mut subset = manifest.clone();
        subset.objects.retain(|o| keep(&o.sha256));
        // The subset of an index that encoded encodes too; were it not to, every object
        // stays listed and reading a missing one names the bundle.
        if let Ok(index) = Index::encode(subset, NOT_A_FILE, None, &self.origin) {
            self.index = Arc::new(index);
        }
    }

    /// What the signature policy said when this bundle or pulled entry was opened
    /// (`verified by key …`, or the `warn` policy's message); `None` for a build directory
    /// or manifest, which are local and unsigned.
    pub fn trust_note(&self) -> Option<&str> {
        self.trust.as_deref()
    }

    #[cfg(feature = "registry")]
    pub(crate) fn with_trust(mut self, note: String) -> Package {
        self.trust = Some(note);
        self
    }

    #[cfg(feature = "registry")]
    pub(crate) fn with_source(mut self, source: Box<dyn ObjectSource>) -> Package {
        self.source = source;
        self
    }
}

/// Parse manifest JSON (`origin` names it in errors), saying what the file is when it is no
/// manifest at all.
fn parse_manifest(data: &[u8], origin: &Path) -> Result<Manifest> {
    if data.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(LoaderError::Package {
            path: origin.to_path_buf(),
            what: "not a kbuild manifest (JSON), bundle (.kbundle) or build directory".into(),
        });
    }
    Manifest::from_json(data).map_err(|source| LoaderError::Manifest {
        path: origin.to_path_buf(),
        source,
    })
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

#[cfg(feature = "registry")]
pub(crate) fn starts_like_bundle(path: &Path) -> bool {
    let mut head = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| crate::bundle::looks_like_bundle(&head))
}

/// Check `bytes` against `o`'s blake3, or its sha256 when the manifest records no blake3.
/// Nothing is allocated unless they differ.
pub fn verify(o: &IndexObject<'_>, bytes: &[u8]) -> Result<()> {
    let size = |found: String| format!("{found} ({} bytes, manifest {})", bytes.len(), o.size);
    match o.blake3 {
        Some(want) => {
            let got = blake3::hash(bytes);
            if got.as_bytes() != want {
                return Err(LoaderError::Blake3Mismatch {
                    path: o.path.to_string(),
                    expected: o.blake3_hex().unwrap_or_default(),
                    found: size(got.to_hex().to_string()),
                });
            }
        }
        None => {
            if Sha256::digest(bytes).as_slice() != o.sha256.as_slice() {
                return Err(LoaderError::Sha256Mismatch {
                    path: o.path.to_string(),
                    expected: o.sha256_hex(),
                    found: size(sha256_hex(bytes)),
                });
            }
        }
    }
    Ok(())
}

/// The load index beside `manifest_path`, when there is one, it is intact (its own digest
/// holds) and it was written for the manifest as it is now: the same file (length, mtime,
/// ctime and inode), or the same bytes (blake3, for a copy). Anything else (a damaged or
/// edited file, an index of another layout version): `None`, and the caller reads the JSON,
/// which reports any error in the manifest itself.
fn open_load_index(manifest_path: &Path, root: &Path) -> Option<Index> {
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
    Some(Index {
        bytes: bytes.into_boxed_slice(),
        file: Some((file, path)),
        manifest_path: Some(manifest_path.to_path_buf()),
        manifest: OnceLock::new(),
        kernels: OnceLock::new(),
        blobs: OnceLock::new(),
    })
}

/// Lowercase hex sha256.
pub use kbuild_base::digest::sha256_hex;

#[cfg(test)]
mod tests_support {
    pub(super) use super::tests::{build_dir, cuda};
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::compat::Rule;
    use kbuild_manifest::resources::CudaResources;
    use kbuild_manifest::target::Version;

    pub(super) fn cuda(registers: u32) -> Resources {
        Resources::Cuda(CudaResources {
            registers,
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
        })
    }

    /// A build dir with one cubin-named object and one PTX object.
    pub(super) fn build_dir() -> (tempfile::TempDir, Manifest) {
        let dir = tempfile::tempdir().unwrap();
        let mut m = crate::select::tests::manifest(vec![
            crate::select::tests::object("k", None, "sm_90", None),
            crate::select::tests::object("k", None, "compute_90", Some("9.5")),
        ]);
        for o in &mut m.objects {
            let bytes = format!("object for {}", o.target).into_bytes();
            let p = dir.path().join(&o.path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, &bytes).unwrap();
            o.sha256 = sha256_hex(&bytes);
            o.blake3 = Some(blake3::hash(&bytes).to_hex().to_string());
            o.size = bytes.len() as u64;
            if o.format == "cubin" {
                o.resources.insert("k".into(), cuda(32));
            }
        }
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        (dir, m)
    }

    #[test]
    fn the_index_agrees_with_the_manifest() {
        let (dir, m) = build_dir();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.kernels(), m.kernels.as_slice());
        assert_eq!(p.manifest().unwrap(), &m);
        for (i, o) in m.objects.iter().enumerate() {
            let mut r = p.record(i).unwrap();
            r.cache_key = o.cache_key.clone();
            assert_eq!(&r, o);
        }
        assert_eq!(p.objects()[1].ptx_isa, Some(Version(9, 5)));
        let sel = p.select(&Device::parse("sm_90", Some(Version(13, 0)), None).unwrap());
        let k = sel.kernel("k", None).unwrap();
        assert_eq!(k.selected().unwrap().target, "sm_90");
        assert_eq!(k.candidates[1].rule, Some(Rule::PtxIsaTooNew));
        // The same through a manifest file path and through from_parts.
        let p2 = Package::open(&dir.path().join("manifest.json")).unwrap();
        assert_eq!(p2.select(&sel.device), sel);
        let p3 = Package::from_parts(
            m.clone(),
            Box::new(DirSource::new(dir.path())),
            dir.path().into(),
        )
        .unwrap();
        assert_eq!(p3.select(&sel.device), sel);
        assert_eq!(p3.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn a_blake3_mismatch_is_refused_naming_the_object() {
        let (dir, m) = build_dir();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
        // The bytes of the other object put in place of this one.
        std::fs::copy(
            dir.path().join(&m.objects[1].path),
            dir.path().join(&m.objects[0].path),
        )
        .unwrap();
        let e = p.read_verified(0).unwrap_err();
        assert!(matches!(e, LoaderError::Blake3Mismatch { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("sm_90/k.cubin") && msg.contains("swapped or modified"),
            "{msg}"
        );
        assert!(
            msg.contains(m.objects[0].blake3.as_deref().unwrap()),
            "{msg}"
        );
        // The manifest's 16 bytes are what is read and checked (the file has 21).
        assert!(msg.contains("16 bytes, manifest 16"), "{msg}");
        // The sha256 alone would not have been asked: the message names the blake3.
        assert!(!msg.contains("sha256"), "{msg}");
    }

    #[test]
    fn without_blake3_the_sha256_is_checked() {
        // A manifest written before objects recorded their blake3.
        let (dir, mut m) = build_dir();
        for o in &mut m.objects {
            o.blake3 = None;
        }
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.object(0).unwrap().blake3, None);
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
        std::fs::write(dir.path().join(&m.objects[0].path), b"swapped").unwrap();
        let e = p.read_verified(0).unwrap_err();
        assert!(matches!(e, LoaderError::Sha256Mismatch { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("sm_90/k.cubin") && msg.contains(&m.objects[0].sha256),
            "{msg}"
        );
        assert!(msg.contains("7 bytes"), "{msg}");
        // A manifest with a blake3 for one object only: each object by what it records.
        m.objects[1].blake3 = Some(blake3::hash(b"object for compute_90").to_hex().to_string());
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(p.object(1).unwrap().blake3.is_some());
        assert_eq!(p.read_verified(1).unwrap(), b"object for compute_90");
        assert!(matches!(
            p.read_verified(0).unwrap_err(),
            LoaderError::Sha256Mismatch { .. }
        ));
    }

    #[test]
    fn object_paths_stay_inside_the_directory() {
        let (dir, mut m) = build_dir();
        m.objects[0].path = "../../etc/passwd".into();
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        // Refused when the manifest is read, before any path is made.
        let e = Package::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("objects[0].path `../../etc/passwd`") && e.contains("stays inside"),
            "{e}"
        );
        // A source asked for such a path directly refuses it too.
        let e = DirSource::new(dir.path())
            .read("../../etc/passwd", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("stays inside its directory"), "{e}");
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = Package::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("manifest.json") && e.contains("kbuild --out directory"),
            "{e}"
        );
        let f = dir.path().join("manifest.json");
        std::fs::write(&f, b"\x28\xb5\x2f\xfd binary").unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("manifest.json") && e.contains("archive"), "{e}");
        std::fs::write(&f, b"\x7fELF binary").unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("not a kbuild manifest (JSON), bundle"), "{e}");
        std::fs::write(&f, br#"{"schema": "kbuild.manifest/v0"}"#).unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("\"kbuild.manifest/v0\" is not supported"), "{e}");
        std::fs::write(&f, br#"{"schema": "kbuild.manifest/v1", "objects": 3}"#).unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("manifest.json"), "{e}");
    }
}

#[cfg(test)]
mod load_index_tests {
    use super::*;
    use kbuild_manifest::load_index::{encode, ManifestStamp};
    use kbuild_manifest::target::Version;

    fn write_index(dir: &Path, m: &Manifest) {
        let path = dir.join("manifest.json");
        let stamp = ManifestStamp::of(
            &std::fs::metadata(&path).unwrap(),
            &std::fs::read(&path).unwrap(),
        );
        let bytes = encode(m, stamp).unwrap();
        std::fs::write(dir.join(LOAD_INDEX_FILE), bytes).unwrap();
    }

    #[test]
    fn a_load_index_gives_what_the_json_gives() {
        let (dir, m) = tests_support::build_dir();
        let json = Package::open_uncached(dir.path()).unwrap();
        assert!(!json.has_load_index());
        write_index(dir.path(), &m);
        let bin = Package::open(dir.path()).unwrap();
        assert!(bin.has_load_index());
        assert_eq!(bin.kernels(), json.kernels());
        // The same encoder with the same stamp: the in-memory index is the file, byte for
        // byte (the file's head, here: the unit tests read it in two steps).
        assert!(!bin.index.bytes.is_empty());
        assert_eq!(
            &json.index.bytes[..bin.index.bytes.len()],
            &*bin.index.bytes
        );
        for (spec, driver) in [
            ("sm_90", Some(Version(13, 0))),
            ("sm_90", Some(Version(13, 5))),
            ("sm_89", None),
            ("gfx1100", None),
        ] {
            let device = Device::parse(spec, driver, None).unwrap();
            let sel = bin.select(&device);
            assert_eq!(sel, json.select(&device), "{spec}");
            let (mut vb, mut vj) = (Verdicts::new(device), Verdicts::new(device));
            for k in &sel.kernels {
                let want = k.selected().map(|c| c.object);
                assert_eq!(bin.choose(&mut vb, &k.kernel, None), want, "{spec}");
                assert_eq!(json.choose(&mut vj, &k.kernel, None), want, "{spec}");
            }
        }
        assert_eq!(bin.object_count(), json.object_count());
        for i in 0..m.objects.len() {
            let (b, j) = (bin.object(i).unwrap(), json.object(i).unwrap());
            assert_eq!(*b, *j);
            assert_eq!(
                b.entries().collect::<Vec<_>>(),
                j.entries().collect::<Vec<_>>()
            );
            assert_eq!(b.entry("k"), j.entry("k"));
            assert_eq!(bin.record(i).unwrap(), json.record(i).unwrap());
            assert_eq!(bin.resources(i).unwrap(), json.resources(i).unwrap());
            assert_eq!(
                bin.read_verified(i).unwrap(),
                json.read_verified(i).unwrap()
            );
        }
        assert!(bin.object(2).is_err() && json.object(2).is_err());
        assert_eq!(bin.manifest().unwrap(), &m);
        assert_eq!(json.manifest().unwrap(), &m);
        assert_eq!(bin.objects().len(), 2);
        assert_eq!(bin.objects()[1].ptx_isa, Some(Version(9, 5)));
        // A swapped object is caught through either index.
        std::fs::write(dir.path().join(&m.objects[0].path), b"swapped").unwrap();
        for p in [&bin, &json] {
            let e = p.read_verified(0).unwrap_err();
            assert!(matches!(e, LoaderError::Blake3Mismatch { .. }), "{e}");
            assert!(e.to_string().contains("7 bytes"), "{e}");
        }
    }

    #[test]
    fn launch_parameters_come_from_manifest_kbi_and_not_from_a_version_3_one() {
        use kbuild_manifest::params::{Param, ParamKind};
        let (dir, mut m) = tests_support::build_dir();
        let p = |index, hidden| Param {
            index,
            offset: 8 * u64::from(index),
            size: 8,
            align: None,
            kind: ParamKind::Unknown,
            name: None,
            type_name: None,
            hidden,
        };
        m.objects[0].params = [("k".to_string(), vec![p(0, false), p(1, true)])].into();
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        write_index(dir.path(), &m);
        let bin = Package::open(dir.path()).unwrap();
        assert!(bin.has_load_index());
        let got = bin.params(0).unwrap().unwrap();
        assert_eq!(got[0].as_ref().unwrap().params, [p(0, false)]);
        assert_eq!(got[0].as_ref().unwrap().hidden, 1);
        // The PTX object's record has none: nothing carried.
        assert_eq!(bin.params(1).unwrap(), None);
        assert_eq!(
            bin.index.entry_params(0, "k", bin.origin()).unwrap(),
            got[0].clone()
        );
        assert_eq!(
            bin.index.entry_params(0, "nope", bin.origin()).unwrap(),
            None
        );
        // The same from the JSON.
        let json = Package::open_uncached(dir.path()).unwrap();
        assert_eq!(json.params(0).unwrap(), Some(got));
        // A version 3 index of the same build (written before parameters were carried):
        // still used, and it carries none.
        let ix = dir.path().join(LOAD_INDEX_FILE);
        let mut bytes = std::fs::read(&ix).unwrap();
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        std::fs::write(&ix, &bytes).unwrap();
        let old = Package::open(dir.path()).unwrap();
        assert!(old.has_load_index());
        assert_eq!(old.params(0).unwrap(), None);
        assert_eq!(old.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn an_index_of_the_previous_layout_is_re_derived_not_misread() {
        let (dir, m) = tests_support::build_dir();
        write_index(dir.path(), &m);
        let ix = dir.path().join(LOAD_INDEX_FILE);
        let mut bytes = std::fs::read(&ix).unwrap();
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        std::fs::write(&ix, &bytes).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.record(0).unwrap().blake3, m.objects[0].blake3);
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn a_stale_or_damaged_index_is_not_used() {
        let (dir, mut m) = tests_support::build_dir();
        write_index(dir.path(), &m);
        assert!(Package::open(dir.path()).unwrap().has_load_index());
        // The same bytes with a new mtime (a copy that does not keep mtimes): the blake3 in
        // the index still binds it.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let json = std::fs::read(dir.path().join("manifest.json")).unwrap();
        std::fs::write(dir.path().join("manifest.json"), &json).unwrap();
        assert!(Package::open(dir.path()).unwrap().has_load_index());
        // The manifest rewritten after the index (an edit, a new build without kbuild):
        // the JSON is what counts.
        m.objects[0]
            .resources
            .insert("k".into(), tests_support::cuda(40));
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        match &p.resources(0).unwrap()["k"] {
            Resources::Cuda(c) => assert_eq!(c.registers, 40),
            r => panic!("{r:?}"),
        }
        // Damaged: truncated, or not an index at all.
        write_index(dir.path(), &m);
        let ix = dir.path().join(LOAD_INDEX_FILE);
        let bytes = std::fs::read(&ix).unwrap();
        std::fs::write(&ix, &bytes[..HEADER_LEN + 10]).unwrap();
        assert!(!Package::open(dir.path()).unwrap().has_load_index());
        // Cut inside the resource blobs: the head is whole and checks out, so the index opens
        // and selects; the resource records fail their own digest when first read, and the
        // error names the index.
        let head = head_len(&bytes[..HEADER_LEN]).unwrap() as usize;
        std::fs::write(&ix, &bytes[..head + 1]).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(p.has_load_index());
        let last = p.objects().len() - 1;
        assert!(p.object(last).is_ok());
        let e = p.record(last).unwrap_err().to_string();
        assert!(
            e.contains(LOAD_INDEX_FILE) && e.contains("past the end"),
            "{e}"
        );
        // Two object records swapped in place, the stamp kept (an index edited to point one
        // kernel at another's object): refused whole, the manifest's choice stands.
        let at = HEADER_LEN + p.kernels().len() * 8;
        let mut swapped = bytes.clone();
        let (a, b) = swapped[at..].split_at_mut(144);
        a.swap_with_slice(&mut b[..144]);
        std::fs::write(&ix, &swapped).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.record(0).unwrap().path, m.objects[0].path);
        // Only the path spans swapped (each object pointing at the other's file).
        let mut swapped = bytes.clone();
        let (a, b) = swapped[at..].split_at_mut(144);
        a[24..32].swap_with_slice(&mut b[24..32]);
        std::fs::write(&ix, &swapped).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.object(0).unwrap().path, m.objects[0].path);
        // Any single flipped byte of the head is caught the same way; one in the blobs when
        // a resource record is read.
        for i in (HEADER_LEN..bytes.len()).step_by(37) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            std::fs::write(&ix, &bad).unwrap();
            let p = Package::open(dir.path()).unwrap();
            if i < head {
                assert!(!p.has_load_index(), "byte {i}");
            } else {
                assert!(p.has_load_index(), "byte {i}");
                let bad_record = (0..p.objects().len()).any(|k| p.resources(k).is_err());
                assert!(bad_record, "byte {i}");
            }
        }
        std::fs::write(&ix, &bytes).unwrap();
        assert!(Package::open(dir.path()).unwrap().has_load_index());
        std::fs::write(&ix, b"garbage").unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(!p.has_load_index());
        assert_eq!(p.kernels(), ["k"]);
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;

    #[test]
    fn the_index_cache_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = crate::select::tests::manifest(vec![crate::select::tests::object(
            "a", None, "sm_90", None,
        )]);
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        assert_eq!(Package::open(dir.path()).unwrap().kernels(), ["a"]);
        assert_eq!(Package::open(dir.path()).unwrap().kernels(), ["a"]);
        // A new build (a rename over the manifest, as the build writes it) is seen at once.
        m = crate::select::tests::manifest(vec![crate::select::tests::object(
            "bb", None, "sm_90", None,
        )]);
        let tmp = dir.path().join("manifest.json.tmp");
        std::fs::write(&tmp, m.to_json()).unwrap();
        std::fs::rename(&tmp, dir.path().join("manifest.json")).unwrap();
        assert_eq!(Package::open(dir.path()).unwrap().kernels(), ["bb"]);
        assert_eq!(
            Package::open_uncached(dir.path()).unwrap().kernels(),
            ["bb"]
        );
    }
}
