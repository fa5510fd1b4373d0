//! Where code objects come from: a build directory (`manifest.json` beside the objects), a
//! manifest file, or any [`ObjectSource`] (a bundle or a pulled cache entry of the registry).
//! Every object is checked against the manifest's sha256 before anyone sees its bytes.
//!
//! Opening reads an index of the manifest (what selection needs: kernel, variant, target,
//! path, sha256, PTX ISA); an object's resource records are parsed when it is loaded, and the
//! whole [`Manifest`] only when asked for. Opening is on the load path of every process, so
//! it costs a scan of the JSON, not a full parse.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use kbuild_manifest::compat::{parse_version, Device};
use kbuild_manifest::manifest::{Manifest, ObjectRecord, SCHEMA};
use kbuild_manifest::resources::Resources;
use kbuild_manifest::target::Version;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::error::{LoaderError, Result};
use crate::select::{select_objects, ObjectInfo, Selection};

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
#[derive(Debug, Clone, Deserialize)]
pub struct IndexedObject {
    pub kernel: String,
    #[serde(default)]
    pub variant: Option<String>,
    pub target: String,
    pub path: String,
    pub sha256: String,
    #[serde(default)]
    pub size: u64,
    pub format: String,
    #[serde(default)]
    pub entries: Vec<String>,
    #[serde(default)]
    resources: Option<Box<RawValue>>,
    #[serde(skip)]
    ptx_isa: Option<Version>,
    #[serde(skip)]
    parsed: Option<BTreeMap<String, Resources>>,
}

impl IndexedObject {
    /// The resource records per entry (parsed on demand).
    pub fn resources(&self) -> Result<BTreeMap<String, Resources>> {
        if let Some(p) = &self.parsed {
            return Ok(p.clone());
        }
        match &self.resources {
            None => Ok(BTreeMap::new()),
            Some(raw) => serde_json::from_str(raw.get()).map_err(|e| {
                LoaderError::Other(format!(
                    "{}: resource records do not parse: {e}",
                    self.path
                ))
            }),
        }
    }
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

#[derive(Deserialize)]
struct Index {
    schema: Option<String>,
    #[serde(default)]
    kernels: Vec<String>,
    #[serde(default)]
    objects: Vec<IndexedObject>,
}

/// A manifest and the source of its objects.
pub struct Package {
    kernels: Vec<String>,
    objects: Vec<IndexedObject>,
    /// The manifest JSON, for a full parse on demand (absent when built from a `Manifest`).
    data: Option<Vec<u8>>,
    full: OnceLock<std::result::Result<Manifest, String>>,
    source: Box<dyn ObjectSource>,
    origin: PathBuf,
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("origin", &self.origin)
            .field("objects", &self.objects.len())
            .finish_non_exhaustive()
    }
}

impl Package {
    /// Open a build directory (holding `manifest.json`) or a manifest file.
    pub fn open(path: &Path) -> Result<Package> {
        let (manifest_path, root) = if path.is_dir() {
            (path.join("manifest.json"), path.to_path_buf())
        } else {
            let root = path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            (path.to_path_buf(), root)
        };
        let data = std::fs::read(&manifest_path).map_err(|e| {
            let what = if path.is_dir() {
                "reading the manifest (is this a kbuild --out directory?)"
            } else {
                "reading the manifest"
            };
            LoaderError::io(&manifest_path, what, e)
        })?;
        Package::from_json(data, Box::new(DirSource::new(root)), manifest_path)
    }

