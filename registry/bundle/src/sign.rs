//! Signatures: ed25519 over a payload naming the package, its version and the manifest
//! digest, and the trust policy that checks them on pull and on load.
//!
//! The signed bytes are the compact JSON of [`Payload`] (fixed field order). Signing the
//! manifest digest covers every object, since the manifest lists each object's sha256; the
//! version inside the payload stops a signature for 1.0.0 from being replayed onto 1.0.1.
//! Signatures live in a [`SignatureFile`]: `NAME-VERSION.kbundle.sig` beside a bundle, and in
//! OCI registries as an artifact tagged `sha256-<manifest hex>.sig` (see `oci.rs`).

use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use kbuild_base::digest;
#[cfg(feature = "config")]
use kbuild_base::dirs::Dirs;
use kbuild_base::env::{names, Env};

pub const PAYLOAD_SCHEMA: &str = "kbuild.signature-payload/v1";
pub const FILE_SCHEMA: &str = "kbuild.signatures/v1";
const PUBLIC_TAG: &str = "kbuild-ed25519";
const SECRET_TAG: &str = "kbuild-ed25519-secret";

mod files;
pub use files::{
    default_key_dir, default_secret_key, read_signatures, sign_artifact, sign_file,
    write_signatures, SigFileError, SignArtifactError, Signed, SignedArtifact, MAX_SIG_FILE_BYTES,
};
#[cfg(feature = "keygen")]
pub use files::{write_key_pair, KeyFileError, KeyPair};

/// The largest key or kbuild config file read (a key is one line; a config a few dozen).
const MAX_KEY_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    /// An outside file over its size limit or not a regular file.
    #[error(transparent)]
    Read(#[from] kbuild_base::read::ReadError),
    #[error("{what}: not a kbuild key (expected `{tag} <base64 of 32 bytes>`)")]
    BadKey { what: String, tag: &'static str },
    #[error("signature file: {0}")]
    BadFile(String),
    #[error("could not get random bytes for a key: {0}")]
    Random(String),
    #[error("{0}")]
    Config(String),
    #[error("signature check failed for {package}: {reason}")]
    Refused { package: String, reason: Unverified },
}

/// Why a package's signatures do not make it trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    #[error("it is not signed (sign it with `kbuild sign`)")]
    NotSigned,
    #[error(
        "no trusted keys are configured ([signatures] trusted-keys in the kbuild config file)"
    )]
    NoTrustedKeys,
    /// Every signature failed; one problem per signature, in file order.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Signatures(Vec<SignatureProblem>),
}

/// What is wrong with one signature of a [`SignatureFile`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureProblem {
    #[error("signature by untrusted key {key_id}")]
    UntrustedKey { key_id: String },
    #[error("signature by {key_id} is for {name} {version} manifest {signed}, not this manifest {manifest}")]
    OtherPayload {
        key_id: String,
        name: String,
        version: String,
        /// The manifest digest the signature covers.
        signed: String,
        /// The manifest digest being checked.
        manifest: String,
    },
    #[error("signature by {key_id} does not verify")]
    DoesNotVerify { key_id: String },
}

/// What is signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub schema: String,
    pub name: String,
    pub version: String,
    /// `sha256:<hex>` of the bundle's manifest.json (= the OCI config blob).
    pub manifest: String,
    /// When it was signed (RFC 3339, UTC), inside the signed bytes: with the version, what
    /// tells a newer signed release from an older one a registry rolls back to. Absent in
    /// signatures made before kbuild recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_at: Option<String>,
}

impl Payload {
    /// The payload for `name` `version` with manifest `manifest_digest`, signed now.
    pub fn new(name: &str, version: &str, manifest_digest: &str) -> Payload {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Payload::at(name, version, manifest_digest, now)
    }

    /// The payload, signed at `unix_secs`.
    pub fn at(name: &str, version: &str, manifest_digest: &str, unix_secs: i64) -> Payload {
        Payload {
            schema: PAYLOAD_SCHEMA.into(),
            name: name.into(),
            version: version.into(),
            manifest: manifest_digest.into(),
            signed_at: Some(kbuild_base::time::rfc3339_utc(unix_secs)),
        }
    }

