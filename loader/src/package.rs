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
//!
//! Bundles (feature `registry`): a bundle file (`NAME-VERSION.kbundle`) or a pulled cache
//! entry, both read and verified by `kbuild-bundle`, then indexed like a build directory, with
//! the signature policy's [`TrustVerdict`](crate::bundle::TrustVerdict) kept. A subset bundle (pulled for
//! one device) holds only some targets' objects: the others are left out of the index, so
//! selection never picks an object that is not there.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kbuild_manifest::compat::Device;
use kbuild_manifest::load_index::{
    decode_resources, hex_into, EntryParams, IndexObject, ManifestStamp,
};
use kbuild_manifest::manifest::{Manifest, ObjectRecord};
use kbuild_manifest::resources::Resources;
use kbuild_manifest::triton::TritonLaunch;
use sha2::{Digest, Sha256};

#[cfg(feature = "registry")]
use crate::bundle::{trust_note, trust_warning, untrusted, Trust};
use crate::error::{LoaderError, Result};
pub use crate::index::ObjectRef;
use crate::index::{index_cache, open_load_index, PackageIndex, NOT_A_FILE};
use crate::select::{choose, trace, Selection, Verdicts};
#[cfg(feature = "registry")]
use crate::source::BundleSource;
use crate::source::EmptySource;
pub use crate::source::{DirSource, ObjectSource};
#[cfg(feature = "registry")]
use kbuild_bundle::{
    bundle::Bundle,
    cache::{BundleCache, CachedRef},
};

/// The signature policy's verdict on a package (none can exist without the registry's
/// reader).
#[cfg(feature = "registry")]
use crate::bundle::TrustVerdict;
#[cfg(not(feature = "registry"))]
type TrustVerdict = std::convert::Infallible;

#[cfg(not(feature = "registry"))]
fn trust_note(v: &TrustVerdict) -> String {
    match *v {}
}

#[cfg(not(feature = "registry"))]
fn trust_warning(v: &TrustVerdict) -> Option<&str> {
    match *v {}
}

/// A manifest and the source of its objects.
pub struct Package {
    index: Arc<PackageIndex>,
    source: Box<dyn ObjectSource>,
    origin: PathBuf,
    /// What the signature policy said when a bundle or pulled entry was opened; `None` for
    /// a build directory or manifest (local and unsigned).
    trust: Option<TrustVerdict>,
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("origin", &self.origin)
            .field("objects", &self.object_count())
            .finish_non_exhaustive()
    }
}

