//! What the loader takes from the registry's bundle crate: the signature policy ([`Trust`])
//! and its [`TrustVerdict`], the bundle source, and the one line a verdict is shown as. Opening a
//! bundle or pulled entry is [`crate::Package::open_bundle`] / [`crate::Package::from_cache`].

use std::path::Path;

use crate::error::LoaderError;

/// The objects of a verified bundle in memory.
pub use crate::source::BundleSource;

/// Whether `bytes` start like a bundle (a zstd frame).
pub use kbuild_base::looks_like_bundle;

/// The signature policy and trusted keys applied when a bundle or pulled entry is opened,
/// exactly as `kbuild pull` applies them. Build the value from the user's settings
/// (`Trust::load` of kbuild-bundle's `config` feature reads the kbuild config and
/// `KBUILD_SIGNATURE_POLICY`); [`Trust::default`] is the `warn` policy with no keys.
pub use kbuild_bundle::sign::{Policy, Trust, TrustVerdict};

/// One line for a verdict that let a package through (what `kbuild explain` and
/// `kbuild.Package.trust_note` show).
pub fn trust_note(v: &TrustVerdict) -> String {
    match v {
        TrustVerdict::Verified { key_id } => format!("signed by trusted key {key_id}"),
        TrustVerdict::Warning(m) => m.clone(),
        TrustVerdict::NotChecked => "signatures not checked (policy off)".into(),
    }
}

/// The message of a verdict that let a package through with a warning (the `warn` policy: an
/// unsigned bundle, or one signed by no trusted key): what `kbuild pull` prints as
/// `warning: …` and the Python package raises as a `kbuild.TrustWarning`. `None` for a
/// verified package or a policy that checks nothing.
pub fn trust_warning(v: &TrustVerdict) -> Option<&str> {
    match v {
        TrustVerdict::Warning(m) => Some(m),
        TrustVerdict::Verified { .. } | TrustVerdict::NotChecked => None,
    }
}

pub(crate) fn untrusted(path: &Path, e: impl std::fmt::Display) -> LoaderError {
    LoaderError::Untrusted {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}