    /// Whether this payload signs exactly `name` `version` with `manifest_digest` (whenever
    /// it was signed).
    fn covers(&self, name: &str, version: &str, manifest_digest: &str) -> bool {
        self.schema == PAYLOAD_SCHEMA
            && self.name == name
            && self.version == version
            && self.manifest == manifest_digest
    }

    fn bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// One signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// First 16 hex digits of the sha256 of the public key.
    pub key_id: String,
    pub public_key: String,
    pub payload: Payload,
    /// base64 ed25519 signature over the payload's JSON.
    pub signature: String,
}

/// Every signature of one bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureFile {
    pub schema: String,
    pub signatures: Vec<Signature>,
}

impl SignatureFile {
    pub fn new() -> SignatureFile {
        SignatureFile {
            schema: FILE_SCHEMA.into(),
            signatures: Vec::new(),
        }
    }

    pub fn from_json(bytes: &[u8]) -> Result<SignatureFile, SignError> {
        let f: SignatureFile =
            serde_json::from_slice(bytes).map_err(|e| SignError::BadFile(e.to_string()))?;
        if f.schema != FILE_SCHEMA {
            return Err(SignError::BadFile(format!(
                "schema \"{}\" is not \"{FILE_SCHEMA}\"",
                f.schema
            )));
        }
        Ok(f)
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).unwrap_or_default();
        v.push(b'\n');
        v
    }

    /// Add (or replace, for the same key) a signature.
    pub fn add(&mut self, sig: Signature) {
        self.signatures.retain(|s| s.key_id != sig.key_id);
        self.signatures.push(sig);
        self.signatures.sort_by(|a, b| a.key_id.cmp(&b.key_id));
    }
}

impl SignatureFile {
    /// Whether every signature in the file belongs to the bundle `name` `version` whose
    /// manifest has `manifest_digest`: it signs exactly that payload and verifies under the
    /// public key it carries. No trust is involved (which keys are trusted is the policy's
    /// business at pull and load); this is what tells a stale `.sig` from the bundle's own.
    pub fn check_belongs(
        &self,
        name: &str,
        version: &str,
        manifest_digest: &str,
    ) -> Result<(), SignatureProblem> {
        for s in &self.signatures {
            self.check_one(s, name, version, manifest_digest)?;
        }
        Ok(())
    }

    /// The signatures that belong to the bundle (see [`SignatureFile::check_belongs`]) and
    /// the problems of those that do not.
    pub fn split_belonging(
        &self,
        name: &str,
        version: &str,
        manifest_digest: &str,
    ) -> (SignatureFile, Vec<SignatureProblem>) {
        let mut keep = SignatureFile::new();
        let mut problems = Vec::new();
        for s in &self.signatures {
            match self.check_one(s, name, version, manifest_digest) {
                Ok(()) => keep.signatures.push(s.clone()),
                Err(p) => problems.push(p),
            }
        }
        (keep, problems)
    }

    fn check_one(
        &self,
        s: &Signature,
        name: &str,
        version: &str,
        manifest_digest: &str,
    ) -> Result<(), SignatureProblem> {
        if !s.payload.covers(name, version, manifest_digest) {
            return Err(SignatureProblem::OtherPayload {
                key_id: s.key_id.clone(),
                name: s.payload.name.clone(),
                version: s.payload.version.clone(),
                signed: s.payload.manifest.clone(),
                manifest: manifest_digest.to_string(),
            });
        }
        let key = B64
            .decode(&s.public_key)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .and_then(|b| VerifyingKey::from_bytes(&b).ok())
            .filter(|k| key_id(k.as_bytes()) == s.key_id);
        let ok = key.is_some_and(|k| {
            B64.decode(&s.signature)
                .ok()
                .and_then(|b| <[u8; 64]>::try_from(b).ok())
                .map(|b| ed25519_dalek::Signature::from_bytes(&b))
                .is_some_and(|sig| k.verify_strict(&s.payload.bytes(), &sig).is_ok())
        });
        if ok {
            Ok(())
        } else {
            Err(SignatureProblem::DoesNotVerify {
                key_id: s.key_id.clone(),
            })
        }
    }
}

impl Default for SignatureFile {
    fn default() -> Self {
        SignatureFile::new()
    }
}

