//! `kbuild toolchain install`: the pinned CUDA wheels through pip, the HIP packages through
//! apt, and the ISA-version bitcode Debian's device libraries lack.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kbuild_base::env::Env;
use kbuild_base::fs as fsutil;
use kbuild_manifest::target::{ProcessorKind, Target, Vendor, Version, PROCESSORS};

use super::tools::{apt_install, run_tool, ToolOutput};
use super::{
    bitcode_files, device_lib_files, isa_version, managed_cuda_dir, managed_devlibs_dir,
    managed_dir, which, ToolchainError, CUDA_BINARIES, CUDA_VERSION, CUDA_VERSION_LINE,
    CUDA_WHEELS, DEBIAN_DEVICE_LIBS, DEBIAN_LLVM_MAJOR, HIP_PACKAGES,
};

/// What an install did to one toolchain.
#[derive(Debug, Clone, PartialEq)]
pub enum InstallAction {
    Installed,
    /// The install there was refused (`why`) and replaced.
    Reinstalled {
        why: String,
    },
    AlreadyInstalled,
}

/// One toolchain's install: what, which version, where, how long. Its [`Display`] is the
/// one line `kbuild toolchain install` prints for it.
///
/// [`Display`]: std::fmt::Display
#[derive(Debug, Clone)]
pub struct Installed {
    /// `CUDA`, `HIP`.
    pub what: &'static str,
    /// The pinned CUDA release; for HIP the LLVM of Debian's clang packages (`LLVM 19`).
    pub version: String,
    pub action: InstallAction,
    /// The managed directory it is in.
    pub path: PathBuf,
    /// What else was done, for the line (HIP: the packages and the generated bitcode).
    pub detail: Option<String>,
    pub seconds: f64,
}

impl std::fmt::Display for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, version, path) = (self.what, &self.version, self.path.display());
        match &self.action {
            InstallAction::Installed => write!(f, "installed {what} {version} into {path}")?,
            InstallAction::Reinstalled { why } => write!(
                f,
                "reinstalled {what} {version} into {path} (the previous install was refused: {why})"
            )?,
            InstallAction::AlreadyInstalled => {
                write!(f, "{what} {version} already installed at {path}")?
            }
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        write!(f, " ({:.1} s)", self.seconds)
    }
}

/// `kbuild toolchain install cuda`: NVIDIA's pinned PyPI wheels into the data dir.
///
/// pip runs isolated (`python3 -I -m pip`, so neither the current directory nor `PYTHON*`
/// variables reach its `sys.path`), from a fresh empty directory, with `--require-hashes`
/// and [`CUDA_WHEELS`]'s hashes, wheels only. It installs into a temp dir beside the managed
/// one, which is renamed into place only when [`verify_cuda_install`] accepts it.
/// Idempotent: an existing install that verifies is kept; one that does not is replaced.
/// pip's own output goes where `output` says.
pub fn install_cuda(env: &Env, output: ToolOutput) -> Result<Installed, ToolchainError> {
    let start = Instant::now();
    let dest = managed_cuda_dir(env)?;
    let done = |action: InstallAction| Installed {
        what: "CUDA",
        version: CUDA_VERSION.to_string(),
        action,
        path: dest.clone(),
        detail: None,
        seconds: start.elapsed().as_secs_f64(),
    };
    let already = || Ok(done(InstallAction::AlreadyInstalled));
    let replacing = match dest.try_exists() {
        Ok(false) => None,
        _ => {
            let stamp = verified_stamp(&dest);
            let recorded = std::fs::read_to_string(dest.join(VERIFIED_STAMP)).ok();
            if stamp.is_some() && recorded.as_deref().map(str::trim) == stamp.as_deref() {
                return already();
            }
            match verify_cuda_install(&dest) {
                Ok(()) => {
                    record_verified(&dest);
                    return already();
                }
                Err(why) => Some(why.to_string()),
            }
        }
    };
    let parent = managed_dir(env)?;
    let tmp = fsutil::tempdir_in(&parent, "cuda")
        .map_err(|e| ToolchainError::Install(format!("creating {}: {e}", parent.display())))?;
    // pip's working directory: empty, ours, and the home of the requirements file.
    let cwd = match fsutil::tempdir_in(&parent, "pip-cwd") {
        Ok(d) => d,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(ToolchainError::Install(format!(
                "creating a working directory in {}: {e}",
                parent.display()
            )));
        }
    };
    let result = pip_install_verified(env, &tmp, &cwd, output);
    let _ = std::fs::remove_dir_all(&cwd);
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    // The old (unverified) install goes aside first, so `dest` is always absent or whole.
    let old = match replacing {
        Some(_) => {
            let aside = fsutil::temp_path(&parent, "cuda-old");
            if let Err(e) = std::fs::rename(&dest, &aside) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(ToolchainError::Install(format!(
                    "moving the old install {} aside: {e}",
                    dest.display()
                )));
            }
            Some(aside)
        }
        None => None,
    };
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(ToolchainError::Install(format!(
            "moving into {}: {e}",
            dest.display()
        )));
    }
    if let Some(aside) = old {
        let _ = std::fs::remove_dir_all(aside);
    }
    record_verified(&dest);
    Ok(done(match replacing {
        Some(why) => InstallAction::Reinstalled { why },
        None => InstallAction::Installed,
    }))
}

