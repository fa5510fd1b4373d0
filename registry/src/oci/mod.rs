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

mod artifact;

pub use artifact::*;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use crate::auth::{self, AuthConfig, Credentials};
use crate::progress::Progress;
use kbuild_base::digest;
use kbuild_base::env::{names, Env};
use kbuild_bundle::archive::ArchiveLimits;

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

impl OciError {
    /// Whether attempt number `attempt` (0 = the first retry) of a failed request is worth
    /// making: 5xx, 429 and transport errors always; a body that does not match its digest
    /// once (a proxy or connection that mangled it), never again after that (tampering).
    fn retryable(&self, attempt: u32) -> bool {
        match self {
            OciError::Transport { .. } => true,
            OciError::Status { code, .. } => *code >= 500 || *code == 429,
            OciError::Digest { .. } => attempt == 0,
            _ => false,
        }
    }
}

/// What an exchange carries: a document (bounded, read whole within the timeout) or a
/// blob stream (each read within the timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Document,
    Stream,
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

/// A bundle in its OCI form, ready to push.

#[derive(Debug, Clone)]
pub struct OciOptions {
    /// `http://` instead of `https://` (ORAS's `--plain-http`).
    pub plain_http: bool,
    /// Upload chunk size in bytes.
    pub chunk_size: usize,
    /// Retries after the first attempt, for 5xx/429/transport errors.
    pub retries: u32,
    /// First backoff delay; doubles each retry.
    pub backoff: Duration,
    /// Connect and per-read/write timeout, and the deadline of a whole document exchange
    /// (manifest, tag page, token, upload handshake). Default: `KBUILD_REGISTRY_TIMEOUT`
    /// (seconds), else [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// The largest blob (layer) kbuild fetches, by its declared size. Default:
    /// `KBUILD_MAX_LAYER_BYTES`, else the unpacked-size cap of [`OciOptions::limits`].
    pub max_layer_bytes: u64,
    /// A PEM file of CA certificates to trust besides the public roots (a registry with a
    /// private or self-signed certificate). Default: `KBUILD_REGISTRY_CA_FILE`. TLS
    /// verification itself is never turned off; `plain_http` is a different thing.
    pub ca_file: Option<PathBuf>,
    /// Where credentials come from.
    pub auth: AuthConfig,
    /// What a fetched layer may unpack to.
    pub limits: ArchiveLimits,
    /// `SOURCE_DATE_EPOCH` of the publisher: the `created` annotation and every archive
    /// header's mtime (0: no annotation, mtime 0).
    pub source_date_epoch: u64,
}

impl OciOptions {
    /// The defaults with the user's environment: `KBUILD_REGISTRY_CA_FILE`, credentials
    /// (`KBUILD_REGISTRY_USER`/`PASSWORD`/`HOST`, docker config files),
    /// `KBUILD_REGISTRY_TIMEOUT`, `KBUILD_MAX_LAYER_BYTES`, `KBUILD_MAX_UNPACKED_BYTES`,
    /// `SOURCE_DATE_EPOCH`.
    pub fn from_env(env: &Env) -> OciOptions {
        let limits = ArchiveLimits::from_env(env);
        OciOptions {
            ca_file: env.path(names::KBUILD_REGISTRY_CA_FILE),
            auth: AuthConfig::from_env(env),
            timeout: env
                .str(names::KBUILD_REGISTRY_TIMEOUT)
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .unwrap_or(DEFAULT_TIMEOUT),
            max_layer_bytes: env
                .u64(names::KBUILD_MAX_LAYER_BYTES)
                .unwrap_or(limits.max_unpacked),
            limits,
            source_date_epoch: env.source_date_epoch(),
            ..OciOptions::default()
        }
    }
}

