//! The JSON documents of the registry commands: `kbuild.publish/v1`, `kbuild.pull/v1` and
//! `kbuild.ls/v1`, typed here, built from what the library returned; the binary renders them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbuild_bundle::cache::CachedRef;
use kbuild_bundle::sign::TrustVerdict;
use serde::Serialize;

use crate::oci::PublishOutcome;
use crate::pull::Pulled;

pub const PUBLISH_SCHEMA: &str = "kbuild.publish/v1";
pub const PULL_SCHEMA: &str = "kbuild.pull/v1";
pub const LS_SCHEMA: &str = "kbuild.ls/v1";

/// `kbuild.publish/v1`.
#[derive(Debug, Serialize)]
pub struct PublishReport<'a> {
    pub schema: &'static str,
    pub name: &'a str,
    pub version: &'a str,
    pub registry: String,
    pub digest: &'a str,
    pub published: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uploaded_blobs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_blobs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uploaded_bytes: Option<u64>,
    pub signed: bool,
}

impl<'a> PublishReport<'a> {
    pub fn new(
        name: &'a str,
        version: &'a str,
        registry: String,
        outcome: &'a PublishOutcome,
        signed: bool,
    ) -> PublishReport<'a> {
        let (digest, published, uploaded, skipped, bytes) = match outcome {
            PublishOutcome::Published {
                digest,
                uploaded,
                skipped,
                bytes,
            } => (digest, true, Some(*uploaded), Some(*skipped), Some(*bytes)),
            PublishOutcome::AlreadyPublished { digest } => (digest, false, None, None, None),
        };
        PublishReport {
            schema: PUBLISH_SCHEMA,
            name,
            version,
            registry,
            digest,
            published,
            uploaded_blobs: uploaded,
            skipped_blobs: skipped,
            uploaded_bytes: bytes,
            signed,
        }
    }

    /// The line `kbuild publish` prints.
    pub fn text(&self) -> String {
        let (name, version, reg, digest) = (self.name, self.version, &self.registry, self.digest);
        match (self.uploaded_blobs, self.skipped_blobs, self.uploaded_bytes) {
            (Some(uploaded), Some(skipped), Some(bytes)) => format!("published {name} {version} to {reg} ({digest}; {uploaded} blob(s) uploaded, {bytes} bytes, {skipped} already there)\n"),
            _ => format!("{name} {version} is already in {reg} with exactly these bytes ({digest}); nothing to do\n"),
        }
    }
}

/// The `signature` object of `kbuild.pull/v1`.
#[derive(Debug, Serialize)]
#[serde(tag = "status")]
pub enum SignatureStatus<'a> {
    #[serde(rename = "verified")]
    Verified { key: &'a str },
    #[serde(rename = "unverified")]
    Unverified { warning: &'a str },
    #[serde(rename = "not-checked")]
    NotChecked,
}

impl<'a> From<&'a TrustVerdict> for SignatureStatus<'a> {
    fn from(v: &'a TrustVerdict) -> SignatureStatus<'a> {
        match v {
            TrustVerdict::Verified { key_id } => SignatureStatus::Verified { key: key_id },
            TrustVerdict::Warning(w) => SignatureStatus::Unverified { warning: w },
            TrustVerdict::NotChecked => SignatureStatus::NotChecked,
        }
    }
}

/// What a pull of a split release read (the keys `kbuild.pull/v1` adds for one).
#[derive(Debug, Serialize)]
pub struct ReleaseParts<'a> {
    pub index: &'a Path,
    pub parts_read: &'a [PathBuf],
    pub parts_skipped: &'a [String],
}

/// `kbuild.pull/v1`.
#[derive(Debug, Serialize)]
pub struct PullReport<'a> {
    pub schema: &'static str,
    pub name: &'a str,
    pub version: &'a str,
    /// The registry, or the index file of a split release.
    pub registry: &'a str,
    pub artifact: &'a str,
    pub manifest: &'a str,
    pub targets: Vec<String>,
    pub layers: &'a BTreeMap<String, String>,
    pub objects: usize,
    pub layer_bytes: u64,
    pub from_cache: bool,
    pub device: Option<&'a str>,
    pub signature: SignatureStatus<'a>,
    /// The bundle written with `--out`.
    pub bundle: Option<&'a Path>,
    pub partial: Option<String>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseParts<'a>>,
}