/// The file in a verified CUDA install that records [`verified_stamp`] of its binaries, so a
/// later `install` need not hash 190 MB again. Any change to a binary (content, inode, size,
/// times) changes the stamp and the install is verified in full again.
pub(super) const VERIFIED_STAMP: &str = ".kbuild-verified";

/// blake3 over the pinned hashes and the metadata (inode, size, mtime, ctime) of the pinned
/// binaries in `dir`; `None` when one is not a regular file.
pub(super) fn verified_stamp(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mut h = blake3::Hasher::new();
    h.update(CUDA_VERSION.as_bytes());
    for (rel, pin) in CUDA_BINARIES {
        let m = std::fs::symlink_metadata(dir.join(rel)).ok()?;
        if !m.file_type().is_file() {
            return None;
        }
        h.update(rel.as_bytes());
        h.update(pin.as_bytes());
        for v in [m.dev(), m.ino(), m.len()] {
            h.update(&v.to_le_bytes());
        }
        for v in [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()] {
            h.update(&v.to_le_bytes());
        }
    }
    Some(h.finalize().to_hex().to_string())
}

/// Remember that `dir` was just verified (best effort: without it the next run verifies).
pub(super) fn record_verified(dir: &Path) {
    if let Some(s) = verified_stamp(dir) {
        let _ = fsutil::write_atomic(&dir.join(VERIFIED_STAMP), s.as_bytes());
    }
}

/// The argument list of the isolated, hash-checked pip run (after the interpreter).
pub fn pip_args(target: &Path, requirements: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = [
        "-I",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-compile",
        "--only-binary=:all:",
        "--require-hashes",
        "--target",
    ]
    .iter()
    .map(Into::into)
    .collect();
    v.push(target.into());
    v.push("-r".into());
    v.push(requirements.into());
    v
}

pub(super) fn pip_install_verified(
    env: &Env,
    target: &Path,
    cwd: &Path,
    output: ToolOutput,
) -> Result<(), ToolchainError> {
    let requirements = cwd.join("requirements.txt");
    let text: String = CUDA_WHEELS.iter().map(|w| w.requirement() + "\n").collect();
    std::fs::write(&requirements, text)
        .map_err(|e| ToolchainError::Install(format!("writing {}: {e}", requirements.display())))?;
    let python = which("python3", env).ok_or_else(|| {
        ToolchainError::Install(
            "python3 is not on PATH (absolute PATH entries only); `kbuild toolchain install cuda` runs `python3 -I -m pip`".into(),
        )
    })?;
    let (status, printed) = run_tool(
        Command::new(&python)
            .args(pip_args(target, &requirements))
            .current_dir(cwd)
            // No "Running pip as the 'root' user" warning: the target is our own directory.
            .env("PIP_ROOT_USER_ACTION", "ignore"),
        &format!("{} -I -m pip", python.display()),
        output,
    )?;
    if !status.success() {
        let names: Vec<String> = CUDA_WHEELS
            .iter()
            .map(|w| format!("{}=={}", w.name, w.version))
            .collect();
        return Err(ToolchainError::Tool {
            message: format!(
                "pip install of {} failed ({status}); is PyPI reachable, and do the wheels match the pinned sha256 hashes?",
                names.join(" ")
            ),
            output: printed,
        });
    }
    verify_cuda_install(target).map_err(|why| {
        ToolchainError::Install(format!(
            "pip reported success, but the result in {} is not the pinned CUDA {CUDA_VERSION}: {why}; nothing was installed",
            target.display()
        ))
    })
}

