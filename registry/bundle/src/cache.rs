//! The local content-addressed cache of pulled bundles (`kbuild_base::dirs::Dirs::registry_cache`,
//! i.e. `<kbuild cache dir>/registry`). Layout:
//!
//! ```text
//! blobs/sha256/<hex>                        manifests, objects and signature files, by content
//! refs/<registry key>/<name>/<version>.json what was pulled from where (a [`CachedRef`])
//! ```
//!
//! Blobs are verified before they are written (temp + rename) and again when read; a ref is
//! written last, so a killed pull leaves at most unreferenced blobs, never a ref to a missing
//! or partial one. Shared by every project of the user, safe under concurrent pulls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bundle::{Bundle, BundleError};
use crate::digest;
use crate::sign::SignatureFile;
use kbuild_base::fs as fsx;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("cache entry {path} is corrupt ({what}); it was removed, pull again")]
    Corrupt { path: String, what: String },
    #[error("cached bundle: {0}")]
    Bundle(#[from] BundleError),
    /// A name or version that is no safe path component (from a registry or a ref file).
    #[error("registry cache: {0}")]
    Field(#[from] kbuild_base::ident::IdentError),
}

/// One pulled version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachedRef {
    pub registry: String,
    pub name: String,
    pub version: String,
    /// OCI manifest digest, or the bundle file's digest (dir registry).
    pub artifact: String,
    /// `sha256:` of manifest.json.
    pub manifest: String,
    /// target → layer digest, for the targets whose objects are cached.
    pub layers: BTreeMap<String, String>,
    /// Hex of the cached signature file blob, when the registry had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signatures: Option<String>,
}

pub struct BundleCache {
    root: PathBuf,
}

/// A directory name for a registry string: readable part + hash, so two never collide.
fn registry_key(registry: &str) -> String {
    let readable: String = registry
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect();
    format!(
        "{readable}-{}",
        &digest::sha256_hex(registry.as_bytes())[..12]
    )
}

impl BundleCache {
    pub fn new(root: &Path) -> BundleCache {
        BundleCache {
            root: root.to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn blob_path(&self, hex: &str) -> PathBuf {
        self.root.join("blobs/sha256").join(hex)
    }

    /// Store bytes by their sha256 (no-op when present). Returns the hex.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String, CacheError> {
        let hex = digest::sha256_hex(bytes);
        let p = self.blob_path(&hex);
        if !p.exists() {
            fsx::write_atomic(&p, bytes).map_err(|err| CacheError::Io {
                path: p.display().to_string(),
                err,
            })?;
        }
        Ok(hex)
    }

    /// A blob, re-verified; a corrupt one is removed and reported.
    pub fn get_blob(&self, hex: &str) -> Result<Option<Vec<u8>>, CacheError> {
        if !digest::is_sha256_hex(hex) {
            return Ok(None);
        }
        let p = self.blob_path(hex);
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => {
                return Err(CacheError::Io {
                    path: p.display().to_string(),
                    err,
                })
            }
        };
        if digest::sha256_hex(&bytes) != hex {
            let _ = std::fs::remove_file(&p);
            return Err(CacheError::Corrupt {
                path: p.display().to_string(),
                what: "sha256 mismatch".into(),
            });
        }
        Ok(Some(bytes))
    }

    /// `refs/<registry key>/<name>/<version>.json`; the name and version are checked first,
    /// so no string from a registry leaves the cache directory.
    fn ref_path(&self, registry: &str, name: &str, version: &str) -> Result<PathBuf, CacheError> {
        kbuild_base::ident::check_package_name("package name", name)?;
        kbuild_base::ident::check_version("package version", version)?;
        Ok(self
            .root
            .join("refs")
            .join(registry_key(registry))
            .join(name)
            .join(format!("{version}.json")))
    }

    /// Store a verified (subset) bundle pulled from `registry`. Targets cached before for the
    /// same artifact are kept.
    pub fn store(
        &self,
        registry: &str,
        artifact: &str,
        bundle: &Bundle,
        layers: &BTreeMap<String, String>,
        sigs: Option<&SignatureFile>,
    ) -> Result<CachedRef, CacheError> {
        self.put_blob(bundle.manifest_json())?;
        for data in bundle.objects().values() {
            self.put_blob(data)?;
        }
        let signatures = match sigs {
            Some(s) => Some(self.put_blob(&s.to_json())?),
            None => None,
        };
        let mut r = CachedRef {
            registry: registry.into(),
            name: bundle.name().into(),
            version: bundle.version().into(),
            artifact: artifact.into(),
            manifest: bundle.manifest_digest().into(),
            layers: layers.clone(),
            signatures,
        };
        if let Some(old) = self.get_ref(registry, bundle.name(), bundle.version()) {
            if old.artifact == r.artifact {
                for (t, d) in old.layers {
                    r.layers.entry(t).or_insert(d);
                }
                if r.signatures.is_none() {
                    r.signatures = old.signatures;
                }
            }
        }
        let p = self.ref_path(registry, &r.name, &r.version)?;
        let mut text = serde_json::to_vec_pretty(&r).unwrap_or_default();
        text.push(b'\n');
        fsx::write_atomic(&p, &text).map_err(|err| CacheError::Io {
            path: p.display().to_string(),
            err,
        })?;
        Ok(r)
    }

