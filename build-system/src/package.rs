//! `kbuild package` as one call ([`package`]): the build it makes when no build dir is named
//! (refused with failed jobs unless partial bundles are allowed), the bundle written whole,
//! split for release-asset limits or per target, and the reproducibility check (a clean
//! rebuild of the bundle's targets in a scratch cache and out-dir, packaged again, compared
//! byte for byte, and the objects that differ named).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbuild_base::digest::oci_digest;
#[cfg(feature = "package")]
use kbuild_bundle::output::{self, OutputError, SplitReport, Written};
use kbuild_bundle::{Bundle, BundleError};
use kbuild_manifest::manifest::{Manifest, ObjectRecord};
use kbuild_manifest::target::{Target, TargetError};

use crate::build::{build, BuildError, BuildOptions};
use crate::config::Project;
#[cfg(feature = "package")]
use crate::config::{self, ConfigError};
use crate::events::Observer;

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("{0} job(s) failed; nothing was packaged (run `kbuild build` to see them)")]
    Failed(usize),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[cfg(feature = "package")]
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[cfg(feature = "package")]
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("creating a scratch directory: {0}")]
    Scratch(std::io::Error),
    /// `--build-dir` names the project's own out-dir, built before `[package]` was edited.
    #[error("{build_dir} was built as `{built}`, but {file} now says `{now}`: rebuild it (`kbuild build`, or `kbuild package` without --build-dir, which builds first) before packaging")]
    StaleBuildDir {
        build_dir: String,
        built: String,
        file: String,
        now: String,
    },
}

#[cfg(feature = "package")]
/// What `kbuild package` is asked to do.
pub struct PackageRequest<'a> {
    /// Kbuild.toml (`None`: found from the current directory); read only when needed.
    pub manifest_path: Option<&'a Path>,
    /// A build output directory to package (`None`: build the project first).
    pub build_dir: Option<&'a Path>,
    pub build: BuildOptions,
    /// Where bundles go.
    pub out: &'a Path,
    /// Also one bundle per target.
    pub per_target: bool,
    /// Split for release assets of at most this many bytes, instead of the whole bundle.
    pub max_asset_size: Option<u64>,
    pub verify_reproducible: bool,
    pub allow_partial: bool,
    /// The archive's mtime (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// Where the reproducibility check makes its scratch build.
    pub scratch: &'a Path,
}

#[cfg(feature = "package")]
/// What [`package`] wrote.
pub struct Packaged {
    pub bundle: Bundle,
    /// The whole bundle (none when split for release assets).
    pub whole: Option<Written>,
    pub split: Option<SplitReport>,
    /// One bundle per target (`per_target`).
    pub per_target: Vec<Written>,
    /// The reproducibility check's outcome, when asked for.
    pub reproduced: Option<Reproduced>,
}

#[cfg(feature = "package")]
impl Packaged {
    /// Every file written, in order.
    pub fn written(&self) -> Vec<&Written> {
        let mut all = match &self.split {
            Some(s) => s.written(),
            None => self.whole.iter().collect(),
        };
        all.extend(self.per_target.iter());
        all
    }

    /// What the user should know about the files written (pruned targets, split parts).
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self
            .split
            .as_ref()
            .map(SplitReport::notes)
            .unwrap_or_default();
        let written = self.whole.iter().chain(self.per_target.iter());
        notes.extend(written.filter_map(Written::note));
        notes
    }
}

#[cfg(feature = "package")]
/// Package a build: `req.build_dir`, else a build of the project made now (through the
/// cache); then the reproducibility check when asked for.
pub fn package(req: PackageRequest, observer: &dyn Observer) -> Result<Packaged, PackageError> {
    let filter = packaged_targets(&req.build);
    let build_dir = match req.build_dir {
        Some(d) => d.to_path_buf(),
        None => {
            let project = config::open(req.manifest_path)?;
            build_for_package(&project, &req.build, req.allow_partial, observer)?
        }
    };
    let bundle = Bundle::from_build_dir(&build_dir, filter.as_deref(), req.allow_partial)?;
    // A named build dir that is the project's own out-dir must match the current [package].
    if req.build_dir.is_some() {
        if let Ok(project) = config::open(req.manifest_path) {
            check_build_dir_package(&project, &build_dir, bundle.manifest())?;
        }
    }
    let bytes = bundle.to_bytes(req.mtime)?;
    let (whole, split) = match req.max_asset_size {
        Some(limit) => {
            let split = output::write_release(req.out, &bundle, &bytes, limit, req.mtime)?;
            (None, Some(split))
        }
        None => (Some(output::write_bundle(req.out, &bundle, &bytes)?), None),
    };
    let per_target = match req.per_target {
        true => output::write_per_target(req.out, &bundle, req.mtime)?,
        false => Vec::new(),
    };
    let reproduced = match req.verify_reproducible {
        true => {
            let project = config::open(req.manifest_path)?;
            let again = Reproduce {
                targets: manifest_targets(bundle.manifest())?,
                filter: filter.as_deref(),
                allow_partial: req.allow_partial,
                mtime: req.mtime,
                build: req.build.clone(),
            };
            Some(verify_reproducible(
                &project,
                &bundle,
                &bytes,
                again,
                req.scratch,
                observer,
            )?)
        }
        false => None,
    };
    Ok(Packaged {
        bundle,
        whole,
        split,
        per_target,
        reproduced,
    })
}