impl Default for OciOptions {
    fn default() -> Self {
        OciOptions {
            plain_http: false,
            chunk_size: 8 << 20,
            retries: 4,
            backoff: Duration::from_millis(250),
            timeout: DEFAULT_TIMEOUT,
            max_layer_bytes: ArchiveLimits::default().max_unpacked,
            ca_file: None,
            auth: AuthConfig::default(),
            limits: ArchiveLimits::default(),
            source_date_epoch: 0,
        }
    }
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

impl OciClient {
    pub fn new(host: &str, repo: &str, opts: OciOptions) -> OciClient {
        let mut builder = ureq::AgentBuilder::new()
            .timeout_connect(opts.timeout)
            .timeout_read(opts.timeout)
            .timeout_write(opts.timeout)
            // Redirects never carry Authorization (not even to the same host), and an https
            // registry never downgrades to plain http.
            .redirect_auth_headers(ureq::RedirectAuthHeaders::Never)
            .https_only(!opts.plain_http)
            .user_agent(concat!("kbuild/", env!("CARGO_PKG_VERSION")));
        let mut setup_error = None;
        if let Some(path) = &opts.ca_file {
            match tls_config(path) {
                Ok(cfg) => builder = builder.tls_config(cfg),
                Err(e) => setup_error = Some(e),
            }
        }
        let agent = builder.build();
        let scheme = if opts.plain_http { "http" } else { "https" };
        let base = format!("{scheme}://{host}");
        OciClient {
            agent,
            origin: auth::Origin::of_url(&base),
            base,
            host: host.to_string(),
            repo: repo.to_string(),
            creds: opts.auth.find(host),
            authorization: Mutex::new(None),
            setup_error,
            opts,
        }
    }

    pub fn with_credentials(mut self, creds: Option<Credentials>) -> OciClient {
        self.creds = creds;
        self
    }

