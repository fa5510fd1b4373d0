//! Toolchain discovery, identity and installation.
//!
//! Discovery order: explicit `[toolchain]` config → CUDA_HOME/CUDA_PATH,
//! ROCM_PATH/HIP_PATH → /usr/local/cuda, /opt/rocm → kbuild-managed (data dir) → PATH.

use std::path::{Path, PathBuf};
use std::process::Command;

use kbuild_manifest::target::{ProcessorKind, Target, Vendor, Version, PROCESSORS};

use crate::config::ToolchainConfig;
use kbuild_base::dirs::Dirs;
use kbuild_base::env::{names, Env};
use kbuild_base::fs as fsutil;

/// The CUDA toolkit kbuild installs: NVIDIA's PyPI wheels, pinned.
pub const CUDA_VERSION: &str = "13.5.37";

/// One pinned wheel: the requirement pip gets and the sha256 of the one file it may install
/// (the x86_64 manylinux wheel of that version; pip runs with `--require-hashes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedWheel {
    pub name: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
}

impl PinnedWheel {
    /// The requirements-file line: `NAME==VERSION --hash=sha256:HEX`.
    pub fn requirement(&self) -> String {
        format!(
            "{}=={} --hash=sha256:{}",
            self.name, self.version, self.sha256
        )
    }

    /// The `.dist-info` directory pip leaves for it under `--target`.
    pub fn dist_info(&self) -> String {
        format!("{}-{}.dist-info", self.name.replace('-', "_"), self.version)
    }
}

/// Every wheel of the CUDA install, with the sha256 of its
/// `py3-none-manylinux…_x86_64` file on PyPI.
pub const CUDA_WHEELS: &[PinnedWheel] = &[
    PinnedWheel {
        name: "nvidia-cuda-nvcc",
        version: "13.5.37",
        sha256: "f5c4f7ead5d964fb4af42bbf1e6d3ec3c1e6e9d83b53749f691d387e7fcaa3a7",
    },
    PinnedWheel {
        name: "nvidia-cuda-runtime",
        version: "13.5.37",
        sha256: "df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d",
    },
    PinnedWheel {
        name: "nvidia-cuda-crt",
        version: "13.5.37",
        sha256: "e898b7f73d3035fa89915a3f7bf3b54a73e90249746111aed295822c4729bb29",
    },
    PinnedWheel {
        name: "nvidia-cuda-cccl",
        version: "13.3.5.0.6",
        sha256: "d5230098fa2df5021e1a00c0c4eee41797671a91119d31e892463e5ccf3ee326",
    },
    PinnedWheel {
        name: "nvidia-nvvm",
        version: "13.5.37",
        sha256: "c41bfa362e407405163f103c2229f0765f8cc2ed7d148b754dc77f228bf7e070",
    },
    PinnedWheel {
        name: "nvidia-cuda-cuobjdump",
        version: "13.5.37",
        sha256: "38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58",
    },
];

/// The compiler binaries of the CUDA install (relative to the install directory) and their
/// sha256, as the pinned wheels ship them (each wheel's RECORD lists the same hash). An
/// install is accepted, and renamed into place, only when all of them match.
pub const CUDA_BINARIES: &[(&str, &str)] = &[
    (
        "nvidia/cu13/bin/nvcc",
        "7b478439de1eab664b8a3b98f2ba2653bcf2de892c44af472b5ee8a1366e9cd7",
    ),
    (
        "nvidia/cu13/bin/ptxas",
        "b3e295413e9628ee261a63ea3f70ec5af20988c9809214c064661662206574a3",
    ),
    (
        "nvidia/cu13/nvvm/bin/cicc",
        "95142a6eed9727e37f935e863f74730a29e07e0c77cfe71ad36f35e8e29978ef",
    ),
    (
        "nvidia/cu13/bin/fatbinary",
        "ea50db89ad7253d3320b0995283c56b54371559c48e70fffdb4e5c3177f5415a",
    ),
];
/// What `nvcc --version` and `ptxas --version` of the pinned install print.
const CUDA_VERSION_LINE: &str = "Cuda compilation tools, release 13.5, V13.5.37";
/// Debian packages that make a HIP device-code toolchain.
pub const HIP_PACKAGES: &[&str] = &[
    "clang-19",
    "lld-19",
    "llvm-19",
    // clang-offload-bundler, for fat offload bundles (`fat = true`).
    "clang-tools-19",
    "libamdhip64-dev",
    "rocm-device-libs",
];
/// The LLVM of Debian 12's clang-19 packages.
pub const DEBIAN_LLVM_MAJOR: u32 = 19;
/// Where Debian's rocm-device-libs puts its bitcode.
pub const DEBIAN_DEVICE_LIBS: &str = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";

