//! kbuild bundles: the deterministic tar+zstd archive ([`archive`]), reading and verifying a
//! bundle ([`bundle::Bundle`]), ed25519 signatures and the user's trust policy ([`sign`]), and
//! the local cache of installed (pulled) bundles ([`cache`]). No network code: the loader
//! depends on this crate, registries build on it.
//!
//! For a loader: [`bundle::Bundle::open`] reads and verifies a bundle file (every object's
//! sha256, nothing missing, nothing extra), [`sign::Trust::load`] + [`sign::Trust::check`]
//! apply the user's signature policy, and [`verify_bundle_file`] does both.

pub mod archive;
pub mod bundle;
#[cfg(feature = "signatures")]
pub mod cache;
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
    limits: archive::Limits,
) -> Result<(Bundle, sign::Verdict), VerifyError> {
    let bundle = Bundle::open(path, limits).map_err(|err| VerifyError::Bundle {
        path: path.display().to_string(),
        err,
    })?;
    let sig_path = signature_path(path);
    let sigs = match std::fs::read(&sig_path) {
        Ok(b) => Some(sign::SignatureFile::from_json(&b)?),
        Err(_) => None,
    };
    let verdict = trust.check(
        bundle.name(),
        bundle.version(),
        bundle.manifest_digest(),
        sigs.as_ref(),
    )?;
    Ok((bundle, verdict))
}
