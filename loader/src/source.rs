//! Where the bytes of a package's objects come from: a directory ([`DirSource`]), a verified
//! bundle in memory ([`BundleSource`]), or nothing (`EmptySource`, a package made from a
//! manifest alone). Sources hand out bytes unverified: the package checks them.

use std::path::PathBuf;

use crate::error::{LoaderError, Result};

/// The most bytes the loader reads for one code object, as a bundle admits per member
/// (`kbuild_bundle::archive::DEFAULT_MAX_UNPACKED`): a build directory is unsigned, so its
/// manifest's recorded size must not decide how much is allocated.
pub const MAX_OBJECT_BYTES: u64 = 256 << 20;

/// Something that hands out the bytes of a manifest's objects.
pub trait ObjectSource: Send + Sync {
    /// The bytes of the object at `path` (manifest-relative) with digest `sha256`,
    /// unverified (the [`Package`](crate::Package) checks them).
    fn read(&self, path: &str, sha256: &str) -> Result<Vec<u8>>;
    /// [`ObjectSource::read`] of an object the manifest says is `size` bytes: a source may
    /// read exactly that many (what it returns is verified either way).
    fn read_sized(&self, path: &str, sha256: &str, size: u64) -> Result<Vec<u8>> {
        let _ = size;
        self.read(path, sha256)
    }
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

    /// The object file at manifest-relative `path`, which must stay inside the directory.
    fn file(&self, path: &str) -> Result<PathBuf> {
        kbuild_base::ident::confined(&self.root, "object path", path).map_err(|e| {
            LoaderError::Package {
                path: self.root.join("manifest.json"),
                what: e.to_string(),
            }
        })
    }
}

impl ObjectSource for DirSource {
    fn read(&self, path: &str, _sha256: &str) -> Result<Vec<u8>> {
        let full = self.file(path)?;
        let io = |e| LoaderError::io(&full, "reading the code object", e);
        // One byte past the cap tells an oversize file without reading all of it.
        let file = std::fs::File::open(&full).map_err(io)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MAX_OBJECT_BYTES + 1),
            &mut bytes,
        )
        .map_err(io)?;
        if bytes.len() as u64 > MAX_OBJECT_BYTES {
            return Err(LoaderError::ObjectTooLarge {
                path: full,
                size: bytes.len() as u64,
                cap: MAX_OBJECT_BYTES,
            });
        }
        Ok(bytes)
    }

    fn read_sized(&self, path: &str, _sha256: &str, size: u64) -> Result<Vec<u8>> {
        let full = self.file(path)?;
        if size > MAX_OBJECT_BYTES {
            return Err(LoaderError::ObjectTooLarge {
                path: full,
                size,
                cap: MAX_OBJECT_BYTES,
            });
        }
        // The size the manifest records: open and one read (no stat, no probe for the end).
        // Only these bytes are verified and handed on, so a longer file changes nothing; a
        // shorter one fails its digest.
        let io = |e| LoaderError::io(&full, "reading the code object", e);
        let want = usize::try_from(size).map_err(|_| {
            io(std::io::Error::other(
                "the manifest's size does not fit in memory",
            ))
        })?;
        let mut file = std::fs::File::open(&full).map_err(io)?;
        kbuild_base::fs::read_up_to(&mut file, want).map_err(io)
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}

/// The one empty source: that of a package made from a manifest alone (it selects and
/// explains, and reads nothing), and the placeholder of a bundle's package while its index is
/// built.
pub(crate) struct EmptySource {
    pub(crate) origin: PathBuf,
}

impl ObjectSource for EmptySource {
    fn read(&self, path: &str, _sha256: &str) -> Result<Vec<u8>> {
        Err(LoaderError::NoObjects {
            origin: self.origin.clone(),
            path: path.to_string(),
        })
    }

    fn describe(&self) -> String {
        self.origin.display().to_string()
    }
}

#[cfg(feature = "registry")]
/// The objects of a verified bundle in memory.
pub struct BundleSource {
    /// sha256 hex → bytes, verified when the bundle was read.
    pub(crate) objects: std::collections::BTreeMap<String, Vec<u8>>,
    pub(crate) origin: String,
}

#[cfg(feature = "registry")]
impl ObjectSource for BundleSource {
    fn read(&self, path: &str, sha256: &str) -> Result<Vec<u8>> {
        self.objects
            .get(sha256)
            .cloned()
            .ok_or_else(|| LoaderError::Package {
                path: PathBuf::from(&self.origin),
                what: format!("object {path} ({sha256}) is not in this bundle"),
            })
    }

    fn describe(&self) -> String {
        self.origin.clone()
    }
}
