//! Manifests: fetching one by tag or digest (bounded, digest-checked) and pushing one.

use super::body::{read_all, Body};
use super::{FetchedManifest, OciClient, OciError, IMAGE_INDEX, IMAGE_MANIFEST, MAX_MANIFEST};
use crate::progress::Progress;
use kbuild_base::digest;

impl OciClient {
    /// A manifest by tag or digest; `None` when there is none.
    pub fn get_manifest(
        &self,
        reference: &str,
        progress: &dyn Progress,
    ) -> Result<Option<FetchedManifest>, OciError> {
        let url = self.url(&format!("manifests/{reference}"));
        let accept = [(
            "Accept",
            format!(
                "{IMAGE_MANIFEST}, {IMAGE_INDEX}, application/vnd.docker.distribution.manifest.v2+json"
            ),
        )];
        let fetched = self.retry(progress, || {
            let resp = match self.exchange("GET", &url, &accept, None, false, Body::Document) {
                Err(OciError::Status { code: 404, .. }) => return Ok(None),
                r => r?,
            };
            let header_digest = resp.header("Docker-Content-Digest").map(str::to_string);
            let media_type = resp.content_type().to_string();
            let bytes = read_all(resp, MAX_MANIFEST, None).map_err(|e| {
                if e.kind() == std::io::ErrorKind::FileTooLarge {
                    OciError::Invalid(format!(
                        "manifest {} is larger than {MAX_MANIFEST} bytes (the OCI distribution limit); refusing an oversize manifest",
                        self.display_ref(reference)
                    ))
                } else {
                    self.transport("GET", &url, e)
                }
            })?;
            // Checked inside the retry: a body mangled on the way is fetched once more.
            let actual = digest::oci_digest(&bytes);
            let expected = if reference.starts_with("sha256:") {
                Some(reference.to_string())
            } else {
                header_digest
            };
            if let Some(expected) = expected {
                if expected != actual {
                    return Err(OciError::Digest {
                        what: format!("manifest {}", self.display_ref(reference)),
                        expected,
                        actual,
                    });
                }
            }
            Ok(Some(FetchedManifest {
                digest: actual,
                bytes,
                media_type,
            }))
        })?;
        Ok(fetched)
    }

    /// PUT a manifest under a tag (or its digest). Returns the registry's digest.
    pub fn put_manifest(
        &self,
        reference: &str,
        bytes: &[u8],
        progress: &dyn Progress,
    ) -> Result<String, OciError> {
        let url = self.url(&format!("manifests/{reference}"));
        let headers = [("Content-Type", IMAGE_MANIFEST.to_string())];
        let resp = self.retry(progress, || {
            self.exchange("PUT", &url, &headers, Some(bytes), true, Body::Document)
        })?;
        let ours = digest::oci_digest(bytes);
        match resp.header("Docker-Content-Digest") {
            Some(d) if d != ours => Err(OciError::Digest {
                what: format!("manifest pushed to {}", self.display_ref(reference)),
                expected: ours,
                actual: d.to_string(),
            }),
            _ => Ok(ours),
        }
    }
}
