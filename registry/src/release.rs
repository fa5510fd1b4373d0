//! Pulling a split release (`kbuild package --max-asset-size`): an asset index
//! `NAME-VERSION.kbindex` and its parts, plain files in one directory (release assets
//! downloaded beside each other; see [`kbuild_bundle::assets`] for the format).
//!
//! The index carries the build manifest, so the caller's selection (the loader's, over the
//! one compat table) picks the targets first; then only the parts holding them are read,
//! each checked against the index (size, sha256) before it is unpacked and as a bundle after
//! (every object's digest, the same manifest). A part that is not needed is never opened, so
//! a device's pull works with only its family's file downloaded. The result is verified,
//! signature-checked (`NAME-VERSION.kbindex.sig` beside the index: the signature covers the
//! manifest every part carries) and cached exactly as a registry pull.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbuild_base::digest;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::assets::AssetIndex;
use kbuild_bundle::bundle::Bundle;
use kbuild_bundle::cache::BundleCache;
use kbuild_bundle::sign::Trust;
use kbuild_manifest::manifest::Manifest;

use crate::lock::LockedPackage;
use crate::pull::{PullError, Pulled, SelectError};
use crate::store::{canonical_dir, StoreError};

/// A pull of a split release from its index file.
pub struct ReleaseRequest<'a> {
    /// The `.kbindex` file; its parts lie beside it.
    pub index: &'a Path,
    pub cache: &'a BundleCache,
    pub trust: &'a Trust,
    /// What one part may unpack to.
    pub limits: ArchiveLimits,
}

/// What a release pull read, besides the bundle.
#[derive(Debug)]
pub struct ReleasePulled {
    pub pulled: Pulled,
    /// The part files read (none when served from the cache), in index order.
    pub parts_read: Vec<PathBuf>,
    /// The parts not needed for the selected targets (never opened).
    pub parts_skipped: Vec<String>,
}

impl ReleasePulled {
    /// The text lines under the pull's own line: each part read, then those not needed
    /// (`for_device`: the pull named a device).
    pub fn parts_text(&self, for_device: bool) -> String {
        let mut out = String::new();
        for p in &self.parts_read {
            out.push_str(&format!("  read {}\n", p.display()));
        }
        if !self.parts_skipped.is_empty() {
            let on = if for_device { " on this device" } else { "" };
            let skipped = self.parts_skipped.join(", ");
            out.push_str(&format!("  not needed{on}: {skipped}\n"));
        }
        out
    }
}

/// Why a split release cannot be pulled from where it was named.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("`{spec}`: a split release is pulled from files, not URLs; download the index and the part(s) the device needs into one directory (the index lists them), then `kbuild pull DIR/{file}`")]
    Url { spec: String, file: String },
    #[error("{index} is a split release's index: its parts are read from beside it, not from --registry {registry}; drop --registry")]
    Registry { index: String, registry: String },
}

/// A split release is read from the files beside its index `spec`: not from a URL, and not
/// from a `registry`.
pub fn check_source(spec: &str, registry: Option<&str>) -> Result<(), SourceError> {
    if spec.starts_with("http://") || spec.starts_with("https://") {
        return Err(SourceError::Url {
            spec: spec.into(),
            file: spec.rsplit('/').next().unwrap_or_default().into(),
        });
    }
    match registry {
        Some(r) => Err(SourceError::Registry {
            index: Path::new(spec).display().to_string(),
            registry: r.into(),
        }),
        None => Ok(()),
    }
}

/// The registry string a release is cached and locked under: `file://` and the index path.
pub fn describe(index: &Path) -> String {
    format!("file://{}", canonical_dir(index).display())
}

