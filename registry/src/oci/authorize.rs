//! Answering a `WWW-Authenticate` challenge: basic credentials, or a bearer token from the
//! realm [`auth::realm_access`] allows, and the hint a refusal carries.

use super::body::read_all;
use super::{OciClient, OciError, MAX_MANIFEST};
use crate::auth::{self, Credentials};

impl OciClient {
    fn scope(&self, push: bool) -> String {
        if push {
            format!("repository:{}:pull,push", self.repo)
        } else {
            format!("repository:{}:pull", self.repo)
        }
    }

    pub(super) fn auth_hint(&self, code: u16) -> String {
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
    pub(super) fn authorize(&self, ch: &auth::Challenge, push: bool) -> Result<String, OciError> {
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
                let creds =
                    match auth::realm_access(origin, realm).map_err(|e| refused(e.to_string()))? {
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
}
