//! Where code objects come from: a build directory (`manifest.json` beside the objects), a
//! manifest file, or any [`ObjectSource`] (a bundle or a pulled cache entry of the registry).
//! Every object is checked against the manifest's sha256 before anyone sees its bytes.
//!
//! Opening a build directory reads its load index `manifest.kbi` (fixed-layout binary, see
//! [`kbuild_manifest::load_index`]) while it matches `manifest.json`: no JSON is parsed on the
//! load path. Without one (or when the manifest changed since), opening scans the JSON for an
//! index of what selection needs (kernel, variant, target, path, sha256, PTX ISA). Either way
//! an object's resource records are decoded when it is loaded, and the whole [`Manifest`] only
//! when asked for.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use kbuild_manifest::compat::{parse_version, Device};
use kbuild_manifest::load_index::{
    decode_resources, head_len, IndexObject, LoadIndex, LoadIndexError, HEADER_LEN, LOAD_INDEX_FILE,
};
use kbuild_manifest::manifest::{Manifest, ObjectRecord, SCHEMA};
use kbuild_manifest::resources::Resources;
use kbuild_manifest::target::Version;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::error::{LoaderError, Result};
use crate::select::{select_indexed, select_kernel, select_objects, ObjectInfo, Selection};

/// Something that hands out the bytes of a manifest's objects.
pub trait ObjectSource: Send + Sync {
    /// The bytes of the object at `path` (manifest-relative) with digest `sha256`,
    /// unverified (the [`Package`] checks them).
    fn read(&self, path: &str, sha256: &str) -> Result<Vec<u8>>;
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
}

impl ObjectSource for DirSource {
    fn read(&self, path: &str, _sha256: &str) -> Result<Vec<u8>> {
        let rel = Path::new(path);
        let safe = rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !safe || path.is_empty() {
            return Err(LoaderError::Package {
                path: self.root.join("manifest.json"),
                what: format!(
                    "object path `{path}` must be relative and stay inside the directory"
                ),
            });
        }
        let full = self.root.join(rel);
        std::fs::read(&full).map_err(|e| LoaderError::io(full, "reading the code object", e))
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

/// One object as the index holds it.
#[derive(Debug, Clone)]
pub struct IndexedObject {
    pub kernel: String,
    pub variant: Option<String>,
    pub target: String,
    pub path: String,
    pub sha256: String,
    pub size: u64,
    pub format: String,
    pub entries: Vec<String>,
    resources: Stored,
    ptx_isa: Option<Version>,
}

/// Resource records: a byte range of the manifest text (parsed on demand), or parsed.
#[derive(Debug, Clone)]
enum Stored {
    Text(std::ops::Range<usize>),
    Parsed(BTreeMap<String, Resources>),
    /// Object `n` of the load index.
    Binary(usize),
}

/// The borrowed view serde fills while scanning the manifest once.
#[derive(Deserialize)]
struct RawObject<'a> {
    #[serde(borrow)]
    kernel: Cow<'a, str>,
    #[serde(default, borrow)]
    variant: Option<Cow<'a, str>>,
    #[serde(borrow)]
    target: Cow<'a, str>,
    #[serde(borrow)]
    path: Cow<'a, str>,
    #[serde(borrow)]
    sha256: Cow<'a, str>,
    #[serde(default)]
    size: u64,
    #[serde(borrow)]
    format: Cow<'a, str>,
    #[serde(default, borrow)]
    entries: Vec<Cow<'a, str>>,
    #[serde(default, borrow)]
    resources: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Index<'a> {
    #[serde(borrow)]
    schema: Option<Cow<'a, str>>,
    #[serde(default)]
    kernels: Vec<String>,
    #[serde(default, borrow)]
    objects: Vec<RawObject<'a>>,
}

impl ObjectInfo for IndexedObject {
    fn kernel(&self) -> &str {
        &self.kernel
    }
    fn variant(&self) -> Option<&str> {
        self.variant.as_deref()
    }
    fn target(&self) -> &str {
        &self.target
    }
    fn path(&self) -> &str {
        &self.path
    }
    fn ptx_isa(&self) -> Option<Version> {
        self.ptx_isa
    }
}

impl ObjectInfo for IndexObject<'_> {
    fn kernel(&self) -> &str {
        self.kernel
    }
    fn variant(&self) -> Option<&str> {
        self.variant
    }
    fn target(&self) -> &str {
        self.target
    }
    fn path(&self) -> &str {
        self.path
    }
    fn ptx_isa(&self) -> Option<Version> {
        self.ptx_isa
    }
}

