//! Publishing a bundle: blobs first, signatures next, the version tag last; an existing
//! version is accepted only with the same bytes.

use super::{Artifact, FetchedManifest, OciClient, OciError, IMAGE_MANIFEST};
use crate::progress::Progress;

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    Published {
        digest: String,
        uploaded: usize,
        skipped: usize,
        bytes: u64,
    },
    /// This version already holds exactly these bytes.
    AlreadyPublished { digest: String },
}

impl OciClient {
    /// Push a bundle as version `tag`: blobs first (skipping existing ones), then the manifest.
    /// An existing tag with the same manifest is a no-op; with another one, an error.
    pub fn publish(
        &self,
        art: &Artifact,
        tag: &str,
        progress: &dyn Progress,
    ) -> Result<PublishOutcome, OciError> {
        self.publish_signed(art, tag, None, progress)
    }

    /// [`OciClient::publish`], attaching `sigs` (merged with any already attached) after the
    /// blobs and before the tag: the version becomes visible last, already signed, so an
    /// interrupted publish never shows an unsigned version. An already published version
    /// gets the signatures attached.
    pub fn publish_signed(
        &self,
        art: &Artifact,
        tag: &str,
        sigs: Option<&kbuild_bundle::sign::SignatureFile>,
        progress: &dyn Progress,
    ) -> Result<PublishOutcome, OciError> {
        let attach = |sigs: &kbuild_bundle::sign::SignatureFile| -> Result<(), OciError> {
            let subject = FetchedManifest {
                digest: art.digest.clone(),
                bytes: art.manifest.clone(),
                media_type: IMAGE_MANIFEST.into(),
            };
            let mut all = self
                .get_signatures(&art.digest, progress)?
                .unwrap_or_default();
            for sig in &sigs.signatures {
                all.add(sig.clone());
            }
            self.put_signatures(&subject, &all, progress).map(|_| ())
        };
        if let Some(existing) = self.get_manifest(tag, progress)? {
            if existing.digest == art.digest {
                if let Some(s) = sigs {
                    attach(s)?;
                }
                return Ok(PublishOutcome::AlreadyPublished {
                    digest: art.digest.clone(),
                });
            }
            return Err(OciError::Invalid(format!(
                "{} already exists with different content (registry: {}, this bundle: {}); published versions are immutable, so bump the version in Kbuild.toml",
                self.display_ref(tag),
                existing.digest,
                art.digest
            )));
        }
        let (mut uploaded, mut skipped, mut bytes) = (0, 0, 0u64);
        let mut blobs: Vec<(&[u8], String)> = vec![(&art.config, "manifest.json".to_string())];
        for (t, b, _) in &art.layers {
            blobs.push((b, t.clone()));
        }
        for (b, label) in blobs {
            if self.put_blob(b, &label, progress)? {
                uploaded += 1;
                bytes += b.len() as u64;
            } else {
                skipped += 1;
            }
        }
        if let Some(s) = sigs {
            attach(s)?;
        }
        let digest = self.put_manifest(tag, &art.manifest, progress)?;
        Ok(PublishOutcome::Published {
            digest,
            uploaded,
            skipped,
            bytes,
        })
    }
}
