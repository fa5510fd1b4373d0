//! The files of signing: the `.sig` file beside a bundle (or a split release's index), read
//! and written through one pair of functions with one rule (no file is no signatures; any
//! other read error, or a file that is not a signature file, is an error), and the key pair
//! `kbuild keygen` writes (the secret key created 0600 and renamed into place).

use std::path::{Path, PathBuf};

use super::{Payload, SecretKey, SignError, SignatureFile, SignatureProblem};

/// Why the `.sig` file beside a bundle could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SigFileError {
    #[error("reading {path}: {err}")]
    Read { path: String, err: std::io::Error },
    /// Over the size limit, or not a regular file.
    #[error(transparent)]
    Refused(kbuild_base::read::ReadError),
    #[error("writing {path}: {err}")]
    Write { path: String, err: std::io::Error },
    /// There, but not a signature file.
    #[error("{path}: {err}")]
    Bad { path: String, err: SignError },
}

impl From<SigFileError> for SignError {
    fn from(e: SigFileError) -> SignError {
        match e {
            SigFileError::Read { path, err } | SigFileError::Write { path, err } => {
                SignError::Io { path, err }
            }
            SigFileError::Bad { err, .. } => err,
            SigFileError::Refused(e) => SignError::Read(e),
        }
    }
}

/// The largest `.sig` file read: a signature is under 1 KiB; a thousand of them fit.
pub const MAX_SIG_FILE_BYTES: u64 = 1 << 20;

/// The signatures beside `file` (`FILE.sig`): `None` when there is no such file.
pub fn read_signatures(file: &Path) -> Result<Option<SignatureFile>, SigFileError> {
    let path = crate::signature_path(file);
    match kbuild_base::read::read_capped(&path, MAX_SIG_FILE_BYTES, "a signature file") {
        Ok(b) => SignatureFile::from_json(&b)
            .map(Some)
            .map_err(|err| SigFileError::Bad {
                path: path.display().to_string(),
                err,
            }),
        Err(e) if e.is_not_found() => Ok(None),
        Err(kbuild_base::read::ReadError::Io { source, .. }) => Err(SigFileError::Read {
            path: path.display().to_string(),
            err: source,
        }),
        Err(e) => Err(SigFileError::Refused(e)),
    }
}

/// Write `sigs` beside `file` (`FILE.sig`), atomically (unchanged bytes are left alone);
/// returns the path written.
pub fn write_signatures(file: &Path, sigs: &SignatureFile) -> Result<PathBuf, SigFileError> {
    let path = crate::signature_path(file);
    kbuild_base::fs::write_if_changed(&path, &sigs.to_json()).map_err(|err| {
        SigFileError::Write {
            path: path.display().to_string(),
            err,
        }
    })?;
    Ok(path)
}

/// What [`sign_file`] did.
#[derive(Debug)]
pub struct Signed {
    /// The `.sig` file written.
    pub path: PathBuf,
    /// Signatures that were in it for another bundle (an earlier build of this version),
    /// dropped.
    pub dropped: Vec<SignatureProblem>,
}

/// Sign `name` `version` (manifest `manifest_digest`) with `key` into the `.sig` beside
/// `file` (a bundle, or a split release's index), keeping the signatures there that belong
/// to it (other keys') and dropping those of another bundle.
pub fn sign_file(
    file: &Path,
    key: &SecretKey,
    name: &str,
    version: &str,
    manifest_digest: &str,
) -> Result<Signed, SigFileError> {
    let sigs = read_signatures(file)?.unwrap_or_default();
    let (mut sigs, dropped) = sigs.split_belonging(name, version, manifest_digest);
    sigs.add(key.sign(Payload::new(name, version, manifest_digest)));
    let path = write_signatures(file, &sigs)?;
    Ok(Signed { path, dropped })
}

