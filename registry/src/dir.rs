//! The local directory registry (`--registry DIR` / `file://DIR`; by default kbuild's XDG data
//! dir). Layout:
//!
//! ```text
//! DIR/NAME/index.json                          {"name", "versions": {VERSION: {bundle, manifest, targets}}}
//! DIR/NAME/VERSION/NAME-VERSION.kbundle
//! DIR/NAME/VERSION/NAME-VERSION.kbundle.sig    (when signed)
//! ```
//!
//! A version directory is written complete under a temp name and renamed into place, so it
//! appears whole or not at all; once there it is never changed (only signatures are added).
//! The index is derived from the version directories and rewritten atomically.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::oci::PublishOutcome;
use kbuild_base::digest;
use kbuild_base::fs as fsx;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::bundle::Bundle;
use kbuild_bundle::sign::SignatureFile;

#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error(transparent)]
    Name(#[from] InvalidName),
    #[error("version `{version}` is not semver: {source}")]
    Version {
        version: String,
        source: semver::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("{name} {version} is already published in {dir} with different content (registry: {existing}, this bundle: {new}); published versions are immutable, so bump the version in Kbuild.toml")]
    Immutable {
        name: String,
        version: String,
        dir: String,
        existing: String,
        new: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DirError + '_ {
    move |err| DirError::Io {
        path: path.display().to_string(),
        err,
    }
}

/// One version's line in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    /// `sha256:` of the bundle file.
    pub bundle: String,
    /// `sha256:` of its manifest.json.
    pub manifest: String,
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirIndex {
    pub name: String,
    pub versions: BTreeMap<String, IndexEntry>,
}

/// A package name that is not a safe path component and OCI repository component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("package name `{name}` must be lowercase letters, digits and `._-`, starting with a letter or digit")]
pub struct InvalidName {
    pub name: String,
}

/// A package name kbuild accepts as a path component and an OCI repository component.
pub fn check_name(name: &str) -> Result<(), InvalidName> {
    kbuild_base::ident::check_package_name("package name", name).map_err(|_| InvalidName {
        name: name.to_string(),
    })
}

pub struct DirStore {
    root: PathBuf,
    limits: ArchiveLimits,
}

impl DirStore {
    pub fn new(root: &Path) -> DirStore {
        DirStore::with_limits(root, ArchiveLimits::default())
    }

    /// A store whose bundles are read within `limits`.
    pub fn with_limits(root: &Path, limits: ArchiveLimits) -> DirStore {
        DirStore {
            root: root.to_path_buf(),
            limits,
        }
    }

    /// What a bundle read from this store may unpack to.
    pub fn limits(&self) -> ArchiveLimits {
        self.limits
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn version_dir(&self, name: &str, version: &str) -> Result<PathBuf, DirError> {
        check_name(name)?;
        semver::Version::parse(version).map_err(|source| DirError::Version {
            version: version.to_string(),
            source,
        })?;
        Ok(self.root.join(name).join(version))
    }

    /// Published versions of `name`, ascending by semver.
    pub fn versions(&self, name: &str) -> Result<Vec<String>, DirError> {
        check_name(name)?;
        let dir = self.root.join(name);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir)(e)),
        };
        let mut v: Vec<semver::Version> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| semver::Version::parse(&e.file_name().to_string_lossy()).ok())
            .collect();
        v.sort();
        Ok(v.into_iter().map(|v| v.to_string()).collect())
    }

    /// The bundle file of a version.
    pub fn bundle_path(&self, name: &str, version: &str) -> Result<PathBuf, DirError> {
        Ok(self
            .version_dir(name, version)?
            .join(format!("{name}-{version}.kbundle")))
    }

    /// Publish atomically. Same bytes already there: no-op; other bytes: refused.
    pub fn publish(
        &self,
        bundle: &Bundle,
        bytes: &[u8],
        sigs: Option<&SignatureFile>,
    ) -> Result<PublishOutcome, DirError> {
        if bundle.is_subset() {
            return Err(DirError::Invalid(format!(
                "{} holds only some targets; publish the full bundle",
                bundle.file_name()
            )));
        }
        let (name, version) = (bundle.name(), bundle.version());
        let vdir = self.version_dir(name, version)?;
        let file = format!("{name}-{version}.kbundle");
        let new = digest::oci_digest(bytes);
        if let Some(o) = self.compare_existing(&vdir, &file, &new, name, version)? {
            if let Some(s) = sigs {
                self.add_signatures(name, version, s)?;
            }
            return Ok(o);
        }
        let parent = self.root.join(name);
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let tmp = fsx::temp_path(&parent, "publish");
        let staged = (|| -> Result<(), DirError> {
            std::fs::create_dir(&tmp).map_err(io(&tmp))?;
            let p = tmp.join(&file);
            fsx::write_atomic(&p, bytes).map_err(io(&p))?;
            if let Some(s) = sigs {
                let p = tmp.join(format!("{file}.sig"));
                fsx::write_atomic(&p, &s.to_json()).map_err(io(&p))?;
            }
            Ok(())
        })();
        let renamed = staged.and_then(|()| std::fs::rename(&tmp, &vdir).map_err(io(&vdir)));
        if let Err(e) = renamed {
            let _ = std::fs::remove_dir_all(&tmp);
            // Lost a race with another publisher of the same version?
            if let Some(o) = self.compare_existing(&vdir, &file, &new, name, version)? {
                return Ok(o);
            }
            return Err(e);
        }
        self.write_index(name)?;
        Ok(PublishOutcome::Published {
            digest: new,
            uploaded: 1,
            skipped: 0,
            bytes: bytes.len() as u64,
        })
    }

    fn compare_existing(
        &self,
        vdir: &Path,
        file: &str,
        new: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<PublishOutcome>, DirError> {
        let p = vdir.join(file);
        match self.read_file(&p, self.max_bundle_file(), "a published bundle") {
            Ok(Some(old)) => {
                let existing = digest::oci_digest(&old);
                if existing == new {
                    Ok(Some(PublishOutcome::AlreadyPublished { digest: existing }))
                } else {
                    Err(DirError::Immutable {
                        name: name.into(),
                        version: version.into(),
                        dir: self.root.display().to_string(),
                        existing,
                        new: new.into(),
                    })
                }
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The largest bundle file read: its unpacked-size cap, with room for tar headers and a
    /// compressor that could not shrink it.
    fn max_bundle_file(&self) -> u64 {
        let cap = self.limits.max_unpacked;
        cap.saturating_add(cap / 64).saturating_add(1 << 20)
    }

    /// A file of the registry through a cap (a regular file of at most `limit` bytes); `None`
    /// when it is not there.
    fn read_file(
        &self,
        p: &Path,
        limit: u64,
        what: &'static str,
    ) -> Result<Option<Vec<u8>>, DirError> {
        match kbuild_base::read::read_capped(p, limit, what) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(kbuild_base::read::ReadError::Io { source, .. }) => Err(io(p)(source)),
            Err(e) => Err(DirError::Invalid(e.to_string())),
        }
    }

    /// Rebuild `NAME/index.json` from the version directories.
    pub fn write_index(&self, name: &str) -> Result<DirIndex, DirError> {
        let mut index = DirIndex {
            name: name.into(),
            versions: BTreeMap::new(),
        };
        for v in self.versions(name)? {
            let p = self.bundle_path(name, &v)?;
            let Ok(Some(bytes)) = self.read_file(&p, self.max_bundle_file(), "a published bundle")
            else {
                continue;
            };
            let Ok(b) = Bundle::from_bytes(&bytes, self.limits) else {
                continue;
            };
            index.versions.insert(
                v,
                IndexEntry {
                    bundle: digest::oci_digest(&bytes),
                    manifest: b.manifest_digest().to_string(),
                    targets: b.targets(),
                },
            );
        }
        let p = self.root.join(name).join("index.json");
        let mut text = serde_json::to_vec_pretty(&index).unwrap_or_default();
        text.push(b'\n');
        fsx::write_atomic(&p, &text).map_err(io(&p))?;
        Ok(index)
    }

    /// The bundle bytes of a version, `None` when it is not published.
    pub fn read(&self, name: &str, version: &str) -> Result<Option<Vec<u8>>, DirError> {
        let p = self.bundle_path(name, version)?;
        self.read_file(&p, self.max_bundle_file(), "a published bundle")
    }

    pub fn signatures(&self, name: &str, version: &str) -> Result<Option<SignatureFile>, DirError> {
        let p = self
            .bundle_path(name, version)?
            .with_extension("kbundle.sig");
        match self.read_file(
            &p,
            kbuild_bundle::sign::MAX_SIG_FILE_BYTES,
            "a signature file",
        )? {
            Some(b) => SignatureFile::from_json(&b)
                .map(Some)
                .map_err(|e| DirError::Invalid(format!("{}: {e}", p.display()))),
            None => Ok(None),
        }
    }

    /// Merge `sigs` into a published version's signature file.
    pub fn add_signatures(
        &self,
        name: &str,
        version: &str,
        sigs: &SignatureFile,
    ) -> Result<(), DirError> {
        let bundle = self.bundle_path(name, version)?;
        if !bundle.exists() {
            return Err(DirError::Invalid(format!(
                "{name} {version} is not published in {}",
                self.root.display()
            )));
        }
        let mut all = self.signatures(name, version)?.unwrap_or_default();
        for s in &sigs.signatures {
            all.add(s.clone());
        }
        let p = bundle.with_extension("kbundle.sig");
        fsx::write_atomic(&p, &all.to_json()).map_err(io(&p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_is_atomic_immutable_and_idempotent() {
        let d = tempfile::tempdir().unwrap();
        let store = DirStore::new(d.path());
        let (m, o) = kbuild_manifest::fixtures::bundle_parts(&["sm_89"]);
        let b = Bundle::from_parts(m, o, None).unwrap();
        let bytes = b.to_bytes(0).unwrap();
        assert!(matches!(
            store.publish(&b, &bytes, None).unwrap(),
            PublishOutcome::Published { .. }
        ));
        assert!(matches!(
            store.publish(&b, &bytes, None).unwrap(),
            PublishOutcome::AlreadyPublished { .. }
        ));
        let mut other = bytes.clone();
        other.push(0);
        let e = store.publish(&b, &other, None).unwrap_err();
        assert!(e.to_string().contains("immutable"), "{e}");
        assert_eq!(store.versions("pkg").unwrap(), vec!["1.2.3".to_string()]);
        let idx: DirIndex =
            serde_json::from_slice(&std::fs::read(d.path().join("pkg/index.json")).unwrap())
                .unwrap();
        assert_eq!(idx.versions["1.2.3"].targets, vec!["sm_89".to_string()]);
        let leftovers: Vec<_> = std::fs::read_dir(d.path().join("pkg"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        assert_eq!(
            check_name("../x"),
            Err(InvalidName {
                name: "../x".into()
            })
        );
        assert!(check_name("a.b-c_1").is_ok());
        assert!(check_name("Pkg").is_err() && check_name("").is_err() && check_name("-x").is_err());
        assert!(matches!(
            store.versions("../x"),
            Err(DirError::Name(InvalidName { .. }))
        ));
        assert!(store.bundle_path("pkg", "../../etc").is_err());
    }
}
