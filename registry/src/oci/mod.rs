//! A blocking OCI distribution client (distribution-spec v1.1) for kbuild artifacts.
//!
//! The artifact (ORAS-compatible): an OCI image manifest with
//! `artifactType: application/vnd.kbuild.bundle.v1+json`, config = the bundle's manifest.json
//! (`application/vnd.kbuild.manifest.v1+json`), one layer per target (tar+zstd of that
//! target's objects, [`LAYER_MEDIA_TYPE`]) annotated with `dev.kbuild.target` and
//! `org.opencontainers.image.title`, tagged with the version. No timestamps, so the same
//! bundle always makes the same manifest digest.
//!
//! Signatures: an artifact of type [`SIGNATURE_ARTIFACT_TYPE`] whose `subject` is the bundle
//! manifest, pushed under the tag `sha256-<hex>.sig` (the tag-schema fallback cosign and ORAS
//! use where a registry lacks the referrers API, as CNCF distribution 2.8 does). Reading tries
//! `GET /v2/<repo>/referrers/<digest>` first and falls back to that tag.
//!
//! Transfers: uploads are chunked (`POST` + `PATCH` with `Content-Range` + `PUT ?digest=`),
//! blobs the registry has (`HEAD`) are skipped, requests are retried with exponential backoff
//! on 5xx, 429 and transport errors, auth follows `WWW-Authenticate` (basic, or bearer via the
//! token endpoint). Plain HTTP only when asked.
//!
//! Faults: every body is checked (size, sha256) inside the retry, so one cut short or mangled
//! on the way is fetched again (a digest mismatch once, then it is the registry's copy); a lost
//! answer to a committing `PUT` is settled with a `HEAD`; blobs and signatures go up before
//! the tag, so an interrupted publish leaves no visible version. Manifests over
//! [`MAX_MANIFEST`] are refused.
//!
//! Trust: `Authorization` goes to the registry's own origin (scheme, host, port) only. An
//! absolute `Link: rel=next` or upload `Location` on another origin is refused; a redirect
//! is followed without it (ureq drops it on every redirect), and a 401 from anywhere but the
//! registry's origin is not answered. Which credentials a bearer token realm gets, and which
//! realms are refused, is [`auth::realm_access`]; what credentials belong to which host is in
//! [`crate::auth`]. An https registry never talks plain http (redirects included).
//!
//! Bounds: a blob declaring more than [`OciOptions::max_layer_bytes`]
//! (`KBUILD_MAX_LAYER_BYTES`, default the unpacked-size cap) is refused before a byte is read;
//! layers stream to a file ([`OciClient::get_blob_to`]) and are size- and digest-checked on
//! the way; tag listing stops at [`MAX_TAG_PAGES`] pages or [`MAX_TAGS`] tags, each page at
//! most [`MAX_TAG_PAGE`] bytes. Every connect, read and write has a timeout
//! ([`OciOptions::timeout`], `KBUILD_REGISTRY_TIMEOUT` seconds, default 60), and a document
//! (a manifest, a tag page, a token, a referrers index, an upload handshake) must arrive whole
//! within it, so a server that drips bytes cannot hold a request open.
//!
//! TLS: certificates are always verified (webpki roots). A registry with a private or
//! self-signed CA is trusted by naming a PEM file of CA certificates in
//! `KBUILD_REGISTRY_CA_FILE` ([`OciOptions::ca_file`]); an untrusted certificate is refused
//! at once (not retried) with that hint.
//!
//! Files, one job each (every one an `impl OciClient` block or its helpers): `transport`
//! (agent, TLS, timeouts, URLs, origin, one exchange), `authorize` (answering a challenge),
//! `retry` (what is retried, backoff), `body` (reading a bounded body, error bodies), `tags`
//! (listing, pagination), `manifests`, `blobs` (download, chunked upload, checks), `publish`,
//! `signatures`, `options` ([`OciOptions`]), `artifact` (the OCI form of a bundle). Siblings
//! share only `body`; the shared types live here.

mod artifact;
mod authorize;
mod blobs;
mod body;
mod manifests;
mod options;
mod publish;
mod retry;
mod signatures;
mod tags;
#[cfg(test)]
mod tests;
mod transport;

pub use artifact::*;
pub use options::OciOptions;
pub use publish::PublishOutcome;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::auth::{self, Credentials};
use kbuild_base::env::names;