/// Build `project` with `opts` for packaging; its out-dir. Failed jobs refuse it unless
/// `allow_partial` (the bundle's manifest then marks them).
pub fn build_for_package(
    project: &Project,
    opts: &BuildOptions,
    allow_partial: bool,
    observer: &dyn Observer,
) -> Result<PathBuf, PackageError> {
    let report = build(project, opts, observer)?;
    if !report.failures.is_empty() && !allow_partial {
        return Err(PackageError::Failed(report.failures.len()));
    }
    Ok(report.out_dir)
}

/// A named build dir that is `project`'s own out-dir must hold a build of the project's
/// current `[package]` name and version: a bundle named after an older `[package]` would be
/// published under the wrong name. Refused, not warned. A build dir elsewhere is another
/// build's, packaged as its manifest names it.
pub fn check_build_dir_package(
    project: &Project,
    build_dir: &Path,
    manifest: &Manifest,
) -> Result<(), PackageError> {
    let same_dir = match (
        std::fs::canonicalize(build_dir),
        std::fs::canonicalize(&project.out_dir),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    let (built, now) = (
        format!("{} {}", manifest.package.name, manifest.package.version),
        format!("{} {}", project.name, project.version),
    );
    if same_dir && built != now {
        return Err(PackageError::StaleBuildDir {
            build_dir: build_dir.display().to_string(),
            built,
            file: project.file.display().to_string(),
            now,
        });
    }
    Ok(())
}

/// The targets to package from a build made with `opts`: those it names, or every target the
/// build holds (`None`) when it named none or `all` (the targets its toolchains could build).
pub fn packaged_targets(opts: &BuildOptions) -> Option<Vec<String>> {
    let named = opts.targets.as_ref().filter(|_| !opts.targets_all)?;
    Some(named.iter().map(Target::to_string).collect())
}

/// The targets a bundle's manifest lists, each parsed on its own.
pub fn manifest_targets(manifest: &Manifest) -> Result<Vec<Target>, TargetError> {
    manifest.targets.iter().map(|t| t.parse()).collect()
}

/// What to rebuild and how to package it, for [`verify_reproducible`].
pub struct Reproduce<'a> {
    /// The targets to rebuild (those of the first bundle: [`manifest_targets`]).
    pub targets: Vec<Target>,
    /// The targets packaged (`None`: every target the build holds).
    pub filter: Option<&'a [String]>,
    pub allow_partial: bool,
    /// The archive's mtime (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// The options of the first build; targets, out-dir and cache are replaced.
    pub build: BuildOptions,
}

/// The outcome of [`verify_reproducible`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reproduced {
    /// The clean rebuild packaged to the same bytes.
    Same,
    /// It did not: both digests, and one line per object that differs (or why the objects
    /// are equal yet the bytes are not).
    Differs {
        first: String,
        second: String,
        objects: Vec<String>,
    },
}

/// Rebuild from scratch (a fresh cache and out-dir under `scratch_parent`, removed after),
/// package again and compare with `first` (whose archive is `bytes`).
pub fn verify_reproducible(
    project: &Project,
    first: &Bundle,
    bytes: &[u8],
    req: Reproduce,
    scratch_parent: &Path,
    observer: &dyn Observer,
) -> Result<Reproduced, PackageError> {
    let scratch = kbuild_base::fs::tempdir_in(scratch_parent, "kbuild-reproduce")
        .map_err(PackageError::Scratch)?;
    let opts = BuildOptions {
        targets: Some(req.targets),
        targets_all: false,
        out_dir: Some(scratch.join("out")),
        cache_dir: Some(scratch.join("cache")),
        ..req.build
    };
    let second = build_for_package(project, &opts, req.allow_partial, observer)
        .and_then(|d| Ok(Bundle::from_build_dir(&d, req.filter, req.allow_partial)?));
    let _ = std::fs::remove_dir_all(&scratch);
    let second = second?;
    let second_bytes = second.to_bytes(req.mtime)?;
    if second_bytes == bytes {
        return Ok(Reproduced::Same);
    }
    Ok(Reproduced::Differs {
        first: oci_digest(bytes),
        second: oci_digest(&second_bytes),
        objects: differing_objects(first.manifest(), second.manifest()),
    })
}

/// One line per object of `a` whose bytes differ in `b` (or that `b` lacks).
fn differing_objects(a: &Manifest, b: &Manifest) -> Vec<String> {
    let key = |o: &ObjectRecord| (o.target.clone(), o.kernel.clone(), o.variant.clone());
    let bm: BTreeMap<_, _> = b.objects.iter().map(|o| (key(o), &o.sha256)).collect();
    let mut out: Vec<String> = a
        .objects
        .iter()
        .filter(|o| bm.get(&key(o)) != Some(&&o.sha256))
        .map(|o| {
            format!(
                "{} for {}: {} then {}",
                o.kernel,
                o.target,
                o.sha256,
                bm.get(&key(o)).map(|s| s.as_str()).unwrap_or("missing")
            )
        })
        .collect();
    if out.is_empty() {
        out.push("objects are equal; the manifest differs (provenance?)".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_objects_names_each_or_says_why_none() {
        use kbuild_manifest::fixtures::{manifest, object};
        let a = manifest(
            "p",
            "1.0.0",
            vec![
                object("k", "sm_90", "cubin", b"one"),
                object("k", "gfx1100", "hsaco", b"two"),
            ],
        );
        assert_eq!(
            differing_objects(&a, &a),
            vec!["objects are equal; the manifest differs (provenance?)".to_string()]
        );
        let mut b = a.clone();
        if let Some(o) = b.objects.first_mut() {
            o.sha256 = "other".into();
        }
        let lines = differing_objects(&a, &b);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].ends_with(" then other"), "{lines:?}");
        let targets = manifest_targets(&a).unwrap();
        assert_eq!(targets.len(), a.targets.len());
    }
}