    pub fn repo(&self) -> &str {
        &self.repo
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// `host/repo:tag` for messages.
    pub fn display_ref(&self, tag_or_digest: &str) -> String {
        let sep = if tag_or_digest.starts_with("sha256:") {
            '@'
        } else {
            ':'
        };
        format!("{}/{}{sep}{tag_or_digest}", self.host, self.repo)
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v2/{}/{path}", self.base, self.repo)
    }

    fn scope(&self, push: bool) -> String {
        if push {
            format!("repository:{}:pull,push", self.repo)
        } else {
            format!("repository:{}:pull", self.repo)
        }
    }

    /// Whether `url` is on the registry's own origin (the only one credentials go to).
    fn same_origin(&self, url: &str) -> bool {
        self.origin.is_some() && auth::Origin::of_url(url) == self.origin
    }

    /// One HTTP exchange with the auth handshake (no retries). Errors for any status ≥ 400.
    /// `Authorization` is attached, and a 401 answered, only for the registry's own origin.
    /// A [`Body::Document`] exchange must finish, body included, within the timeout.
    fn exchange(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Option<&[u8]>,
        push: bool,
        kind: Body,
    ) -> Result<ureq::Response, OciError> {
        if let Some(e) = &self.setup_error {
            return Err(OciError::CaFile(e.clone()));
        }
        let own = self.same_origin(url);
        let mut authz = if own {
            self.authorization
                .lock()
                .map(|a| a.clone())
                .unwrap_or_default()
        } else {
            None
        };
        for round in 0..2 {
            let mut req = self.agent.request(method, url);
            if kind == Body::Document {
                req = req.timeout(self.opts.timeout);
            }
            for (k, v) in headers {
                req = req.set(k, v);
            }
            if let Some(a) = &authz {
                req = req.set("Authorization", a);
            }
            let res = match body {
                Some(b) => req.send_bytes(b),
                None => req.call(),
            };
            match res {
                Ok(r) => return Ok(r),
                Err(ureq::Error::Status(401, r)) if !own || !self.same_origin(r.get_url()) => {
                    return Err(OciError::Auth {
                        host: self.host.clone(),
                        message: format!(
                            "{method} {url}: {} asked for credentials; kbuild sends them to the registry's own origin ({}) only",
                            r.get_url(),
                            self.base
                        ),
                    });
                }
                Err(ureq::Error::Status(401, r)) if round == 0 => {
                    let header = r.header("WWW-Authenticate").unwrap_or_default().to_string();
                    let ch = auth::parse_challenge(&header).ok_or_else(|| OciError::Auth {
                        host: self.host.clone(),
                        message: "the registry answered 401 without a WWW-Authenticate challenge"
                            .into(),
                    })?;
                    let a = self.authorize(&ch, push)?;
                    if let Ok(mut slot) = self.authorization.lock() {
                        *slot = Some(a.clone());
                    }
                    authz = Some(a);
                }
                Err(ureq::Error::Status(code @ (401 | 403), _)) => {
                    return Err(OciError::Auth {
                        host: self.host.clone(),
                        message: self.auth_hint(code),
                    })
                }
                Err(ureq::Error::Status(code, r)) => {
                    return Err(OciError::Status {
                        method: method.into(),
                        url: url.into(),
                        code,
                        message: error_message(r),
                    })
                }
                Err(ureq::Error::Transport(t)) if is_certificate_error(&t) => {
                    return Err(OciError::Invalid(format!(
                        "{method} {url}: the TLS certificate of {} is not trusted ({t}); hint: if the registry uses a private or self-signed CA, set {CA_FILE_ENV}=PATH to a PEM file with that CA certificate (TLS verification stays on)",
                        self.host
                    )))
                }
                Err(ureq::Error::Transport(t)) => {
                    return Err(OciError::Transport {
                        method: method.into(),
                        url: url.into(),
                        message: t.to_string(),
                    })
                }
            }
        }
        Err(OciError::Auth {
            host: self.host.clone(),
            message: self.auth_hint(401),
        })
    }

    fn auth_hint(&self, code: u16) -> String {
        let what = if code == 403 {
            "access denied (HTTP 403)"
        } else {
            "credentials refused (HTTP 401)"
        };
        match &self.creds {
            Some(c) => format!(
                "{what} with the credentials from {}; check them (hint: KBUILD_REGISTRY_USER/KBUILD_REGISTRY_PASSWORD or `auths` in a docker config.json)",
                c.source
            ),
            None => match self.opts.auth.unbound_note(&self.host) {
                Some(note) => format!("{what}: the registry needs credentials and none are for it ({note})"),
                None => format!(
                    "{what}: the registry needs credentials and none were found (hint: set KBUILD_REGISTRY_USER and KBUILD_REGISTRY_PASSWORD, or log in with `docker login`/`oras login` so ~/.docker/config.json has them)"
                ),
            },
        }
    }

    /// The `Authorization` value answering a challenge.
    fn authorize(&self, ch: &auth::Challenge, push: bool) -> Result<String, OciError> {
        match ch.scheme.as_str() {
            "basic" => self
                .creds
                .as_ref()
                .map(Credentials::basic_header)
                .ok_or_else(|| OciError::Auth {
                    host: self.host.clone(),
                    message: self.auth_hint(401),
                }),
            "bearer" => {
                let url = auth::token_url(ch, &self.scope(push)).ok_or_else(|| OciError::Auth {
                    host: self.host.clone(),
                    message: "bearer challenge without a realm".into(),
                })?;
                let realm = ch
                    .params
                    .get("realm")
                    .map(String::as_str)
                    .unwrap_or_default();
                let refused = |message: String| OciError::Auth {
                    host: self.host.clone(),
                    message,
                };
                let origin = self
                    .origin
                    .as_ref()
                    .ok_or_else(|| refused(format!("{} is not a registry URL", self.base)))?;
                // The registry's own credentials to its own origin only; a realm elsewhere gets
                // only credentials configured for that host.
                let creds = match auth::realm_access(origin, realm).map_err(refused)? {
                    auth::RealmAccess::Registry => self.creds.clone(),
                    auth::RealmAccess::Foreign => auth::Origin::of_url(realm).and_then(|r| {
                        self.opts
                            .auth
                            .find_scoped(&r.authority(), auth::Scope::Other)
                    }),
                };
                let mut req = self.agent.get(&url).timeout(self.opts.timeout);
                if let Some(c) = &creds {
                    req = req.set("Authorization", &c.basic_header());
                }
                let resp = req.call().map_err(|e| OciError::Auth {
                    host: self.host.clone(),
                    message: match e {
                        ureq::Error::Status(code, _) => {
                            format!(
                                "the token endpoint refused ({code}): {}",
                                self.auth_hint(code)
                            )
                        }
                        ureq::Error::Transport(t) => format!("token endpoint {realm}: {t}"),
                    },
                })?;
                let body = read_all(resp, MAX_MANIFEST, None).map_err(|e| OciError::Auth {
                    host: self.host.clone(),
                    message: format!("reading the token from {realm}: {e}"),
                })?;
                let token = auth::token_from_response(&body).ok_or_else(|| OciError::Auth {
                    host: self.host.clone(),
                    message: "the token endpoint's answer has no token".into(),
                })?;
                Ok(format!("Bearer {token}"))
            }
            other => Err(OciError::Auth {
                host: self.host.clone(),
                message: format!("unsupported auth scheme `{other}`"),
            }),
        }
    }

    /// Run `op` with retries and exponential backoff on retryable errors.
    fn retry<T>(
        &self,
        progress: &dyn Progress,
        mut op: impl FnMut() -> Result<T, OciError>,
    ) -> Result<T, OciError> {
        let mut delay = self.opts.backoff;
        let mut attempt = 0;
        loop {
            match op() {
                Err(e) if e.retryable(attempt) && attempt < self.opts.retries => {
                    attempt += 1;
                    progress.note(&format!(
                        "{e}; retrying in {:.1}s ({attempt}/{})",
                        delay.as_secs_f64(),
                        self.opts.retries
                    ));
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(8));
                }
                other => return other,
            }
        }
    }

