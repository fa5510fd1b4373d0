//! Registry credentials and the `WWW-Authenticate` challenge (RFC 7235, as the OCI
//! distribution spec and Docker's token spec use it).
//!
//! Credentials come from `KBUILD_REGISTRY_USER` + `KBUILD_REGISTRY_PASSWORD`, else from a
//! docker-style `config.json` (`auths.<host>.auth` = base64 `user:password`): the file in
//! `KBUILD_REGISTRY_AUTH_FILE`, `REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json` or
//! `~/.docker/config.json`. They are never printed: `Debug` shows only where they came from.
//!
//! Scope: credentials belong to one host and go nowhere else.
//! - A config.json entry goes to the host of its key only (`host[:port]`, compared exactly).
//! - The `KBUILD_REGISTRY_USER`/`PASSWORD` pair goes to the host `KBUILD_REGISTRY_HOST` names
//!   when that is set; when it is not, to the host the client was opened for (the one
//!   `--registry` or the remote cache's `oci://` URL names), never to a host a server answer
//!   names. Set `KBUILD_REGISTRY_HOST` when a project's Kbuild.toml (`remote-cache`) or a
//!   `KBUILD_REGISTRY` you did not choose could name another host.
//! - A bearer token realm on the registry's own origin (scheme, host, port) gets the
//!   registry's credentials, as the token flow intends. A realm on another origin gets only
//!   credentials configured for that realm's own host (a config.json entry for it, or
//!   `KBUILD_REGISTRY_HOST` naming it); otherwise the token is asked for anonymously. A
//!   plain-http realm is refused unless it is the registry's own (plain-http) origin: never
//!   for an https registry, never on another origin. See [`realm_access`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use kbuild_base::env::{names, Env};

/// A user name and password (or identity token).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    /// Where they came from, for messages (`KBUILD_REGISTRY_USER`, a file path).
    pub source: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials(from {})", self.source)
    }
}

impl Credentials {
    /// `Authorization: Basic ...` value.
    pub fn basic_header(&self) -> String {
        format!(
            "Basic {}",
            B64.encode(format!("{}:{}", self.user, self.password))
        )
    }
}

/// Where credentials come from: a user/password pair (`KBUILD_REGISTRY_USER` and
/// `KBUILD_REGISTRY_PASSWORD`), then docker-style config files in order.
#[derive(Clone, Default)]
pub struct AuthConfig {
    pub user_password: Option<(String, String)>,
    /// `KBUILD_REGISTRY_HOST`: the one host (`host[:port]`) the pair goes to. `None`: the host
    /// the client was opened for.
    pub user_password_host: Option<String>,
    pub files: Vec<PathBuf>,
}

/// The scope of a credentials lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The host the client was opened for (`--registry`, the remote cache URL).
    Configured,
    /// Any other host (a token realm elsewhere): only credentials named for it explicitly.
    Other,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field(
                "user_password",
                &self.user_password.as_ref().map(|_| "<set>"),
            )
            .field("user_password_host", &self.user_password_host)
            .field("files", &self.files)
            .finish()
    }
}

impl AuthConfig {
    /// `KBUILD_REGISTRY_USER`/`PASSWORD`, then `KBUILD_REGISTRY_AUTH_FILE`,
    /// `REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json`, `~/.docker/config.json`.
    pub fn from_env(env: &Env) -> AuthConfig {
        let user_password = match (
            env.str(names::KBUILD_REGISTRY_USER),
            env.str(names::KBUILD_REGISTRY_PASSWORD),
        ) {
            (Some(u), Some(p)) => Some((u.to_string(), p.to_string())),
            _ => None,
        };
        let mut files = Vec::new();
        for var in [names::KBUILD_REGISTRY_AUTH_FILE, names::REGISTRY_AUTH_FILE] {
            files.extend(env.path(var));
        }
        if let Some(d) = env.path(names::DOCKER_CONFIG) {
            files.push(d.join("config.json"));
        }
        if let Some(h) = env.path(names::HOME) {
            files.push(h.join(".docker/config.json"));
        }
        AuthConfig {
            user_password,
            user_password_host: env
                .str(names::KBUILD_REGISTRY_HOST)
                .map(normalize_host)
                .filter(|h| !h.is_empty()),
            files,
        }
    }

    /// Credentials for the host the client was opened for (`host[:port]`).
    pub fn find(&self, host: &str) -> Option<Credentials> {
        self.find_scoped(host, Scope::Configured)
    }

