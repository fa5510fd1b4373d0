//! One interface over the two backends: a local directory and an OCI registry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbuild_manifest::manifest::Manifest;

use crate::dir::{DirError, DirStore};
use crate::oci::{self, OciClient, OciError, OciOptions, PublishOutcome};
use crate::progress::Progress;
use kbuild_base::digest;
use kbuild_bundle::archive::{self, ArchiveLimits};
use kbuild_bundle::bundle::{Bundle, BundleError};
use kbuild_bundle::sign::{Policy, SignatureFile, Trust};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Dir(#[from] DirError),
    #[error(transparent)]
    Oci(#[from] OciError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Name(#[from] crate::dir::InvalidName),
    #[error("{0}")]
    Invalid(String),
    #[error("{0} not found")]
    NotFound(String),
}

/// Where bundles are published and pulled from.
pub enum Registry {
    Dir(DirStore),
    /// `oci://HOST[:PORT]/REPO`; with no REPO the repository is the package name.
    Oci {
        host: String,
        repo: Option<String>,
        opts: Box<OciOptions>,
    },
}

/// A version found in a registry: its manifest and per-target layer digests, not yet the
/// objects.
pub struct Resolved {
    pub name: String,
    pub version: String,
    /// OCI manifest digest, or the bundle file's digest (dir registry).
    pub artifact: String,
    pub manifest: Manifest,
    pub manifest_json: Vec<u8>,
    pub manifest_digest: String,
    source: Source,
}

enum Source {
    Dir(Box<Bundle>),
    Oci {
        client: Box<OciClient>,
        fetched: oci::FetchedManifest,
        layers: BTreeMap<String, oci::Descriptor>,
    },
}

impl Resolved {
    /// Layer digest of each of `targets` (what the lockfile records).
    pub fn layer_digests(
        &self,
        targets: &[String],
    ) -> Result<BTreeMap<String, String>, StoreError> {
        let mut out = BTreeMap::new();
        for t in targets {
            let d = match &self.source {
                // The canonical layer (mtime 0): a directory registry has no layers of its own.
                Source::Dir(b) => digest::oci_digest(&oci::target_layer(b, t, 0)?),
                Source::Oci { layers, .. } => layers
                    .get(t)
                    .map(|d| d.digest.clone())
                    .ok_or_else(|| StoreError::Invalid(format!("no layer for target {t}")))?,
            };
            out.insert(t.clone(), d);
        }
        Ok(out)
    }

    /// Targets the artifact has layers (objects) for.
    pub fn targets(&self) -> Vec<String> {
        match &self.source {
            Source::Dir(b) => b.targets(),
            Source::Oci { layers, .. } => self
                .manifest
                .targets
                .iter()
                .filter(|t| layers.contains_key(*t))
                .cloned()
                .collect(),
        }
    }
}

/// One spelling per directory, so that `../reg`, `./x/../reg` and `/abs/reg` name the same
/// registry in the lockfile and the cache: the path made absolute, the longest part of it
/// that exists resolved by the file system (symlinks, `..`), the rest (a registry that a
/// publish will create) normalised lexically.
pub fn canonical_dir(path: &Path) -> PathBuf {
    use std::path::Component;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let mut base = abs.as_path();
    let resolved = loop {
        if let Ok(c) = std::fs::canonicalize(base) {
            break c;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                base = parent;
            }
            // `..` or the root: resolve what is left lexically.
            _ => break PathBuf::from(base),
        }
    };
    let mut out = resolved;
    for part in rest.iter().rev() {
        out.push(part);
    }
    // Lexically: `.` and `..` left in the part that does not exist yet.
    let mut clean = PathBuf::new();
    for c in out.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other.as_os_str()),
        }
    }
    clean
}

impl Registry {
    /// Parse `DIR`, `file://DIR` or `oci://HOST[:PORT][/REPO]`.
    pub fn parse(spec: &str, opts: OciOptions) -> Result<Registry, StoreError> {
        if spec.starts_with("oci://") {
            let (host, repo) = oci::parse_reference(spec)?;
            return Ok(Registry::Oci {
                host,
                repo: (!repo.is_empty()).then_some(repo),
                opts: Box::new(opts),
            });
        }
        if let Some((scheme, _)) = spec.split_once("://") {
            if scheme != "file" {
                return Err(StoreError::Invalid(format!(
                    "registry `{spec}`: unknown scheme `{scheme}://` (expected a directory, file://DIR or oci://HOST[:PORT]/REPO)"
                )));
            }
        }
        let path = spec.strip_prefix("file://").unwrap_or(spec);
        Ok(Registry::Dir(DirStore::with_limits(
            &canonical_dir(Path::new(path)),
            opts.limits,
        )))
    }

