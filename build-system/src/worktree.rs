//! `kbuild diff --base REV`: build the working tree, then `REV` in a temporary git worktree
//! with the same (shared) cache, so kernels the two share compile once.

use std::path::{Path, PathBuf};
use std::process::Command;

use kbuild_report::diff::{Snapshot, SnapshotError};

use crate::build::{build, BuildError, BuildOptions};
use crate::config::{self, ConfigError, Project};
use crate::events::Observer;

/// Why the two builds could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("--base needs the project in a git checkout ({dir}): {message}")]
    NotGit { dir: String, message: String },
    #[error("unknown git revision `{rev}` in {top} (a shallow clone may lack it: fetch more history, e.g. actions/checkout with `fetch-depth: 0`)")]
    UnknownRevision { rev: String, top: String },
    #[error("{file} is not inside {top}")]
    Outside { file: String, top: String },
    #[error("{rev} has no {file} (the project file)")]
    NoProjectFile { rev: String, file: String },
    #[error("git {args}: {message}")]
    Git { args: String, message: String },
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("{side}: {err}")]
    Config { side: String, err: ConfigError },
    #[error("building {side}: {err}")]
    Build { side: String, err: Box<BuildError> },
    #[error("building {side}: {failed} job(s) failed (see above)")]
    JobsFailed { side: String, failed: usize },
    #[error("{path}: {err}")]
    Snapshot { path: String, err: SnapshotError },
}

impl WorktreeError {
    /// Whether the user asked for something that is not there (exit 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, WorktreeError::UnknownRevision { .. })
    }
}

/// Both builds: the base revision's and the working tree's.
pub struct BaseAndHead {
    pub base: Snapshot,
    pub head: Snapshot,
    /// `REV (abcdef1234)`.
    pub base_label: String,
}

/// A `git worktree` in a temporary directory, removed (worktree and directory) on drop.
struct Worktree {
    repo: PathBuf,
    dir: PathBuf,
    tree: PathBuf,
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let _ = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["worktree", "remove", "--force"])
            .arg(&self.tree)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["worktree", "prune"])
            .output();
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<String, WorktreeError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .map_err(|err| WorktreeError::Io {
            what: "running git".into(),
            err,
        })?;
    if !out.status.success() {
        return Err(WorktreeError::Git {
            args: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Build `project` into `out` (or its own out-dir) and snapshot the manifest.
fn build_snapshot(
    project: &Project,
    opts: &BuildOptions,
    out: Option<PathBuf>,
    side: &str,
    observer: &dyn Observer,
) -> Result<Snapshot, WorktreeError> {
    let opts = BuildOptions {
        out_dir: out,
        ..opts.clone()
    };
    let report = build(project, &opts, observer).map_err(|err| WorktreeError::Build {
        side: side.into(),
        err: Box::new(err),
    })?;
    if !report.failures.is_empty() {
        return Err(WorktreeError::JobsFailed {
            side: side.into(),
            failed: report.failures.len(),
        });
    }
    let path = &report.manifest_path;
    let data = std::fs::read(path).map_err(|err| WorktreeError::Io {
        what: format!("reading {}", path.display()),
        err,
    })?;
    Snapshot::from_json(&data).map_err(|err| WorktreeError::Snapshot {
        path: path.display().to_string(),
        err,
    })
}

/// Build the working tree's project (`manifest_path`, else found from the current
/// directory), then the same project file at `rev`; `opts` (targets, jobs, env) serve both.
pub fn build_base_and_head(
    manifest_path: Option<&Path>,
    rev: &str,
    opts: &BuildOptions,
    observer: &dyn Observer,
) -> Result<BaseAndHead, WorktreeError> {
    let config_err = |side: &str| {
        let side = side.to_string();
        move |err| WorktreeError::Config { side, err }
    };
    let file = config::locate(manifest_path).map_err(config_err("the working tree"))?;
    let file = std::fs::canonicalize(&file).map_err(|err| WorktreeError::Io {
        what: file.display().to_string(),
        err,
    })?;
    let project_dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    let top = git(&project_dir, &["rev-parse", "--show-toplevel"]).map_err(|e| {
        WorktreeError::NotGit {
            dir: project_dir.display().to_string(),
            message: e.to_string(),
        }
    })?;
    let top = std::fs::canonicalize(&top).unwrap_or_else(|_| PathBuf::from(&top));
    let spec = format!("{rev}^{{commit}}");
    let commit = git(&top, &["rev-parse", "--verify", "--quiet", &spec]).map_err(|_| {
        WorktreeError::UnknownRevision {
            rev: rev.into(),
            top: top.display().to_string(),
        }
    })?;
    let rel = file
        .strip_prefix(&top)
        .map_err(|_| WorktreeError::Outside {
            file: file.display().to_string(),
            top: top.display().to_string(),
        })?
        .to_path_buf();

    let head_project = config::load(&file).map_err(config_err("the working tree"))?;
    let head = build_snapshot(&head_project, opts, None, "the working tree", observer)?;

    let dir = kbuild_base::fs::tempdir_in(&std::env::temp_dir(), "kbuild-base").map_err(|err| {
        WorktreeError::Io {
            what: "creating a temporary directory for the base worktree".into(),
            err,
        }
    })?;
    let wt = Worktree {
        repo: top.clone(),
        tree: dir.join("tree"),
        dir,
    };
    let tree = wt.tree.display().to_string();
    git(
        &top,
        &["worktree", "add", "--detach", "--quiet", &tree, &commit],
    )?;
    let base_file = wt.tree.join(&rel);
    if !base_file.is_file() {
        return Err(WorktreeError::NoProjectFile {
            rev: rev.into(),
            file: rel.display().to_string(),
        });
    }
    let base_project =
        config::load(&base_file).map_err(config_err(&format!("the project file of {rev}")))?;
    let base = build_snapshot(&base_project, opts, Some(wt.dir.join("out")), rev, observer)?;
    drop(wt);
    let short = commit.get(..10).unwrap_or(&commit);
    Ok(BaseAndHead {
        base,
        head,
        base_label: format!("{rev} ({short})"),
    })
}
