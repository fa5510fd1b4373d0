//! What a registry and the local cache hold, for `kbuild ls`: the packages a registry has
//! (a directory registry's package directories, an OCI repository's name) and their
//! versions, read through the stores so that no caller walks their layout.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kbuild_base::dirs::Dirs;

use crate::dir::{check_name, DirStore};
use crate::progress::Progress;
use crate::store::{Registry, StoreError};

/// kbuild's local registry (a directory registry in the XDG data dir), used when none is named.
pub fn default_registry(dirs: &Dirs) -> PathBuf {
    dirs.data.join("registry")
}

#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// An OCI registry named without a repository: it cannot be listed whole.
    #[error("name a package: `kbuild ls NAME --registry {0}`")]
    NeedName(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DirStore {
    /// The packages published here: each directory with a valid package name, sorted. A
    /// registry directory that cannot be read holds none.
    pub fn package_names(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(self.root()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| check_name(n).is_ok())
            .collect();
        names.sort();
        names
    }
}

impl Registry {
    /// The published versions of `name`, or of every package a directory registry holds (an
    /// OCI registry with a repository lists that repository's package), by package name.
    pub fn list(
        &self,
        name: Option<&str>,
        progress: &dyn Progress,
    ) -> Result<BTreeMap<String, Vec<String>>, ListError> {
        let names: Vec<String> = match (name, self) {
            (Some(n), _) => vec![n.to_string()],
            (None, Registry::Dir(d)) => d.package_names(),
            (None, Registry::Oci { repo: Some(r), .. }) => {
                vec![r.rsplit('/').next().unwrap_or(r).to_string()]
            }
            (None, Registry::Oci { repo: None, .. }) => {
                return Err(ListError::NeedName(self.describe()))
            }
        };
        let mut out = BTreeMap::new();
        for n in names {
            let versions = self.versions(&n, progress)?;
            out.insert(n, versions);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dir_registry_lists_its_package_directories() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["b", "a", ".hidden-tmp"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let store = DirStore::new(dir.path());
        assert_eq!(store.package_names(), vec!["a", "b"]);
        assert!(DirStore::new(&dir.path().join("none"))
            .package_names()
            .is_empty());
        let reg = Registry::Dir(store);
        let listed = reg.list(None, &crate::progress::Silent).unwrap();
        assert_eq!(listed.keys().collect::<Vec<_>>(), vec!["a", "b"]);
    }
}