/// A public key that signatures are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Parse `kbuild-ed25519 <base64>` (the `.pub` file's text).
    pub fn parse(text: &str, what: &str) -> Result<PublicKey, SignError> {
        let bad = || SignError::BadKey {
            what: what.to_string(),
            tag: PUBLIC_TAG,
        };
        let raw = parse_tagged(text, PUBLIC_TAG).ok_or_else(bad)?;
        VerifyingKey::from_bytes(&raw)
            .map(PublicKey)
            .map_err(|_| bad())
    }

    pub fn id(&self) -> String {
        key_id(self.0.as_bytes())
    }

    pub fn to_text(&self) -> String {
        format!("{PUBLIC_TAG} {}\n", B64.encode(self.0.as_bytes()))
    }
}

/// A signing key.
pub struct SecretKey(SigningKey);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretKey({})", self.public().id())
    }
}

impl SecretKey {
    #[cfg(feature = "keygen")]
    pub fn generate() -> Result<SecretKey, SignError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| SignError::Random(e.to_string()))?;
        Ok(SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// Parse `kbuild-ed25519-secret <base64>`.
    pub fn parse(text: &str, what: &str) -> Result<SecretKey, SignError> {
        let raw = parse_tagged(text, SECRET_TAG).ok_or_else(|| SignError::BadKey {
            what: what.to_string(),
            tag: SECRET_TAG,
        })?;
        Ok(SecretKey(SigningKey::from_bytes(&raw)))
    }

    pub fn load(path: &Path) -> Result<SecretKey, SignError> {
        let text = kbuild_base::read::read_capped_string(path, MAX_KEY_FILE_BYTES, "a key file")?;
        SecretKey::parse(&text, &path.display().to_string())
    }

    pub fn to_text(&self) -> String {
        format!("{SECRET_TAG} {}\n", B64.encode(self.0.to_bytes()))
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    pub fn sign(&self, payload: Payload) -> Signature {
        let sig = self.0.sign(&payload.bytes());
        let public = self.public();
        Signature {
            key_id: public.id(),
            public_key: B64.encode(public.0.as_bytes()),
            payload,
            signature: B64.encode(sig.to_bytes()),
        }
    }
}

fn parse_tagged(text: &str, tag: &str) -> Option<[u8; 32]> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let (t, rest) = line.split_once(char::is_whitespace)?;
    if t != tag {
        return None;
    }
    let raw = B64.decode(rest.trim()).ok()?;
    raw.try_into().ok()
}

fn key_id(public: &[u8]) -> String {
    digest::sha256_hex(public)[..16].to_string()
}

/// What to do about a bundle that is not signed by a trusted key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Refuse it.
    Require,
    /// Say so and go on.
    #[default]
    Warn,
    /// Do not look.
    Off,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "require" => Ok(Policy::Require),
            "warn" => Ok(Policy::Warn),
            "off" => Ok(Policy::Off),
            other => Err(format!(
                "unknown signature policy `{other}` (expected require, warn or off)"
            )),
        }
    }
}

/// Trusted keys and the policy.
#[derive(Debug, Clone, Default)]
pub struct Trust {
    pub policy: Policy,
    pub keys: Vec<PublicKey>,
}

/// The outcome of a check that did not refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrustVerdict {
    /// Signed by this trusted key.
    Verified { key_id: String },
    /// Not verified; `warn` lets it through with this message.
    Warning(String),
    /// Policy `off`.
    NotChecked,
}

#[cfg(feature = "config")]
#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct ConfigFile {
    #[serde(default)]
    signatures: SignaturesConfig,
}

#[cfg(feature = "config")]
#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct SignaturesConfig {
    policy: Option<String>,
    #[serde(default)]
    trusted_keys: Vec<String>,
}

impl Trust {
    #[cfg(feature = "config")]
    /// Read `[signatures] policy` and `trusted-keys` (key text or paths to `.pub` files,
    /// relative to the config file) from the config file, if it exists; then
    /// `KBUILD_SIGNATURE_POLICY` overrides the policy and `KBUILD_TRUSTED_KEYS` adds keys
    /// ([`Trust::from_env`]). The config file is
    /// [`kbuild_base::dirs::Dirs::config_file`] of `env`.
    pub fn load(env: &Env) -> Result<Trust, SignError> {
        let path = Dirs::from_env(env)
            .map_err(|e| SignError::Config(e.to_string()))?
            .config_file;
        let mut trust = match kbuild_base::read::read_capped_string(
            &path,
            MAX_KEY_FILE_BYTES,
            "a kbuild config file",
        ) {
            Ok(text) => Trust::from_config(&text, &path)?,
            Err(e) if e.is_not_found() => Trust::default(),
            Err(e) => return Err(e.into()),
        };
        trust.apply_env(env)?;
        Ok(trust)
    }