#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    #[error("no CUDA toolchain found (looked in [toolchain] cuda, CUDA_HOME, CUDA_PATH, /usr/local/cuda, {managed}, PATH)\nhint: run `kbuild toolchain install cuda`")]
    CudaMissing { managed: String },
    #[error("no HIP toolchain found (looked in [toolchain] hip-clang, ROCM_PATH, HIP_PATH, /opt/rocm, Debian clang-19 + {managed}, PATH)\nhint: run `kbuild toolchain install hip`")]
    HipMissing { managed: String },
    /// `detail`: "LLVM ≥ 20.0, but the LLVM toolchain at … is 19.1" plus a hint line.
    #[error("target {target} needs {detail}")]
    TooOld { target: String, detail: String },
    #[error("target {target}: the HIP device libraries in {dir} lack {file}\nhint: run `kbuild toolchain install hip` (it generates the missing ISA-version bitcode)")]
    DeviceLib {
        target: String,
        dir: String,
        file: String,
    },
    #[error("{0}")]
    Install(String),
    /// No data directory to install into (HOME and the XDG variables unset).
    #[error(transparent)]
    Dirs(#[from] kbuild_base::dirs::DirsError),
    #[error("running {cmd}: {err}")]
    Run { cmd: String, err: std::io::Error },
}

/// A CUDA toolkit (nvcc, ptxas, fatbinary).
#[derive(Debug, Clone)]
pub struct CudaToolchain {
    pub root: PathBuf,
    pub nvcc: PathBuf,
    pub version: Version,
    pub version_text: String,
    /// blake3 over the version text and the nvcc, ptxas and cicc binaries.
    pub identity: String,
    pub found_by: &'static str,
}

impl CudaToolchain {
    pub fn fatbinary(&self) -> PathBuf {
        self.root.join("bin/fatbinary")
    }
}

/// A hip-clang driver plus device libraries.
#[derive(Debug, Clone)]
pub struct HipToolchain {
    pub clang: PathBuf,
    /// `--rocm-path`.
    pub rocm_path: PathBuf,
    pub device_libs: PathBuf,
    pub version: Version,
    pub version_text: String,
    /// blake3 over the version text, the clang binary and the device-library bitcode.
    pub identity: String,
    pub found_by: &'static str,
}

impl HipToolchain {
    pub fn bundler(&self) -> PathBuf {
        let dir = self.clang.parent().unwrap_or(Path::new("/usr/bin"));
        for name in ["clang-offload-bundler", "clang-offload-bundler-19"] {
            let p = dir.join(name);
            if p.exists() {
                return p;
            }
        }
        PathBuf::from("clang-offload-bundler")
    }
}

/// Both vendors' toolchains, each possibly absent.
#[derive(Debug, Clone)]
pub struct Toolchains {
    pub cuda: Option<CudaToolchain>,
    pub hip: Option<HipToolchain>,
    /// Where `kbuild toolchain install` puts toolchains (named in "missing" errors).
    pub managed: PathBuf,
}

