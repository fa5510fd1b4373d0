//! Packages from the registry: a bundle file (`NAME-VERSION.kbundle`) or a pulled cache entry,
//! both read and verified by `kbuild-registry`, then indexed like a build directory. A subset
//! bundle (pulled for one device) holds only some targets' objects: the others are left out of
//! the index, so selection never picks an object that is not there.

use std::path::{Path, PathBuf};

use kbuild_registry::bundle::Bundle;
use kbuild_registry::cache::{Cache, CachedRef};

use crate::error::{LoaderError, Result};
use crate::package::{ObjectSource, Package};

/// The objects of a verified bundle in memory.
pub struct BundleSource {
    bundle: Bundle,
    origin: String,
}

impl ObjectSource for BundleSource {
    fn read(&self, path: &str, sha256: &str) -> Result<Vec<u8>> {
        self.bundle
            .object(sha256)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| LoaderError::Package {
                path: PathBuf::from(&self.origin),
                what: format!("object {path} ({sha256}) is not in this bundle"),
            })
    }

    fn describe(&self) -> String {
        self.origin.clone()
    }
}

/// Whether `bytes` start like a bundle (a zstd frame).
pub fn looks_like_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
}

impl Package {
    /// Open a bundle file, verified by the registry's reader.
    pub fn open_bundle(path: &Path) -> Result<Package> {
        let bundle = Bundle::open(path).map_err(|e| LoaderError::Package {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
        Package::from_bundle(bundle, path.to_path_buf())
    }

    /// A pulled version from the local registry cache (`kbuild pull`).
    pub fn from_cache(cache: &Cache, entry: &CachedRef) -> Result<Package> {
        let bundle = cache.open(entry).map_err(|e| LoaderError::Package {
            path: cache.root().to_path_buf(),
            what: e.to_string(),
        })?;
        let origin = cache
            .root()
            .join(format!("{}@{}", entry.name, entry.version));
        Package::from_bundle(bundle, origin)
    }

    /// Any bundle in memory.
    pub fn from_bundle(bundle: Bundle, origin: PathBuf) -> Result<Package> {
        let json = bundle.manifest_json().to_vec();
        let source = BundleSource {
            origin: origin.display().to_string(),
            bundle,
        };
        let present = |sha: &str| source.bundle.object(sha).is_some();
        let mut package = Package::from_json(json, Box::new(NoSource), origin)?;
        package.retain_objects(present);
        Ok(package.with_source(Box::new(source)))
    }
}

/// Placeholder while the index is built.
struct NoSource;

impl ObjectSource for NoSource {
    fn read(&self, path: &str, _sha256: &str) -> Result<Vec<u8>> {
        Err(LoaderError::Other(format!("{path}: no object source")))
    }

    fn describe(&self) -> String {
        String::new()
    }
}