    /// Credentials for `host`: the env pair when `KBUILD_REGISTRY_HOST` names `host` (or,
    /// for [`Scope::Configured`], when it is unset), else a config.json entry for `host`.
    pub fn find_scoped(&self, host: &str, scope: Scope) -> Option<Credentials> {
        if let Some((user, password)) = &self.user_password {
            let bound = match &self.user_password_host {
                Some(h) => *h == normalize_host(host),
                None => scope == Scope::Configured,
            };
            if bound {
                return Some(Credentials {
                    user: user.clone(),
                    password: password.clone(),
                    source: "KBUILD_REGISTRY_USER/KBUILD_REGISTRY_PASSWORD".into(),
                });
            }
        }
        for path in &self.files {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            if let Some(c) = from_docker_config(&text, host, &path.display().to_string()) {
                return Some(c);
            }
        }
        None
    }

    /// Why the env pair was not used for `host`, when it is set but bound to another host.
    pub fn unbound_note(&self, host: &str) -> Option<String> {
        let bound = self.user_password_host.as_ref()?;
        (self.user_password.is_some() && *bound != normalize_host(host)).then(|| {
            format!(
                "KBUILD_REGISTRY_USER/KBUILD_REGISTRY_PASSWORD are for KBUILD_REGISTRY_HOST={bound} only, not for {host}"
            )
        })
    }
}

/// `host[:port]` as compared for credentials: lowercase, without a scheme or a path
/// (`https://Reg.example:5000/v2/` → `reg.example:5000`).
pub fn normalize_host(spec: &str) -> String {
    let s = spec.trim();
    let s = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .or_else(|| s.strip_prefix("oci://"))
        .unwrap_or(s);
    s.split('/').next().unwrap_or(s).to_ascii_lowercase()
}

/// The origin of a URL: scheme, host and port (the default port of the scheme when none is
/// written). `Authorization` is only ever sent to the registry's own origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// The origin of `http(s)://host[:port]/...`; `None` for another scheme, credentials in
    /// the URL, or a malformed authority.
    pub fn of_url(url: &str) -> Option<Origin> {
        let (scheme, rest) = url.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().ok()?,
                None if after.is_empty() => default,
                None => return None,
            };
            (format!("[{h}]"), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().ok()?),
                None => (authority.to_string(), default),
            }
        };
        if host.is_empty() {
            return None;
        }
        Some(Origin {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// `host:port`, or `host` when the port is the scheme's default (as written in `oci://`).
    pub fn authority(&self) -> String {
        let default = if self.scheme == "https" { 443 } else { 80 };
        if self.port == default {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// What a bearer token realm may be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealmAccess {
    /// The registry's own origin: its credentials.
    Registry,
    /// Another origin over https: only credentials configured for that host
    /// ([`Scope::Other`]), else none.
    Foreign,
}

/// Why a bearer token realm is refused (see [`realm_access`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RealmError {
    /// The realm is not an http(s) URL, or carries credentials.
    #[error("the token realm `{realm}` is not an http(s) URL without credentials")]
    NotUrl { realm: String },
    /// A plain-http realm for an https registry.
    #[error("the token realm {realm} is plain http for an https registry; refusing to send a token request in the clear")]
    PlainHttpForHttps { realm: String },
    /// A plain-http realm on another origin than a plain-http registry.
    #[error("the token realm {realm} is plain http on another origin than the registry ({registry}); refusing it")]
    PlainHttpElsewhere { realm: String, registry: Origin },
}

/// Whether the token realm `realm` (a URL from a `WWW-Authenticate` challenge) may be asked
/// for a token for `registry`, and with which credentials; `Err` says why not. A plain-http
/// realm is accepted only as the registry's own plain-http origin: an https registry never
/// sends anything over plain http, and a plain-http registry (a local test registry) never
/// sends a token request to another origin in the clear.
pub fn realm_access(registry: &Origin, realm: &str) -> Result<RealmAccess, RealmError> {
    let r = Origin::of_url(realm).ok_or_else(|| RealmError::NotUrl {
        realm: realm.to_string(),
    })?;
    if r == *registry {
        return Ok(RealmAccess::Registry);
    }
    if r.scheme != "https" {
        return Err(if registry.scheme == "https" {
            RealmError::PlainHttpForHttps {
                realm: realm.to_string(),
            }
        } else {
            RealmError::PlainHttpElsewhere {
                realm: realm.to_string(),
                registry: registry.clone(),
            }
        });
    }
    Ok(RealmAccess::Foreign)
}

/// Look `host` up in a docker `config.json` (`auths` keys may carry a scheme and a path).
pub fn from_docker_config(text: &str, host: &str, source: &str) -> Option<Credentials> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        auths: BTreeMap<String, Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        auth: Option<String>,
        username: Option<String>,
        password: Option<String>,
    }
    let file: File = serde_json::from_str(text).ok()?;
    // The entry's own host only: `https://h:5000/v2/` is `h:5000`, never `h` or `h:5001`.
    let host = normalize_host(host);
    let entry = file
        .auths
        .iter()
        .find(|(k, _)| normalize_host(k) == host)?
        .1;
    let (user, password) = match (&entry.auth, &entry.username, &entry.password) {
        (Some(a), _, _) => {
            let raw = B64.decode(a.trim()).ok()?;
            let s = String::from_utf8(raw).ok()?;
            let (u, p) = s.split_once(':')?;
            (u.to_string(), p.to_string())
        }
        (None, Some(u), Some(p)) => (u.clone(), p.clone()),
        _ => return None,
    };
    Some(Credentials {
        user,
        password,
        source: source.to_string(),
    })
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// `basic` or `bearer` (lowercased).
    pub scheme: String,
    /// Parameters, keys lowercased: `realm`, `service`, `scope`, ...
    pub params: BTreeMap<String, String>,
}

