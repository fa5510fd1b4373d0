//! Registry credentials and the `WWW-Authenticate` challenge (RFC 7235, as the OCI
//! distribution spec and Docker's token spec use it).
//!
//! Credentials come from `KBUILD_REGISTRY_USER` + `KBUILD_REGISTRY_PASSWORD`, else from a
//! docker-style `config.json` (`auths.<host>.auth` = base64 `user:password`): the file in
//! `KBUILD_REGISTRY_AUTH_FILE`, `REGISTRY_AUTH_FILE`, `$DOCKER_CONFIG/config.json` or
//! `~/.docker/config.json`. They are never printed: `Debug` shows only where they came from.

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
    pub files: Vec<PathBuf>,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field(
                "user_password",
                &self.user_password.as_ref().map(|_| "<set>"),
            )
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
            files,
        }
    }

    /// Credentials for `host` (`host[:port]`).
    pub fn find(&self, host: &str) -> Option<Credentials> {
        if let Some((user, password)) = &self.user_password {
            return Some(Credentials {
                user: user.clone(),
                password: password.clone(),
                source: "KBUILD_REGISTRY_USER/KBUILD_REGISTRY_PASSWORD".into(),
            });
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
    let key_host = |k: &str| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        k.split('/').next().unwrap_or(k).to_string()
    };
    let entry = file.auths.iter().find(|(k, _)| key_host(k) == host)?.1;
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
        assert_eq!(
            c.basic_header(),
            format!("Basic {}", B64.encode("alice:s3cret"))
        );
    }
}