impl Toolchains {
    /// Discover both toolchains. Identities are memoised in `cache_dir` by file metadata so
    /// a no-op build hashes no compiler binary.
    /// `env` gives CUDA_HOME/CUDA_PATH, ROCM_PATH/HIP_PATH, PATH and the data dir.
    pub fn discover(config: &ToolchainConfig, cache_dir: &Path, env: &Env) -> Toolchains {
        Toolchains {
            cuda: discover_cuda(config, cache_dir, env),
            hip: discover_hip(config, cache_dir, env),
            managed: managed_dir(env).unwrap_or_else(|e| PathBuf::from(format!("({e})"))),
        }
    }

    /// Check that `target` can be built; the error names the fix.
    pub fn check(&self, target: &Target) -> Result<(), ToolchainError> {
        let needed = target.processor.min_toolchain;
        match target.vendor() {
            Vendor::Nvidia => {
                let tc = self
                    .cuda
                    .as_ref()
                    .ok_or_else(|| ToolchainError::CudaMissing {
                        managed: self.managed.display().to_string(),
                    })?;
                if tc.version < needed {
                    return Err(too_old(
                        target,
                        "CUDA",
                        &tc.root,
                        tc.version,
                        format!("run `kbuild toolchain install cuda` (CUDA {CUDA_VERSION}) or point CUDA_HOME at a newer toolkit"),
                    ));
                }
                Ok(())
            }
            Vendor::Amd => {
                let tc = self
                    .hip
                    .as_ref()
                    .ok_or_else(|| ToolchainError::HipMissing {
                        managed: self.managed.display().to_string(),
                    })?;
                if tc.version < needed {
                    return Err(too_old(
                        target,
                        "LLVM",
                        &tc.clang,
                        tc.version,
                        format!(
                            "{} needs clang ≥ {}: install a newer ROCm and set ROCM_PATH, or set [toolchain] hip-clang",
                            target.processor.name, needed.0
                        ),
                    ));
                }
                for file in device_lib_files(target) {
                    if !tc.device_libs.join(&file).exists() {
                        return Err(ToolchainError::DeviceLib {
                            target: target.to_string(),
                            dir: tc.device_libs.display().to_string(),
                            file,
                        });
                    }
                }
                Ok(())
            }
        }
    }
}

fn too_old(
    target: &Target,
    kind: &str,
    path: &Path,
    found: Version,
    hint: String,
) -> ToolchainError {
    ToolchainError::TooOld {
        target: target.to_string(),
        detail: format!(
            "{kind} ≥ {}, but the {kind} toolchain at {} is {found}\nhint: {hint}",
            target.processor.min_toolchain,
            path.display()
        ),
    }
}

/// Directory kbuild installs toolchains into.
pub fn managed_dir(env: &Env) -> Result<PathBuf, kbuild_base::dirs::DirsError> {
    Ok(Dirs::from_env(env)?.data.join("toolchains"))
}

fn managed_cuda_dir(env: &Env) -> Result<PathBuf, kbuild_base::dirs::DirsError> {
    Ok(managed_dir(env)?.join(format!("cuda-{CUDA_VERSION}")))
}

fn managed_devlibs_dir(
    env: &Env,
    llvm_major: u32,
) -> Result<PathBuf, kbuild_base::dirs::DirsError> {
    Ok(managed_dir(env)?.join(format!("hip-device-libs-llvm{llvm_major}")))
}