impl<'a> PullReport<'a> {
    pub fn new(
        pulled: &'a Pulled,
        registry: &'a str,
        device: Option<&'a str>,
        bundle: Option<&'a Path>,
        release: Option<ReleaseParts<'a>>,
    ) -> PullReport<'a> {
        let b = &pulled.bundle;
        PullReport {
            schema: PULL_SCHEMA,
            name: b.name(),
            version: b.version(),
            registry,
            artifact: &pulled.artifact,
            manifest: b.manifest_digest(),
            targets: b.targets(),
            layers: &pulled.lock.layers,
            objects: b.objects().len(),
            layer_bytes: pulled.layer_bytes,
            from_cache: pulled.from_cache,
            device,
            signature: (&pulled.verdict).into(),
            bundle,
            partial: b.manifest().partial_note(),
            release,
        }
    }
}

/// The text line of a pull: what was pulled from `artifact`, for which device, how (from
/// the cache, or how many bytes `bytes` moved: "layer bytes fetched", "part bytes read") and
/// the signature's verdict.
pub fn pulled_line(pulled: &Pulled, artifact: &str, device: Option<&str>, bytes: &str) -> String {
    let b = &pulled.bundle;
    let sig = match &pulled.verdict {
        TrustVerdict::Verified { key_id } => format!("signature verified (key {key_id})"),
        TrustVerdict::Warning(_) => "signature NOT verified".into(),
        TrustVerdict::NotChecked => "signature not checked (policy off)".into(),
    };
    format!(
        "pulled {} {} ({artifact}) {}: {} ({} objects, {}); {sig}",
        b.name(),
        b.version(),
        match device {
            Some(label) => format!("for {label}"),
            None => "for every target".into(),
        },
        b.targets().join(", "),
        b.objects().len(),
        if pulled.from_cache {
            "from the cache".to_string()
        } else {
            format!("{} {bytes}", pulled.layer_bytes)
        },
    )
}

/// One cached version in `kbuild.ls/v1`.
#[derive(Debug, Serialize)]
pub struct CachedVersion<'a> {
    pub registry: &'a str,
    pub name: &'a str,
    pub version: &'a str,
    pub artifact: &'a str,
    pub targets: Vec<&'a String>,
}

/// `kbuild.ls/v1`.
#[derive(Debug, Serialize)]
pub struct LsReport<'a> {
    pub schema: &'static str,
    pub registry: String,
    pub remote: &'a BTreeMap<String, Vec<String>>,
    pub cached: Vec<CachedVersion<'a>>,
}

impl<'a> LsReport<'a> {
    pub fn new(
        registry: String,
        remote: &'a BTreeMap<String, Vec<String>>,
        cached: &'a [CachedRef],
    ) -> LsReport<'a> {
        LsReport {
            schema: LS_SCHEMA,
            registry,
            remote,
            cached: cached
                .iter()
                .map(|r| CachedVersion {
                    registry: &r.registry,
                    name: &r.name,
                    version: &r.version,
                    artifact: &r.artifact,
                    targets: r.layers.keys().collect(),
                })
                .collect(),
        }
    }

    /// The text of `kbuild ls`: each published name's versions, then each cached version.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (name, versions) in self.remote {
            let versions = match versions.is_empty() {
                true => "no versions".to_string(),
                false => versions.join(", "),
            };
            out.push_str(&format!("{name} in {}: {versions}\n", self.registry));
        }
        if self.cached.is_empty() {
            out.push_str("cache: nothing pulled yet\n");
        }
        for c in &self.cached {
            let targets: Vec<&str> = c.targets.iter().map(|t| t.as_str()).collect();
            out.push_str(&format!(
                "cached {} {} from {} ({}): {}\n",
                c.name,
                c.version,
                c.registry,
                c.artifact,
                targets.join(", ")
            ));
        }
        out
    }
}