/// The manifest crate's limit for a manifest file.
const MAX_JSON_BYTES: u64 = kbuild_manifest::manifest::MAX_JSON_BYTES;

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
            return Package::open_bundle(path, &Trust::default());
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
        if !meta.is_file() || meta.len() > MAX_JSON_BYTES {
            return Err(LoaderError::Package {
                path: manifest_path.clone(),
                what: format!(
                    "not a regular file of at most {MAX_JSON_BYTES} bytes (kbuild's limit for a manifest); refusing to read it"
                ),
            });
        }
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
        let index = Arc::new(PackageIndex::encode(
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
            index: Arc::new(PackageIndex::encode(manifest, NOT_A_FILE, None, &origin)?),
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
        let source = Box::new(EmptySource {
            origin: origin.clone(),
        });
        Package::from_parts(manifest, source, origin)
    }

    /// Open a build directory, manifest or bundle, applying `trust` to a bundle (with the
    /// `NAME-VERSION.kbundle.sig` file beside it). Build directories and manifests are local
    /// and unsigned: no policy applies to them.
    #[cfg(feature = "registry")]
    pub fn open_trusted(path: &Path, trust: &Trust) -> Result<Package> {
        if starts_like_bundle(path) {
            Package::open_bundle(path, trust)
        } else {
            Package::open(path)
        }
    }

    /// Open a bundle file, verified by the registry's reader, and apply `trust` to it (its
    /// `.sig` file beside it): under `require`, a bundle without a valid signature by a
    /// trusted key is refused before anything of it is used.
    #[cfg(feature = "registry")]
    pub fn open_bundle(path: &Path, trust: &Trust) -> Result<Package> {
        let (bundle, verdict) = kbuild_bundle::verify_bundle_file(
            path,
            trust,
            kbuild_bundle::archive::ArchiveLimits::default(),
        )
        .map_err(|e| match e {
            kbuild_bundle::VerifyError::Signature(s) => untrusted(path, s),
            kbuild_bundle::VerifyError::Bundle { err, .. } => LoaderError::Package {
                path: path.to_path_buf(),
                what: err.to_string(),
            },
        })?;
        Ok(Package::from_bundle(bundle, path.to_path_buf())?.with_trust(verdict))
    }

    /// A pulled version from the local registry cache (`kbuild pull`), with `trust` applied
    /// to the signatures cached with it, as at pull.
    #[cfg(feature = "registry")]
    pub fn from_cache(cache: &BundleCache, entry: &CachedRef, trust: &Trust) -> Result<Package> {
        let origin = cache
            .root()
            .join(format!("{}@{}", entry.name, entry.version));
        let bundle = cache.open(entry).map_err(|e| LoaderError::Package {
            path: cache.root().to_path_buf(),
            what: e.to_string(),
        })?;
        let sigs = cache.signatures(entry).map_err(|e| LoaderError::Package {
            path: cache.root().to_path_buf(),
            what: e.to_string(),
        })?;
        let verdict = trust
            .check(
                bundle.name(),
                bundle.version(),
                bundle.manifest_digest(),
                sigs.as_ref(),
            )
            .map_err(|e| untrusted(&origin, e))?;
        Ok(Package::from_bundle(bundle, origin)?.with_trust(verdict))
    }

    /// A bundle file's bytes held in memory (e.g. `include_bytes!` of a bundle a build script
    /// wrote), verified like a file; `origin` names it in messages.
    #[cfg(feature = "registry")]
    pub fn from_bundle_bytes(bytes: &[u8], origin: &str) -> Result<Package> {
        let bundle = Bundle::from_bytes(bytes, kbuild_bundle::archive::ArchiveLimits::default())
            .map_err(|e| LoaderError::Package {
                path: PathBuf::from(origin),
                what: e.to_string(),
            })?;
        Package::from_bundle(bundle, PathBuf::from(origin))
    }

    /// Any bundle in memory.
    #[cfg(feature = "registry")]
    pub fn from_bundle(bundle: Bundle, origin: PathBuf) -> Result<Package> {
        // The bundle's parsed manifest is the one indexed: no second parse or copy of it.
        // A subset bundle lists only the objects it holds.
        let (mut manifest, objects) = bundle.into_parts();
        manifest.objects.retain(|o| objects.contains_key(&o.sha256));
        let source = BundleSource {
            origin: origin.display().to_string(),
            objects,
        };
        Package::from_parts(manifest, Box::new(source), origin)
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

    pub(crate) fn shared_index(&self) -> Arc<PackageIndex> {
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
            kbuild_base::read::read_capped(path, MAX_JSON_BYTES, "a manifest").map_err(|e| {
                LoaderError::Package {
                    path: path.clone(),
                    what: e.to_string(),
                }
            })?;
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
            triton: None,
        })
    }

    /// The Triton launch record of object `index` (block, dynamic shared memory, scratch,
    /// parameters and their specialization), read from the manifest; `None` for an object
    /// that is not a Triton kernel's.
    pub fn triton_launch(&self, index: usize) -> Result<Option<&TritonLaunch>> {
        let m = self.manifest()?;
        Ok(m.objects.get(index).and_then(|o| o.triton.as_ref()))
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

    /// What the signature policy said when this bundle or pulled entry was opened; `None`
    /// for a build directory or manifest, which are local and unsigned.
    #[cfg(feature = "registry")]
    pub fn trust(&self) -> Option<&crate::bundle::TrustVerdict> {
        self.trust.as_ref()
    }

    /// [`Package::trust`] in one line (`signed by trusted key …`, or the `warn` policy's
    /// message).
    pub fn trust_note(&self) -> Option<String> {
        self.trust.as_ref().map(trust_note)
    }

    /// The policy's warning when it let this bundle or pulled entry through with one
    /// ([`crate::bundle::trust_warning`]); `None` otherwise.
    pub fn trust_warning(&self) -> Option<&str> {
        self.trust.as_ref().and_then(trust_warning)
    }

    /// The package with the verdict the signature policy gave it (a bundle verified by the
    /// caller, as a pull does).
    #[cfg(feature = "registry")]
    pub fn with_trust(mut self, verdict: crate::bundle::TrustVerdict) -> Package {
        self.trust = Some(verdict);
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

#[cfg(feature = "registry")]
pub(crate) fn starts_like_bundle(path: &Path) -> bool {
    let mut head = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| kbuild_base::looks_like_bundle(&head))
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

/// Lowercase hex sha256.
pub use kbuild_base::digest::sha256_hex;

#[cfg(test)]
mod tests;
