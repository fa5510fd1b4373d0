//! The Triton toolchain: the pinned `triton` wheel (it carries its own ptxas and the AMD code
//! generator), installed by `kbuild toolchain install triton` with pip into a kbuild-managed
//! directory per CPython version, and found there. No GPU, driver or torch is involved.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kbuild_base::env::Env;
use kbuild_base::fs as fsutil;

use super::install::{pip_args, InstallAction, Installed};
use super::tools::{run_tool, ToolOutput};
use super::{managed_dir, which, ToolchainError};

pub use crate::config::{TRITON_PTXAS, TRITON_PTXAS_BLACKWELL, TRITON_VERSION};

/// The sha256 of each CPython's manylinux x86_64 wheel of [`TRITON_VERSION`] on PyPI.
pub const TRITON_WHEELS: &[(&str, &str)] = &[
    (
        "cp310",
        "a6550fae429e0667e397e5de64b332d1e5695b73650ee75a6146e2e902770bea",
    ),
    (
        "cp311",
        "e8e323d608e3a9bfcc2d9efcc90ceefb764a82b99dea12a86d643c72539ad5d3",
    ),
    (
        "cp312",
        "74caf5e34b66d9f3a429af689c1c7128daba1d8208df60e81106b115c00d6fca",
    ),
    (
        "cp313",
        "10c7f76c6e72d2ef08df639e3d0d30729112f47a56b0c81672edc05ee5116ac9",
    ),
];

/// The compile worker kbuild runs in the Triton environment (the protocol is in its
/// docstring). Its bytes are part of the toolchain's identity.
pub const WORKER_PY: &str = include_str!("../../triton/worker.py");

/// The file in a managed install that records the wheel pip installed (written last).
const WHEEL_STAMP: &str = ".kbuild-wheel";

/// A found Triton install.
#[derive(Debug, Clone)]
pub struct TritonToolchain {
    /// The interpreter that runs the workers.
    pub python: PathBuf,
    /// The directory holding the `triton` package.
    pub site: PathBuf,
    pub version: String,
    /// The sha256 of the wheel installed.
    pub wheel_sha256: String,
    /// blake3 over the version, the wheel, the interpreter's tag and the worker: in every
    /// Triton cache key.
    pub identity: String,
}

/// `cp311` for the `python3` on PATH.
fn python_tag(python: &Path) -> Result<String, ToolchainError> {
    let out = Command::new(python)
        .args([
            "-I",
            "-c",
            "import sys; print('cp%d%d' % sys.version_info[:2])",
        ])
        .output()
        .map_err(|err| ToolchainError::Run {
            cmd: format!("{} -I -c ...", python.display()),
            err,
        })?;
    let tag = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !tag.starts_with("cp") || tag.len() > 8 {
        return Err(ToolchainError::Install(format!(
            "{} did not report its version",
            python.display()
        )));
    }
    Ok(tag)
}

fn pinned_wheel(tag: &str) -> Result<&'static str, ToolchainError> {
    TRITON_WHEELS
        .iter()
        .find(|(t, _)| *t == tag)
        .map(|(_, sha)| *sha)
        .ok_or_else(|| {
            let known: Vec<&str> = TRITON_WHEELS.iter().map(|(t, _)| *t).collect();
            ToolchainError::Install(format!(
                "python3 is {tag}; kbuild pins Triton {TRITON_VERSION} wheels for {} only",
                known.join(", ")
            ))
        })
}

fn managed_triton_dir(env: &Env, tag: &str) -> Result<PathBuf, ToolchainError> {
    Ok(managed_dir(env)?.join(format!("triton-{TRITON_VERSION}-{tag}")))
}

fn python3(env: &Env) -> Result<PathBuf, ToolchainError> {
    which("python3", env).ok_or_else(|| {
        ToolchainError::Install(
            "python3 is not on PATH (absolute PATH entries only); Triton runs in it".into(),
        )
    })
}

