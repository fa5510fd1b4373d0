//! Signing a version already published: the payload (name, exact version, the manifest
//! digest the registry resolves it to) signed and added to the registry's signatures.

use kbuild_bundle::sign::{Payload, SecretKey, SignatureFile};

use crate::progress::Progress;
use crate::store::{Registry, Resolved, StoreError};

impl Registry {
    /// Sign `name` `version` (an exact version) as published here with `key`; what it signed.
    pub fn sign_published(
        &self,
        name: &str,
        version: &str,
        key: &SecretKey,
        progress: &dyn Progress,
    ) -> Result<Resolved, StoreError> {
        let resolved = self.resolve(name, version, progress)?;
        let mut sigs = SignatureFile::new();
        sigs.add(key.sign(Payload::new(name, version, &resolved.manifest_digest)));
        self.add_signatures(&resolved, &sigs, progress)?;
        Ok(resolved)
    }
}
