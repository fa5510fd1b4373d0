//! `Kbuild.lock`: what a pull resolved, so the next pull can insist on exactly that.
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
            "# Written by `kbuild pull`. `kbuild pull --locked` refuses any drift from it.\n",
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
    /// artifact is the same.
    pub fn upsert(&mut self, mut p: LockedPackage) {
        if let Some(old) = self.packages.iter().find(|o| o.name == p.name) {
            if old.artifact == p.artifact && old.registry == p.registry {
                for (t, d) in &old.layers {
                    p.layers.entry(t.clone()).or_insert_with(|| d.clone());
                }
            }
        }
        self.packages.retain(|o| o.name != p.name);
        self.packages.push(p);
        self.packages.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// Compare what a pull resolved with the lock; the error names the first drifting field.
pub fn check(locked: &LockedPackage, got: &LockedPackage, path: &Path) -> Result<(), LockError> {
    let drift = |what: String| LockError::Drift {
        path: path.display().to_string(),
        name: locked.name.clone(),
        what,
    };
    if locked.registry != got.registry {
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
}
