//! The kbuild artifact in OCI terms: media types, descriptors, the image manifest kbuild
//! writes for a bundle (config = manifest.json, one tar+zstd layer per target) and the check
//! that a fetched manifest is one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{FetchedManifest, OciError};
use kbuild_base::digest;
use kbuild_bundle::archive::{self, Entry};
use kbuild_bundle::bundle::Bundle;

pub const IMAGE_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const IMAGE_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const ARTIFACT_TYPE: &str = "application/vnd.kbuild.bundle.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.kbuild.manifest.v1+json";
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.kbuild.layer.v1.tar+zstd";
pub const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.kbuild.signature.v1+json";
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub const TARGET_ANNOTATION: &str = "dev.kbuild.target";
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";
pub const VERSION_ANNOTATION: &str = "org.opencontainers.image.version";
pub const NAME_ANNOTATION: &str = "dev.kbuild.name";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OCI image manifest (the fields kbuild writes and reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageManifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    pub config: Descriptor,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct Artifact {
    pub manifest: Vec<u8>,
    pub digest: String,
    pub config: Vec<u8>,
    /// (target, layer bytes, descriptor), in manifest target order.
    pub layers: Vec<(String, Vec<u8>, Descriptor)>,
}

/// The deterministic per-target layer: tar+zstd of that target's objects.
pub fn target_layer(bundle: &Bundle, target: &str, mtime: u64) -> Result<Vec<u8>, OciError> {
    let entries: Vec<Entry> = bundle
        .target_objects(target)
        .into_iter()
        .map(|(hex, data)| Entry {
            name: format!("objects/sha256/{hex}"),
            data,
        })
        .collect();
    archive::write(&entries, mtime).map_err(|e| OciError::Invalid(e.to_string()))
}

impl Artifact {
    /// The OCI form of a full bundle.
    /// `source_date_epoch` (0: unset) is every layer header's mtime and, when set, the
    /// `created` annotation.
    pub fn from_bundle(bundle: &Bundle, source_date_epoch: u64) -> Result<Artifact, OciError> {
        if bundle.is_subset() {
            return Err(OciError::Invalid(format!(
                "{} holds only some targets ({}); publish the full bundle",
                bundle.file_name(),
                bundle.targets().join(", ")
            )));
        }
        let config = bundle.manifest_json().to_vec();
        let mut layers = Vec::new();
        for t in bundle.targets() {
            let bytes = target_layer(bundle, &t, source_date_epoch)?;
            let desc = Descriptor {
                media_type: LAYER_MEDIA_TYPE.into(),
                digest: digest::oci_digest(&bytes),
                size: bytes.len() as u64,
                artifact_type: None,
                annotations: [
                    (TARGET_ANNOTATION.to_string(), t.clone()),
                    (TITLE_ANNOTATION.to_string(), format!("{t}.tar.zst")),
                ]
                .into(),
            };
            layers.push((t, bytes, desc));
        }
        let mut annotations: BTreeMap<String, String> = [
            (NAME_ANNOTATION.to_string(), bundle.name().to_string()),
            (VERSION_ANNOTATION.to_string(), bundle.version().to_string()),
        ]
        .into();
        if source_date_epoch > 0 {
            annotations.insert(
                "org.opencontainers.image.created".into(),
                kbuild_base::time::rfc3339_utc(source_date_epoch as i64),
            );
        }
        let m = ImageManifest {
            schema_version: 2,
            media_type: Some(IMAGE_MANIFEST.into()),
            artifact_type: Some(ARTIFACT_TYPE.into()),
            config: Descriptor {
                media_type: CONFIG_MEDIA_TYPE.into(),
                digest: digest::oci_digest(&config),
                size: config.len() as u64,
                artifact_type: None,
                annotations: BTreeMap::new(),
            },
            layers: layers.iter().map(|l| l.2.clone()).collect(),
            subject: None,
            annotations,
        };
        let manifest = serde_json::to_vec(&m).map_err(|e| OciError::Invalid(e.to_string()))?;
        Ok(Artifact {
            digest: digest::oci_digest(&manifest),
            manifest,
            config,
            layers,
        })
    }
}

/// How to talk to a registry.
pub fn signature_tag(digest: &str) -> Result<String, OciError> {
    let hex = digest::oci_hex(digest)
        .ok_or_else(|| OciError::Invalid(format!("`{digest}` is not a sha256 digest")))?;
    Ok(format!("sha256-{hex}.sig"))
}

/// A kbuild artifact manifest, checked: artifact type, config type, one layer per target.
#[derive(Debug, Clone)]
pub struct KbuildArtifact {
    pub manifest: ImageManifest,
    /// target → layer descriptor.
    pub layers: BTreeMap<String, Descriptor>,
}

/// Check that a fetched manifest is a kbuild bundle artifact; `reference` names it in errors.
pub fn parse_kbuild_artifact(
    fetched: &FetchedManifest,
    reference: &str,
) -> Result<KbuildArtifact, OciError> {
    let not = |found: String| OciError::NotKbuild {
        reference: reference.to_string(),
        found,
    };
    let v: serde_json::Value = serde_json::from_slice(&fetched.bytes)
        .map_err(|e| not(format!("its manifest is not JSON ({e})")))?;
    let media = v
        .get("mediaType")
        .and_then(|m| m.as_str())
        .unwrap_or(fetched.media_type.as_str())
        .to_string();
    if media == IMAGE_INDEX || v.get("manifests").is_some() {
        return Err(not(
            "it is an image index (a multi-platform image?), not an artifact manifest".into(),
        ));
    }
    let m: ImageManifest = serde_json::from_value(v)
        .map_err(|e| not(format!("its manifest is not an OCI image manifest ({e})")))?;
    let art = m.artifact_type.clone().unwrap_or_default();
    if art != ARTIFACT_TYPE || m.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(not(format!(
            "artifactType is `{}` and config mediaType is `{}` (kbuild bundles have `{ARTIFACT_TYPE}` and `{CONFIG_MEDIA_TYPE}`); it was pushed by another tool",
            if art.is_empty() { "(none)" } else { &art },
            m.config.media_type
        )));
    }
    let mut layers = BTreeMap::new();
    for l in &m.layers {
        let t = l.annotations.get(TARGET_ANNOTATION).ok_or_else(|| {
            not(format!(
                "layer {} has no {TARGET_ANNOTATION} annotation",
                l.digest
            ))
        })?;
        if l.media_type != LAYER_MEDIA_TYPE {
            return Err(not(format!(
                "layer for {t} has media type {}",
                l.media_type
            )));
        }
        if digest::oci_hex(&l.digest).is_none() {
            return Err(not(format!("layer for {t} has digest `{}`", l.digest)));
        }
        if layers.insert(t.clone(), l.clone()).is_some() {
            return Err(not(format!("two layers for target {t}")));
        }
    }
    Ok(KbuildArtifact {
        manifest: m,
        layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_is_deterministic_and_parses_back() {
        let (m, o) = kbuild_manifest::fixtures::bundle_parts(&["sm_89", "gfx1100"]);
        let b = Bundle::from_parts(m, o, None).unwrap();
        let a = Artifact::from_bundle(&b, 0).unwrap();
        assert_eq!(a.digest, Artifact::from_bundle(&b, 0).unwrap().digest);
        let f = FetchedManifest {
            digest: a.digest.clone(),
            bytes: a.manifest.clone(),
            media_type: IMAGE_MANIFEST.into(),
        };
        let k = parse_kbuild_artifact(&f, "r").unwrap();
        assert_eq!(k.layers.len(), 2);
        assert_eq!(k.manifest.config.digest, b.manifest_digest());
        assert!(Artifact::from_bundle(&b.restrict(&["sm_89".into()]).unwrap(), 0).is_err());
        let foreign = FetchedManifest {
            digest: String::new(),
            bytes: br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.unknown.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}"#.to_vec(),
            media_type: IMAGE_MANIFEST.into(),
        };
        let e = parse_kbuild_artifact(&foreign, "h/r:1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is not a kbuild bundle") && e.contains("vnd.unknown.config"),
            "{e}"
        );
    }
}