    /// The trust the environment alone gives (no config file): `KBUILD_SIGNATURE_POLICY`
    /// (default `warn`) and the `.pub` files `KBUILD_TRUSTED_KEYS` lists (`:`-separated).
    /// What an embedder without the `config` feature (the C ABI) applies.
    pub fn from_env(env: &Env) -> Result<Trust, SignError> {
        let mut trust = Trust::default();
        trust.apply_env(env)?;
        Ok(trust)
    }

    /// `KBUILD_SIGNATURE_POLICY` over the policy, `KBUILD_TRUSTED_KEYS` added to the keys.
    fn apply_env(&mut self, env: &Env) -> Result<(), SignError> {
        if let Some(p) = env.str(names::KBUILD_SIGNATURE_POLICY) {
            self.policy = p
                .parse()
                .map_err(|e| SignError::Config(format!("KBUILD_SIGNATURE_POLICY: {e}")))?;
        }
        if let Some(list) = env.str(names::KBUILD_TRUSTED_KEYS) {
            for k in list.split(':').filter(|k| !k.is_empty()) {
                self.add_key(k, Path::new("."))?;
            }
        }
        Ok(())
    }

    #[cfg(feature = "config")]
    pub fn from_config(text: &str, path: &Path) -> Result<Trust, SignError> {
        let cfg: ConfigFile = toml::from_str(text)
            .map_err(|e| SignError::Config(format!("{}: {e}", path.display())))?;
        let mut trust = Trust::default();
        if let Some(p) = cfg.signatures.policy {
            trust.policy = p
                .parse()
                .map_err(|e| SignError::Config(format!("{}: {e}", path.display())))?;
        }
        let base = path.parent().unwrap_or(Path::new("."));
        for k in cfg.signatures.trusted_keys {
            trust.add_key(&k, base)?;
        }
        Ok(trust)
    }

    /// Add a key given as text or as a path to a `.pub` file (relative to `base`).
    pub fn add_key(&mut self, spec: &str, base: &Path) -> Result<(), SignError> {
        let key = if spec.trim_start().starts_with(PUBLIC_TAG) {
            PublicKey::parse(spec, "trusted key")?
        } else {
            let p = base.join(spec);
            let text = kbuild_base::read::read_capped_string(&p, MAX_KEY_FILE_BYTES, "a key file")?;
            PublicKey::parse(&text, &p.display().to_string())?
        };
        if !self.keys.contains(&key) {
            self.keys.push(key);
        }
        Ok(())
    }

    /// Check `sigs` for the package `name@version` whose manifest has `manifest_digest`.
    /// Under `require` anything but a valid signature by a trusted key is an error; under
    /// `warn` it is a [`TrustVerdict::Warning`].
    pub fn check(
        &self,
        name: &str,
        version: &str,
        manifest_digest: &str,
        sigs: Option<&SignatureFile>,
    ) -> Result<TrustVerdict, SignError> {
        if self.policy == Policy::Off {
            return Ok(TrustVerdict::NotChecked);
        }
        let package = format!("{name} {version}");
        let reason = match self.verify(name, version, manifest_digest, sigs) {
            Ok(key_id) => return Ok(TrustVerdict::Verified { key_id }),
            Err(r) => r,
        };
        match self.policy {
            Policy::Require => Err(SignError::Refused { package, reason }),
            _ => Ok(TrustVerdict::Warning(format!("{package}: {reason}"))),
        }
    }

