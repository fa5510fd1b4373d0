//! Packages from the registry: a bundle file (`NAME-VERSION.kbundle`) or a pulled cache entry,
//! both read and verified by `kbuild-registry`, then indexed like a build directory. A subset
//! bundle (pulled for one device) holds only some targets' objects: the others are left out of
//! the index, so selection never picks an object that is not there.

use std::path::{Path, PathBuf};

use kbuild_bundle::bundle::Bundle;
use kbuild_bundle::cache::{Cache, CachedRef};

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
pub use kbuild_base::looks_like_bundle;

/// The signature policy and trusted keys applied when a bundle or pulled entry is opened,
/// exactly as `kbuild pull` applies them. Build the value from the user's settings
/// (`Trust::load` of kbuild-bundle's `config` feature reads the kbuild config and
/// `KBUILD_SIGNATURE_POLICY`); [`Trust::default`] is the `warn` policy with no keys.
pub use kbuild_bundle::sign::{Policy, Trust, Verdict};

/// One line for a verdict that let a package through.
fn trust_note(v: &Verdict) -> String {
    match v {
        Verdict::Verified { key_id } => format!("signed by trusted key {key_id}"),
        Verdict::Warning(m) => m.clone(),
        Verdict::NotChecked => "signatures not checked (policy off)".into(),
    }
}

fn untrusted(path: &Path, e: impl std::fmt::Display) -> LoaderError {
    LoaderError::Untrusted {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl Package {
    /// Open a build directory, manifest or bundle, applying `trust` to a bundle (with the
    /// `NAME-VERSION.kbundle.sig` file beside it). Build directories and manifests are local
    /// and unsigned: no policy applies to them.
    pub fn open_trusted(path: &Path, trust: &Trust) -> Result<Package> {
        if crate::package::starts_like_bundle(path) {
            Package::open_bundle(path, trust)
        } else {
            Package::open(path)
        }
    }

    /// Open a bundle file, verified by the registry's reader, and apply `trust` to it (its
    /// `.sig` file beside it): under `require`, a bundle without a valid signature by a
    /// trusted key is refused before anything of it is used.
    pub fn open_bundle(path: &Path, trust: &Trust) -> Result<Package> {
        let (bundle, verdict) = kbuild_bundle::verify_bundle_file(
            path,
            trust,
            kbuild_bundle::archive::Limits::default(),
        )
        .map_err(|e| match e {
            kbuild_bundle::VerifyError::Signature(s) => untrusted(path, s),
            kbuild_bundle::VerifyError::Bundle { err, .. } => LoaderError::Package {
                path: path.to_path_buf(),
                what: err.to_string(),
            },
        })?;
        Ok(Package::from_bundle(bundle, path.to_path_buf())?.with_trust(trust_note(&verdict)))
    }

    /// A pulled version from the local registry cache (`kbuild pull`), with `trust` applied
    /// to the signatures cached with it, as at pull.
    pub fn from_cache(cache: &Cache, entry: &CachedRef, trust: &Trust) -> Result<Package> {
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
        Ok(Package::from_bundle(bundle, origin)?.with_trust(trust_note(&verdict)))
    }

    /// A bundle file's bytes held in memory (e.g. `include_bytes!` of a bundle a build script
    /// wrote), verified like a file; `origin` names it in messages.
    pub fn from_bundle_bytes(bytes: &[u8], origin: &str) -> Result<Package> {
        let bundle =
            Bundle::from_bytes(bytes, kbuild_bundle::archive::Limits::default()).map_err(|e| {
                LoaderError::Package {
                    path: PathBuf::from(origin),
                    what: e.to_string(),
                }
            })?;
        Package::from_bundle(bundle, PathBuf::from(origin))
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
        Err(LoaderError::NoSource {
            path: path.to_string(),
        })
    }

    fn describe(&self) -> String {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::compat::{Device, NEWEST_DRIVER};

    #[test]
    fn a_bundle_opens_from_memory_and_selects() {
        let mut m = crate::select::tests::manifest(vec![crate::select::tests::object(
            "k", None, "sm_90", None,
        )]);
        m.targets = vec!["sm_90".into()];
        let mut objects = std::collections::BTreeMap::new();
        for o in &mut m.objects {
            let bytes = b"object for sm_90".to_vec();
            o.sha256 = crate::package::sha256_hex(&bytes);
            o.size = bytes.len() as u64;
            objects.insert(o.sha256.clone(), bytes);
        }
        let bundle = Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap();
        let bytes = bundle.to_bytes(0).unwrap();
        let p = Package::from_bundle_bytes(&bytes, "embedded").unwrap();
        assert_eq!(p.kernels(), ["k"]);
        let dev = Device::parse("sm_90", Some(NEWEST_DRIVER), None).unwrap();
        assert!(p.select(&dev).complete());
        assert_eq!(p.read_verified(0).unwrap(), b"object for sm_90");

        let mut torn = bytes.clone();
        torn.truncate(bytes.len() / 2);
        let e = Package::from_bundle_bytes(&torn, "embedded").unwrap_err();
        assert!(e.to_string().contains("embedded"), "{e}");
    }
}