    /// What a bundle or layer read from this registry may unpack to.
    pub fn limits(&self) -> ArchiveLimits {
        match self {
            Registry::Dir(d) => d.limits(),
            Registry::Oci { opts, .. } => opts.limits,
        }
    }

    /// The canonical spelling, as recorded in lockfiles and the cache.
    pub fn describe(&self) -> String {
        match self {
            Registry::Dir(d) => format!("file://{}", d.root().display()),
            Registry::Oci { host, repo, .. } => match repo {
                Some(r) => format!("oci://{host}/{r}"),
                None => format!("oci://{host}"),
            },
        }
    }

    /// A client for the repository holding `name`.
    pub fn client(&self, name: &str) -> Result<OciClient, StoreError> {
        match self {
            Registry::Oci { host, repo, opts } => {
                crate::dir::check_name(name)?;
                let repo = repo.clone().unwrap_or_else(|| name.to_string());
                Ok(OciClient::new(host, &repo, (**opts).clone()))
            }
            Registry::Dir(_) => Err(StoreError::Invalid("not an OCI registry".into())),
        }
    }

    /// Published versions of `name`, ascending by semver (non-version tags are left out).
    pub fn versions(&self, name: &str, progress: &dyn Progress) -> Result<Vec<String>, StoreError> {
        match self {
            Registry::Dir(d) => Ok(d.versions(name)?),
            Registry::Oci { .. } => {
                let tags = self.client(name)?.tags(progress)?;
                let mut v: Vec<semver::Version> = tags
                    .iter()
                    .filter_map(|t| semver::Version::parse(t).ok())
                    .collect();
                v.sort();
                Ok(v.into_iter().map(|v| v.to_string()).collect())
            }
        }
    }

    /// Publish a full bundle (and its signatures, when given).
    pub fn publish(
        &self,
        bundle: &Bundle,
        bytes: &[u8],
        sigs: Option<&SignatureFile>,
        progress: &dyn Progress,
    ) -> Result<PublishOutcome, StoreError> {
        match self {
            Registry::Dir(d) => Ok(d.publish(bundle, bytes, sigs)?),
            Registry::Oci { opts, .. } => {
                let client = self.client(bundle.name())?;
                let art = oci::Artifact::from_bundle(bundle, opts.source_date_epoch)?;
                let outcome = client.publish_signed(&art, bundle.version(), sigs, progress)?;
                Ok(outcome)
            }
        }
    }

    /// Find `name` at `reference` (a version, or for OCI a `sha256:` manifest digest) and
    /// check it is a kbuild bundle of that name.
    pub fn resolve(
        &self,
        name: &str,
        reference: &str,
        progress: &dyn Progress,
    ) -> Result<Resolved, StoreError> {
        self.resolve_trusted(name, reference, progress, None)
    }