/// Search `PATH` for an executable. Relative entries (`.`, an empty entry) are skipped: what
/// runs must not depend on the current directory.
pub fn which(name: &str, env: &Env) -> Option<PathBuf> {
    let path = env.get(names::PATH)?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn discover_cuda(config: &ToolchainConfig, cache_dir: &Path, env: &Env) -> Option<CudaToolchain> {
    let mut candidates: Vec<(PathBuf, &'static str)> = Vec::new();
    if let Some(root) = &config.cuda {
        candidates.push((root.clone(), "Kbuild.toml [toolchain] cuda"));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = env.path(var) {
            candidates.push((
                root,
                if var == "CUDA_HOME" {
                    "CUDA_HOME"
                } else {
                    "CUDA_PATH"
                },
            ));
        }
    }
    candidates.push((PathBuf::from("/usr/local/cuda"), "/usr/local/cuda"));
    if let Ok(dir) = managed_cuda_dir(env) {
        candidates.push((dir.join("nvidia/cu13"), "kbuild-managed"));
    }
    if let Some(nvcc) = which("nvcc", env) {
        if let Some(root) = nvcc.parent().and_then(Path::parent) {
            candidates.push((root.to_path_buf(), "PATH"));
        }
    }
    candidates.into_iter().find_map(|(root, found_by)| {
        let nvcc = root.join("bin/nvcc");
        if !nvcc.is_file() {
            return None;
        }
        let binaries = [
            nvcc.clone(),
            root.join("bin/ptxas"),
            root.join("nvvm/bin/cicc"),
        ];
        let (version_text, identity) = identity(cache_dir, &nvcc, &["--version"], &binaries)?;
        let version = parse_cuda_version(&version_text)?;
        Some(CudaToolchain {
            root,
            nvcc,
            version,
            version_text,
            identity,
            found_by,
        })
    })
}

fn discover_hip(config: &ToolchainConfig, cache_dir: &Path, env: &Env) -> Option<HipToolchain> {
    // (clang, rocm path, device libs, found by)
    let mut candidates: Vec<(PathBuf, PathBuf, Option<PathBuf>, &'static str)> = Vec::new();
    if let Some(clang) = &config.hip_clang {
        candidates.push((
            clang.clone(),
            PathBuf::from("/usr"),
            config.hip_device_libs.clone(),
            "Kbuild.toml [toolchain] hip-clang",
        ));
    }
    for var in ["ROCM_PATH", "HIP_PATH"] {
        if let Some(root) = env.path(var) {
            candidates.push((
                root.join("llvm/bin/clang++"),
                root.clone(),
                None,
                if var == "ROCM_PATH" {
                    "ROCM_PATH"
                } else {
                    "HIP_PATH"
                },
            ));
        }
    }
    candidates.push((
        PathBuf::from("/opt/rocm/llvm/bin/clang++"),
        PathBuf::from("/opt/rocm"),
        None,
        "/opt/rocm",
    ));
    {
        let major = DEBIAN_LLVM_MAJOR;
        let clang = PathBuf::from(format!("/usr/lib/llvm-{major}/bin/clang++"));
        if let Ok(dir) = managed_devlibs_dir(env, major) {
            candidates.push((clang, PathBuf::from("/usr"), Some(dir), "kbuild-managed"));
        }
        candidates.push((
            PathBuf::from(format!("/usr/lib/llvm-{major}/bin/clang++")),
            PathBuf::from("/usr"),
            Some(PathBuf::from(DEBIAN_DEVICE_LIBS)),
            "Debian clang + rocm-device-libs",
        ));
    }
    if let Some(clang) = which("clang++", env) {
        candidates.push((clang, PathBuf::from("/usr"), None, "PATH"));
    }
    candidates
        .into_iter()
        .find_map(|(clang, rocm_path, libs, found_by)| {
            if !clang.is_file() {
                return None;
            }
            let device_libs = libs
                .or_else(|| rocm_device_libs(&rocm_path))
                .filter(|d| d.join("ocml.bc").is_file())?;
            let mut binaries = vec![std::fs::canonicalize(&clang).unwrap_or(clang.clone())];
            binaries.extend(bitcode_files(&device_libs));
            let (version_text, identity) = identity(cache_dir, &clang, &["--version"], &binaries)?;
            let version = parse_clang_version(&version_text)?;
            Some(HipToolchain {
                clang,
                rocm_path,
                device_libs,
                version,
                version_text,
                identity,
                found_by,
            })
        })
}

/// Device-library directory of a ROCm installation (5.x: `amdgcn/bitcode`; 6.x: under llvm).
fn rocm_device_libs(rocm: &Path) -> Option<PathBuf> {
    let direct = rocm.join("amdgcn/bitcode");
    if direct.is_dir() {
        return Some(direct);
    }
    let clang_lib = rocm.join("lib/llvm/lib/clang");
    if let Ok(rd) = std::fs::read_dir(&clang_lib) {
        for e in rd.flatten() {
            let p = e.path().join("lib/amdgcn/bitcode");
            if p.is_dir() {
                return Some(p);
            }
        }
    }
    if rocm == Path::new("/usr") && Path::new(DEBIAN_DEVICE_LIBS).is_dir() {
        return Some(PathBuf::from(DEBIAN_DEVICE_LIBS));
    }
    None
}

fn bitcode_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "bc"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The device-library files clang needs for `target`.
pub fn device_lib_files(target: &Target) -> Vec<String> {
    let p = target.processor;
    let digits = p.name.strip_prefix("gfx").unwrap_or(p.name);
    let mut v = vec![format!("oclc_isa_version_{digits}.bc")];
    if p.is_generic() {
        v.push("oclc_abi_version_600.bc".into());
    }
    v
}

/// `__oclc_ISA_version` of a processor: major·1000 + minor·100 + stepping (hex), as in
/// ROCm-Device-Libs (`gfx90a` → 9010, `gfx1151` → 11501); a generic target takes its lowest
/// member's.
pub fn isa_version(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("gfx")?;
    if let Some(generic) = digits.strip_suffix("-generic") {
        let mut parts = generic.split('-');
        let major: u32 = parts.next()?.parse().ok()?;
        let minor: u32 = parts.next().map(str::parse).transpose().ok()?.unwrap_or(0);
        return Some(major * 1000 + minor * 100);
    }
    if digits.len() < 3 {
        return None;
    }
    let (major, rest) = digits.split_at(digits.len() - 2);
    let mut chars = rest.chars();
    let minor = chars.next()?.to_digit(16)?;
    let stepping = chars.next()?.to_digit(16)?;
    Some(major.parse::<u32>().ok()? * 1000 + minor * 100 + stepping)
}

/// (version text, identity) of a compiler, memoised by the binaries' metadata.
fn identity(
    cache_dir: &Path,
    exe: &Path,
    args: &[&str],
    binaries: &[PathBuf],
) -> Option<(String, String)> {
    let mut meta_key = blake3::Hasher::new();
    meta_key.update(exe.as_os_str().as_encoded_bytes());
    for b in binaries {
        meta_key.update(b.as_os_str().as_encoded_bytes());
        if let Ok(m) = std::fs::metadata(b) {
            use std::os::unix::fs::MetadataExt;
            meta_key.update(&m.len().to_le_bytes());
            meta_key.update(&m.mtime().to_le_bytes());
            meta_key.update(&m.mtime_nsec().to_le_bytes());
            meta_key.update(&m.ino().to_le_bytes());
        }
    }
    let memo = cache_dir
        .join("compilers")
        .join(meta_key.finalize().to_hex().as_str());
    if let Ok(text) = std::fs::read_to_string(&memo) {
        if let Some((id, version)) = text.split_once('\n') {
            return Some((version.to_string(), id.to_string()));
        }
    }
    let out = Command::new(exe).args(args).output().ok()?;
    let version_text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut h = blake3::Hasher::new();
    h.update(version_text.as_bytes());
    for b in binaries {
        if let Ok(hash) = kbuild_base::digest::blake3_file(b) {
            h.update(
                b.file_name()
                    .map(|n| n.as_encoded_bytes())
                    .unwrap_or_default(),
            );
            h.update(hash.as_bytes());
        }
    }
    let id = h.finalize().to_hex().to_string();
    let _ = fsutil::write_atomic(&memo, format!("{id}\n{version_text}").as_bytes());
    Some((version_text, id))
}

fn parse_cuda_version(text: &str) -> Option<Version> {
    // "Cuda compilation tools, release 13.5, V13.5.37"
    let rest = text.split("release ").nth(1)?;
    let v = rest.split(',').next()?;
    let (a, b) = v.trim().split_once('.')?;
    Some(Version(a.parse().ok()?, b.parse().ok()?))
}

fn parse_clang_version(text: &str) -> Option<Version> {
    // "Debian clang version 19.1.7 (3~deb12u1)" / "AMD clang version 18.0.0git ..."
    let rest = text.split("clang version ").nth(1)?;
    let mut it = rest.split(|c: char| !c.is_ascii_digit());
    Some(Version(it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The catalogue targets a toolchain can build (for `kbuild toolchain list`).
pub fn buildable_targets(tcs: &Toolchains, vendor: Vendor) -> Vec<String> {
    let mut out = Vec::new();
    for p in PROCESSORS.iter().filter(|p| p.vendor() == vendor) {
        let t = Target {
            processor: p,
            ptx: false,
            xnack: Default::default(),
            sramecc: Default::default(),
        };
        if tcs.check(&t).is_ok() {
            out.push(p.name.to_string());
        }
    }
    out
}

/// `kbuild toolchain install cuda`: NVIDIA's pinned PyPI wheels into the data dir.
///
/// pip runs isolated (`python3 -I -m pip`, so neither the current directory nor `PYTHON*`
/// variables reach its `sys.path`), from a fresh empty directory, with `--require-hashes`
/// and [`CUDA_WHEELS`]'s hashes, wheels only. It installs into a temp dir beside the managed
/// one, which is renamed into place only when [`verify_cuda_install`] accepts it.
/// Idempotent: an existing install that verifies is kept; one that does not is replaced.
/// Returns a line saying what happened.
pub fn install_cuda(env: &Env) -> Result<String, ToolchainError> {
    let dest = managed_cuda_dir(env)?;
    let already = || {
        Ok(format!(
            "CUDA {CUDA_VERSION} already installed at {}",
            dest.display()
        ))
    };
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
                Err(why) => Some(why),
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
    let result = pip_install_verified(env, &tmp, &cwd);
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
    Ok(match replacing {
        Some(why) => format!(
            "reinstalled CUDA {CUDA_VERSION} into {} (the previous install was refused: {why})",
            dest.display()
        ),
        None => format!("installed CUDA {CUDA_VERSION} into {}", dest.display()),
    })
}

/// The file in a verified CUDA install that records [`verified_stamp`] of its binaries, so a
/// later `install` need not hash 190 MB again. Any change to a binary (content, inode, size,
/// times) changes the stamp and the install is verified in full again.
const VERIFIED_STAMP: &str = ".kbuild-verified";

/// blake3 over the pinned hashes and the metadata (inode, size, mtime, ctime) of the pinned
/// binaries in `dir`; `None` when one is not a regular file.
fn verified_stamp(dir: &Path) -> Option<String> {
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
fn record_verified(dir: &Path) {
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

fn pip_install_verified(env: &Env, target: &Path, cwd: &Path) -> Result<(), ToolchainError> {
    let requirements = cwd.join("requirements.txt");
    let text: String = CUDA_WHEELS.iter().map(|w| w.requirement() + "\n").collect();
    std::fs::write(&requirements, text)
        .map_err(|e| ToolchainError::Install(format!("writing {}: {e}", requirements.display())))?;
    let python = which("python3", env).ok_or_else(|| {
        ToolchainError::Install(
            "python3 is not on PATH (absolute PATH entries only); `kbuild toolchain install cuda` runs `python3 -I -m pip`".into(),
        )
    })?;
    let status = Command::new(&python)
        .args(pip_args(target, &requirements))
        .current_dir(cwd)
        .status()
        .map_err(|err| ToolchainError::Run {
            cmd: format!("{} -I -m pip", python.display()),
            err,
        })?;
    if !status.success() {
        let names: Vec<String> = CUDA_WHEELS
            .iter()
            .map(|w| format!("{}=={}", w.name, w.version))
            .collect();
        return Err(ToolchainError::Install(format!(
            "pip install of {} failed ({status}); is PyPI reachable, and do the wheels match the pinned sha256 hashes?",
            names.join(" ")
        )));
    }
    verify_cuda_install(target).map_err(|why| {
        ToolchainError::Install(format!(
            "pip reported success, but the result in {} is not the pinned CUDA {CUDA_VERSION}: {why}; nothing was installed",
            target.display()
        ))
    })
}

/// Whether `dir` holds the pinned CUDA install: every wheel's `.dist-info`, every binary of
/// [`CUDA_BINARIES`] a regular file with its pinned sha256 (checked before anything runs),
/// then `nvcc --version` and `ptxas --version` naming the pinned release. The error says
/// what differs.
pub fn verify_cuda_install(dir: &Path) -> Result<(), String> {
    for w in CUDA_WHEELS {
        let d = dir.join(w.dist_info());
        if !d.join("RECORD").is_file() {
            return Err(format!("{} is missing", d.display()));
        }
    }
    for (rel, want) in CUDA_BINARIES {
        let p = dir.join(rel);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_file() => {}
            Ok(_) => return Err(format!("{} is not a regular file", p.display())),
            Err(e) => return Err(format!("{}: {e}", p.display())),
        }
        let got = kbuild_base::digest::sha256_file(&p)
            .map_err(|e| format!("reading {}: {e}", p.display()))?;
        if got != *want {
            return Err(format!(
                "{} has sha256 {got}, the pinned wheel's is {want}",
                p.display()
            ));
        }
    }
    for exe in ["nvidia/cu13/bin/nvcc", "nvidia/cu13/bin/ptxas"] {
        let p = dir.join(exe);
        let out = Command::new(&p)
            .arg("--version")
            .output()
            .map_err(|e| format!("running {} --version: {e}", p.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !text.lines().any(|l| l.trim() == CUDA_VERSION_LINE) {
            return Err(format!(
                "{} --version does not say `{CUDA_VERSION_LINE}`",
                p.display()
            ));
        }
    }
    Ok(())
}

/// `kbuild toolchain install hip`: Debian's clang-19 + device libs (apt, when missing), then
/// the ISA-version bitcode Debian's ROCm 5.2 device libs lack, generated with llvm-as into a
/// kbuild-managed device-library directory. Idempotent.
pub fn install_hip(env: &Env) -> Result<Vec<String>, ToolchainError> {
    let mut said = Vec::new();
    let llvm = Path::new("/usr/lib/llvm-19/bin");
    let have_packages = llvm.join("clang++").is_file()
        && llvm.join("llvm-as").is_file()
        && llvm.join("ld.lld").is_file()
        && llvm.join("clang-offload-bundler").is_file()
        && Path::new(DEBIAN_DEVICE_LIBS).join("ocml.bc").is_file()
        && Path::new("/usr/include/hip/hip_runtime.h").is_file();
    if have_packages {
        said.push("Debian HIP packages already installed".to_string());
    } else {
        apt_install(HIP_PACKAGES, env)?;
        said.push(format!("installed {}", HIP_PACKAGES.join(" ")));
    }
    let dest = managed_devlibs_dir(env, 19)?;
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
        said.push(format!(
            "HIP device libraries already complete at {}",
            dest.display()
        ));
        return Ok(said);
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
        let status = Command::new(llvm.join("llvm-as"))
            .arg(&ll)
            .arg("-o")
            .arg(tmp.join(file))
            .status()
            .map_err(|e| fail(format!("running llvm-as: {e}")))?;
        let _ = std::fs::remove_file(&ll);
        if !status.success() {
            return Err(fail(format!("llvm-as failed for {file}")));
        }
        generated += 1;
    }
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(&tmp, &dest)
        .map_err(|e| ToolchainError::Install(format!("moving into {}: {e}", dest.display())))?;
    said.push(format!(
        "generated {generated} ISA/ABI bitcode modules into {}",
        dest.display()
    ));
    Ok(said)
}

fn constant_module(layout: &str, symbol: &str, value: u32) -> String {
    format!(
        "target datalayout = \"{layout}\"\ntarget triple = \"amdgcn-amd-amdhsa\"\n@{symbol} = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 {value}, align 4\n"
    )
}

/// The amdgcn data layout of this clang, so generated bitcode links without warnings.
fn datalayout(clang: &Path) -> Result<String, ToolchainError> {
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

fn apt_install(packages: &[&str], env: &Env) -> Result<(), ToolchainError> {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false);
    let mut prefix: Vec<String> = Vec::new();
    if !is_root {
        if which("sudo", env).is_none() {
            return Err(ToolchainError::Install(format!(
                "HIP needs Debian packages; run as root: apt-get install -y {}",
                packages.join(" ")
            )));
        }
        prefix.push("sudo".into());
    }
    let run = |args: &[&str]| -> Result<(), ToolchainError> {
        let mut all: Vec<String> = prefix.clone();
        all.extend(args.iter().map(|s| s.to_string()));
        let status = Command::new(&all[0])
            .args(&all[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|err| ToolchainError::Run {
                cmd: all.join(" "),
                err,
            })?;
        if status.success() {
            Ok(())
        } else {
            Err(ToolchainError::Install(format!(
                "`{}` failed ({status})",
                all.join(" ")
            )))
        }
    };
    let mut install = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    install.extend_from_slice(packages);
    if run(&install).is_err() {
        run(&["apt-get", "update", "-qq"])?;
        run(&install)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isa_versions_match_rocm_device_libs() {
        assert_eq!(isa_version("gfx90a"), Some(9010));
        assert_eq!(isa_version("gfx942"), Some(9402));
        assert_eq!(isa_version("gfx1030"), Some(10300));
        assert_eq!(isa_version("gfx1151"), Some(11501));
        assert_eq!(isa_version("gfx1201"), Some(12001));
        assert_eq!(isa_version("gfx11-generic"), Some(11000));
        assert_eq!(isa_version("gfx10-3-generic"), Some(10300));
        assert_eq!(isa_version("gfx9-4-generic"), Some(9400));
    }

    #[test]
    fn pip_runs_isolated_with_hashes_and_fakes_are_not_accepted() {
        let args: Vec<String> = pip_args(Path::new("/t"), Path::new("/c/r.txt"))
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args[..3], ["-I", "-m", "pip"]);
        for a in ["--require-hashes", "--only-binary=:all:", "--no-deps"] {
            assert!(args.iter().any(|x| x == a), "{a}: {args:?}");
        }
        assert!(args.ends_with(&["-r".to_string(), "/c/r.txt".to_string()]));
        for w in CUDA_WHEELS {
            assert!(kbuild_base::digest::is_sha256_hex(w.sha256), "{w:?}");
            assert!(w
                .requirement()
                .ends_with(&format!(" --hash=sha256:{}", w.sha256)));
        }
        assert_eq!(
            CUDA_WHEELS[0].dist_info(),
            "nvidia_cuda_nvcc-13.5.37.dist-info"
        );
        // A --target dir with a plausible layout but other binaries is refused.
        let d = tempfile::tempdir().unwrap();
        for w in CUDA_WHEELS {
            let di = d.path().join(w.dist_info());
            std::fs::create_dir_all(&di).unwrap();
            std::fs::write(di.join("RECORD"), "").unwrap();
        }
        for (rel, _) in CUDA_BINARIES {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(
                &p,
                "#!/bin/sh\necho 'Cuda compilation tools, release 13.5, V13.5.37'\n",
            )
            .unwrap();
        }
        let e = verify_cuda_install(d.path()).unwrap_err();
        assert!(e.contains("nvidia/cu13/bin/nvcc has sha256"), "{e}");
        let e = verify_cuda_install(&d.path().join("none")).unwrap_err();
        assert!(e.contains(".dist-info is missing"), "{e}");
    }

    #[test]
    fn version_texts() {
        assert_eq!(
            parse_cuda_version("Cuda compilation tools, release 13.5, V13.5.37\nBuild x"),
            Some(Version(13, 5))
        );
        assert_eq!(
            parse_clang_version("Debian clang version 19.1.7 (3~deb12u1)"),
            Some(Version(19, 1))
        );
    }
}
