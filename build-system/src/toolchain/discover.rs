//! Finding the toolchains: explicit config, the vendors' environment variables and install
//! paths, kbuild's managed installs, PATH; their versions and identities (for the cache key).

use std::path::{Path, PathBuf};
use std::process::Command;

use kbuild_base::dirs::Dirs;
use kbuild_base::env::{names, Env};
use kbuild_base::fs as fsutil;
use kbuild_manifest::target::{Target, Vendor, Version, PROCESSORS};

use crate::config::ToolchainConfig;

use super::{ToolchainError, CUDA_VERSION, DEBIAN_DEVICE_LIBS, DEBIAN_LLVM_MAJOR};

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
    /// Found only for a build with Triton kernels ([`Toolchains::find_triton`]).
    pub triton: Option<super::TritonToolchain>,
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
            triton: None,
            managed: managed_dir(env).unwrap_or_else(|e| PathBuf::from(format!("({e})"))),
        }
    }

    /// Look for the managed Triton (it costs an interpreter start, so only builds with Triton
    /// kernels ask).
    pub fn find_triton(&mut self, env: &Env) {
        self.triton = super::discover_triton(env);
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

pub(super) fn too_old(
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

pub(super) fn managed_cuda_dir(env: &Env) -> Result<PathBuf, kbuild_base::dirs::DirsError> {
    Ok(managed_dir(env)?.join(format!("cuda-{CUDA_VERSION}")))
}

pub(super) fn managed_devlibs_dir(
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

pub(super) fn discover_cuda(
    config: &ToolchainConfig,
    cache_dir: &Path,
    env: &Env,
) -> Option<CudaToolchain> {
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

pub(super) fn discover_hip(
    config: &ToolchainConfig,
    cache_dir: &Path,
    env: &Env,
) -> Option<HipToolchain> {
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
pub(super) fn rocm_device_libs(rocm: &Path) -> Option<PathBuf> {
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

pub(super) fn bitcode_files(dir: &Path) -> Vec<PathBuf> {
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
pub(super) fn identity(
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

pub(super) fn parse_cuda_version(text: &str) -> Option<Version> {
    // "Cuda compilation tools, release 13.5, V13.5.37"
    let rest = text.split("release ").nth(1)?;
    let v = rest.split(',').next()?;
    let (a, b) = v.trim().split_once('.')?;
    Some(Version(a.parse().ok()?, b.parse().ok()?))
}

pub(super) fn parse_clang_version(text: &str) -> Option<Version> {
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
