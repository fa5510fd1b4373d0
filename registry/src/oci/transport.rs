//! Transport: the HTTP agent (timeouts, TLS, redirects), the registry's URLs and origin,
//! and one exchange with its auth handshake and error mapping.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::body::{error_message, Body};
use super::{CaFileError, OciClient, OciError, OciOptions, CA_FILE_ENV};
use crate::auth::{self, Credentials};

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

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}/v2/{}/{path}", self.base, self.repo)
    }

    /// Whether `url` is on the registry's own origin (the only one credentials go to).
    pub(super) fn same_origin(&self, url: &str) -> bool {
        self.origin.is_some() && auth::Origin::of_url(url) == self.origin
    }

    /// One HTTP exchange with the auth handshake (no retries). Errors for any status ≥ 400.
    /// `Authorization` is attached, and a 401 answered, only for the registry's own origin.
    /// A [`Body::Document`] exchange must finish, body included, within the timeout.
    pub(super) fn exchange(
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

    pub(super) fn transport(&self, method: &str, url: &str, e: std::io::Error) -> OciError {
        OciError::Transport {
            method: method.into(),
            url: url.into(),
            message: e.to_string(),
        }
    }

    pub(super) fn absolute(&self, location: &str) -> String {
        if location.starts_with("http://") || location.starts_with("https://") {
            location.to_string()
        } else {
            format!("{}{location}", self.base)
        }
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
