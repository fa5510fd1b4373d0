//! Build provenance from git: commit and dirty flag of the project checkout.

use std::path::Path;
use std::process::Command;

/// `(commit, dirty)` of the checkout holding `dir`, or `None` outside git.
pub fn provenance(dir: &Path) -> Option<(String, bool)> {
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let commit = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let status = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(dir)
        .output()
        .ok()?;
    Some((commit, !status.stdout.is_empty()))
}