    /// [`Registry::resolve`]; under a `require` policy in `trust`, the version's signatures
    /// are checked on its manifest's digest before the manifest is fetched or parsed.
    pub fn resolve_trusted(
        &self,
        name: &str,
        reference: &str,
        progress: &dyn Progress,
        trust: Option<&Trust>,
    ) -> Result<Resolved, StoreError> {
        let trust = trust.filter(|t| t.policy == Policy::Require);
        let refused = |e| StoreError::Bundle(BundleError::Refused(Box::new(e)));
        let resolved = match self {
            Registry::Dir(d) => {
                let version = if reference.starts_with("sha256:") {
                    d.versions(name)?
                        .into_iter()
                        .find(|v| {
                            d.read(name, v)
                                .ok()
                                .flatten()
                                .is_some_and(|b| digest::oci_digest(&b) == reference)
                        })
                        .ok_or_else(|| {
                            StoreError::NotFound(format!(
                                "{name}@{reference} in {}",
                                self.describe()
                            ))
                        })?
                } else {
                    reference.to_string()
                };
                let bytes = d.read(name, &version)?.ok_or_else(|| {
                    StoreError::NotFound(format!("{name} {version} in {}", self.describe()))
                })?;
                let bundle = match trust {
                    Some(t) => {
                        let sigs = d.signatures(name, &version)?;
                        Bundle::from_reader_checked(&bytes[..], d.limits(), &mut |json| {
                            t.check_before_parse(
                                &digest::oci_digest(json),
                                sigs.as_ref(),
                                Manifest::claimed_package(json).as_deref(),
                            )
                            .map_err(|e| BundleError::Refused(Box::new(e)))
                        })?
                    }
                    None => Bundle::from_bytes(&bytes, d.limits())?,
                };
                Resolved {
                    name: name.into(),
                    version: bundle.version().into(),
                    artifact: digest::oci_digest(&bytes),
                    manifest: bundle.manifest().clone(),
                    manifest_json: bundle.manifest_json().to_vec(),
                    manifest_digest: bundle.manifest_digest().into(),
                    source: Source::Dir(Box::new(bundle)),
                }
            }
            Registry::Oci { .. } => {
                let client = self.client(name)?;
                let shown = client.display_ref(reference);
                let fetched = client
                    .get_manifest(reference, progress)?
                    .ok_or_else(|| StoreError::NotFound(shown.clone()))?;
                let art = oci::parse_kbuild_artifact(&fetched, &shown)?;
                if art.manifest.config.size > kbuild_bundle::bundle::MAX_MANIFEST_BYTES {
                    return Err(StoreError::Invalid(format!(
                        "{shown}: its config (the kbuild manifest) declares {} bytes, over kbuild's limit of {} bytes; refusing an oversize manifest",
                        art.manifest.config.size,
                        kbuild_bundle::bundle::MAX_MANIFEST_BYTES
                    )));
                }
                if let Some(t) = trust {
                    let sigs = client.get_signatures(&fetched.digest, progress)?;
                    t.check_before_parse(
                        &art.manifest.config.digest,
                        sigs.as_ref(),
                        Some(&format!("{name} {reference}")),
                    )
                    .map_err(refused)?;
                }
                let config = client.get_blob(&art.manifest.config, progress)?;
                let manifest = Manifest::from_json(&config).map_err(|e| OciError::NotKbuild {
                    reference: shown.clone(),
                    found: format!("its config is not a kbuild manifest ({e})"),
                })?;
                for t in art.layers.keys() {
                    if !manifest.targets.contains(t) {
                        return Err(StoreError::Invalid(format!(
                            "{shown}: layer for target {t}, which its manifest does not list"
                        )));
                    }
                }
                Resolved {
                    name: name.into(),
                    version: manifest.package.version.clone(),
                    artifact: fetched.digest.clone(),
                    manifest_digest: digest::oci_digest(&config),
                    manifest,
                    manifest_json: config,
                    source: Source::Oci {
                        client: Box::new(client),
                        fetched,
                        layers: art.layers,
                    },
                }
            }
        };
        if resolved.manifest.package.name != name {
            return Err(StoreError::Invalid(format!(
                "{} {reference} holds package `{}`, not `{name}`",
                self.describe(),
                resolved.manifest.package.name
            )));
        }
        if !reference.starts_with("sha256:") && resolved.version != reference {
            return Err(StoreError::Invalid(format!(
                "{} tag {reference} holds version {}",
                self.describe(),
                resolved.version
            )));
        }
        Ok(resolved)
    }

