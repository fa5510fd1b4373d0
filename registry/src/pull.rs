//! `pull`: resolve a version requirement, fetch the manifest and only the layers a device can
//! run (the caller decides which, from the compat table), verify, check signatures, cache,
//! and check or produce the lockfile entry.

use std::collections::BTreeMap;
use std::path::Path;

use kbuild_manifest::manifest::Manifest;

use crate::lock::{self, LockError, LockMode, LockedPackage};
use crate::progress::Progress;
use crate::store::{Registry, Resolved, StoreError};
use kbuild_bundle::bundle::Bundle;
use kbuild_bundle::cache::{BundleCache, CacheError};
use kbuild_bundle::sign::{SignError, Trust, TrustVerdict};

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Sign(#[from] SignError),
    /// A split release's index or part (see [`crate::release`]).
    #[error(transparent)]
    Asset(#[from] kbuild_bundle::assets::AssetError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("{registry} has no versions of {name}")]
    NoVersions { registry: String, name: String },
    #[error("no version of {name} in {registry} matches `{req}` (available: {available})")]
    NoMatchingVersion {
        name: String,
        registry: String,
        req: String,
        available: String,
    },
    #[error("{name} {version} has no objects for target {target}")]
    NoTarget {
        name: String,
        version: String,
        target: String,
    },
    /// The caller's target selection refused the manifest (nothing runs on the device).
    #[error(transparent)]
    Select(SelectError),
    #[error("--offline: no cached version of {name} from {registry} matches{want} (cached: {cached}); pull it once online")]
    NotCached {
        name: String,
        registry: String,
        want: String,
        cached: String,
    },
    #[error("--offline: {name} {version} is cached without target {target} (cached: {cached}); pull it online for this device")]
    TargetNotCached {
        name: String,
        version: String,
        target: String,
        cached: String,
    },
}

/// Why a caller's target selection refused a manifest.
pub type SelectError = Box<dyn std::error::Error + Send + Sync>;

/// What `NAME@...` asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Want {
    /// A semver requirement; a bare full version (`1.2.3`) means exactly that version.
    Req(semver::VersionReq),
    /// An artifact digest (`sha256:...`).
    Digest(String),
}

/// Why a `NAME[@REQ]` spec does not parse.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Name(#[from] crate::dir::InvalidName),
    #[error("`{0}` is not a sha256 digest (sha256:<64 hex>)")]
    Digest(String),
    #[error("`{req}` is not a version requirement: {source}")]
    Requirement { req: String, source: semver::Error },
}

/// Parse `NAME[@REQ]`.
pub fn parse_spec(spec: &str) -> Result<(String, Want), SpecError> {
    let (name, req) = match spec.split_once('@') {
        Some((n, r)) => (n, r.trim()),
        None => (spec, "*"),
    };
    crate::dir::check_name(name)?;
    if req.starts_with("sha256:") {
        if kbuild_base::digest::oci_hex(req).is_none() {
            return Err(SpecError::Digest(req.to_string()));
        }
        return Ok((name.into(), Want::Digest(req.into())));
    }
    let req = if semver::Version::parse(req).is_ok() {
        format!("={req}")
    } else {
        req.to_string()
    };
    let r = semver::VersionReq::parse(&req).map_err(|source| SpecError::Requirement {
        req: req.clone(),
        source,
    })?;
    Ok((name.into(), Want::Req(r)))
}

/// The newest published version of `name` that `req` matches.
pub fn newest_matching(
    registry: &Registry,
    name: &str,
    req: &semver::VersionReq,
    progress: &dyn Progress,
) -> Result<String, PullError> {
    let versions = registry.versions(name, progress)?;
    versions
        .iter()
        .filter_map(|v| semver::Version::parse(v).ok())
        .filter(|v| req.matches(v))
        .max()
        .map(|v| v.to_string())
        .ok_or_else(|| {
            if versions.is_empty() {
                PullError::NoVersions {
                    registry: registry.describe(),
                    name: name.into(),
                }
            } else {
                PullError::NoMatchingVersion {
                    name: name.into(),
                    registry: registry.describe(),
                    req: req.to_string(),
                    available: versions.join(", "),
                }
            }
        })
}

