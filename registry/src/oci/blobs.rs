//! Blobs: downloads (to a file or to memory, size- and digest-checked inside the retry,
//! bounded by [`OciOptions::max_layer_bytes`](super::OciOptions::max_layer_bytes)) and
//! chunked uploads that skip what the registry has.

use std::io::Read;
use std::path::Path;

use super::body::{read_all, Body};
use super::{Descriptor, OciClient, OciError, TARGET_ANNOTATION};
use crate::auth;
use crate::progress::Progress;
use kbuild_base::digest;

impl OciClient {
    /// The label of a blob in messages, and its URL; refuses a declared size over
    /// [`OciOptions::max_layer_bytes`](super::OciOptions::max_layer_bytes).
    fn blob_request(&self, desc: &Descriptor) -> Result<(String, String), OciError> {
        let url = self.url(&format!("blobs/{}", desc.digest));
        let label = desc
            .annotations
            .get(TARGET_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| short(&desc.digest));
        if desc.size > self.opts.max_layer_bytes {
            return Err(OciError::TooLarge {
                what: format!("{}: blob {label} ({})", self.host, desc.digest),
                declared: desc.size,
                limit: self.opts.max_layer_bytes,
            });
        }
        Ok((url, label))
    }

    /// A blob, streamed into the file `path` (created or truncated), checked on the way
    /// against its descriptor's size and digest: at most `size + 1` bytes are read, and a
    /// declared size over [`OciOptions::max_layer_bytes`] is refused before any. Returns the
    /// bytes written. On an error the file may hold a partial body; the caller removes it.
    ///
    /// [`OciOptions::max_layer_bytes`]: super::OciOptions::max_layer_bytes
    pub fn get_blob_to(
        &self,
        desc: &Descriptor,
        path: &Path,
        progress: &dyn Progress,
    ) -> Result<u64, OciError> {
        use std::io::Write as _;
        let (url, label) = self.blob_request(desc)?;
        let io = |e: std::io::Error| OciError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        self.retry(progress, || {
            let resp = match self.exchange("GET", &url, &[], None, false, Body::Stream) {
                Err(OciError::Status { code: 404, .. }) => {
                    return Err(OciError::NotFound(format!("blob {}", desc.digest)))
                }
                r => r?,
            };
            let mut file = std::fs::File::create(path).map_err(io)?;
            let mut reader = resp.into_reader().take(desc.size.saturating_add(1));
            let mut hasher = digest::Hasher::default();
            let mut buf = vec![0u8; 256 << 10];
            let mut n: u64 = 0;
            progress.begin(&label, desc.size);
            let copied = loop {
                let k = match reader.read(&mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(k) => k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => break Err(self.transport("GET", &url, e)),
                };
                n += k as u64;
                if n > desc.size {
                    break Err(OciError::Digest {
                        what: format!("blob {} (size)", desc.digest),
                        expected: format!("{} bytes", desc.size),
                        actual: "more bytes".into(),
                    });
                }
                hasher.update(&buf[..k]);
                if let Err(e) = file.write_all(&buf[..k]) {
                    break Err(io(e));
                }
                progress.advance(k as u64);
            };
            progress.end();
            copied?;
            file.flush().map_err(io)?;
            if n != desc.size {
                return Err(OciError::Digest {
                    what: format!("blob {} (size)", desc.digest),
                    expected: format!("{} bytes", desc.size),
                    actual: format!("{n} bytes"),
                });
            }
            let actual = hasher.finish_oci();
            if actual != desc.digest {
                return Err(OciError::Digest {
                    what: format!("GET {url}: blob {label}"),
                    expected: desc.digest.clone(),
                    actual,
                });
            }
            Ok(n)
        })
    }

    /// A blob in memory, checked against its descriptor's digest and size; a declared size
    /// over [`OciOptions::max_layer_bytes`] is refused before any byte is read. For small
    /// blobs (a config, a signature file, a cached object); layers go through
    /// [`OciClient::get_blob_to`].
    ///
    /// [`OciOptions::max_layer_bytes`]: super::OciOptions::max_layer_bytes
    pub fn get_blob(
        &self,
        desc: &Descriptor,
        progress: &dyn Progress,
    ) -> Result<Vec<u8>, OciError> {
        let (url, label) = self.blob_request(desc)?;
        let bytes = self.retry(progress, || {
            let resp = match self.exchange("GET", &url, &[], None, false, Body::Stream) {
                Err(OciError::Status { code: 404, .. }) => {
                    return Err(OciError::NotFound(format!("blob {}", desc.digest)))
                }
                r => r?,
            };
            progress.begin(&label, desc.size);
            let r = read_all(resp, desc.size.saturating_add(1), Some(progress));
            progress.end();
            let bytes = r.map_err(|e| {
                if e.kind() == std::io::ErrorKind::FileTooLarge {
                    OciError::Digest {
                        what: format!("blob {} (size)", desc.digest),
                        expected: format!("{} bytes", desc.size),
                        actual: "more bytes".into(),
                    }
                } else {
                    self.transport("GET", &url, e)
                }
            })?;
            // Checked inside the retry: a body cut short or mangled on the way is fetched
            // once more; a registry whose copy is wrong still fails after that.
            if bytes.len() as u64 != desc.size {
                return Err(OciError::Digest {
                    what: format!("blob {} (size)", desc.digest),
                    expected: format!("{} bytes", desc.size),
                    actual: format!("{} bytes", bytes.len()),
                });
            }
            let actual = digest::oci_digest(&bytes);
            if actual != desc.digest {
                return Err(OciError::Digest {
                    what: format!("blob {label}"),
                    expected: desc.digest.clone(),
                    actual,
                });
            }
            Ok(bytes)
        })?;
        Ok(bytes)
    }