    /// Fetch the objects of `targets` only, verify them, and return the subset bundle and the
    /// bytes transferred. Each OCI layer streams into a temporary file under `spool` (created
    /// if missing, the file removed afterwards, whatever happens), size- and digest-checked on
    /// the way, before it is unpacked.
    pub fn fetch(
        &self,
        r: &Resolved,
        targets: &[String],
        spool: &Path,
        progress: &dyn Progress,
    ) -> Result<(Bundle, u64), StoreError> {
        match &r.source {
            Source::Dir(b) => Ok((b.restrict(targets)?, 0)),
            Source::Oci { client, layers, .. } => {
                let mut objects = BTreeMap::new();
                let mut bytes = 0u64;
                // One budget for every layer this pull unpacks.
                let mut budget = archive::UnpackBudget::new(self.limits());
                for t in targets {
                    let desc = layers.get(t).ok_or_else(|| {
                        StoreError::Invalid(format!("{}: no layer for target {t}", r.artifact))
                    })?;
                    let blob = spooled_blob(client, desc, spool, progress)?;
                    bytes += blob.len() as u64;
                    let entries = archive::read(&blob, budget.next()).map_err(|e| {
                        let e = budget.explain(e);
                        StoreError::Invalid(format!("layer for {t} ({}): {e}", desc.digest))
                    })?;
                    budget.spend(entries.iter().map(|e| e.data.len() as u64).sum());
                    for e in entries {
                        let Some(hex) = e.name.strip_prefix("objects/sha256/") else {
                            return Err(StoreError::Invalid(format!(
                                "layer for {t} holds `{}`; kbuild layers hold objects only",
                                e.name
                            )));
                        };
                        objects.insert(hex.to_string(), e.data);
                    }
                }
                let bundle =
                    Bundle::from_parts(r.manifest_json.clone(), objects, Some(targets.to_vec()))?;
                Ok((bundle, bytes))
            }
        }
    }

    /// The signatures of a resolved version, if any.
    pub fn signatures(
        &self,
        r: &Resolved,
        progress: &dyn Progress,
    ) -> Result<Option<SignatureFile>, StoreError> {
        match (&r.source, self) {
            (Source::Dir(_), Registry::Dir(d)) => Ok(d.signatures(&r.name, &r.version)?),
            (
                Source::Oci {
                    client, fetched, ..
                },
                _,
            ) => Ok(client.get_signatures(&fetched.digest, progress)?),
            _ => Ok(None),
        }
    }

    /// Add signatures to a published version.
    pub fn add_signatures(
        &self,
        r: &Resolved,
        sigs: &SignatureFile,
        progress: &dyn Progress,
    ) -> Result<(), StoreError> {
        match (&r.source, self) {
            (Source::Dir(_), Registry::Dir(d)) => Ok(d.add_signatures(&r.name, &r.version, sigs)?),
            (
                Source::Oci {
                    client, fetched, ..
                },
                _,
            ) => {
                let mut all = client
                    .get_signatures(&fetched.digest, progress)?
                    .unwrap_or_default();
                for s in &sigs.signatures {
                    all.add(s.clone());
                }
                client.put_signatures(fetched, &all, progress)?;
                Ok(())
            }
            _ => Err(StoreError::Invalid("mismatched registry".into())),
        }
    }
}

/// A temporary file removed when dropped.
struct SpoolFile(PathBuf);

impl Drop for SpoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A layer streamed to a file under `spool` and checked there, then read back: nothing of
/// it is held in memory before its size and digest are known to be right.
fn spooled_blob(
    client: &OciClient,
    desc: &oci::Descriptor,
    spool: &Path,
    progress: &dyn Progress,
) -> Result<Vec<u8>, StoreError> {
    let io = |path: &Path, e: std::io::Error| {
        StoreError::Oci(OciError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    };
    std::fs::create_dir_all(spool).map_err(|e| io(spool, e))?;
    let hex = digest::oci_hex(&desc.digest).unwrap_or("blob");
    let file = SpoolFile(spool.join(format!(
        ".layer-{}-{}.tmp",
        std::process::id(),
        &hex[..hex.len().min(16)]
    )));
    client.get_blob_to(desc, &file.0, progress)?;
    std::fs::read(&file.0).map_err(|e| io(&file.0, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_registry_has_one_spelling() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        std::fs::create_dir_all(root.join("proj")).unwrap();
        let want = root.join("reg");
        // Not there yet (a first publish creates it), then there.
        for _ in 0..2 {
            assert_eq!(canonical_dir(&root.join("proj/../reg")), want);
            assert_eq!(canonical_dir(&root.join("./reg/.")), want);
            assert_eq!(canonical_dir(&root.join("nope/../reg")), want);
            assert_eq!(canonical_dir(&want), want);
            std::fs::create_dir_all(&want).unwrap();
        }
        let r = Registry::parse(
            &format!("file://{}", root.join("proj/../reg").display()),
            OciOptions::default(),
        )
        .unwrap();
        assert_eq!(r.describe(), format!("file://{}", want.display()));
    }
}