/// What opening a manifest produces; shared by every open of the same unchanged file.
#[derive(Clone)]
struct PackageIndex {
    kernels: Vec<String>,
    /// From the JSON (or a parsed manifest); for a load index, made on first use of
    /// [`Package::objects`] (the load path reads the index in place).
    objects: OnceLock<Vec<IndexedObject>>,
    /// The manifest JSON: resource records are parsed from it on demand, the full manifest
    /// too (absent when built from a `Manifest` or opened through a load index).
    data: Option<String>,
    /// A validated load index (`manifest.kbi`): its head, read at open.
    binary: Option<BinaryIndex>,
}

/// The head of a load index (everything but the resource blobs, which are read one at a time
/// from the still open file when an object is loaded), and the manifest it stands for.
#[derive(Clone)]
struct BinaryIndex {
    head: Box<[u8]>,
    file: Arc<std::fs::File>,
    manifest: PathBuf,
}

impl BinaryIndex {
    fn read_at(&self, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>> {
        // The header's sizes were not checked against the file's: do that before allocating.
        if range.end > self.file.metadata()?.len() {
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
            self.file.read_exact_at(&mut buf, range.start)?;
        }
        #[cfg(not(unix))]
        {
            use std::io::{Read, Seek, SeekFrom};
            let mut f = &*self.file;
            f.seek(SeekFrom::Start(range.start))?;
            f.read_exact(&mut buf)?;
        }
        Ok(buf)
    }
}

impl PackageIndex {
    fn json(kernels: Vec<String>, objects: Vec<IndexedObject>, data: Option<String>) -> Self {
        PackageIndex {
            kernels,
            objects: OnceLock::from(objects),
            data,
            binary: None,
        }
    }

    fn load_index(&self) -> Option<LoadIndex<'_>> {
        // Validated when opened: parsing again only re-reads the header.
        self.binary
            .as_ref()
            .and_then(|b| LoadIndex::parse(&b.head).ok())
    }

    fn objects(&self) -> &[IndexedObject] {
        self.objects.get_or_init(|| {
            let Some(ix) = self.load_index() else {
                return Vec::new();
            };
            (0..ix.object_count())
                .filter_map(|i| ix.object(i).ok().map(|o| (i, o)))
                .map(|(i, o)| IndexedObject {
                    kernel: o.kernel.to_string(),
                    variant: o.variant.map(str::to_string),
                    target: o.target.to_string(),
                    path: o.path.to_string(),
                    sha256: o.sha256_hex(),
                    size: o.size,
                    format: o.format.to_string(),
                    entries: ix
                        .entries(&o)
                        .unwrap_or_default()
                        .into_iter()
                        .map(str::to_string)
                        .collect(),
                    resources: Stored::Binary(i),
                    ptx_isa: o.ptx_isa,
                })
                .collect()
        })
    }
}

/// Identity of a manifest file: an edit, a rename over it or a new build changes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> FileId {
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(-1);
        FileId {
            dev,
            ino,
            len: meta.len(),
            mtime_ns,
        }
    }
}

/// Parsed indexes of manifests opened in this process, by path and file identity. Only the
/// index is shared: every object is still read and sha256-checked on every load.
type IndexCache = Mutex<HashMap<PathBuf, (FileId, Arc<PackageIndex>)>>;