/// Largest manifest or config read into memory.
const MAX_DOCUMENT: u64 = 64 << 20;

/// The largest OCI manifest kbuild reads: distribution's own limit on a manifest PUT
/// (4 MiB); a kbuild artifact manifest is a few KiB.
pub const MAX_MANIFEST: u64 = 4 << 20;

/// The most `tags/list` pages kbuild follows through `Link: rel=next`.
pub const MAX_TAG_PAGES: usize = 1000;

/// The most tags kbuild collects from one repository.
pub const MAX_TAGS: usize = 100_000;

/// The largest `tags/list` page read into memory.
pub const MAX_TAG_PAGE: u64 = 4 << 20;

/// The default connect/read/write timeout, and the deadline of a whole document.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The environment variable naming extra CA certificates (PEM) for registry TLS.
pub const CA_FILE_ENV: &str = names::KBUILD_REGISTRY_CA_FILE;

#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error("{method} {url}: {message}")]
    Transport {
        method: String,
        url: String,
        message: String,
    },
    #[error("{method} {url}: HTTP {code}{}", if .message.is_empty() { String::new() } else { format!(": {}", .message) })]
    Status {
        method: String,
        url: String,
        code: u16,
        message: String,
    },
    #[error("authentication to {host} failed: {message}")]
    Auth { host: String, message: String },
    #[error("{0} not found in the registry")]
    NotFound(String),
    #[error("{reference} is not a kbuild bundle: {found}")]
    NotKbuild { reference: String, found: String },
    #[error("{what}: digest mismatch (expected {expected}, got {actual}); the registry's copy is corrupt or was tampered with")]
    Digest {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("{what} declares {declared} bytes, over the limit of {limit} bytes; refusing it before reading (raise KBUILD_MAX_LAYER_BYTES if it is genuine)")]
    TooLarge {
        what: String,
        declared: u64,
        limit: u64,
    },
    #[error("{}: {message}", .path.display())]
    Io { path: PathBuf, message: String },
    #[error(transparent)]
    CaFile(#[from] CaFileError),
}

/// The CA file of [`OciOptions::ca_file`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{CA_FILE_ENV}={}: {detail}", .path.display())]
pub struct CaFileError {
    pub path: std::path::PathBuf,
    /// What is wrong: unreadable, no PEM certificate, a certificate rustls refuses.
    pub detail: String,
}

/// A manifest fetched from the registry, digest-checked.
#[derive(Debug, Clone)]
pub struct FetchedManifest {
    pub digest: String,
    pub bytes: Vec<u8>,
    pub media_type: String,
}

/// A client for one repository.
pub struct OciClient {
    agent: ureq::Agent,
    base: String,
    /// The registry's origin: the only one `Authorization` is sent to (`None`: a host that
    /// does not make a URL, so nothing is).
    origin: Option<auth::Origin>,
    host: String,
    repo: String,
    creds: Option<Credentials>,
    authorization: Mutex<Option<String>>,
    /// Why the client cannot talk to the registry at all (an unreadable CA file).
    setup_error: Option<CaFileError>,
    opts: OciOptions,
}

impl std::fmt::Debug for OciClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OciClient({}/{})", self.base, self.repo)
    }
}

/// `oci://HOST[:PORT]/REPO` split into host and repository (the repository may be empty).
pub fn parse_reference(spec: &str) -> Result<(String, String), OciError> {
    let rest = spec
        .strip_prefix("oci://")
        .ok_or_else(|| OciError::Invalid(format!("`{spec}` is not an oci:// reference")))?;
    let (host, repo) = match rest.split_once('/') {
        Some((h, r)) => (h, r.trim_end_matches('/')),
        None => (rest, ""),
    };
    if host.is_empty() || host.contains('@') {
        return Err(OciError::Invalid(format!(
            "`{spec}`: expected oci://HOST[:PORT]/REPO (no credentials in the URL; use KBUILD_REGISTRY_USER/KBUILD_REGISTRY_PASSWORD)"
        )));
    }
    let valid_repo = repo.split('/').all(|c| {
        !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    });
    if !repo.is_empty() && !valid_repo {
        return Err(OciError::Invalid(format!(
            "`{spec}`: repository `{repo}` must be lowercase letters, digits, `._-` and `/`"
        )));
    }
    Ok((host.to_string(), repo.to_string()))
}