/// Why [`sign_artifact`] signed nothing.
#[derive(Debug, thiserror::Error)]
pub enum SignArtifactError {
    #[error(transparent)]
    Index(#[from] crate::assets::AssetError),
    #[error(transparent)]
    Bundle(#[from] crate::BundleError),
    #[error(transparent)]
    File(#[from] SigFileError),
}

/// A bundle file or a split release's index, signed by [`sign_artifact`].
pub struct SignedArtifact {
    pub name: String,
    pub version: String,
    pub manifest_digest: String,
    /// A split release's index: the signature covers the manifest every part carries.
    pub index: bool,
    pub signed: Signed,
}

/// Sign a bundle file, or a split release's index (`.kbindex`), with `key`: its name, version
/// and manifest digest read from the file itself, the `.sig` beside it through [`sign_file`].
pub fn sign_artifact(
    file: &Path,
    key: &SecretKey,
    limits: crate::archive::ArchiveLimits,
) -> Result<SignedArtifact, SignArtifactError> {
    let index = crate::assets::is_index_path(file);
    let (name, version, manifest_digest): (String, String, String) = if index {
        let i = crate::assets::AssetIndex::open(file)?;
        let (n, v, d) = (i.name(), i.version(), i.manifest_digest());
        (n.into(), v.into(), d.into())
    } else {
        let b = crate::Bundle::open(file, limits)?;
        (
            b.name().into(),
            b.version().into(),
            b.manifest_digest().into(),
        )
    };
    let signed = sign_file(file, key, &name, &version, &manifest_digest)?;
    Ok(SignedArtifact {
        name,
        version,
        manifest_digest,
        index,
        signed,
    })
}

/// Where `kbuild keygen` puts keys by default: `keys/` beside the kbuild config file.
pub fn default_key_dir(dirs: &kbuild_base::dirs::Dirs) -> PathBuf {
    dirs.config_file
        .parent()
        .map(|p| p.join("keys"))
        .unwrap_or_else(|| PathBuf::from("keys"))
}

/// The secret key `kbuild sign` uses by default: the one `kbuild keygen` makes by default
/// (`kbuild.key` in [`default_key_dir`]).
pub fn default_secret_key(dirs: &kbuild_base::dirs::Dirs) -> PathBuf {
    default_key_dir(dirs).join("kbuild.key")
}

/// Why a key pair was not written.
#[cfg(feature = "keygen")]
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{} already exists; pass --force to replace it (signatures by the old key will no longer verify against the new one)", .0.display())]
    Exists(PathBuf),
    #[error("{what} {path}: {err}")]
    Io {
        what: &'static str,
        path: String,
        err: std::io::Error,
    },
    #[error(transparent)]
    Key(#[from] SignError),
}

/// A key pair written by [`write_key_pair`].
#[cfg(feature = "keygen")]
#[derive(Debug)]
pub struct KeyPair {
    /// `NAME.key`, mode 0600.
    pub secret: PathBuf,
    /// `NAME.pub`.
    pub public: PathBuf,
    /// The public key's id.
    pub key_id: String,
}

/// Make a fresh key pair as `DIR/NAME.key` (secret, created 0600 under a temporary name and
/// renamed into place, so it is never readable by others nor half-written) and `DIR/NAME.pub`.
/// Refused when either exists, unless `force`.
#[cfg(feature = "keygen")]
pub fn write_key_pair(dir: &Path, name: &str, force: bool) -> Result<KeyPair, KeyFileError> {
    let secret = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    if !force && (secret.exists() || public.exists()) {
        return Err(KeyFileError::Exists(secret));
    }
    let io = |what: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |err| KeyFileError::Io { what, path, err }
    };
    let key = super::SecretKey::generate()?;
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let tmp = kbuild_base::fs::temp_path(dir, "key");
    write_private(&tmp, key.to_text().as_bytes()).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("creating", &tmp)(e)
    })?;
    std::fs::rename(&tmp, &secret).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("writing", &secret)(e)
    })?;
    kbuild_base::fs::write_atomic(&public, key.public().to_text().as_bytes())
        .map_err(io("writing", &public))?;
    Ok(KeyPair {
        secret,
        public,
        key_id: key.public().id(),
    })
}

/// Create `path` (it must not exist) readable by its owner alone, holding `bytes`.
#[cfg(feature = "keygen")]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_sig_is_none_a_bad_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("p-1.0.0.kbundle");
        assert!(read_signatures(&bundle).unwrap().is_none());
        std::fs::write(crate::signature_path(&bundle), b"{").unwrap();
        let e = read_signatures(&bundle).unwrap_err().to_string();
        assert!(e.contains("p-1.0.0.kbundle.sig: signature file"), "{e}");
        let written = write_signatures(&bundle, &SignatureFile::new()).unwrap();
        assert_eq!(written, crate::signature_path(&bundle));
        assert!(read_signatures(&bundle).unwrap().is_some());
        // A directory where the file should be is an error, not "unsigned".
        let other = dir.path().join("q.kbundle");
        std::fs::create_dir(crate::signature_path(&other)).unwrap();
        assert!(read_signatures(&other).is_err());
    }

    #[cfg(all(unix, feature = "keygen"))]
    #[test]
    fn key_pair_is_private_and_not_replaced_without_force() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let pair = write_key_pair(&keys, "k", false).unwrap();
        let mode = std::fs::metadata(&pair.secret)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(super::super::SecretKey::load(&pair.secret).is_ok());
        assert!(matches!(
            write_key_pair(&keys, "k", false),
            Err(KeyFileError::Exists(_))
        ));
        let again = write_key_pair(&keys, "k", true).unwrap();
        assert_ne!(again.key_id, pair.key_id);
        let left: Vec<_> = std::fs::read_dir(&keys).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file left");
    }
}