fn index_cache() -> &'static IndexCache {
    static CACHE: OnceLock<IndexCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A manifest and the source of its objects.
pub struct Package {
    index: Arc<PackageIndex>,
    full: OnceLock<std::result::Result<Manifest, String>>,
    source: Box<dyn ObjectSource>,
    origin: PathBuf,
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("origin", &self.origin)
            .field("objects", &self.objects().len())
            .finish_non_exhaustive()
    }
}

impl Package {
    /// Open a build directory (holding `manifest.json`) or a manifest file: through its load
    /// index `manifest.kbi` when that matches the manifest, else from the JSON, whose parsed
    /// index is reused while the manifest file is unchanged (same device, inode, size and
    /// mtime); [`Package::open_uncached`] always reads and parses the JSON.
    pub fn open(path: &Path) -> Result<Package> {
        Package::open_with(path, true)
    }

    /// [`Package::open`] from the JSON alone: no load index, no process-wide index cache.
    pub fn open_uncached(path: &Path) -> Result<Package> {
        Package::open_with(path, false)
    }

    fn open_with(path: &Path, cached: bool) -> Result<Package> {
        // One stat: opening is on the load path of every process.
        let is_dir = match std::fs::metadata(path) {
            Ok(m) => m.is_dir(),
            Err(_) => false,
        };
        #[cfg(feature = "registry")]
        if !is_dir && path.is_file() && starts_like_bundle(path) {
            return Package::open_bundle(path);
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
        let read_err = |e| {
            let what = if path.is_dir() {
                "reading the manifest (is this a kbuild --out directory?)"
            } else {
                "reading the manifest"
            };
            LoaderError::io(&manifest_path, what, e)
        };
        if let Some(index) = cached
            .then(|| open_load_index(&manifest_path, &root))
            .flatten()
        {
            return Ok(Package {
                index: Arc::new(index),
                full: OnceLock::new(),
                source: Box::new(DirSource::new(root)),
                origin: manifest_path,
            });
        }
        let source: Box<dyn ObjectSource> = Box::new(DirSource::new(root));
        if !cached {
            let data = std::fs::read(&manifest_path).map_err(read_err)?;
            return Package::from_json(data, source, manifest_path);
        }
        let id = FileId::of(&std::fs::metadata(&manifest_path).map_err(read_err)?);
        let hit = index_cache().lock().ok().and_then(|c| {
            c.get(&manifest_path)
                .filter(|(i, _)| *i == id)
                .map(|(_, x)| Arc::clone(x))
        });
        if let Some(index) = hit {
            return Ok(Package {
                index,
                full: OnceLock::new(),
                source,
                origin: manifest_path,
            });
        }
        let data = std::fs::read(&manifest_path).map_err(read_err)?;
        let package = Package::from_json(data, source, manifest_path.clone())?;
        if let Ok(mut c) = index_cache().lock() {
            c.insert(manifest_path, (id, Arc::clone(&package.index)));
        }
        Ok(package)
    }

    /// A package from manifest JSON and the source of its objects.
    pub fn from_json(
        data: Vec<u8>,
        source: Box<dyn ObjectSource>,
        origin: PathBuf,
    ) -> Result<Package> {
        let not_manifest = |origin: &Path| LoaderError::Package {
            path: origin.to_path_buf(),
            what: "not a kbuild manifest (JSON), bundle (.kbundle) or build directory".into(),
        };
        if data.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(not_manifest(&origin));
        }
        let text = match String::from_utf8(data) {
            Ok(t) => t,
            Err(_) => return Err(not_manifest(&origin)),
        };
        let base = text.as_ptr() as usize;
        let index: Option<Index> = serde_json::from_str(&text).ok();
        let (kernels, objects) = match index {
            Some(i) if i.schema.as_deref() == Some(SCHEMA) => {
                let objects: Vec<IndexedObject> = i
                    .objects
                    .into_iter()
                    .map(|o| {
                        // RawValue borrows from `text`: keep its place, not a copy.
                        let stored = match o.resources {
                            None => Stored::Text(0..0),
                            Some(r) => {
                                let start = (r.get().as_ptr() as usize).checked_sub(base);
                                match start.filter(|s| s + r.get().len() <= text.len()) {
                                    Some(s) => Stored::Text(s..s + r.get().len()),
                                    None => Stored::Parsed(
                                        serde_json::from_str(r.get()).unwrap_or_default(),
                                    ),
                                }
                            }
                        };
                        let ptx_isa = if o.format == "ptx" {
                            o.resources
                                .and_then(|r| serde_json::from_str(r.get()).ok())
                                .and_then(|r: BTreeMap<String, Resources>| first_ptx_isa(&r))
                        } else {
                            None
                        };
                        IndexedObject {
                            kernel: o.kernel.into_owned(),
                            variant: o.variant.map(Cow::into_owned),
                            target: o.target.into_owned(),
                            path: o.path.into_owned(),
                            sha256: o.sha256.into_owned(),
                            size: o.size,
                            format: o.format.into_owned(),
                            entries: o.entries.into_iter().map(Cow::into_owned).collect(),
                            resources: stored,
                            ptx_isa,
                        }
                    })
                    .collect();
                (i.kernels, objects)
            }
            // Not ours or malformed: the manifest reader says exactly what is wrong.
            _ => {
                return Err(match Manifest::from_json(text.as_bytes()) {
                    Err(source) => LoaderError::Manifest {
                        path: origin,
                        source,
                    },
                    Ok(_) => not_manifest(&origin),
                })
            }
        };
        Ok(Package {
            index: Arc::new(PackageIndex::json(kernels, objects, Some(text))),
            full: OnceLock::new(),
            source,
            origin,
        })
    }