    /// The repository's tags, in the registry's order, following `Link: rel=next` on the
    /// registry's own origin only, at most [`MAX_TAG_PAGES`] pages and [`MAX_TAGS`] tags.
    pub fn tags(&self, progress: &dyn Progress) -> Result<Vec<String>, OciError> {
        let first = self.url("tags/list");
        let mut tags = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut next = Some(first.clone());
        while let Some(url) = next.take() {
            if seen.len() >= MAX_TAG_PAGES {
                return Err(OciError::Invalid(format!(
                    "GET {first}: the registry's tags/list goes on past {MAX_TAG_PAGES} pages ({} tags so far); refusing an endless tag list",
                    tags.len()
                )));
            }
            if !seen.insert(url.clone()) {
                return Err(OciError::Invalid(format!(
                    "GET {url}: the registry's tags/list Link points back to a page already read; refusing a tag list that loops"
                )));
            }
            let resp = match self.retry(progress, || {
                self.exchange("GET", &url, &[], None, false, Body::Document)
            }) {
                Err(OciError::Status { code: 404, .. }) if url == first => return Ok(Vec::new()),
                r => r?,
            };
            let link = resp.header("Link").map(str::to_string);
            #[derive(Deserialize)]
            struct Tags {
                #[serde(default)]
                tags: Option<Vec<String>>,
            }
            let body = read_all(resp, MAX_TAG_PAGE, None).map_err(|e| {
                if e.kind() == std::io::ErrorKind::FileTooLarge {
                    OciError::Invalid(format!(
                        "GET {url}: a tags/list page larger than {MAX_TAG_PAGE} bytes; refusing it"
                    ))
                } else {
                    self.transport("GET", &url, e)
                }
            })?;
            let t: Tags = serde_json::from_slice(&body)
                .map_err(|e| OciError::Invalid(format!("GET {url}: tags/list answer: {e}")))?;
            tags.extend(t.tags.unwrap_or_default());
            if tags.len() > MAX_TAGS {
                return Err(OciError::Invalid(format!(
                    "GET {first}: the registry's tags/list holds more than {MAX_TAGS} tags (after {} pages); refusing an endless tag list",
                    seen.len()
                )));
            }
            if let Some(l) = link {
                next = self.next_link(&url, &l)?;
            }
        }
        Ok(tags)
    }

    /// The `rel="next"` target of a tags/list `Link` header (`</v2/repo/tags/list?last=x>;
    /// rel="next"`), made absolute; an error when it leaves the registry's origin.
    fn next_link(&self, url: &str, link: &str) -> Result<Option<String>, OciError> {
        let Some(target) = link
            .trim()
            .strip_prefix('<')
            .and_then(|s| s.split_once('>'))
            .filter(|(_, params)| {
                params
                    .split(';')
                    .any(|p| p.to_ascii_lowercase().replace([' ', '"'], "") == "rel=next")
            })
            .map(|(t, _)| t.to_string())
        else {
            return Ok(None);
        };
        let next = self.absolute(&target);
        if !self.same_origin(&next) {
            return Err(OciError::Invalid(format!(
                "GET {url}: the tags/list Link points to another origin ({next}) than the registry ({}); refusing to follow it",
                self.base
            )));
        }
        Ok(Some(next))
    }

    fn transport(&self, method: &str, url: &str, e: std::io::Error) -> OciError {
        OciError::Transport {
            method: method.into(),
            url: url.into(),
            message: e.to_string(),
        }
    }

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