/// Why a CUDA install is not the pinned one; each names the file that differs.
#[derive(Debug, thiserror::Error)]
pub enum CudaInstallError {
    #[error("{} is missing", .0.display())]
    Missing(PathBuf),
    #[error("{} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    #[error("{}: {err}", .path.display())]
    Stat { path: PathBuf, err: std::io::Error },
    #[error("reading {}: {err}", .path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{} has sha256 {got}, the pinned wheel's is {want}", .path.display())]
    Hash {
        path: PathBuf,
        got: String,
        want: &'static str,
    },
    #[error("running {} --version: {err}", .path.display())]
    Run { path: PathBuf, err: std::io::Error },
    #[error("{} --version does not say `{CUDA_VERSION_LINE}`", .0.display())]
    Version(PathBuf),
}

/// Whether `dir` holds the pinned CUDA install: every wheel's `.dist-info`, every binary of
/// [`CUDA_BINARIES`] a regular file with its pinned sha256 (checked before anything runs),
/// then `nvcc --version` and `ptxas --version` naming the pinned release. The error says
/// what differs.
pub fn verify_cuda_install(dir: &Path) -> Result<(), CudaInstallError> {
    for w in CUDA_WHEELS {
        let d = dir.join(w.dist_info());
        if !d.join("RECORD").is_file() {
            return Err(CudaInstallError::Missing(d));
        }
    }
    for (rel, want) in CUDA_BINARIES {
        let p = dir.join(rel);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_file() => {}
            Ok(_) => return Err(CudaInstallError::NotAFile(p)),
            Err(err) => return Err(CudaInstallError::Stat { path: p, err }),
        }
        let got = match kbuild_base::digest::sha256_file(&p) {
            Ok(got) => got,
            Err(err) => return Err(CudaInstallError::Read { path: p, err }),
        };
        if got != *want {
            return Err(CudaInstallError::Hash { path: p, got, want });
        }
    }
    for exe in ["nvidia/cu13/bin/nvcc", "nvidia/cu13/bin/ptxas"] {
        let p = dir.join(exe);
        let out = match Command::new(&p).arg("--version").output() {
            Ok(out) => out,
            Err(err) => return Err(CudaInstallError::Run { path: p, err }),
        };
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !text.lines().any(|l| l.trim() == CUDA_VERSION_LINE) {
            return Err(CudaInstallError::Version(p));
        }
    }
    Ok(())
}

/// `kbuild toolchain install hip`: Debian's clang-19 + device libs (apt, when missing), then
/// the ISA-version bitcode Debian's ROCm 5.2 device libs lack, generated with llvm-as into a
/// kbuild-managed device-library directory. Idempotent. apt's and llvm-as's own output goes
/// where `output` says.
pub fn install_hip(env: &Env, output: ToolOutput) -> Result<Installed, ToolchainError> {
    let start = Instant::now();
    let mut said = Vec::new();
    let llvm = Path::new("/usr/lib/llvm-19/bin");
    let have_packages = llvm.join("clang++").is_file()
        && llvm.join("llvm-as").is_file()
        && llvm.join("ld.lld").is_file()
        && llvm.join("clang-offload-bundler").is_file()
        && Path::new(DEBIAN_DEVICE_LIBS).join("ocml.bc").is_file()
        && Path::new("/usr/include/hip/hip_runtime.h").is_file();
    if !have_packages {
        apt_install(HIP_PACKAGES, env, output)?;
        said.push(format!("apt installed {}", HIP_PACKAGES.join(" ")));
    }
    let dest = managed_devlibs_dir(env, DEBIAN_LLVM_MAJOR)?;
    let done = |action: InstallAction, said: Vec<String>| Installed {
        what: "HIP",
        version: format!("LLVM {DEBIAN_LLVM_MAJOR}"),
        action,
        path: dest.clone(),
        detail: (!said.is_empty()).then(|| said.join(", ")),
        seconds: start.elapsed().as_secs_f64(),
    };
    let mut wanted: Vec<(String, String)> = Vec::new(); // (file, IR)
    let layout = datalayout(&llvm.join("clang++"))?;
    for p in PROCESSORS
        .iter()
        .filter(|p| p.vendor() == Vendor::Amd && p.min_toolchain <= Version(19, 99))
    {
        let Some(version) = isa_version(p.name) else {
            continue;
        };
        let t = Target {
            processor: p,
            ptx: false,
            xnack: Default::default(),
            sramecc: Default::default(),
        };
        let file = device_lib_files(&t).remove(0);
        wanted.push((
            file,
            constant_module(&layout, "__oclc_ISA_version", version),
        ));
        if matches!(p.kind, ProcessorKind::AmdGeneric { .. }) {
            wanted.push((
                "oclc_abi_version_600.bc".into(),
                constant_module(&layout, "__oclc_ABI_version", 600),
            ));
        }
    }
    wanted.sort();
    wanted.dedup();
    let complete =
        dest.join("ocml.bc").is_file() && wanted.iter().all(|(f, _)| dest.join(f).is_file());
    if complete {
        let action = if have_packages {
            InstallAction::AlreadyInstalled
        } else {
            InstallAction::Installed
        };
        return Ok(done(action, said));
    }
    let parent = managed_dir(env)?;
    let tmp = fsutil::tempdir_in(&parent, "devlibs")
        .map_err(|e| ToolchainError::Install(e.to_string()))?;
    let fail = |msg: String| {
        let _ = std::fs::remove_dir_all(&tmp);
        ToolchainError::Install(msg)
    };
    for src in bitcode_files(Path::new(DEBIAN_DEVICE_LIBS)) {
        let name = src.file_name().unwrap_or_default();
        std::fs::copy(&src, tmp.join(name))
            .map_err(|e| fail(format!("copying {}: {e}", src.display())))?;
    }
    let mut generated = 0;
    for (file, ir) in &wanted {
        if tmp.join(file).exists() {
            continue;
        }
        let ll = tmp.join(format!("{file}.ll"));
        std::fs::write(&ll, ir).map_err(|e| fail(e.to_string()))?;
        let (status, printed) = run_tool(
            Command::new(llvm.join("llvm-as"))
                .arg(&ll)
                .arg("-o")
                .arg(tmp.join(file)),
            "llvm-as",
            output,
        )
        .map_err(|e| match e {
            ToolchainError::Run { err, .. } => fail(format!("running llvm-as: {err}")),
            other => other,
        })?;
        let _ = std::fs::remove_file(&ll);
        if !status.success() {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(ToolchainError::Tool {
                message: format!("llvm-as failed for {file}"),
                output: printed,
            });
        }
        generated += 1;
    }
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(&tmp, &dest)
        .map_err(|e| ToolchainError::Install(format!("moving into {}: {e}", dest.display())))?;
    said.push(format!("generated {generated} ISA/ABI bitcode modules"));
    Ok(done(InstallAction::Installed, said))
}