    /// A package from a parsed manifest and any source of its objects (a bundle, a cache
    /// entry of the registry).
    pub fn from_parts(
        manifest: Manifest,
        source: Box<dyn ObjectSource>,
        origin: PathBuf,
    ) -> Package {
        let objects = manifest
            .objects
            .iter()
            .map(|o| IndexedObject {
                kernel: o.kernel.clone(),
                variant: o.variant.clone(),
                target: o.target.clone(),
                path: o.path.clone(),
                sha256: o.sha256.clone(),
                size: o.size,
                format: o.format.clone(),
                entries: o.entries.clone(),
                resources: Stored::Parsed(o.resources.clone()),
                ptx_isa: first_ptx_isa(&o.resources),
            })
            .collect();
        let full = OnceLock::new();
        let kernels = manifest.kernels.clone();
        let _ = full.set(Ok(manifest));
        Package {
            index: Arc::new(PackageIndex::json(kernels, objects, None)),
            full,
            source,
            origin,
        }
    }

    /// The objects, in manifest order.
    pub fn objects(&self) -> &[IndexedObject] {
        self.index.objects()
    }

    /// Whether this package was opened through its load index (`manifest.kbi`).
    pub fn has_load_index(&self) -> bool {
        self.index.binary.is_some()
    }

    /// Kernel names in Kbuild.toml order.
    pub fn kernels(&self) -> &[String] {
        &self.index.kernels
    }

    /// The whole manifest (parsed on first call).
    pub fn manifest(&self) -> Result<&Manifest> {
        let full = self
            .full
            .get_or_init(|| match (&self.index.data, &self.index.binary) {
                (Some(d), _) => Manifest::from_json(d.as_bytes()).map_err(|e| e.to_string()),
                (None, Some(b)) => std::fs::read(&b.manifest)
                    .map_err(|e| format!("{}: {e}", b.manifest.display()))
                    .and_then(|d| Manifest::from_json(&d).map_err(|e| e.to_string())),
                (None, None) => Err("no manifest data".into()),
            });
        full.as_ref().map_err(|e| LoaderError::Package {
            path: self.origin.clone(),
            what: e.clone(),
        })
    }