/// A report's side named `NAME@...` (a published version) rather than a file: the spec, when
/// `path` does not exist and reads as one.
pub fn published_spec(path: &Path) -> Option<&str> {
    let text = path.to_str()?;
    (text.contains('@') && !path.exists() && parse_spec(text).is_ok()).then_some(text)
}

/// The manifest of a published version, fetched alone (never its objects), and its label:
/// `NAME@VERSION`, followed by the spec asked for when that was not the exact version.
pub fn published_manifest(
    registry: &Registry,
    spec: &str,
) -> Result<(Manifest, String), PullError> {
    let (name, want) = parse_spec(spec)?;
    let resolved = resolve_published(registry, &name, &want, &crate::progress::Silent)?;
    let package = &resolved.manifest.package;
    let exact = format!("{}@{}", package.name, package.version);
    let label = match exact == spec {
        true => exact,
        false => format!("{exact} ({spec})"),
    };
    Ok((resolved.manifest, label))
}

/// `NAME@REQ` (or `NAME@sha256:...`) resolved to one published version: its manifest, and no
/// objects (an OCI registry serves the manifest's blob and nothing else; no cache, no lock).
/// What `kbuild diff NAME@VERSION` reads.
pub fn resolve_published(
    registry: &Registry,
    name: &str,
    want: &Want,
    progress: &dyn Progress,
) -> Result<Resolved, PullError> {
    let reference = match want {
        Want::Digest(d) => d.clone(),
        Want::Req(r) => newest_matching(registry, name, r, progress)?,
    };
    Ok(registry.resolve(name, &reference, progress)?)
}

/// The lockfile a pull honours, and how strictly ([`LockMode`]).
pub struct Locked<'a> {
    /// The lock's entry for the package, if it has one.
    pub entry: Option<&'a LockedPackage>,
    pub path: &'a Path,
    pub mode: LockMode,
}

/// Whether `want` names one version exactly (`=1.2.3`, or a digest): then an older version
/// than the locked one is what the user asked for, not a rollback.
pub fn is_explicit(want: &Want) -> bool {
    match want {
        Want::Digest(_) => true,
        Want::Req(r) => match r.comparators.as_slice() {
            [c] => c.op == semver::Op::Exact && c.minor.is_some() && c.patch.is_some(),
            _ => false,
        },
    }
}

impl Locked<'_> {
    /// The lock's rules for a pull that resolved `got` (from a registry or a split release's
    /// index): `--locked` wants the entry and every digest as locked ([`lock::check`]); a
    /// plain pull keeps a locked version's digests and refuses a rollback
    /// ([`lock::check_keep`]; `req` is the requirement asked for, `explicit` whether it named
    /// one version); `--update` accepts what was resolved.
    pub fn check(
        &self,
        name: &str,
        got: &LockedPackage,
        req: Option<&semver::VersionReq>,
        explicit: bool,
    ) -> Result<(), LockError> {
        match (self.mode, self.entry) {
            (LockMode::Exact, None) => Err(LockError::Drift {
                path: self.path.display().to_string(),
                name: name.into(),
                what: "not in the lockfile".into(),
            }),
            (LockMode::Exact, Some(e)) => lock::check(e, got, self.path),
            (LockMode::Keep, Some(e)) => lock::check_keep(e, got, self.path, req, explicit),
            _ => Ok(()),
        }
    }
}

/// After a pull that resolved `got`: the lockfile at `path` (`current`, as read before the
/// pull) with `got`'s entry added or replaced, written, unless the pull was `--locked`
/// (`exact`), which only reads it.
pub fn record_lock(
    path: &Path,
    current: Option<crate::lock::Lockfile>,
    got: &LockedPackage,
    exact: bool,
) -> Result<(), LockError> {
    if exact {
        return Ok(());
    }
    let mut l = current.clone().unwrap_or_default();
    l.upsert(got.clone());
    // Unchanged (the same entry again): the file is left as it is.
    if current.as_ref() == Some(&l) {
        return Ok(());
    }
    l.write(path)
}

