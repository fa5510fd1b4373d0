//! The committed resource baseline (`kbuild.resources/v1`, default `resources.json` next to
//! `Kbuild.toml`, i.e. `kernels/resources.json`): `kbuild build --check-baseline` fails when a
//! build's resources drift from it and prints the diff; `kbuild baseline update` rewrites it.
//!
//! A check compares only the targets the build built (a `--targets` subset checks that subset).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kbuild_manifest::diff::{self, Diff, Snapshot};

use crate::build::{build, BuildOptions};
use crate::config::Project;
use crate::diff_cmd::{color_for, demangle_names, load_side};
use crate::fsutil;

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

fn read_baseline(path: &Path) -> Result<Snapshot> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no resource baseline at {}; create it with `kbuild baseline update` and commit it",
            shown(path)
        ),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Snapshot::from_json(&data).with_context(|| shown(path))
}

/// Compare the build whose manifest is `manifest` with the baseline `path`. Drift (any
/// changed resource or size, any added or removed kernel or target) prints the diff on stderr
/// (with `json`: one `{"event": "baseline", ...}` line on stdout) and exits 1.
pub fn check(manifest: &Path, path: &Path, json: bool) -> Result<ExitCode> {
    let data =
        std::fs::read(manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let head = Snapshot::from_json(&data).with_context(|| manifest.display().to_string())?;
    let baseline = read_baseline(path)?;
    let base = baseline.restricted_to(&head.targets);
    let names = demangle_names(&[&base, &head]);
    let label = shown(path);
    let d = Diff::new(&base, &head, &label, "this build", &names);
    let drift = d.differs();
    let skipped = baseline.targets.len() - base.targets.len();
    if json {
        let report: serde_json::Value =
            serde_json::from_str(&diff::to_json(&d, None)).unwrap_or_default();
        println!(
            "{}",
            serde_json::json!({"event": "baseline", "path": label, "drift": drift, "diff": report})
        );
    }
    if !drift {
        if !json {
            let mut msg = format!(
                "baseline {label}: up to date ({} objects, {} targets)",
                head.objects.len(),
                head.targets.len()
            );
            if skipped > 0 {
                msg.push_str(&format!("; {skipped} more targets in it were not built"));
            }
            eprintln!("{msg}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !json {
        eprint!(
            "{}",
            diff::text(&d, None, color_for(std::io::stderr().is_terminal()))
        );
    }
    let toolchain_note = if baseline.toolchains != head.toolchains && !head.toolchains.is_empty() {
        format!(
            " (the baseline was made with other toolchains: {:?}, this build: {:?})",
            baseline.toolchains, head.toolchains
        )
    } else {
        String::new()
    };
    eprintln!(
        "error: kernel resources drifted from {label}{toolchain_note}; if the change is \
         intended, run `kbuild baseline update` and commit {label}"
    );
    Ok(ExitCode::from(1))
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

/// Rewrite the baseline from a build (atomically: temp file + rename). A partial build
/// (`--targets`, `--from`) replaces its targets and keeps the baseline's others (for kernels
/// the project still has).
pub fn update(project: &Project, req: &UpdateRequest) -> Result<ExitCode> {
    let path = req.path.clone().unwrap_or_else(|| default_path(project));
    let fresh = match &req.from {
        Some(from) => load_side(from, "--from")?,
        None => {
            let report = build(project, &req.build)?;
            if !report.failures.is_empty() {
                bail!(
                    "{} job(s) failed; {} was not updated",
                    report.failures.len(),
                    shown(&path)
                );
            }
            let data = std::fs::read(&report.manifest_path)
                .with_context(|| format!("reading {}", report.manifest_path.display()))?;
            Snapshot::from_json(&data)
                .with_context(|| report.manifest_path.display().to_string())?
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
    let wrote = fsutil::write_if_changed(&path, text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    let mut msg = format!(
        "{} {}: {} objects, {} targets",
        if wrote { "wrote" } else { "unchanged" },
        shown(&path),
        next.objects.len(),
        next.targets.len()
    );
    if kept > 0 {
        msg.push_str(&format!(
            " ({kept} targets kept from the previous baseline)"
        ));
    }
    eprintln!("{msg}");
    Ok(ExitCode::SUCCESS)
}
