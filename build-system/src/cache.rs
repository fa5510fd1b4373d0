//! The content-addressed compile cache.
//!
//! Two levels, as ccache's direct mode: an *action key* (blake3 of compiler identity, target,
//! and the compile arguments with project paths relative) names the list of dependency sets
//! seen for that action (from compiler depfiles); the *result key* is the action key plus the
//! path and blake3 of every dependency (the source and every header it includes). An entry is
//! a directory `objects/<kk>/<key>/` holding `object`, `log` and `meta.json`, written in a
//! temp directory and renamed into place, so a killed build never leaves a torn entry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use kbuild_base::fs as fsutil;
use kbuild_manifest::triton::TritonLaunch;

/// Bumped when the entry layout or key derivation changes.
const VERSION: &str = "kbuild-cache-v1";
/// Dependency sets remembered per action (newest first).
const MAX_DEP_SETS: usize = 8;

/// One dependency: the path as the depfile gave it (relative to the project root for project
/// files) and the blake3 of its bytes.
pub type Dep = (String, String);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryMeta {
    pub object_blake3: String,
    pub size: u64,
    pub deps: Vec<Dep>,
    /// The command line that produced the entry, for humans.
    pub command: String,
    /// Compile wall time, seconds.
    pub seconds: f64,
    /// What the object's launch needs beyond the object (a Triton kernel's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Box<TritonLaunch>>,
}

/// What a compile made, to store.
#[derive(Debug, Clone)]
pub struct Made {
    pub object: Vec<u8>,
    pub log: String,
    /// The command line, for humans.
    pub command: String,
    pub seconds: f64,
    /// See [`EntryMeta::launch`].
    pub launch: Option<Box<TritonLaunch>>,
}

/// A cache hit.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub object: Vec<u8>,
    pub log: String,
    pub meta: EntryMeta,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct DepSets {
    sets: Vec<Vec<Dep>>,
}

/// The cache, shareable between worker threads (and safe between processes).
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    /// blake3 of files already hashed in this process (a header is hashed once per build).
    hashes: Mutex<HashMap<PathBuf, Option<String>>>,
}