    /// The label of a blob in messages, and its URL; refuses a declared size over
    /// [`OciOptions::max_layer_bytes`].
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

    fn absolute(&self, location: &str) -> String {
        if location.starts_with("http://") || location.starts_with("https://") {
            location.to_string()
        } else {
            format!("{}{location}", self.base)
        }
    }

    /// An upload `Location` made absolute; an error when it leaves the registry's origin (the
    /// blob and the registry's `Authorization` would go there).
    fn upload_location(&self, method: &str, url: &str, location: &str) -> Result<String, OciError> {
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

/// Whether a transport error is a failed certificate check (not worth retrying).
fn is_certificate_error(t: &ureq::Transport) -> bool {
    let text = t.to_string();
    text.contains("certificate") || text.contains("UnknownIssuer") || text.contains("CertNotValid")
}

/// A rustls client config trusting the public roots plus the CA certificates in `path`.
fn tls_config(path: &Path) -> Result<Arc<rustls::ClientConfig>, CaFileError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let bad = |detail: String| CaFileError {
        path: path.to_path_buf(),
        detail,
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let mut added = 0;
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
        added += 1;
    }
    if added == 0 {
        return Err(bad("no PEM certificate in the file".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// `sha256-<hex>.sig`, the tag a signature of artifact `digest` lives under.
fn short(d: &str) -> String {
    d.trim_start_matches("sha256:").chars().take(12).collect()
}

/// The `errors[].message` of a distribution error body, or a short excerpt.
fn error_message(r: ureq::Response) -> String {
    let body = read_all(r, 64 << 10, None).unwrap_or_default();
    #[derive(Deserialize)]
    struct Errs {
        errors: Vec<Err>,
    }
    #[derive(Deserialize)]
    struct Err {
        code: Option<String>,
        message: Option<String>,
    }
    if let Ok(e) = serde_json::from_slice::<Errs>(&body) {
        return e
            .errors
            .iter()
            .map(|e| {
                format!(
                    "{}{}",
                    e.code
                        .as_deref()
                        .map(|c| format!("{c}: "))
                        .unwrap_or_default(),
                    e.message.as_deref().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
    }
    String::from_utf8_lossy(&body).chars().take(200).collect()
}

/// Read a response body, at most `limit` bytes (more is an error), reporting progress.
fn read_all(
    resp: ureq::Response,
    limit: u64,
    progress: Option<&dyn Progress>,
) -> std::io::Result<Vec<u8>> {
    let mut r = resp.into_reader().take(limit.saturating_add(1));
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if let Some(p) = progress {
            p.advance(n as u64);
        }
        if out.len() as u64 > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!("response is larger than the {limit} bytes expected"),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_refuse_credentials() {
        assert_eq!(
            parse_reference("oci://127.0.0.1:5000/a/b").unwrap(),
            ("127.0.0.1:5000".to_string(), "a/b".to_string())
        );
        assert_eq!(
            parse_reference("oci://host").unwrap(),
            ("host".to_string(), String::new())
        );
        assert!(parse_reference("oci://u:p@host/r").is_err());
        assert!(parse_reference("oci://host/Upper").is_err());
        assert!(parse_reference("http://host/r").is_err());
    }

    #[test]
    fn links_and_locations_stay_on_the_registry_origin() {
        let c = OciClient::new(
            "127.0.0.1:5000",
            "r",
            OciOptions {
                plain_http: true,
                ..OciOptions::default()
            },
        );
        let url = "http://127.0.0.1:5000/v2/r/tags/list";
        assert_eq!(
            c.next_link(url, r#"</v2/r/tags/list?last=a&n=2>; rel="next""#)
                .unwrap()
                .as_deref(),
            Some("http://127.0.0.1:5000/v2/r/tags/list?last=a&n=2")
        );
        assert!(c
            .next_link(
                url,
                "<http://127.0.0.1:5000/v2/r/tags/list?last=b>;rel=next"
            )
            .unwrap()
            .is_some());
        assert_eq!(c.next_link(url, r#"</v2/r/x>; rel="prev""#).unwrap(), None);
        for foreign in [
            "http://127.0.0.1:5001/v2/r/tags/list",
            "https://127.0.0.1:5000/v2/r/tags/list",
            "http://localhost:5000/v2/r/tags/list",
        ] {
            let e = c
                .next_link(url, &format!("<{foreign}>; rel=\"next\""))
                .unwrap_err()
                .to_string();
            assert!(e.contains("another origin") && e.contains(foreign), "{e}");
            let e = c
                .upload_location("POST", url, foreign)
                .unwrap_err()
                .to_string();
            assert!(e.contains("Location") && e.contains(foreign), "{e}");
        }
        assert_eq!(
            c.upload_location("POST", url, "/v2/r/blobs/uploads/1?s=2")
                .unwrap(),
            "http://127.0.0.1:5000/v2/r/blobs/uploads/1?s=2"
        );
        // A declared size over the cap is refused before any request.
        let small = OciClient::new(
            "127.0.0.1:1",
            "r",
            OciOptions {
                plain_http: true,
                max_layer_bytes: 10,
                ..OciOptions::default()
            },
        );
        let d = Descriptor {
            media_type: LAYER_MEDIA_TYPE.into(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 11,
            artifact_type: None,
            annotations: BTreeMap::new(),
        };
        let e = small.get_blob(&d, &crate::progress::Silent).unwrap_err();
        assert!(
            matches!(
                e,
                OciError::TooLarge {
                    declared: 11,
                    limit: 10,
                    ..
                }
            ),
            "{e}"
        );
    }

    /// The bearer flow (401 + `WWW-Authenticate: Bearer` → token endpoint with the basic
    /// credentials → retry with the token) against a minimal in-process HTTP responder: the
    /// test registry (distribution 2.8 with htpasswd) only does basic auth.
    #[test]
    fn bearer_token_flow() {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(8) {
                let Ok(stream) = conn else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let mut authz = String::new();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                        if h.to_ascii_lowercase().starts_with("authorization:") {
                            authz = h[14..].trim().to_string();
                        }
                    }
                    log.lock().unwrap().push(format!("{} {authz}", line.trim()));
                    let (status, extra, body) = if line.starts_with("GET /token") {
                        if authz == format!("Basic {}", base64_of("u:p")) {
                            ("200 OK", String::new(), r#"{"token":"T0K"}"#.to_string())
                        } else {
                            ("401 Unauthorized", String::new(), String::new())
                        }
                    } else if authz == "Bearer T0K" {
                        (
                            "200 OK",
                            String::new(),
                            r#"{"name":"r","tags":["1.0.0","x"]}"#.to_string(),
                        )
                    } else {
                        (
                            "401 Unauthorized",
                            format!("WWW-Authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"reg\",scope=\"repository:r:pull\"\r\n"),
                            String::new(),
                        )
                    };
                    let _ = write!(
                        out,
                        "HTTP/1.1 {status}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            }
        });
        fn base64_of(s: &str) -> String {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(s)
        }
        let opts = OciOptions {
            plain_http: true,
            retries: 0,
            ..OciOptions::default()
        };
        let c = OciClient::new(&format!("127.0.0.1:{port}"), "r", opts).with_credentials(Some(
            Credentials {
                user: "u".into(),
                password: "p".into(),
                source: "test".into(),
            },
        ));
        let tags = c.tags(&crate::progress::Silent).unwrap();
        assert_eq!(tags, ["1.0.0", "x"]);
        drop(c);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(
            seen[0].starts_with("GET /v2/r/tags/list") && seen[0].ends_with("HTTP/1.1 "),
            "{seen:?}"
        );
        assert!(
            seen[1].starts_with("GET /token?service=reg&scope=repository%3Ar%3Apull"),
            "{seen:?}"
        );
        assert!(seen[2].ends_with("Bearer T0K"), "{seen:?}");
        // Wrong credentials: the token endpoint refuses, and the message says where they came from.
        let bad = OciClient::new(
            &format!("127.0.0.1:{port}"),
            "r",
            OciOptions {
                plain_http: true,
                retries: 0,
                ..OciOptions::default()
            },
        )
        .with_credentials(Some(Credentials {
            user: "u".into(),
            password: "nope".into(),
            source: "test-env".into(),
        }));
        let e = bad.tags(&crate::progress::Silent).unwrap_err().to_string();
        assert!(
            e.contains("token endpoint refused") && e.contains("test-env") && !e.contains("nope"),
            "{e}"
        );
    }
}
