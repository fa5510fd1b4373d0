//! `Kbuild.lock`: what a pull resolved, so the next pull can insist on exactly that.
//!
//! Three strengths, as cargo has them ([`LockMode`]): `--locked` refuses any drift; a plain
//! pull with a lock present may move a package forward, but refuses a locked version whose
//! digests changed (a re-pointed tag) and a resolution older than the locked version for a
//! requirement the locked version still satisfies (a rollback: tags hidden or withdrawn);
//! `--update` accepts both and rewrites the entry.
//!
//! ```toml
//! version = 1
//!
//! [[package]]
//! name = "kbuild-kernels"
//! version = "0.1.0"
//! registry = "oci://127.0.0.1:5000/kernels"
//! artifact = "sha256:..."   # OCI manifest digest, or the bundle file's digest (dir registry)
//! manifest = "sha256:..."   # the kbuild manifest (OCI config) digest
//!
//! [package.layers]          # per target: the layer (tar+zstd of its objects) digest
//! sm_89 = "sha256:..."
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use kbuild_base::fs as fsx;

pub const FILE_NAME: &str = "Kbuild.lock";
pub const LOCK_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{path}: not a kbuild lockfile: {msg}")]
    Parse { path: String, msg: String },
    #[error("{path} (--locked): {name}: {what}; run `kbuild pull` without --locked to update the lockfile")]
    Drift {
        path: String,
        name: String,
        what: String,
    },
    /// A plain pull found a locked version with other digests than the lock's.
    #[error("{path}: {name} {version} is locked, but the registry's {version} differs: {what}; pass --update to accept it and rewrite the lockfile entry")]
    Changed {
        path: String,
        name: String,
        version: String,
        what: String,
    },
    /// A plain pull of a locked package from another registry than the lock's.
    #[error("{path}: {name} is locked from {locked}, but this pull is from {new}; refusing to switch registries for a locked package: pass --update to accept it and rewrite the lockfile entry")]
    RegistryChanged {
        path: String,
        name: String,
        locked: String,
        new: String,
    },
    /// A plain pull resolved an older version than the locked one for the same requirement.
    #[error("{path}: {name} is locked at {locked}, but `{req}` now resolves to the older {resolved} (newer versions hidden or withdrawn?); refusing to roll back: pass --update, or ask for ={resolved} explicitly")]
    Rollback {
        path: String,
        name: String,
        locked: String,
        resolved: String,
        req: String,
    },
}