    /// A package from manifest JSON and the source of its objects.
    pub fn from_json(
        data: Vec<u8>,
        source: Box<dyn ObjectSource>,
        origin: PathBuf,
    ) -> Result<Package> {
        let not_manifest = |origin: &Path| LoaderError::Package {
            path: origin.to_path_buf(),
            what: "not a kbuild manifest (JSON) or build directory; a .kbundle file is opened through kbuild-registry (unpack or pull it, then open the directory)".into(),
        };
        if !data
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{')
        {
            return Err(not_manifest(&origin));
        }
        let index: Option<Index> = serde_json::from_slice(&data).ok();
        let index = match index {
            Some(i) if i.schema.as_deref() == Some(SCHEMA) => i,
            // Not ours or malformed: the manifest reader says exactly what is wrong.
            _ => {
                return Err(match Manifest::from_json(&data) {
                    Err(source) => LoaderError::Manifest {
                        path: origin,
                        source,
                    },
                    Ok(_) => not_manifest(&origin),
                })
            }
        };
        let mut objects = index.objects;
        for o in &mut objects {
            if o.format == "ptx" {
                o.ptx_isa = o.resources().ok().and_then(|r| first_ptx_isa(&r));
            }
        }
        Ok(Package {
            kernels: index.kernels,
            objects,
            data: Some(data),
            full: OnceLock::new(),
            source,
            origin,
        })
    }

    /// A package from a parsed manifest and any source of its objects (a bundle, a cache
    /// entry of the registry).
    pub fn from_parts(manifest: Manifest, source: Box<dyn ObjectSource>, origin: PathBuf) -> Package {
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
                resources: None,
                ptx_isa: first_ptx_isa(&o.resources),
                parsed: Some(o.resources.clone()),
            })
            .collect();
        let full = OnceLock::new();
        let kernels = manifest.kernels.clone();
        let _ = full.set(Ok(manifest));
        Package {
            kernels,
            objects,
            data: None,
            full,
            source,
            origin,
        }
    }

    /// The objects, in manifest order.
    pub fn objects(&self) -> &[IndexedObject] {
        &self.objects
    }

    /// Kernel names in Kbuild.toml order.
    pub fn kernels(&self) -> &[String] {
        &self.kernels
    }

    /// The whole manifest (parsed on first call).
    pub fn manifest(&self) -> Result<&Manifest> {
        let full = self.full.get_or_init(|| match &self.data {
            Some(d) => Manifest::from_json(d).map_err(|e| e.to_string()),
            None => Err("no manifest data".into()),
        });
        full.as_ref().map_err(|e| LoaderError::Package {
            path: self.origin.clone(),
            what: e.clone(),
        })
    }

    /// Judge every object for `device`.
    pub fn select(&self, device: &Device) -> Selection {
        select_objects(&self.objects, &self.kernels, device)
    }

    /// The manifest file or bundle this package was opened from.
    pub fn origin(&self) -> &Path {
        &self.origin
    }

    /// Object `index` as a full manifest record (resources parsed).
    pub fn record(&self, index: usize) -> Result<ObjectRecord> {
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
            resources: o.resources()?,
            cache_key: String::new(),
        })
    }

    fn object(&self, index: usize) -> Result<&IndexedObject> {
        self.objects
            .get(index)
            .ok_or_else(|| LoaderError::Other(format!("object {index} is not in the manifest")))
    }

    /// The bytes of object `index`, after checking their sha256 against the manifest.
    pub fn read_verified(&self, index: usize) -> Result<Vec<u8>> {
        let o = self.object(index)?;
        let bytes = self.source.read(&o.path, &o.sha256)?;
        verify(&o.path, &o.sha256, o.size, &bytes)?;
        Ok(bytes)
    }

    pub fn source(&self) -> &dyn ObjectSource {
        self.source.as_ref()
    }
}

fn first_ptx_isa(r: &BTreeMap<String, Resources>) -> Option<Version> {
    r.values().find_map(|r| match r {
        Resources::Ptx(p) => parse_version(&p.ptx_isa),
        _ => None,
    })
}

/// Check `bytes` against the manifest's sha256 (the sizes are part of the message).
pub fn verify(path: &str, sha256: &str, size: u64, bytes: &[u8]) -> Result<()> {
    let found = sha256_hex(bytes);
    if !found.eq_ignore_ascii_case(sha256) {
        return Err(LoaderError::Sha256Mismatch {
            path: path.to_string(),
            expected: sha256.to_string(),
            found: format!("{found} ({} bytes, manifest {size})", bytes.len()),
        });
    }
    Ok(())
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
mod tests {
    use super::*;
    use kbuild_manifest::compat::Rule;
    use kbuild_manifest::resources::CudaResources;

    fn cuda(registers: u32) -> Resources {
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
    fn build_dir() -> (tempfile::TempDir, Manifest) {
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
        let sel = p.select(&Device::parse("sm_90", Some(Version(13, 0)), true).unwrap());
        let k = sel.kernel("k", None).unwrap();
        assert_eq!(k.selected().unwrap().target, "sm_90");
        assert_eq!(k.candidates[1].rule, Some(Rule::PtxIsaTooNew));
        // The same through a manifest file path and through from_parts.
        let p2 = Package::open(&dir.path().join("manifest.json")).unwrap();
        assert_eq!(p2.select(&sel.device), sel);
        let p3 = Package::from_parts(m.clone(), Box::new(DirSource::new(dir.path())), dir.path().into());
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
        assert!(msg.contains("sm_90/k.cubin") && msg.contains("swapped or modified"), "{msg}");
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
        assert!(e.contains("manifest.json") && e.contains("kbuild --out directory"), "{e}");
        let f = dir.path().join("manifest.json");
        std::fs::write(&f, b"\x28\xb5\x2f\xfd binary").unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("kbuild-registry"), "{e}");
        std::fs::write(&f, br#"{"schema": "kbuild.manifest/v0"}"#).unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("\"kbuild.manifest/v0\" is not supported"), "{e}");
        std::fs::write(&f, br#"{"schema": "kbuild.manifest/v1", "objects": 3}"#).unwrap();
        let e = Package::open(&f).unwrap_err().to_string();
        assert!(e.contains("manifest.json"), "{e}");
    }
}
