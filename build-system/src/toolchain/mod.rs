//! Toolchain discovery, identity and installation.
//!
//! Discovery order: explicit `[toolchain]` config → CUDA_HOME/CUDA_PATH,
//! ROCM_PATH/HIP_PATH → /usr/local/cuda, /opt/rocm → kbuild-managed (data dir) → PATH.

use kbuild_base::env::Env;

mod discover;
mod install;
mod tools;
mod triton;

pub use discover::*;
pub use install::*;
pub use tools::ToolOutput;
pub use triton::{
    discover_triton, install_triton, TritonToolchain, TRITON_PTXAS, TRITON_PTXAS_BLACKWELL,
    TRITON_VERSION, TRITON_WHEELS, WORKER_PY,
};

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
    #[error("no Triton {version} found for the python3 on PATH (looked in kbuild's toolchains dir)\nhint: run `kbuild toolchain install triton`")]
    TritonMissing { version: String },
    #[error("{0}")]
    Install(String),
    /// A package manager (pip, apt) or tool failed; `output` is what it printed, captured
    /// unless it was shown as it ran ([`ToolOutput`]), for the caller to show now.
    #[error("{message}")]
    Tool { message: String, output: String },
    /// No data directory to install into (HOME and the XDG variables unset).
    #[error(transparent)]
    Dirs(#[from] kbuild_base::dirs::DirsError),
    #[error("running {cmd}: {err}")]
    Run { cmd: String, err: std::io::Error },
}

/// Install the toolchain `name` names (`cuda`, `hip` or `triton`).
pub fn install(name: &str, env: &Env, output: ToolOutput) -> Result<Installed, ToolchainError> {
    match name {
        "cuda" => install_cuda(env, output),
        "hip" => install_hip(env, output),
        "triton" => install_triton(env, output),
        other => Err(ToolchainError::Install(format!(
            "no toolchain `{other}`: kbuild installs cuda, hip and triton"
        ))),
    }
}

impl ToolchainError {
    /// The captured output of the tool that failed, when there is any.
    pub fn tool_output(&self) -> Option<&str> {
        match self {
            ToolchainError::Tool { output, .. } if !output.trim().is_empty() => Some(output),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::target::Version;
    use std::path::Path;

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
        let e = verify_cuda_install(d.path()).unwrap_err().to_string();
        assert!(e.contains("nvidia/cu13/bin/nvcc has sha256"), "{e}");
        let e = verify_cuda_install(&d.path().join("none"))
            .unwrap_err()
            .to_string();
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
