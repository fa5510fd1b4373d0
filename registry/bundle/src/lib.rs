//! kbuild bundles: the deterministic tar+zstd archive ([`archive`]), reading and verifying a
//! bundle ([`bundle::Bundle`]), ed25519 signatures and the user's trust policy ([`sign`]), and
//! the local cache of installed (pulled) bundles ([`cache`]). No network code: the loader
//! depends on this crate, registries build on it.
//!
//! For a loader: [`bundle::Bundle::open`] reads and verifies a bundle file (every object's
//! sha256, nothing missing, nothing extra), [`sign::Trust::load`] + [`sign::Trust::check`]
//! apply the user's signature policy, and [`verify_bundle_file`] does both.

pub mod archive;
pub mod assets;
pub mod bundle;
#[cfg(feature = "signatures")]
pub mod cache;
pub mod merge;
#[cfg(feature = "signatures")]
pub mod output;
pub mod side;
#[cfg(feature = "signatures")]
pub mod sign;

pub use bundle::{Bundle, BundleError};
pub use kbuild_base::digest;

use std::path::{Path, PathBuf};

/// The signature file beside a bundle: `NAME-VERSION.kbundle.sig`.
pub fn signature_path(bundle: &Path) -> PathBuf {
    let mut s = bundle.as_os_str().to_owned();
    s.push(".sig");
    PathBuf::from(s)
}

/// Why a bundle file was refused on load.
#[cfg(feature = "signatures")]
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{path}: {err}")]
    Bundle { path: String, err: BundleError },
    #[error(transparent)]
    Signature(#[from] sign::SignError),
}

#[cfg(feature = "signatures")]
/// Open a bundle file and check it against `trust` using the `.sig` file beside it: what a
/// loader calls before loading any object.
pub fn verify_bundle_file(
    path: &Path,
    trust: &sign::Trust,
    limits: archive::ArchiveLimits,
) -> Result<(Bundle, sign::TrustVerdict), VerifyError> {
    let sigs = sign::read_signatures(path).map_err(sign::SignError::from)?;
    // Under `require` the signature is checked on the manifest's bytes before they are parsed;
    // its refusal is kept whole (the archive reader words errors as text).
    let mut refused: Option<sign::SignError> = None;
    let mut check = |json: &[u8]| {
        trust
            .check_before_parse(
                &digest::oci_digest(json),
                sigs.as_ref(),
                kbuild_manifest::manifest::Manifest::claimed_package(json).as_deref(),
            )
            .map_err(|e| {
                let shown = BundleError::Refused(e.to_string().into());
                refused = Some(e);
                shown
            })
    };
    let opened = Bundle::open_checked(path, limits, &mut check);
    if let Some(e) = refused {
        return Err(VerifyError::Signature(e));
    }
    let bundle = opened.map_err(|err| VerifyError::Bundle {
        path: path.display().to_string(),
        err,
    })?;
    let verdict = trust.check(
        bundle.name(),
        bundle.version(),
        bundle.manifest_digest(),
        sigs.as_ref(),
    )?;
    Ok((bundle, verdict))
}

/// What [`prune_stale_signatures`] did to the `.sig` beside a bundle.
#[cfg(feature = "signatures")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pruned {
    /// No `.sig` file, or every signature in it belongs to the bundle.
    Nothing,
    /// Some signatures were for another bundle; the file now holds only the rest.
    Rewrote { path: PathBuf, removed: Vec<String> },
    /// No signature in it belonged to the bundle (or it was not a signature file); it is gone.
    Removed { path: PathBuf, why: Vec<String> },
}

/// Why the `.sig` beside a bundle could not be pruned.
#[cfg(feature = "signatures")]
#[derive(Debug, thiserror::Error)]
#[error("{path}: {err}")]
pub struct PruneError {
    pub path: String,
    pub err: std::io::Error,
}

/// After (re)writing the bundle file `path` holding `bundle`: drop from the `.sig` beside it
/// every signature that is not for this bundle, removing the file when none is left, so a
/// stale signature never sits next to a rebuilt bundle. The file is rewritten atomically.
#[cfg(feature = "signatures")]
pub fn prune_stale_signatures(path: &Path, bundle: &Bundle) -> Result<Pruned, PruneError> {
    let sig_path = signature_path(path);
    let io = |err: std::io::Error| PruneError {
        path: sig_path.display().to_string(),
        err,
    };
    let bytes = match kbuild_base::read::read_capped(
        &sig_path,
        sign::MAX_SIG_FILE_BYTES,
        "a signature file",
    ) {
        Ok(b) => b,
        Err(e) if e.is_not_found() => return Ok(Pruned::Nothing),
        Err(kbuild_base::read::ReadError::Io { source, .. }) => return Err(io(source)),
        Err(e) => return Err(io(std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
    };
    let (keep, why) = match sign::SignatureFile::from_json(&bytes) {
        Ok(file) => {
            let (keep, problems) =
                file.split_belonging(bundle.name(), bundle.version(), bundle.manifest_digest());
            (keep, problems.iter().map(ToString::to_string).collect())
        }
        Err(e) => (sign::SignatureFile::new(), vec![e.to_string()]),
    };
    if why.is_empty() {
        return Ok(Pruned::Nothing);
    }
    if keep.signatures.is_empty() {
        std::fs::remove_file(&sig_path).map_err(io)?;
        return Ok(Pruned::Removed {
            path: sig_path,
            why,
        });
    }
    kbuild_base::fs::write_atomic(&sig_path, &keep.to_json()).map_err(io)?;
    Ok(Pruned::Rewrote {
        path: sig_path,
        removed: why,
    })
}