/// Pull from an index: select targets from the manifest it carries, read only the parts
/// holding them. `select` is as for [`crate::pull::pull`].
pub fn pull_release(
    req: &ReleaseRequest,
    select: &dyn Fn(&Manifest) -> Result<Vec<String>, SelectError>,
) -> Result<ReleasePulled, PullError> {
    let shown = req.index.display().to_string();
    let index_bytes = kbuild_bundle::assets::read_index(req.index)?;
    let sigs = kbuild_bundle::sign::read_signatures(req.index)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    // Under `require` the signature is checked on the manifest's bytes before they are parsed
    // or selected from.
    let mut check = |json: &[u8]| {
        req.trust
            .check_before_parse(
                &digest::oci_digest(json),
                sigs.as_ref(),
                Manifest::claimed_package(json).as_deref(),
            )
            .map_err(|e| kbuild_bundle::BundleError::Refused(Box::new(e)))
    };
    let index = AssetIndex::from_bytes_checked(&index_bytes, &shown, &mut check)?;
    let registry = describe(req.index);
    let artifact = digest::oci_digest(&index_bytes);
    let targets = select(index.manifest()).map_err(PullError::Select)?;
    // Signatures before any part is read or cached: a refused release leaves nothing.
    let verdict = req.trust.check(
        index.name(),
        index.version(),
        index.manifest_digest(),
        sigs.as_ref(),
    )?;
    let needed = index.parts_for(&targets);
    let parts_skipped: Vec<String> = index
        .parts()
        .iter()
        .filter(|p| !needed.iter().any(|n| n.file == p.file))
        .map(|p| p.file.clone())
        .collect();
    let lock = |layers| LockedPackage {
        name: index.name().into(),
        version: index.version().into(),
        registry: registry.clone(),
        artifact: artifact.clone(),
        manifest: index.manifest_digest().into(),
        layers,
    };
    // Served from the cache when it holds these targets of this very index.
    if let Some(c) = req.cache.get_ref(&registry, index.name(), index.version()) {
        if c.artifact == artifact
            && c.manifest == index.manifest_digest()
            && targets.iter().all(|t| c.layers.contains_key(t))
        {
            if let Ok(b) = req.cache.open(&c) {
                let bundle = b.restrict(&targets).map_err(StoreError::from)?;
                let layers = targets
                    .iter()
                    .filter_map(|t| c.layers.get(t).map(|d| (t.clone(), d.clone())))
                    .collect();
                return Ok(ReleasePulled {
                    pulled: Pulled {
                        bundle,
                        artifact: artifact.clone(),
                        verdict,
                        layer_bytes: 0,
                        from_cache: true,
                        signatures: sigs,
                        lock: lock(layers),
                    },
                    parts_read: Vec::new(),
                    parts_skipped,
                });
            }
        }
    }
    let dir = match req.index.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut objects = BTreeMap::new();
    let mut bytes = 0u64;
    let mut parts_read = Vec::new();
    // One budget for every part this pull unpacks.
    let mut budget = kbuild_bundle::archive::UnpackBudget::new(req.limits);
    for part in &needed {
        let b = index.read_part(&dir, part, &shown, &mut budget)?;
        bytes += part.size;
        parts_read.push(dir.join(&part.file));
        // Moved out of the part, never copied: what a pull holds is its budget.
        let wanted: Vec<String> = b
            .manifest()
            .objects
            .iter()
            .filter(|o| part.targets.contains(&o.target) && targets.contains(&o.target))
            .map(|o| o.sha256.clone())
            .collect();
        let (_, mut held) = b.into_parts();
        for sha in wanted {
            if let Some(data) = held.remove(&sha) {
                objects.insert(sha, data);
            }
        }
    }
    let bundle = Bundle::from_parts(
        index.manifest_json().to_vec(),
        objects,
        Some(targets.clone()),
    )
    .map_err(StoreError::from)?;
    let mut layers = BTreeMap::new();
    for t in &targets {
        // The canonical layer (mtime 0), as a directory registry records it.
        let layer = crate::oci::target_layer(&bundle, t, 0).map_err(StoreError::from)?;
        layers.insert(t.clone(), digest::oci_digest(&layer));
    }
    req.cache
        .store(&registry, &artifact, &bundle, &layers, sigs.as_ref())?;
    Ok(ReleasePulled {
        pulled: Pulled {
            bundle,
            artifact: artifact.clone(),
            verdict,
            layer_bytes: bytes,
            from_cache: false,
            signatures: sigs,
            lock: lock(layers),
        },
        parts_read,
        parts_skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_bundle::assets::{pack, Packed};
    use kbuild_bundle::sign::Policy;

    #[test]
    fn only_the_selected_targets_parts_are_read() {
        let (m, o) = kbuild_manifest::fixtures::bundle_parts(&["sm_89", "sm_90", "gfx1100"]);
        let b = Bundle::from_parts(m, o, None).unwrap();
        let full = b.to_bytes(0).unwrap().len() as u64;
        // The limit only needs to be under the whole bundle and over the index.
        let Packed::Split {
            parts, index_bytes, ..
        } = pack(&b, full, full - 1, 0).unwrap()
        else {
            panic!("expected a split")
        };
        let d = tempfile::tempdir().unwrap();
        let index = d.path().join("pkg-1.2.3.kbindex");
        std::fs::write(&index, &index_bytes).unwrap();
        let sm90 = parts.iter().find(|p| p.part.family == "sm_9x").unwrap();
        std::fs::write(d.path().join(&sm90.part.file), &sm90.bytes).unwrap();
        let cache = BundleCache::new(&d.path().join("cache"));
        let trust = Trust {
            policy: Policy::Off,
            ..Trust::default()
        };
        let req = ReleaseRequest {
            index: &index,
            cache: &cache,
            trust: &trust,
            limits: ArchiveLimits::default(),
        };
        let got = pull_release(&req, &|_| Ok(vec!["sm_90".to_string()])).unwrap();
        assert_eq!(got.pulled.bundle.targets(), ["sm_90"]);
        assert_eq!(got.parts_read, [d.path().join(&sm90.part.file)]);
        assert_eq!(got.parts_skipped.len(), 2);
        assert!(got.pulled.lock.layers.contains_key("sm_90"));
        let e = pull_release(&req, &|m| Ok(m.targets.clone())).unwrap_err();
        assert!(
            matches!(&e, PullError::Asset(kbuild_bundle::assets::AssetError::MissingPart { file, .. }) if file.ends_with("pkg-1.2.3.sm_8x.kbundle")),
            "{e}"
        );
        let refused = pull_release(&req, &|_| Err("nothing runs here".into())).unwrap_err();
        assert_eq!(refused.to_string(), "nothing runs here");
    }

    #[test]
    fn a_release_is_read_from_files_only() {
        assert!(check_source("dist/p-1.0.0.kbindex", None).is_ok());
        let url = check_source("https://h/x/p-1.0.0.kbindex", None).unwrap_err();
        assert!(
            url.to_string()
                .ends_with("then `kbuild pull DIR/p-1.0.0.kbindex`"),
            "{url}"
        );
        let reg = check_source("p-1.0.0.kbindex", Some("oci://h/r")).unwrap_err();
        assert!(
            reg.to_string().contains("not from --registry oci://h/r"),
            "{reg}"
        );
    }
}