/// [`Locked::check`] of what `req` resolved.
fn check_lock(req: &PullRequest, got: &LockedPackage) -> Result<(), LockError> {
    let Some(l) = &req.locked else {
        return Ok(());
    };
    let r = match req.want {
        Want::Req(r) => Some(r),
        Want::Digest(_) => None,
    };
    l.check(req.name, got, r, is_explicit(req.want))
}

pub struct PullRequest<'a> {
    pub registry: &'a Registry,
    pub cache: &'a BundleCache,
    pub name: &'a str,
    pub want: &'a Want,
    pub offline: bool,
    pub locked: Option<Locked<'a>>,
    pub trust: &'a Trust,
    pub progress: &'a dyn Progress,
}

#[derive(Debug)]
pub struct Pulled {
    pub bundle: Bundle,
    pub artifact: String,
    pub verdict: TrustVerdict,
    /// Bytes of layers transferred (0 when served from the cache).
    pub layer_bytes: u64,
    pub from_cache: bool,
    /// The signatures the registry (or the cache) had for it.
    pub signatures: Option<kbuild_bundle::sign::SignatureFile>,
    /// The lockfile entry for what was pulled.
    pub lock: LockedPackage,
}

/// Pull. `select` picks the targets to fetch from the manifest (all of them, or those the
/// device runs); an `Err` from it is the user-facing reason nothing fits.
pub fn pull(
    req: &PullRequest,
    select: &dyn Fn(&Manifest) -> Result<Vec<String>, SelectError>,
) -> Result<Pulled, PullError> {
    let registry = req.registry.describe();
    let exact = req.locked.as_ref().filter(|l| l.mode == LockMode::Exact);
    if let Some(l) = exact {
        if l.entry.is_none() {
            return Err(LockError::Drift {
                path: l.path.display().to_string(),
                name: req.name.into(),
                what: "not in the lockfile".into(),
            }
            .into());
        }
    }
    let locked_entry = exact.and_then(|l| l.entry);
    if let (Some(e), Want::Req(r)) = (locked_entry, req.want) {
        let ok = semver::Version::parse(&e.version).is_ok_and(|v| r.matches(&v));
        if !ok {
            return Err(drift(
                req,
                format!("locked version {} does not satisfy `{r}`", e.version),
            ));
        }
    }
    if req.offline {
        return pull_offline(req, &registry, select, locked_entry);
    }
    let reference = match (locked_entry, req.want) {
        (Some(e), Want::Req(_)) => e.version.clone(),
        (_, Want::Digest(d)) => d.clone(),
        (None, Want::Req(r)) => newest_matching(req.registry, req.name, r, req.progress)?,
    };
    let resolved =
        req.registry
            .resolve_trusted(req.name, &reference, req.progress, Some(req.trust))?;
    let available = resolved.targets();
    let targets = select(&resolved.manifest).map_err(PullError::Select)?;
    if let Some(t) = targets.iter().find(|t| !available.contains(t)) {
        return Err(PullError::NoTarget {
            name: req.name.into(),
            version: resolved.version.clone(),
            target: t.clone(),
        });
    }
    let entry = LockedPackage {
        name: req.name.into(),
        version: resolved.version.clone(),
        registry: registry.clone(),
        artifact: resolved.artifact.clone(),
        manifest: resolved.manifest_digest.clone(),
        layers: resolved.layer_digests(&targets)?,
    };
    check_lock(req, &entry)?;
    // Signatures before any object is fetched or cached: a refused bundle leaves nothing.
    let sigs = if req.trust.policy == kbuild_bundle::sign::Policy::Off {
        None
    } else {
        req.registry.signatures(&resolved, req.progress)?
    };
    let verdict = req.trust.check(
        req.name,
        &resolved.version,
        &resolved.manifest_digest,
        sigs.as_ref(),
    )?;
    // Served from the cache when it already holds these targets of this artifact, with the
    // very manifest resolved and checked above (never the one a ref file names).
    if let Some(c) = req.cache.get_ref(&registry, req.name, &resolved.version) {
        let have_all = c.artifact == resolved.artifact
            && c.manifest == resolved.manifest_digest
            && targets
                .iter()
                .all(|t| c.layers.get(t) == entry.layers.get(t));
        if have_all {
            // `open` reads the manifest blob by the ref's digest, checked equal above.
            if let Ok(b) = req.cache.open(&c) {
                let bundle = b.restrict(&targets).map_err(StoreError::from)?;
                if sigs.is_some() {
                    // Newly signed since it was cached: remember the signatures.
                    req.cache.store(
                        &registry,
                        &resolved.artifact,
                        &bundle,
                        &entry.layers,
                        sigs.as_ref(),
                    )?;
                }
                return Ok(Pulled {
                    bundle,
                    artifact: resolved.artifact,
                    verdict,
                    layer_bytes: 0,
                    from_cache: true,
                    signatures: sigs,
                    lock: entry,
                });
            }
        }
    }
    let (bundle, layer_bytes) =
        req.registry
            .fetch(&resolved, &targets, req.cache.root(), req.progress)?;
    req.cache.store(
        &registry,
        &resolved.artifact,
        &bundle,
        &entry.layers,
        sigs.as_ref(),
    )?;
    Ok(Pulled {
        bundle,
        artifact: resolved.artifact,
        verdict,
        layer_bytes,
        from_cache: false,
        signatures: sigs,
        lock: entry,
    })
}