/// The managed install for the `python3` on PATH, when it is there and whole.
pub fn discover_triton(env: &Env) -> Option<TritonToolchain> {
    let python = python3(env).ok()?;
    let tag = python_tag(&python).ok()?;
    let sha = pinned_wheel(&tag).ok()?;
    let site = managed_triton_dir(env, &tag).ok()?;
    let stamp =
        kbuild_base::read::read_capped(&site.join(WHEEL_STAMP), 4096, "wheel stamp").ok()?;
    if String::from_utf8_lossy(&stamp).trim() != sha {
        return None;
    }
    let mut h = blake3::Hasher::new();
    for part in ["triton", TRITON_VERSION, sha, &tag, WORKER_PY] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    Some(TritonToolchain {
        python,
        site,
        version: TRITON_VERSION.to_string(),
        wheel_sha256: sha.to_string(),
        identity: h.finalize().to_hex().to_string(),
    })
}

/// `kbuild toolchain install triton`: the pinned wheel for the `python3` on PATH, through
/// the same isolated, hash-checked pip run as CUDA's, into a temp dir renamed into place.
/// Idempotent.
pub fn install_triton(env: &Env, output: ToolOutput) -> Result<Installed, ToolchainError> {
    let start = Instant::now();
    let python = python3(env)?;
    let tag = python_tag(&python)?;
    let sha = pinned_wheel(&tag)?;
    let dest = managed_triton_dir(env, &tag)?;
    let done = |action| Installed {
        what: "Triton",
        version: format!("{TRITON_VERSION} ({tag})"),
        action,
        path: dest.clone(),
        detail: None,
        seconds: start.elapsed().as_secs_f64(),
    };
    if discover_triton(env).is_some_and(|t| t.site == dest) {
        return Ok(done(InstallAction::AlreadyInstalled));
    }
    let parent = managed_dir(env)?;
    std::fs::create_dir_all(&parent)
        .map_err(|e| ToolchainError::Install(format!("creating {}: {e}", parent.display())))?;
    let tmp = fsutil::tempdir_in(&parent, "triton")
        .map_err(|e| ToolchainError::Install(format!("creating {}: {e}", parent.display())))?;
    let result = (|| {
        let requirements = tmp.join("requirements.txt");
        let line = format!("triton=={TRITON_VERSION} --hash=sha256:{sha}\n");
        std::fs::write(&requirements, line).map_err(|e| {
            ToolchainError::Install(format!("writing {}: {e}", requirements.display()))
        })?;
        let site = tmp.join("site");
        let (status, printed) = run_tool(
            Command::new(&python)
                .args(pip_args(&site, &requirements))
                .current_dir(&tmp)
                .env("PIP_ROOT_USER_ACTION", "ignore"),
            &format!("{} -I -m pip", python.display()),
            output,
        )?;
        if !status.success() {
            return Err(ToolchainError::Tool {
                message: format!(
                    "pip install of triton=={TRITON_VERSION} failed ({status}); is PyPI reachable, and does the wheel match the pinned sha256?"
                ),
                output: printed,
            });
        }
        if !site.join("triton/__init__.py").is_file() {
            return Err(ToolchainError::Install(format!(
                "pip reported success, but {} holds no triton package; nothing was installed",
                site.display()
            )));
        }
        fsutil::write_atomic(&site.join(WHEEL_STAMP), sha.as_bytes())
            .map_err(|e| ToolchainError::Install(format!("writing the wheel stamp: {e}")))?;
        Ok(site)
    })();
    let site = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let replacing = dest.exists();
    if replacing {
        let aside = fsutil::temp_path(&parent, "triton-old");
        if let Err(e) = std::fs::rename(&dest, &aside) {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(ToolchainError::Install(format!(
                "moving the old install {} aside: {e}",
                dest.display()
            )));
        }
        let _ = std::fs::remove_dir_all(aside);
    }
    let moved = std::fs::rename(&site, &dest);
    let _ = std::fs::remove_dir_all(&tmp);
    moved.map_err(|e| ToolchainError::Install(format!("moving into {}: {e}", dest.display())))?;
    Ok(done(match replacing {
        true => InstallAction::Reinstalled {
            why: "its wheel stamp did not match the pinned wheel".into(),
        },
        false => InstallAction::Installed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pinned_wheel_is_a_sha256() {
        for (tag, sha) in TRITON_WHEELS {
            assert!(tag.starts_with("cp3"), "{tag}");
            assert_eq!(sha.len(), 64, "{tag}");
            assert!(sha.bytes().all(|b| b.is_ascii_hexdigit()), "{tag}");
        }
        assert!(pinned_wheel("cp39").is_err());
    }
}