/// How a pull treats an existing lockfile entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// `--locked`: exactly the locked version and digests, or an error.
    Exact,
    /// A plain pull: forward moves are fine; changed digests of the locked version and
    /// rollbacks are errors ([`check_keep`]).
    Keep,
    /// `--update`: anything the registry resolves; the entry is rewritten.
    Update,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedPackage {
    pub name: String,
    pub version: String,
    pub registry: String,
    pub artifact: String,
    pub manifest: String,
    #[serde(default)]
    pub layers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lockfile {
    pub version: u32,
    #[serde(default, rename = "package")]
    pub packages: Vec<LockedPackage>,
}

impl Default for Lockfile {
    fn default() -> Self {
        Lockfile {
            version: LOCK_VERSION,
            packages: Vec::new(),
        }
    }
}

impl Lockfile {
    /// Read a lockfile; `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Lockfile>, LockError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => {
                return Err(LockError::Io {
                    path: path.display().to_string(),
                    err,
                })
            }
        };
        let lock: Lockfile = toml::from_str(&text).map_err(|e| LockError::Parse {
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
        if lock.version != LOCK_VERSION {
            return Err(LockError::Parse {
                path: path.display().to_string(),
                msg: format!(
                    "lockfile version {} (this kbuild writes {LOCK_VERSION})",
                    lock.version
                ),
            });
        }
        Ok(Some(lock))
    }

    pub fn write(&self, path: &Path) -> Result<(), LockError> {
        let mut text = String::from(
            "# Written by `kbuild pull`. `kbuild pull --locked` refuses any drift from it; a plain\n\
             # pull refuses a changed digest of a locked version and a rollback (`--update` takes them).\n",
        );
        text.push_str(&toml::to_string(self).map_err(|e| LockError::Parse {
            path: path.display().to_string(),
            msg: e.to_string(),
        })?);
        fsx::write_atomic(path, text.as_bytes()).map_err(|err| LockError::Io {
            path: path.display().to_string(),
            err,
        })
    }

    pub fn find(&self, name: &str) -> Option<&LockedPackage> {
        self.packages.iter().find(|p| p.name == name)
    }

    /// Insert or replace `name`'s entry; layers of targets pulled before are kept when the
    /// artifact is the same. The locked registry string stays when the source is the same
    /// ([`same_source`]): a release index downloaded into another directory does not rewrite
    /// the entry.
    pub fn upsert(&mut self, mut p: LockedPackage) {
        if let Some(old) = self.packages.iter().find(|o| o.name == p.name) {
            if same_source(&old.registry, &p.registry) {
                p.registry = old.registry.clone();
                if old.artifact == p.artifact {
                    for (t, d) in &old.layers {
                        p.layers.entry(t.clone()).or_insert_with(|| d.clone());
                    }
                }
            }
        }
        self.packages.retain(|o| o.name != p.name);
        self.packages.push(p);
        self.packages.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// Whether two lock entries' registries are one source. A split release's index
/// (`file://DIR/NAME-VERSION.kbindex`) is the same source wherever it was downloaded: the
/// directory is where a CI job put the files, not where they came from, and the digests
/// (which the lock keeps by name and version) say what they are. Any other registry string
/// must be equal.
pub fn same_source(a: &str, b: &str) -> bool {
    let index_file = |r: &str| {
        r.strip_prefix("file://")
            .filter(|p| p.ends_with(".kbindex"))
            .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
    };
    a == b || matches!((index_file(a), index_file(b)), (Some(x), Some(y)) if x == y)
}

/// Compare what a pull resolved with the lock; the error names the first drifting field.
pub fn check(locked: &LockedPackage, got: &LockedPackage, path: &Path) -> Result<(), LockError> {
    let drift = |what: String| LockError::Drift {
        path: path.display().to_string(),
        name: locked.name.clone(),
        what,
    };
    if !same_source(&locked.registry, &got.registry) {
        return Err(drift(format!(
            "registry drifted: locked {}, now {}",
            locked.registry, got.registry
        )));
    }
    if locked.version != got.version {
        return Err(drift(format!(
            "version drifted: locked {}, resolved {}",
            locked.version, got.version
        )));
    }
    if locked.artifact != got.artifact {
        return Err(drift(format!(
            "artifact digest of {} drifted: locked {}, registry has {}",
            locked.version, locked.artifact, got.artifact
        )));
    }
    if locked.manifest != got.manifest {
        return Err(drift(format!(
            "manifest digest of {} drifted: locked {}, registry has {}",
            locked.version, locked.manifest, got.manifest
        )));
    }
    for (t, d) in &got.layers {
        match locked.layers.get(t) {
            None => {
                return Err(drift(format!(
                    "layer for target {t} is not in the lockfile (locked targets: {})",
                    locked.layers.keys().cloned().collect::<Vec<_>>().join(", ")
                )))
            }
            Some(l) if l != d => {
                return Err(drift(format!(
                    "layer digest for target {t} drifted: locked {l}, registry has {d}"
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A plain pull's check against the lock entry `locked` (the lock at `path`), which is keyed
/// by name and version: the same version must have the same digests (artifact, manifest, the
/// layers of targets in both) whatever registry or download directory it comes from; the
/// registry must be the locked one ([`same_source`]); and the resolution must not be older
/// than the locked version unless `explicit` (the user named an exact version or a digest) or
/// the locked version no longer satisfies the requirement `req` (the requirement changed).
pub fn check_keep(
    locked: &LockedPackage,
    got: &LockedPackage,
    path: &Path,
    req: Option<&semver::VersionReq>,
    explicit: bool,
) -> Result<(), LockError> {
    // The registry first: artifact digests of different kinds of registry are not
    // comparable (an OCI manifest, a bundle file, an index), so a move is named as one.
    if !same_source(&locked.registry, &got.registry) {
        return Err(LockError::RegistryChanged {
            path: path.display().to_string(),
            name: locked.name.clone(),
            locked: locked.registry.clone(),
            new: got.registry.clone(),
        });
    }
    let changed = |what: String| LockError::Changed {
        path: path.display().to_string(),
        name: locked.name.clone(),
        version: locked.version.clone(),
        what,
    };
    if locked.version == got.version {
        if locked.artifact != got.artifact {
            return Err(changed(format!(
                "artifact digest locked {}, registry has {}",
                locked.artifact, got.artifact
            )));
        }
        if locked.manifest != got.manifest {
            return Err(changed(format!(
                "manifest digest locked {}, registry has {}",
                locked.manifest, got.manifest
            )));
        }
        for (t, d) in &got.layers {
            if let Some(l) = locked.layers.get(t).filter(|l| *l != d) {
                return Err(changed(format!(
                    "layer digest for target {t} locked {l}, registry has {d}"
                )));
            }
        }
        return Ok(());
    }
    let (Ok(lv), Ok(gv)) = (
        semver::Version::parse(&locked.version),
        semver::Version::parse(&got.version),
    ) else {
        return Ok(());
    };
    let same_req = req.is_none_or(|r| r.matches(&lv));
    if gv < lv && same_req && !explicit {
        return Err(LockError::Rollback {
            path: path.display().to_string(),
            name: locked.name.clone(),
            locked: locked.version.clone(),
            resolved: got.version.clone(),
            req: req.map(ToString::to_string).unwrap_or_else(|| "*".into()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg() -> LockedPackage {
        LockedPackage {
            name: "k".into(),
            version: "0.1.0".into(),
            registry: "oci://h/r".into(),
            artifact: "sha256:a".into(),
            manifest: "sha256:m".into(),
            layers: [("sm_89".to_string(), "sha256:l".to_string())].into(),
        }
    }

    #[test]
    fn round_trip_and_drift_messages() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(FILE_NAME);
        let mut lock = Lockfile::default();
        lock.upsert(pkg());
        lock.write(&p).unwrap();
        let back = Lockfile::read(&p).unwrap().unwrap();
        assert_eq!(back, lock);
        assert!(std::fs::read_to_string(&p).unwrap().contains("[[package]]"));
        check(&pkg(), &pkg(), &p).unwrap();
        let mut g = pkg();
        g.manifest = "sha256:x".into();
        let e = check(&pkg(), &g, &p).unwrap_err().to_string();
        assert!(e.contains("manifest digest of 0.1.0 drifted"), "{e}");
        let mut g = pkg();
        g.layers.insert("sm_89".into(), "sha256:y".into());
        let e = check(&pkg(), &g, &p).unwrap_err().to_string();
        assert!(e.contains("layer digest for target sm_89 drifted"), "{e}");
        let mut g = pkg();
        g.version = "0.2.0".into();
        assert!(check(&pkg(), &g, &p)
            .unwrap_err()
            .to_string()
            .contains("version drifted: locked 0.1.0, resolved 0.2.0"));
    }

    #[test]
    fn keep_refuses_changed_digests_and_rollbacks_only() {
        let p = Path::new("Kbuild.lock");
        let any = semver::VersionReq::STAR;
        check_keep(&pkg(), &pkg(), p, Some(&any), false).unwrap();
        // Forward is fine.
        let mut g = pkg();
        g.version = "0.2.0".into();
        g.artifact = "sha256:b".into();
        check_keep(&pkg(), &g, p, Some(&any), false).unwrap();
        // The same version re-pointed.
        let mut g = pkg();
        g.artifact = "sha256:b".into();
        let e = check_keep(&pkg(), &g, p, Some(&any), false).unwrap_err();
        assert!(matches!(e, LockError::Changed { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.starts_with("Kbuild.lock: k 0.1.0 is locked"), "{msg}");
        assert!(msg.contains("--update"), "{msg}");
        // A layer of a target not in the lock is new, not changed.
        let mut g = pkg();
        g.layers.insert("gfx1100".into(), "sha256:n".into());
        check_keep(&pkg(), &g, p, Some(&any), false).unwrap();
        // Older for a requirement the locked version satisfies: a rollback.
        let mut locked = pkg();
        locked.version = "0.2.0".into();
        let e = check_keep(&locked, &pkg(), p, Some(&any), false).unwrap_err();
        assert!(matches!(e, LockError::Rollback { .. }), "{e}");
        assert!(e.to_string().contains("refusing to roll back"), "{e}");
        // Explicit, or a requirement the lock no longer satisfies: fine.
        check_keep(&locked, &pkg(), p, Some(&any), true).unwrap();
        let old = semver::VersionReq::parse("<0.2").unwrap();
        check_keep(&locked, &pkg(), p, Some(&old), false).unwrap();
        // Another registry: refused, whether the digests changed too or not.
        let mut g = pkg();
        g.registry = "oci://other/r".into();
        let e = check_keep(&pkg(), &g, p, Some(&any), false).unwrap_err();
        assert!(matches!(e, LockError::RegistryChanged { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("k is locked from oci://h/r, but this pull is from oci://other/r")
                && msg.contains("--update"),
            "{msg}"
        );
        g.version = "0.2.0".into();
        assert!(check_keep(&pkg(), &g, p, Some(&any), false).is_err());
        g.version = "0.1.0".into();
        g.artifact = "sha256:z".into();
        let e = check_keep(&pkg(), &g, p, Some(&any), false).unwrap_err();
        assert!(matches!(e, LockError::RegistryChanged { .. }), "{e}");
    }

    #[test]
    fn a_release_index_is_one_source_wherever_it_was_downloaded() {
        let p = Path::new("Kbuild.lock");
        let index = |dir: &str| LockedPackage {
            registry: format!("file://{dir}/k-0.1.0.kbindex"),
            ..pkg()
        };
        assert!(same_source(
            &index("/a").registry,
            &index("/tmp/b").registry
        ));
        assert!(!same_source(
            &index("/a").registry,
            "file:///a/other-0.1.0.kbindex"
        ));
        assert!(!same_source(&index("/a").registry, "oci://h/r"));
        // Same digests from a new directory: fine, and the entry keeps its registry.
        check_keep(&index("/a"), &index("/b"), p, None, true).unwrap();
        check(&index("/a"), &index("/b"), p).unwrap();
        let mut lock = Lockfile::default();
        lock.upsert(index("/a"));
        lock.upsert(index("/b"));
        assert_eq!(lock.packages, vec![index("/a")]);
        // A re-pointed digest from a new directory: refused.
        let mut g = index("/b");
        g.artifact = "sha256:other".into();
        let e = check_keep(&index("/a"), &g, p, None, true).unwrap_err();
        assert!(matches!(e, LockError::Changed { .. }), "{e}");
    }
}