pub(super) fn constant_module(layout: &str, symbol: &str, value: u32) -> String {
    format!(
        "target datalayout = \"{layout}\"\ntarget triple = \"amdgcn-amd-amdhsa\"\n@{symbol} = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 {value}, align 4\n"
    )
}

/// The amdgcn data layout of this clang, so generated bitcode links without warnings.
pub(super) fn datalayout(clang: &Path) -> Result<String, ToolchainError> {
    let out = Command::new(clang)
        .args([
            "-x",
            "hip",
            "--offload-arch=gfx1100",
            "--offload-device-only",
            "-nogpulib",
            "-nogpuinc",
            "-S",
            "-emit-llvm",
            "-o",
            "-",
            "/dev/null",
        ])
        .output()
        .map_err(|err| ToolchainError::Run {
            cmd: clang.display().to_string(),
            err,
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("target datalayout = \"")
                .and_then(|r| r.strip_suffix('"'))
        })
        .map(str::to_string)
        .ok_or_else(|| {
            ToolchainError::Install(format!("{} printed no amdgcn datalayout", clang.display()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(action: InstallAction, detail: Option<&str>) -> Installed {
        Installed {
            what: "CUDA",
            version: CUDA_VERSION.to_string(),
            action,
            path: PathBuf::from("/data/toolchains/cuda"),
            detail: detail.map(str::to_string),
            seconds: 41.26,
        }
    }

    #[test]
    fn one_line_per_toolchain_says_what_version_and_seconds() {
        assert_eq!(
            installed(InstallAction::Installed, None).to_string(),
            format!("installed CUDA {CUDA_VERSION} into /data/toolchains/cuda (41.3 s)")
        );
        assert_eq!(
            installed(InstallAction::AlreadyInstalled, None).to_string(),
            format!("CUDA {CUDA_VERSION} already installed at /data/toolchains/cuda (41.3 s)")
        );
        assert_eq!(
            installed(
                InstallAction::Reinstalled { why: "nvcc differs".into() },
                Some("generated 3 ISA/ABI bitcode modules")
            )
            .to_string(),
            format!("reinstalled CUDA {CUDA_VERSION} into /data/toolchains/cuda (the previous install was refused: nvcc differs): generated 3 ISA/ABI bitcode modules (41.3 s)")
        );
    }
}