/// Parse `Bearer realm="https://auth/token",service="registry",scope="repository:a:pull"` or
/// `Basic realm="Registry Realm"`. Quoted strings may hold commas and `\"` escapes.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = match header.split_once(char::is_whitespace) {
        Some((s, r)) => (s, r),
        None => (header, ""),
    };
    if scheme.is_empty() {
        return None;
    }
    let mut params = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() || c == ',' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() {
            break;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek() != Some(&'=') {
            // token68 or a bare word: not a parameter we use.
            continue;
        }
        chars.next();
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        params.insert(key.to_ascii_lowercase(), value);
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// The token endpoint URL for a bearer challenge: `realm?service=...&scope=...`; the scope is
/// the challenge's own when it names one (it names what the refused request needed), else
/// `scope`.
pub fn token_url(ch: &Challenge, scope: &str) -> Option<String> {
    let realm = ch.params.get("realm")?;
    let mut q = Vec::new();
    if let Some(s) = ch.params.get("service") {
        q.push(format!("service={}", url_encode(s)));
    }
    let scope = ch.params.get("scope").map(String::as_str).unwrap_or(scope);
    q.push(format!("scope={}", url_encode(scope)));
    let sep = if realm.contains('?') { '&' } else { '?' };
    Some(format!("{realm}{sep}{}", q.join("&")))
}

/// The token in a token endpoint's JSON answer (`token`, or OAuth2's `access_token`).
pub fn token_from_response(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("token")
        .or_else(|| v.get("access_token"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

/// Percent-encode a query value (RFC 3986 unreserved characters pass).
pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bearer_and_basic_challenges() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token?x=1",service="registry.example",scope="repository:a/b:pull,push",error="insufficient_scope""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.params["realm"], "https://auth.example/token?x=1");
        assert_eq!(c.params["scope"], "repository:a/b:pull,push");
        assert_eq!(c.params["error"], "insufficient_scope");
        assert_eq!(
            token_url(&c, "ignored").unwrap(),
            "https://auth.example/token?x=1&service=registry.example&scope=repository%3Aa%2Fb%3Apull%2Cpush"
        );
        let b = parse_challenge(r#"Basic realm="Registry \"Realm\"""#).unwrap();
        assert_eq!(b.scheme, "basic");
        assert_eq!(b.params["realm"], "Registry \"Realm\"");
        let bare = parse_challenge("Bearer realm=https://t/token, service=s").unwrap();
        assert_eq!(bare.params["realm"], "https://t/token");
        assert_eq!(bare.params["service"], "s");
        assert_eq!(
            token_url(&bare, "repository:r:pull").unwrap(),
            "https://t/token?service=s&scope=repository%3Ar%3Apull"
        );
        assert!(parse_challenge("").is_none());
        assert_eq!(
            token_from_response(br#"{"access_token":"abc"}"#).as_deref(),
            Some("abc")
        );
        assert_eq!(token_from_response(br#"{"token":""}"#), None);
    }

    #[test]
    fn env_pair_is_bound_to_its_host() {
        let env = Env::empty()
            .with(names::KBUILD_REGISTRY_USER, "u")
            .with(names::KBUILD_REGISTRY_PASSWORD, "p");
        let free = AuthConfig::from_env(&env);
        assert!(free.find("a:1").is_some());
        assert!(free.find_scoped("a:1", Scope::Other).is_none());
        let bound = AuthConfig::from_env(&env.with(names::KBUILD_REGISTRY_HOST, "https://A:1/"));
        assert!(bound.find("a:1").is_some());
        assert!(bound.find_scoped("a:1", Scope::Other).is_some());
        assert!(bound.find("a:2").is_none() && bound.find("a").is_none());
        assert!(bound
            .unbound_note("b")
            .is_some_and(|n| n.contains("KBUILD_REGISTRY_HOST=a:1")));
        assert!(bound.unbound_note("a:1").is_none());
    }

    #[test]
    fn origins_and_realms() {
        let o = |u: &str| Origin::of_url(u).unwrap();
        assert_eq!(
            o("https://R.example/v2/x"),
            o("https://r.example:443/token")
        );
        assert_ne!(o("https://r.example/"), o("http://r.example/"));
        assert_ne!(o("http://127.0.0.1:5000/"), o("http://127.0.0.1:5001/"));
        assert_eq!(o("http://[::1]:80/x").authority(), "[::1]");
        assert_eq!(o("https://h:5000?x").authority(), "h:5000");
        assert!(Origin::of_url("https://u:p@h/").is_none());
        assert!(Origin::of_url("ftp://h/").is_none());
        assert!(Origin::of_url("https://h:port/").is_none());
        let https = o("https://reg.example");
        let http = o("http://127.0.0.1:5000");
        use RealmAccess::*;
        assert_eq!(
            realm_access(&https, "https://reg.example/token"),
            Ok(Registry)
        );
        assert_eq!(
            realm_access(&https, "https://auth.example/token"),
            Ok(Foreign)
        );
        assert_eq!(
            realm_access(&https, "https://reg.example:8443/token"),
            Ok(Foreign)
        );
        assert!(realm_access(&https, "http://reg.example/token").is_err());
        assert!(realm_access(&https, "http://auth.example/token").is_err());
        assert_eq!(
            realm_access(&http, "http://127.0.0.1:5000/token"),
            Ok(Registry)
        );
        assert!(realm_access(&http, "http://127.0.0.1:5001/token").is_err());
        assert_eq!(realm_access(&http, "https://auth.example/t"), Ok(Foreign));
        assert!(realm_access(&https, "file:///etc/passwd").is_err());
    }

    #[test]
    fn realm_refusals_say_why() {
        let https = Origin::of_url("https://reg.example").unwrap();
        let http = Origin::of_url("http://127.0.0.1:5000").unwrap();
        let text = |o: &Origin, realm: &str| realm_access(o, realm).unwrap_err().to_string();
        assert_eq!(
            text(&https, "file:///etc/passwd"),
            "the token realm `file:///etc/passwd` is not an http(s) URL without credentials"
        );
        assert_eq!(
            text(&https, "http://reg.example/token"),
            "the token realm http://reg.example/token is plain http for an https registry; refusing to send a token request in the clear"
        );
        assert_eq!(
            text(&http, "http://127.0.0.1:5001/token"),
            "the token realm http://127.0.0.1:5001/token is plain http on another origin than the registry (http://127.0.0.1:5000); refusing it"
        );
    }

    #[test]
    fn docker_config_lookup_and_no_secret_in_debug() {
        let auth = B64.encode("alice:s3cret");
        let text = format!(
            r#"{{"auths":{{"https://127.0.0.1:5000/v2/":{{"auth":"{auth}"}},"other:1":{{"username":"u","password":"p"}}}}}}"#
        );
        let c = from_docker_config(&text, "127.0.0.1:5000", "cfg").unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("alice", "s3cret"));
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(
            from_docker_config(&text, "other:1", "cfg").unwrap().user,
            "u"
        );
        assert!(from_docker_config(&text, "nowhere", "cfg").is_none());
        // Its own host only: not the same host on another port, not the bare host.
        assert!(from_docker_config(&text, "127.0.0.1:5001", "cfg").is_none());
        assert!(from_docker_config(&text, "127.0.0.1", "cfg").is_none());
        assert!(from_docker_config(&text, "OTHER:1", "cfg").is_some());
        assert_eq!(
            c.basic_header(),
            format!("Basic {}", B64.encode("alice:s3cret"))
        );
    }
}