    /// Judge every object for `device`.
    pub fn select(&self, device: &Device) -> Selection {
        select_objects(self.objects(), &self.index.kernels, device)
    }

    /// Judge only `kernel`'s objects for `device` (the load path; with a load index, only
    /// that kernel's records are decoded).
    pub fn select_kernel(&self, device: &Device, kernel: &str) -> Selection {
        match self.index.load_index() {
            Some(ix) => {
                let objects = (0..ix.object_count())
                    .filter(|&i| ix.object_kernel_is(i, kernel))
                    .filter_map(|i| ix.object(i).ok().map(|o| (i, o)));
                select_indexed(objects, &self.index.kernels, device)
            }
            None => select_kernel(self.objects(), &self.index.kernels, device, kernel),
        }
    }

    /// The manifest file or bundle this package was opened from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// Object `index` as a full manifest record (resources parsed).
    pub fn record(&self, index: usize) -> Result<ObjectRecord> {
        if let Some(ix) = self.index.load_index() {
            let o = ix.object(index).map_err(|e| self.index_error(e))?;
            return Ok(ObjectRecord {
                kernel: o.kernel.to_string(),
                variant: o.variant.map(str::to_string),
                defines: BTreeMap::new(),
                target: o.target.to_string(),
                path: o.path.to_string(),
                sha256: o.sha256_hex(),
                size: o.size,
                format: o.format.to_string(),
                entries: ix
                    .entries(&o)
                    .map_err(|e| self.index_error(e))?
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
                resources: self.index_resources(&ix, &o)?,
                cache_key: String::new(),
            });
        }
        let o = self.object(index)?;
        Ok(ObjectRecord {
            kernel: o.kernel.clone(),
            variant: o.variant.clone(),
            defines: BTreeMap::new(),
            target: o.target.clone(),
            path: o.path.clone(),
            sha256: o.sha256.clone(),
            size: o.size,
            format: o.format.clone(),
            entries: o.entries.clone(),
            resources: self.resources(index)?,
            cache_key: String::new(),
        })
    }

    /// The resource records of object `index`, per entry.
    pub fn resources(&self, index: usize) -> Result<BTreeMap<String, Resources>> {
        let o = self.object(index)?;
        match &o.resources {
            Stored::Parsed(p) => Ok(p.clone()),
            Stored::Binary(i) => {
                let ix = self
                    .index
                    .load_index()
                    .ok_or_else(|| self.index_error(LoadIndexError::Magic))?;
                let v = ix.object(*i).map_err(|e| self.index_error(e))?;
                self.index_resources(&ix, &v)
            }
            Stored::Text(r) if r.is_empty() => Ok(BTreeMap::new()),
            Stored::Text(r) => {
                let text = self
                    .index
                    .data
                    .as_deref()
                    .and_then(|d| d.get(r.clone()))
                    .unwrap_or("{}");
                serde_json::from_str(text).map_err(|e| LoaderError::Package {
                    path: self.origin.clone(),
                    what: format!("{}: resource records do not parse: {e}", o.path),
                })
            }
        }
    }

    /// `o`'s resource records, read from the load index file.
    fn index_resources(
        &self,
        ix: &LoadIndex<'_>,
        o: &IndexObject<'_>,
    ) -> Result<BTreeMap<String, Resources>> {
        let b = self
            .index
            .binary
            .as_ref()
            .ok_or_else(|| self.index_error(LoadIndexError::Magic))?;
        let bytes = b.read_at(ix.resources_at(o)).map_err(|e| {
            LoaderError::io(
                b.manifest.with_file_name(LOAD_INDEX_FILE),
                "reading a resource record",
                e,
            )
        })?;
        decode_resources(&bytes, o.path).map_err(|e| self.index_error(e))
    }