    pub fn get_ref(&self, registry: &str, name: &str, version: &str) -> Option<CachedRef> {
        let p = self.ref_path(registry, name, version).ok()?;
        let r: CachedRef = serde_json::from_slice(&std::fs::read(p).ok()?).ok()?;
        // A ref file is only what it says where it lies: another name or version is a damaged
        // (or planted) file, not a hit.
        (r.name == name && r.version == version && r.registry == registry).then_some(r)
    }

    /// Every cached ref, optionally only one registry's and one name's.
    pub fn refs(&self, registry: Option<&str>, name: Option<&str>) -> Vec<CachedRef> {
        let mut out = Vec::new();
        let Ok(regs) = std::fs::read_dir(self.root.join("refs")) else {
            return out;
        };
        for reg in regs.filter_map(|e| e.ok()) {
            if let Some(r) = registry {
                if reg.file_name().to_string_lossy() != registry_key(r) {
                    continue;
                }
            }
            let Ok(names) = std::fs::read_dir(reg.path()) else {
                continue;
            };
            for n in names.filter_map(|e| e.ok()) {
                if name.is_some_and(|want| n.file_name().to_string_lossy() != want) {
                    continue;
                }
                let Ok(files) = std::fs::read_dir(n.path()) else {
                    continue;
                };
                for f in files.filter_map(|e| e.ok()) {
                    if !f.file_name().to_string_lossy().ends_with(".json") {
                        continue;
                    }
                    if let Some(r) = std::fs::read(f.path())
                        .ok()
                        .and_then(|b| serde_json::from_slice::<CachedRef>(&b).ok())
                        .filter(|r| {
                            self.ref_path(&r.registry, &r.name, &r.version)
                                .is_ok_and(|p| p == f.path())
                        })
                    {
                        out.push(r);
                    }
                }
            }
        }
        out.sort_by(|a, b| {
            (
                &a.registry,
                &a.name,
                semver::Version::parse(&a.version).ok(),
            )
                .cmp(&(
                    &b.registry,
                    &b.name,
                    semver::Version::parse(&b.version).ok(),
                ))
        });
        out
    }

    /// The cached bundle of a ref (its cached targets only), re-verified.
    pub fn open(&self, r: &CachedRef) -> Result<Bundle, CacheError> {
        let ref_path = self.ref_path(&r.registry, &r.name, &r.version)?;
        let missing = |what: String| CacheError::Corrupt {
            path: ref_path.display().to_string(),
            what,
        };
        let mhex = digest::oci_hex(&r.manifest).unwrap_or_default();
        let manifest = self
            .get_blob(mhex)?
            .ok_or_else(|| missing(format!("manifest blob {mhex} is missing")))?;
        let m = kbuild_manifest::manifest::Manifest::from_json(&manifest)
            .map_err(|e| missing(e.to_string()))?;
        if m.package.name != r.name || m.package.version != r.version {
            return Err(missing(format!(
                "its manifest is {} {}, not {} {}",
                m.package.name, m.package.version, r.name, r.version
            )));
        }
        let targets: Vec<String> = m
            .targets
            .iter()
            .filter(|t| r.layers.contains_key(*t))
            .cloned()
            .collect();
        let mut objects = BTreeMap::new();
        for o in m.objects.iter().filter(|o| targets.contains(&o.target)) {
            if objects.contains_key(&o.sha256) {
                continue;
            }
            let data = self
                .get_blob(&o.sha256)?
                .ok_or_else(|| missing(format!("object blob {} is missing", o.sha256)))?;
            objects.insert(o.sha256.clone(), data);
        }
        Ok(Bundle::from_parts(manifest, objects, Some(targets))?)
    }

    pub fn signatures(&self, r: &CachedRef) -> Result<Option<SignatureFile>, CacheError> {
        let Some(hex) = &r.signatures else {
            return Ok(None);
        };
        match self.get_blob(hex)? {
            Some(b) => Ok(SignatureFile::from_json(&b).ok()),
            None => Ok(None),
        }
    }
}