    fn blob_exists(&self, digest: &str, progress: &dyn Progress) -> Result<bool, OciError> {
        let url = self.url(&format!("blobs/{digest}"));
        match self.retry(progress, || {
            self.exchange("HEAD", &url, &[], None, true, Body::Document)
        }) {
            Ok(_) => Ok(true),
            Err(OciError::Status { code: 404, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// An upload `Location` made absolute; an error when it leaves the registry's origin (the
    /// blob and the registry's `Authorization` would go there).
    pub(super) fn upload_location(
        &self,
        method: &str,
        url: &str,
        location: &str,
    ) -> Result<String, OciError> {
        let abs = self.absolute(location);
        if !self.same_origin(&abs) {
            return Err(OciError::Invalid(format!(
                "{method} {url}: the upload Location {abs} is on another origin than the registry ({}); refusing to send the blob there",
                self.base
            )));
        }
        Ok(abs)
    }

    /// Upload a blob unless the registry has it. Returns whether it uploaded.
    pub fn put_blob(
        &self,
        bytes: &[u8],
        label: &str,
        progress: &dyn Progress,
    ) -> Result<bool, OciError> {
        let digest = digest::oci_digest(bytes);
        if self.blob_exists(&digest, progress)? {
            progress.note(&format!(
                "{label}: the registry has blob {} already, skipped",
                short(&digest)
            ));
            return Ok(false);
        }
        let start_url = self.url("blobs/uploads/");
        self.retry(progress, || {
            let resp = self.exchange(
                "POST",
                &start_url,
                &[("Content-Length", "0".into())],
                Some(&[]),
                true,
                Body::Document,
            )?;
            let mut location = self.upload_location(
                "POST",
                &start_url,
                resp.header("Location").ok_or_else(|| {
                    OciError::Invalid(format!(
                        "POST {start_url}: upload start answered without a Location"
                    ))
                })?,
            )?;
            progress.begin(label, bytes.len() as u64);
            let mut offset = 0usize;
            let chunk = self.opts.chunk_size.max(1);
            while offset < bytes.len() {
                let end = (offset + chunk).min(bytes.len());
                let headers = [
                    ("Content-Type", "application/octet-stream".to_string()),
                    ("Content-Range", format!("{offset}-{}", end - 1)),
                    ("Content-Length", (end - offset).to_string()),
                ];
                let r = self.exchange(
                    "PATCH",
                    &location,
                    &headers,
                    Some(&bytes[offset..end]),
                    true,
                    Body::Stream,
                );
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        progress.end();
                        return Err(e);
                    }
                };
                if let Some(l) = r.header("Location") {
                    match self.upload_location("PATCH", &location, l) {
                        Ok(next) => location = next,
                        Err(e) => {
                            progress.end();
                            return Err(e);
                        }
                    }
                }
                progress.advance((end - offset) as u64);
                offset = end;
            }
            progress.end();
            let sep = if location.contains('?') { '&' } else { '?' };
            let put = format!("{location}{sep}digest={}", auth::url_encode(&digest));
            match self.exchange(
                "PUT",
                &put,
                &[("Content-Length", "0".into())],
                Some(&[]),
                true,
                Body::Stream,
            ) {
                Ok(_) => Ok(()),
                // The answer to a committing PUT was lost: the registry may have the blob
                // now (and forgot the upload, so a retry of this PUT would be a 404).
                Err(e) => match self.blob_exists(&digest, progress) {
                    Ok(true) => Ok(()),
                    _ => Err(e),
                },
            }
        })?;
        Ok(true)
    }
}

/// The first 12 hex digits of a digest, for messages.
fn short(d: &str) -> String {
    d.trim_start_matches("sha256:").chars().take(12).collect()
}