    fn index_error(&self, e: LoadIndexError) -> LoaderError {
        let path = match &self.index.binary {
            Some(b) => b.manifest.with_file_name(LOAD_INDEX_FILE),
            None => self.origin.clone(),
        };
        LoaderError::Package {
            path,
            what: e.to_string(),
        }
    }

    fn object(&self, index: usize) -> Result<&IndexedObject> {
        self.objects()
            .get(index)
            .ok_or_else(|| LoaderError::Other(format!("object {index} is not in the manifest")))
    }

    /// The bytes of object `index`, after checking their sha256 against the manifest.
    pub fn read_verified(&self, index: usize) -> Result<Vec<u8>> {
        if let Some(ix) = self.index.load_index() {
            let o = ix.object(index).map_err(|e| self.index_error(e))?;
            let hex = o.sha256_hex();
            let bytes = self.source.read(o.path, &hex)?;
            if Sha256::digest(&bytes).as_slice() != o.sha256.as_slice() {
                return Err(mismatch(o.path, &hex, o.size, &bytes));
            }
            return Ok(bytes);
        }
        let o = self.object(index)?;
        let bytes = self.source.read(&o.path, &o.sha256)?;
        verify(&o.path, &o.sha256, o.size, &bytes)?;
        Ok(bytes)
    }

    pub fn source(&self) -> &dyn ObjectSource {
        self.source.as_ref()
    }

    /// Keep only the objects whose sha256 passes `keep` (a subset bundle's present ones).
    pub(crate) fn retain_objects(&mut self, keep: impl Fn(&str) -> bool) {
        let index = Arc::make_mut(&mut self.index);
        let mut objects = index.objects().to_vec();
        objects.retain(|o| keep(&o.sha256));
        index.objects = OnceLock::from(objects);
        index.binary = None;
    }

    pub(crate) fn with_source(mut self, source: Box<dyn ObjectSource>) -> Package {
        self.source = source;
        self
    }
}

#[cfg(feature = "registry")]
fn starts_like_bundle(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| crate::bundle::looks_like_bundle(&head))
}

fn first_ptx_isa(r: &BTreeMap<String, Resources>) -> Option<Version> {
    r.values().find_map(|r| match r {
        Resources::Ptx(p) => parse_version(&p.ptx_isa),
        _ => None,
    })
}

/// Check `bytes` against the manifest's sha256 (the sizes are part of the message).
pub fn verify(path: &str, sha256: &str, size: u64, bytes: &[u8]) -> Result<()> {
    if !sha256_hex(bytes).eq_ignore_ascii_case(sha256) {
        return Err(mismatch(path, sha256, size, bytes));
    }
    Ok(())
}

fn mismatch(path: &str, sha256: &str, size: u64, bytes: &[u8]) -> LoaderError {
    LoaderError::Sha256Mismatch {
        path: path.to_string(),
        expected: sha256.to_string(),
        found: format!(
            "{} ({} bytes, manifest {size})",
            sha256_hex(bytes),
            bytes.len()
        ),
    }
}

/// The load index beside `manifest_path`, when there is one, it is intact and it was written
/// for the manifest as it is now: the same file (length and mtime), or, when the mtime differs
/// (a copy that did not keep it), the same bytes (blake3). Anything else: `None`, and the
/// caller reads the JSON (which reports any error in the manifest itself).
fn open_load_index(manifest_path: &Path, root: &Path) -> Option<PackageIndex> {
    use std::io::Read;
    // The head only: the header says how long it is; the blobs stay in the file.
    let mut file = std::fs::File::open(root.join(LOAD_INDEX_FILE)).ok()?;
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header).ok()?;
    let head_len = head_len(&header).ok()?;
    // What the file holds, not what its header claims, bounds the allocation.
    let mut bytes = Vec::with_capacity(usize::try_from(head_len.min(1 << 20)).ok()?);
    bytes.extend_from_slice(&header);
    (&mut file)
        .take(head_len.saturating_sub(HEADER_LEN as u64))
        .read_to_end(&mut bytes)
        .ok()?;
    if bytes.len() as u64 != head_len {
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
    let kernels = (0..ix.kernel_count())
        .map(|k| ix.kernel(k).map(str::to_string))
        .collect::<std::result::Result<Vec<_>, _>>()
        .ok()?;
    Some(PackageIndex {
        kernels,
        objects: OnceLock::new(),
        data: None,
        binary: Some(BinaryIndex {
            head: bytes.into_boxed_slice(),
            file: Arc::new(file),
            manifest: manifest_path.to_path_buf(),
        }),
    })
}

