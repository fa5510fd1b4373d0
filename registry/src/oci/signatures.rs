//! Signatures: the signature artifact attached to a bundle manifest, read through the
//! referrers API or the `sha256-<hex>.sig` tag, and pushed under that tag.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::body::{read_all, Body};
use super::{
    signature_tag, Descriptor, FetchedManifest, ImageManifest, OciClient, OciError, ARTIFACT_TYPE,
    EMPTY_MEDIA_TYPE, IMAGE_INDEX, IMAGE_MANIFEST, MAX_DOCUMENT, SIGNATURE_ARTIFACT_TYPE,
    TITLE_ANNOTATION,
};
use crate::auth;
use crate::progress::Progress;
use kbuild_base::digest;

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

impl OciClient {
    /// The kbuild signature file attached to the artifact `subject` (an OCI manifest
    /// digest): through the referrers API where the registry has it, else the
    /// `sha256-<hex>.sig` tag.
    pub fn get_signatures(
        &self,
        subject: &str,
        progress: &dyn Progress,
    ) -> Result<Option<kbuild_bundle::sign::SignatureFile>, OciError> {
        let referrers = self.url(&format!(
            "referrers/{subject}?artifactType={}",
            auth::url_encode(SIGNATURE_ARTIFACT_TYPE)
        ));
        let mut sig_manifest = None;
        match self.exchange(
            "GET",
            &referrers,
            &[("Accept", IMAGE_INDEX.into())],
            None,
            false,
            Body::Document,
        ) {
            Ok(resp) => {
                let body = read_all(resp, MAX_DOCUMENT, None)
                    .map_err(|e| self.transport("GET", &referrers, e))?;
                if let Ok(index) = serde_json::from_slice::<Index>(&body) {
                    if let Some(d) = index
                        .manifests
                        .iter()
                        .find(|d| d.artifact_type.as_deref() == Some(SIGNATURE_ARTIFACT_TYPE))
                    {
                        sig_manifest = self.get_manifest(&d.digest, progress)?;
                    }
                }
            }
            Err(OciError::Status {
                code: 404 | 400 | 405,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
        if sig_manifest.is_none() {
            sig_manifest = self.get_manifest(&signature_tag(subject)?, progress)?;
        }
        let Some(m) = sig_manifest else {
            return Ok(None);
        };
        let im: ImageManifest = serde_json::from_slice(&m.bytes)
            .map_err(|e| OciError::Invalid(format!("signature manifest: {e}")))?;
        if im.artifact_type.as_deref() != Some(SIGNATURE_ARTIFACT_TYPE) {
            return Err(OciError::Invalid(format!(
                "{} is not a kbuild signature artifact",
                self.display_ref(&signature_tag(subject)?)
            )));
        }
        let layer = im
            .layers
            .first()
            .ok_or_else(|| OciError::Invalid("signature artifact without a layer".into()))?;
        let bytes = self.get_blob(layer, progress)?;
        kbuild_bundle::sign::SignatureFile::from_json(&bytes)
            .map(Some)
            .map_err(|e| OciError::Invalid(e.to_string()))
    }

    /// Attach `sigs` to the artifact `subject` (its manifest bytes' descriptor).
    pub fn put_signatures(
        &self,
        subject: &FetchedManifest,
        sigs: &kbuild_bundle::sign::SignatureFile,
        progress: &dyn Progress,
    ) -> Result<String, OciError> {
        let body = sigs.to_json();
        let empty = b"{}".to_vec();
        self.put_blob(&empty, "empty config", progress)?;
        self.put_blob(&body, "signatures", progress)?;
        let m = ImageManifest {
            schema_version: 2,
            media_type: Some(IMAGE_MANIFEST.into()),
            artifact_type: Some(SIGNATURE_ARTIFACT_TYPE.into()),
            config: Descriptor {
                media_type: EMPTY_MEDIA_TYPE.into(),
                digest: digest::oci_digest(&empty),
                size: 2,
                artifact_type: None,
                annotations: BTreeMap::new(),
            },
            layers: vec![Descriptor {
                media_type: SIGNATURE_ARTIFACT_TYPE.into(),
                digest: digest::oci_digest(&body),
                size: body.len() as u64,
                artifact_type: None,
                annotations: [(TITLE_ANNOTATION.to_string(), "signatures.json".to_string())].into(),
            }],
            subject: Some(Descriptor {
                media_type: IMAGE_MANIFEST.into(),
                digest: subject.digest.clone(),
                size: subject.bytes.len() as u64,
                artifact_type: Some(ARTIFACT_TYPE.into()),
                annotations: BTreeMap::new(),
            }),
            annotations: BTreeMap::new(),
        };
        let bytes = serde_json::to_vec(&m).map_err(|e| OciError::Invalid(e.to_string()))?;
        self.put_manifest(&signature_tag(&subject.digest)?, &bytes, progress)
    }
}