    /// Under `require`, before a manifest is parsed: whether `sigs` hold a valid signature by
    /// a trusted key over `manifest_digest` (for the name and version it claims; [`Trust::check`]
    /// then checks them against the parsed manifest). Nothing of an unsigned or forged
    /// manifest is parsed or selected from. Other policies decide after the parse.
    pub fn check_before_parse(
        &self,
        manifest_digest: &str,
        sigs: Option<&SignatureFile>,
        package: Option<&str>,
    ) -> Result<(), SignError> {
        if self.policy != Policy::Require {
            return Ok(());
        }
        let claims = sigs
            .map(|f| f.signatures.iter().map(|s| &s.payload).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut reason = Unverified::NotSigned;
        for p in claims.iter().filter(|p| p.manifest == manifest_digest) {
            match self.verify(&p.name, &p.version, manifest_digest, sigs) {
                Ok(_) => return Ok(()),
                Err(r) => reason = r,
            }
        }
        if matches!(reason, Unverified::NotSigned) {
            if let Some(p) = claims.first() {
                // Signed, but none over this manifest: say what the signatures are for.
                reason = self
                    .verify(&p.name, &p.version, manifest_digest, sigs)
                    .err()
                    .unwrap_or(Unverified::NotSigned);
            }
        }
        Err(SignError::Refused {
            package: match package {
                Some(p) => format!("{p} (manifest {manifest_digest})"),
                None => format!("manifest {manifest_digest}"),
            },
            reason,
        })
    }

    fn verify(
        &self,
        name: &str,
        version: &str,
        manifest_digest: &str,
        sigs: Option<&SignatureFile>,
    ) -> Result<String, Unverified> {
        let sigs = match sigs {
            Some(s) if !s.signatures.is_empty() => s,
            _ => return Err(Unverified::NotSigned),
        };
        if self.keys.is_empty() {
            return Err(Unverified::NoTrustedKeys);
        }
        let mut problems = Vec::new();
        for s in &sigs.signatures {
            let Some(key) = self.keys.iter().find(|k| k.id() == s.key_id) else {
                problems.push(SignatureProblem::UntrustedKey {
                    key_id: s.key_id.clone(),
                });
                continue;
            };
            if !s.payload.covers(name, version, manifest_digest) {
                problems.push(SignatureProblem::OtherPayload {
                    key_id: s.key_id.clone(),
                    name: s.payload.name.clone(),
                    version: s.payload.version.clone(),
                    signed: s.payload.manifest.clone(),
                    manifest: manifest_digest.to_string(),
                });
                continue;
            }
            let ok = B64
                .decode(&s.signature)
                .ok()
                .and_then(|b| <[u8; 64]>::try_from(b).ok())
                .map(|b| ed25519_dalek::Signature::from_bytes(&b))
                // Over the payload as signed (its time included), re-encoded: serde writes the
                // fields in declaration order, as when it was signed.
                .is_some_and(|sig| key.0.verify_strict(&s.payload.bytes(), &sig).is_ok());
            if ok {
                return Ok(s.key_id.clone());
            }
            problems.push(SignatureProblem::DoesNotVerify {
                key_id: s.key_id.clone(),
            });
        }
        Err(Unverified::Signatures(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_verify_tamper_and_policies() {
        let sk = SecretKey::generate().unwrap();
        let sk2 = SecretKey::parse(&sk.to_text(), "k").unwrap();
        assert_eq!(sk2.public(), sk.public());
        let pk = PublicKey::parse(&sk.public().to_text(), "p").unwrap();
        let d = digest::oci_digest(b"manifest");
        let mut file = SignatureFile::new();
        file.add(sk.sign(Payload::new("pkg", "1.0.0", &d)));
        let file = SignatureFile::from_json(&file.to_json()).unwrap();
        let trust = Trust {
            policy: Policy::Require,
            keys: vec![pk],
        };
        assert!(matches!(
            trust.check("pkg", "1.0.0", &d, Some(&file)).unwrap(),
            TrustVerdict::Verified { .. }
        ));
        // Other manifest, other version (replay), no signature, untrusted key: refused.
        let other = digest::oci_digest(b"other");
        let reason = |r: Result<TrustVerdict, SignError>| match r {
            Err(SignError::Refused { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        let key_id = file.signatures[0].key_id.clone();
        assert_eq!(
            reason(trust.check("pkg", "1.0.0", &other, Some(&file))),
            Unverified::Signatures(vec![SignatureProblem::OtherPayload {
                key_id: key_id.clone(),
                name: "pkg".into(),
                version: "1.0.0".into(),
                signed: d.clone(),
                manifest: other.clone(),
            }])
        );
        assert!(trust.check("pkg", "1.0.1", &d, Some(&file)).is_err());
        let e = trust.check("pkg", "1.0.0", &d, None).unwrap_err();
        assert!(e.to_string().contains("not signed"), "{e}");
        assert_eq!(reason(Err(e)), Unverified::NotSigned);
        let stranger = Trust {
            policy: Policy::Require,
            keys: vec![SecretKey::generate().unwrap().public()],
        };
        let e = stranger.check("pkg", "1.0.0", &d, Some(&file)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("signature check failed for pkg 1.0.0: signature by untrusted key {key_id}")
        );
        // A flipped signature byte.
        let mut bad = file.clone();
        let mut raw = B64.decode(&bad.signatures[0].signature).unwrap();
        raw[0] ^= 1;
        bad.signatures[0].signature = B64.encode(raw);
        assert_eq!(
            reason(trust.check("pkg", "1.0.0", &d, Some(&bad))),
            Unverified::Signatures(vec![SignatureProblem::DoesNotVerify {
                key_id: key_id.clone()
            }])
        );
        // The signing time is signed: moving it (to pass an old release off as new) breaks
        // the signature; a signature from before the field existed still verifies.
        assert!(file.signatures[0].payload.signed_at.is_some());
        let mut moved = file.clone();
        moved.signatures[0].payload.signed_at = Some("2099-01-01T00:00:00Z".into());
        assert_eq!(
            reason(trust.check("pkg", "1.0.0", &d, Some(&moved))),
            Unverified::Signatures(vec![SignatureProblem::DoesNotVerify {
                key_id: key_id.clone()
            }])
        );
        let mut legacy = Payload::at("pkg", "1.0.0", &d, 0);
        legacy.signed_at = None;
        let mut old = SignatureFile::new();
        old.add(sk.sign(legacy));
        assert!(!String::from_utf8(old.to_json())
            .unwrap()
            .contains("signed_at"));
        assert!(matches!(
            trust.check("pkg", "1.0.0", &d, Some(&old)).unwrap(),
            TrustVerdict::Verified { .. }
        ));
        let warn = Trust {
            policy: Policy::Warn,
            ..trust.clone()
        };
        assert!(matches!(
            warn.check("pkg", "1.0.0", &d, None).unwrap(),
            TrustVerdict::Warning(_)
        ));
        let off = Trust {
            policy: Policy::Off,
            ..trust
        };
        assert_eq!(
            off.check("pkg", "1.0.0", &d, None).unwrap(),
            TrustVerdict::NotChecked
        );
    }

    #[test]
    fn a_signature_file_belongs_to_its_bundle_only() {
        let sk = SecretKey::generate().unwrap();
        let d = digest::oci_digest(b"manifest");
        let mut file = SignatureFile::new();
        file.add(sk.sign(Payload::new("pkg", "1.0.0", &d)));
        file.check_belongs("pkg", "1.0.0", &d).unwrap();
        let other = digest::oci_digest(b"rebuilt");
        let e = file.check_belongs("pkg", "1.0.0", &other).unwrap_err();
        assert!(matches!(e, SignatureProblem::OtherPayload { .. }), "{e}");
        let (keep, problems) = file.split_belonging("pkg", "1.0.0", &other);
        assert!(keep.signatures.is_empty());
        assert_eq!(problems.len(), 1);
        let mut bad = file.clone();
        let mut raw = B64.decode(&bad.signatures[0].signature).unwrap();
        raw[0] ^= 1;
        bad.signatures[0].signature = B64.encode(raw);
        assert!(matches!(
            bad.check_belongs("pkg", "1.0.0", &d),
            Err(SignatureProblem::DoesNotVerify { .. })
        ));
    }

    #[test]
    fn config_file_keys_and_policy() {
        let d = tempfile::tempdir().unwrap();
        let sk = SecretKey::generate().unwrap();
        std::fs::write(d.path().join("a.pub"), sk.public().to_text()).unwrap();
        let cfg = d.path().join("config.toml");
        let t = Trust::from_config(
            "[signatures]\npolicy = \"require\"\ntrusted-keys = [\"a.pub\"]\n",
            &cfg,
        )
        .unwrap();
        assert_eq!(t.policy, Policy::Require);
        assert_eq!(t.keys, vec![sk.public()]);
        let e = Trust::from_config("[signatures]\npolicy = \"maybe\"\n", &cfg).unwrap_err();
        assert!(e.to_string().contains("unknown signature policy"), "{e}");
        assert!(PublicKey::parse("ssh-ed25519 AAAA", "x").is_err());
    }
}