/// Lowercase hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests_support {
    pub(super) use super::tests::{build_dir, cuda};
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::compat::Rule;
    use kbuild_manifest::resources::CudaResources;

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
        assert_eq!(p.objects()[1].ptx_isa(), Some(Version(9, 5)));
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
        );
        assert_eq!(p3.select(&sel.device), sel);
        assert_eq!(p3.read_verified(0).unwrap(), b"object for sm_90");
    }

    #[test]
    fn sha256_is_checked_before_anyone_sees_the_bytes() {
        let (dir, m) = build_dir();
        let p = Package::open(dir.path()).unwrap();
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");
        std::fs::write(dir.path().join(&m.objects[0].path), b"swapped").unwrap();
        let e = p.read_verified(0).unwrap_err();
        assert!(matches!(e, LoaderError::Sha256Mismatch { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("sm_90/k.cubin") && msg.contains("swapped or modified"),
            "{msg}"
        );
        assert!(msg.contains("7 bytes"), "{msg}");
    }

    #[test]
    fn object_paths_stay_inside_the_directory() {
        let (dir, mut m) = build_dir();
        m.objects[0].path = "../../etc/passwd".into();
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let p = Package::open(dir.path()).unwrap();
        let e = p.read_verified(0).unwrap_err().to_string();
        assert!(e.contains("must be relative and stay inside"), "{e}");
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
        let device = Device::parse("sm_90", Some(Version(13, 0)), None).unwrap();
        assert_eq!(bin.select(&device), json.select(&device));
        assert_eq!(
            bin.select_kernel(&device, "k"),
            json.select_kernel(&device, "k")
        );
        for i in 0..m.objects.len() {
            assert_eq!(bin.record(i).unwrap(), json.record(i).unwrap());
            assert_eq!(bin.resources(i).unwrap(), json.resources(i).unwrap());
            assert_eq!(
                bin.read_verified(i).unwrap(),
                json.read_verified(i).unwrap()
            );
        }
        assert_eq!(bin.manifest().unwrap(), &m);
        assert_eq!(bin.objects().len(), 2);
        assert_eq!(bin.objects()[1].ptx_isa(), Some(Version(9, 5)));
        // A swapped object is caught through the index as well.
        std::fs::write(dir.path().join(&m.objects[0].path), b"swapped").unwrap();
        let e = bin.read_verified(0).unwrap_err();
        assert!(matches!(e, LoaderError::Sha256Mismatch { .. }), "{e}");
        assert!(e.to_string().contains("7 bytes"), "{e}");
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
        // Cut inside the resource blobs: the head is whole, so the index opens, and loading
        // an object whose record is missing names the file.
        let head = head_len(&bytes[..HEADER_LEN]).unwrap() as usize;
        std::fs::write(&ix, &bytes[..head + 1]).unwrap();
        let p = Package::open(dir.path()).unwrap();
        assert!(p.has_load_index());
        let last = p.objects().len() - 1;
        let e = p.record(last).unwrap_err().to_string();
        assert!(
            e.contains(LOAD_INDEX_FILE) && e.contains("past the end"),
            "{e}"
        );
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
