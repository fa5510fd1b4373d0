//! The committed resource baseline (`kbuild.resources/v1`, default `resources.json` next to
//! `Kbuild.toml`, i.e. `kernels/resources.json`): `kbuild build --check-baseline` fails when a
//! build's resources drift from it; `kbuild baseline update` rewrites it. This module compares
//! and rewrites; the caller renders.
//!
//! A check compares only the targets the build built (a `--targets` subset checks that subset).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbuild_bundle::archive::ArchiveLimits;
use kbuild_report::demangle::demangle_snapshots;
use kbuild_report::diff::{Diff, Snapshot, SnapshotError};

use crate::build::{build, BuildError, BuildOptions};
use crate::config::Project;
use crate::events::Observer;
use crate::sides::{load_side, SideError};
use kbuild_base::fs as fsutil;

/// Why a baseline could not be checked or written.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("no resource baseline at {0}; create it with `kbuild baseline update` and commit it")]
    Missing(String),
    #[error("reading {path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("writing {path}: {err}")]
    Write { path: String, err: std::io::Error },
    #[error("{path}: {err}")]
    Snapshot { path: String, err: SnapshotError },
    #[error(transparent)]
    Side(#[from] SideError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("{failed} job(s) failed; {path} was not updated")]
    JobsFailed { failed: usize, path: String },
}

/// The baseline's file name, next to `Kbuild.toml`.
pub const FILE_NAME: &str = "resources.json";

/// Where the project's baseline lives unless given.
pub fn default_path(project: &Project) -> PathBuf {
    project.root.join(FILE_NAME)
}

/// `path` relative to the current directory when under it (for messages).
fn shown(path: &Path) -> String {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            let abs = std::fs::canonicalize(path).ok()?;
            let cwd = std::fs::canonicalize(cwd).ok()?;
            abs.strip_prefix(cwd).ok().map(|p| p.display().to_string())
        })
        .unwrap_or_else(|| path.display().to_string())
}

fn snapshot_at(path: &Path, shown_as: String) -> Result<Snapshot, BaselineError> {
    let data = std::fs::read(path).map_err(|err| BaselineError::Io {
        path: path.display().to_string(),
        err,
    })?;
    Snapshot::from_json(&data).map_err(|err| BaselineError::Snapshot {
        path: shown_as,
        err,
    })
}

fn read_baseline(path: &Path) -> Result<Snapshot, BaselineError> {
    if !path.exists() {
        return Err(BaselineError::Missing(shown(path)));
    }
    snapshot_at(path, shown(path))
}

/// A build compared with the baseline.
#[derive(Debug)]
pub struct BaselineCheck {
    /// The baseline as the user sees its path.
    pub label: String,
    /// Baseline (restricted to the built targets) → this build.
    pub diff: Diff,
    /// Any changed resource or size, any added or removed kernel or target.
    pub drift: bool,
    /// Targets of the baseline this build did not build.
    pub skipped_targets: usize,
    pub objects: usize,
    pub targets: usize,
    /// Set when the toolchains differ: `(baseline's, this build's)`.
    pub toolchains: Option<(BTreeMap<String, String>, BTreeMap<String, String>)>,
}

/// Compare the build whose manifest is `manifest` with the baseline `path`.
pub fn check(manifest: &Path, path: &Path) -> Result<BaselineCheck, BaselineError> {
    let head = snapshot_at(manifest, manifest.display().to_string())?;
    let baseline = read_baseline(path)?;
    let base = baseline.restricted_to(&head.targets);
    let names = demangle_snapshots(&[&base, &head]);
    let label = shown(path);
    let diff = Diff::new(&base, &head, &label, "this build", &names);
    let toolchains = (baseline.toolchains != head.toolchains && !head.toolchains.is_empty())
        .then(|| (baseline.toolchains.clone(), head.toolchains.clone()));
    Ok(BaselineCheck {
        drift: diff.differs(),
        skipped_targets: baseline.targets.len() - base.targets.len(),
        objects: head.objects.len(),
        targets: head.targets.len(),
        label,
        diff,
        toolchains,
    })
}

/// What `kbuild baseline update` was asked.
#[derive(Debug, Clone, Default)]
pub struct UpdateRequest {
    /// Build options (targets, jobs, out dir); default targets: the project's.
    pub build: BuildOptions,
    /// The baseline file (default: [`default_path`]).
    pub path: Option<PathBuf>,
    /// Take the resources from this build output directory or manifest instead of building.
    pub from: Option<PathBuf>,
}

/// What an update did.
#[derive(Debug)]
pub struct UpdateOutcome {
    /// The baseline as the user sees its path.
    pub label: String,
    /// False when the file already held exactly this.
    pub wrote: bool,
    pub objects: usize,
    pub targets: usize,
    /// Targets kept from the previous baseline (a partial update).
    pub kept_targets: usize,
}

/// Rewrite the baseline from a build (atomically: temp file + rename). A partial build
/// (`--targets`, `--from`) replaces its targets and keeps the baseline's others (for kernels
/// the project still has).
pub fn update(
    project: &Project,
    req: &UpdateRequest,
    observer: &dyn Observer,
) -> Result<UpdateOutcome, BaselineError> {
    let path = req.path.clone().unwrap_or_else(|| default_path(project));
    let fresh = match &req.from {
        Some(from) => load_side(from, "--from", ArchiveLimits::from_env(&req.build.env))?,
        None => {
            let report = build(project, &req.build, observer)?;
            if !report.failures.is_empty() {
                return Err(BaselineError::JobsFailed {
                    failed: report.failures.len(),
                    path: shown(&path),
                });
            }
            snapshot_at(
                &report.manifest_path,
                report.manifest_path.display().to_string(),
            )?
        }
    };
    let mut next = fresh.clone();
    let mut kept = 0;
    // A partial build (--targets, --from) replaces its targets and keeps the others; a build
    // of the project's default list replaces everything (dropped targets go).
    let partial = req.build.targets.is_some() || req.from.is_some();
    if let (true, Ok(old)) = (partial, read_baseline(&path)) {
        let kernels: Vec<&str> = project.kernels.iter().map(|k| k.name.as_str()).collect();
        next.objects.extend(
            old.objects
                .iter()
                .filter(|o| {
                    !fresh.targets.contains(&o.target) && kernels.contains(&o.kernel.as_str())
                })
                .cloned(),
        );
        kept = old
            .targets
            .iter()
            .filter(|t| !fresh.targets.contains(t))
            .count();
        next.targets = old.targets.clone();
        next.targets.extend(
            fresh
                .targets
                .iter()
                .filter(|t| !old.targets.contains(t))
                .cloned(),
        );
    }
    let text = next.to_baseline_json();
    let wrote =
        fsutil::write_if_changed(&path, text.as_bytes()).map_err(|err| BaselineError::Write {
            path: path.display().to_string(),
            err,
        })?;
    Ok(UpdateOutcome {
        label: shown(&path),
        wrote,
        objects: next.objects.len(),
        targets: next.targets.len(),
        kept_targets: kept,
    })
}