impl Cache {
    pub fn open(root: &Path) -> Cache {
        Cache {
            root: root.to_path_buf(),
            hashes: Mutex::new(HashMap::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Scratch space for compiles, on the cache's file system so entries move by rename.
    pub fn scratch(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The action key of a compile.
    pub fn action_key(identity: &str, target: &str, args: &[String]) -> String {
        let mut h = blake3::Hasher::new();
        for part in [VERSION, identity, target] {
            h.update(part.as_bytes());
            h.update(&[0]);
        }
        for a in args {
            h.update(a.as_bytes());
            h.update(&[0]);
        }
        h.finalize().to_hex().to_string()
    }

    /// The result key of an action with these dependencies (what names an entry).
    pub fn result_key(action: &str, deps: &[Dep]) -> String {
        let mut h = blake3::Hasher::new();
        h.update(action.as_bytes());
        for (p, d) in deps {
            h.update(p.as_bytes());
            h.update(&[0]);
            h.update(d.as_bytes());
            h.update(&[0]);
        }
        h.finalize().to_hex().to_string()
    }

    fn shard(&self, kind: &str, key: &str) -> PathBuf {
        self.root
            .join(kind)
            .join(&key[..2.min(key.len())])
            .join(key)
    }

    /// blake3 of a dependency, resolved against `project_root`; memoised per process.
    pub fn hash_dep(&self, project_root: &Path, recorded: &str) -> Option<String> {
        let path = project_root.join(recorded);
        if let Ok(map) = self.hashes.lock() {
            if let Some(h) = map.get(&path) {
                return h.clone();
            }
        }
        let h = kbuild_base::digest::blake3_file(&path).ok();
        if let Ok(mut map) = self.hashes.lock() {
            map.insert(path, h.clone());
        }
        h
    }

    /// Find a complete entry for `action` whose recorded dependencies all still hash the same.
    pub fn lookup(&self, action: &str, project_root: &Path) -> Option<Entry> {
        let sets: DepSets = std::fs::read(self.shard("deps", action))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())?;
        for set in &sets.sets {
            let current: Option<Vec<Dep>> = set
                .iter()
                .map(|(p, _)| self.hash_dep(project_root, p).map(|h| (p.clone(), h)))
                .collect();
            let Some(current) = current else { continue };
            if current != *set {
                continue;
            }
            let key = Self::result_key(action, &current);
            if let Some(entry) = self.read_entry(&key) {
                return Some(entry);
            }
        }
        None
    }

    /// The dependency sets recorded for `action`, newest first (empty when none).
    pub fn dep_sets(&self, action: &str) -> Vec<Vec<Dep>> {
        std::fs::read(self.shard("deps", action))
            .ok()
            .and_then(|b| serde_json::from_slice::<DepSets>(&b).ok())
            .map(|s| s.sets)
            .unwrap_or_default()
    }

    /// The dependencies recorded in entry `key` (the source and every header it included),
    /// without reading the object.
    pub fn entry_deps(&self, key: &str) -> Option<Vec<Dep>> {
        let meta = std::fs::read(self.shard("objects", key).join("meta.json")).ok()?;
        serde_json::from_slice::<EntryMeta>(&meta)
            .ok()
            .map(|m| m.deps)
    }

    fn read_entry(&self, key: &str) -> Option<Entry> {
        let dir = self.shard("objects", key);
        let meta: EntryMeta =
            serde_json::from_slice(&std::fs::read(dir.join("meta.json")).ok()?).ok()?;
        let object = std::fs::read(dir.join("object")).ok()?;
        // An entry that does not hash to what it says is ignored (and overwritten later).
        if object.len() as u64 != meta.size
            || blake3::hash(&object).to_hex().as_str() != meta.object_blake3
        {
            return None;
        }
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        Some(Entry {
            key: key.to_string(),
            object,
            log,
            meta,
        })
    }

    /// Store a compile result; returns the entry. Concurrent stores of the same key are fine:
    /// the first rename wins and the others are discarded.
    pub fn store(&self, action: &str, deps: Vec<Dep>, made: Made) -> std::io::Result<Entry> {
        let Made {
            object,
            log,
            command,
            seconds,
            launch,
        } = made;
        let key = Self::result_key(action, &deps);
        let meta = EntryMeta {
            object_blake3: blake3::hash(&object).to_hex().to_string(),
            size: object.len() as u64,
            deps: deps.clone(),
            command,
            seconds,
            launch,
        };
        let final_dir = self.shard("objects", &key);
        if self.read_entry(&key).is_none() {
            let parent = final_dir.parent().unwrap_or(&self.root).to_path_buf();
            let tmp = fsutil::tempdir_in(&parent, "entry")?;
            let written = (|| {
                std::fs::write(tmp.join("object"), &object)?;
                std::fs::write(tmp.join("log"), &log)?;
                std::fs::write(tmp.join("meta.json"), serde_json::to_vec(&meta)?)?;
                Ok::<(), std::io::Error>(())
            })();
            if let Err(e) = written {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            if std::fs::rename(&tmp, &final_dir).is_err() {
                // Someone else stored it, or a corrupt entry sits there: replace a corrupt one.
                if self.read_entry(&key).is_none() {
                    let _ = std::fs::remove_dir_all(&final_dir);
                    if let Err(e) = std::fs::rename(&tmp, &final_dir) {
                        let _ = std::fs::remove_dir_all(&tmp);
                        return Err(e);
                    }
                } else {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
            }
        }
        self.remember_deps(action, deps);
        Ok(Entry {
            key,
            object,
            log,
            meta,
        })
    }

    fn remember_deps(&self, action: &str, deps: Vec<Dep>) {
        let path = self.shard("deps", action);
        let mut sets: DepSets = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        sets.sets.retain(|s| *s != deps);
        sets.sets.insert(0, deps);
        sets.sets.truncate(MAX_DEP_SETS);
        if let Ok(bytes) = serde_json::to_vec(&sets) {
            let _ = fsutil::write_atomic(&path, &bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_then_lookup_follows_dependency_content() {
        let cache_dir = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::write(project.path().join("a.h"), "1").unwrap();
        let cache = Cache::open(cache_dir.path());
        let action = Cache::action_key("id", "sm_89", &["-O3".into()]);
        assert!(cache.lookup(&action, project.path()).is_none());
        let h = cache.hash_dep(project.path(), "a.h").unwrap();
        cache
            .store(
                &action,
                vec![("a.h".into(), h)],
                Made {
                    object: b"obj".to_vec(),
                    log: "log".into(),
                    command: "cmd".into(),
                    seconds: 0.1,
                    launch: None,
                },
            )
            .unwrap();
        let hit = cache.lookup(&action, project.path()).unwrap();
        assert_eq!(hit.object, b"obj");

        // A new process (fresh memo) after the header changed: miss.
        std::fs::write(project.path().join("a.h"), "2").unwrap();
        let cache = Cache::open(cache_dir.path());
        assert!(cache.lookup(&action, project.path()).is_none());
    }

    fn made(object: &[u8]) -> Made {
        Made {
            object: object.to_vec(),
            log: String::new(),
            command: String::new(),
            seconds: 0.0,
            launch: None,
        }
    }

    #[test]
    fn a_corrupt_entry_is_a_miss() {
        let cache_dir = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let cache = Cache::open(cache_dir.path());
        let action = Cache::action_key("id", "gfx1100", &[]);
        let e = cache.store(&action, vec![], made(b"object")).unwrap();
        let obj = cache.shard("objects", &e.key).join("object");
        std::fs::write(&obj, b"objec").unwrap();
        assert!(cache.lookup(&action, project.path()).is_none());
        // Storing again repairs it.
        cache.store(&action, vec![], made(b"object")).unwrap();
        assert!(cache.lookup(&action, project.path()).is_some());
    }
}