fn drift(req: &PullRequest, what: String) -> PullError {
    PullError::Lock(LockError::Drift {
        path: req
            .locked
            .as_ref()
            .map(|l| l.path.display().to_string())
            .unwrap_or_default(),
        name: req.name.into(),
        what,
    })
}

fn pull_offline(
    req: &PullRequest,
    registry: &str,
    select: &dyn Fn(&Manifest) -> Result<Vec<String>, SelectError>,
    locked: Option<&LockedPackage>,
) -> Result<Pulled, PullError> {
    let refs = req.cache.refs(Some(registry), Some(req.name));
    let pick = refs
        .iter()
        .filter(|r| match req.want {
            Want::Digest(d) => &r.artifact == d,
            Want::Req(q) => semver::Version::parse(&r.version).is_ok_and(|v| q.matches(&v)),
        })
        .filter(|r| locked.is_none_or(|l| l.version == r.version))
        .max_by_key(|r| semver::Version::parse(&r.version).ok())
        .ok_or_else(|| PullError::NotCached {
            name: req.name.into(),
            registry: registry.to_string(),
            want: match req.want {
                Want::Req(q) => format!(" `{q}`"),
                Want::Digest(d) => format!(" {d}"),
            },
            cached: if refs.is_empty() {
                "none".to_string()
            } else {
                refs.iter()
                    .map(|r| r.version.clone())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })?;
    let full = req.cache.open(pick)?;
    let targets = select(full.manifest()).map_err(PullError::Select)?;
    if let Some(t) = targets.iter().find(|t| !pick.layers.contains_key(*t)) {
        return Err(PullError::TargetNotCached {
            name: req.name.into(),
            version: pick.version.clone(),
            target: t.clone(),
            cached: pick.layers.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    }
    let layers: BTreeMap<String, String> = targets
        .iter()
        .filter_map(|t| pick.layers.get(t).map(|d| (t.clone(), d.clone())))
        .collect();
    let entry = LockedPackage {
        name: req.name.into(),
        version: pick.version.clone(),
        registry: registry.into(),
        artifact: pick.artifact.clone(),
        manifest: pick.manifest.clone(),
        layers,
    };
    check_lock(req, &entry)?;
    let sigs = req.cache.signatures(pick)?;
    let verdict = req
        .trust
        .check(req.name, &pick.version, &pick.manifest, sigs.as_ref())?;
    let bundle = full.restrict(&targets).map_err(StoreError::from)?;
    Ok(Pulled {
        bundle,
        artifact: pick.artifact.clone(),
        verdict,
        layer_bytes: 0,
        from_cache: true,
        signatures: sigs,
        lock: entry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(
            parse_spec("k@1.2.3").unwrap().1,
            Want::Req(semver::VersionReq::parse("=1.2.3").unwrap())
        );
        assert_eq!(
            parse_spec("k").unwrap().1,
            Want::Req(semver::VersionReq::STAR)
        );
        assert!(matches!(parse_spec("k@^0.1").unwrap().1, Want::Req(_)));
        assert!(is_explicit(&parse_spec("k@0.1.0").unwrap().1));
        assert!(is_explicit(&parse_spec("k@=0.1.0").unwrap().1));
        assert!(!is_explicit(&parse_spec("k@0.1").unwrap().1));
        assert!(!is_explicit(&parse_spec("k@=0.1").unwrap().1));
        assert!(!is_explicit(&parse_spec("k@^0.1.0").unwrap().1));
        assert!(!is_explicit(&parse_spec("k").unwrap().1));
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(parse_spec(&format!("k@{d}")).unwrap().1, Want::Digest(d));
        assert!(matches!(parse_spec("k@sha256:zz"), Err(SpecError::Digest(d)) if d == "sha256:zz"));
        assert!(matches!(parse_spec("../k"), Err(SpecError::Name(_))));
        let e = parse_spec("k@not a req").unwrap_err();
        assert!(matches!(&e, SpecError::Requirement { req, .. } if req == "not a req"));
        assert!(
            e.to_string()
                .starts_with("`not a req` is not a version requirement: "),
            "{e}"
        );
    }

    #[test]
    fn locked_rules_for_every_mode() {
        let entry = |version: &str, artifact: &str| LockedPackage {
            name: "k".into(),
            version: version.into(),
            registry: "file:///r".into(),
            artifact: artifact.into(),
            manifest: "sha256:m".into(),
            layers: BTreeMap::new(),
        };
        let path = Path::new("Kbuild.lock");
        let locked = entry("1.0.0", "sha256:a");
        let lock = |mode, entry| Locked { entry, path, mode };
        // --locked: the entry must be there and the same.
        let missing = lock(LockMode::Exact, None).check("k", &locked, None, false);
        assert!(matches!(missing, Err(LockError::Drift { .. })));
        let same = lock(LockMode::Exact, Some(&locked)).check("k", &locked, None, false);
        assert!(same.is_ok());
        let other = entry("1.0.0", "sha256:b");
        let drift = lock(LockMode::Exact, Some(&locked)).check("k", &other, None, false);
        assert!(matches!(drift, Err(LockError::Drift { .. })));
        // A plain pull: the locked version's digests stay; a new entry is fine.
        let changed = lock(LockMode::Keep, Some(&locked)).check("k", &other, None, true);
        assert!(matches!(changed, Err(LockError::Changed { .. })));
        assert!(lock(LockMode::Keep, None)
            .check("k", &other, None, true)
            .is_ok());
        // --update takes what was resolved.
        let update = lock(LockMode::Update, Some(&locked)).check("k", &other, None, true);
        assert!(update.is_ok());
    }

    #[test]
    fn record_lock_writes_unless_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("Kbuild.lock");
        let got = LockedPackage {
            name: "k".into(),
            version: "1.0.0".into(),
            registry: "file:///r".into(),
            artifact: "sha256:a".into(),
            manifest: "sha256:m".into(),
            layers: BTreeMap::new(),
        };
        record_lock(&path, None, &got, true).unwrap();
        assert!(!path.exists());
        record_lock(&path, None, &got, false).unwrap();
        let read = crate::lock::Lockfile::read(&path).unwrap().unwrap();
        assert_eq!(read.find("k"), Some(&got));
    }
}
