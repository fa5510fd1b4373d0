//! The compat header kbuild ships (`kcompat.h`, plus `cuda_runtime.h`, `cuda_fp16.h`,
//! `cuda_bf16.h`, `cooperative_groups.h` and `device_launch_parameters.h` shims for
//! hip-clang): embedded here, written to `<out-dir>/include/` by every build, and put on every
//! kernel's include path (docs/compat-header.md).
//!
//! Compile commands name the directory through the symbolic root [`ROOT`], resolved only when a
//! compiler runs, so cache keys and the manifest's `compile_args` do not depend on where the
//! out-dir is. The header's bytes enter the action key through [`digest`] instead, and its
//! depfile entries are left out of the dependency list (they would carry the out-dir path).

use std::path::{Path, PathBuf};

use kbuild_base::fs as fsutil;

/// `kcompat.h`: the KC_* portability layer and the CUDA names on HIP.
pub const KCOMPAT_H: &str = include_str!("../include/kcompat.h");

/// Every file written, path relative to the include dir and its bytes. `hip-shim/` is on
/// hip-clang's include path only: nvcc must find the toolkit's own `cuda_*.h`.
pub const FILES: &[(&str, &str)] = &[
    ("kcompat.h", KCOMPAT_H),
    (
        "hip-shim/cuda_runtime.h",
        include_str!("../include/hip-shim/cuda_runtime.h"),
    ),
    (
        "hip-shim/cuda_fp16.h",
        include_str!("../include/hip-shim/cuda_fp16.h"),
    ),
    (
        "hip-shim/cuda_bf16.h",
        include_str!("../include/hip-shim/cuda_bf16.h"),
    ),
    (
        "hip-shim/cooperative_groups.h",
        include_str!("../include/hip-shim/cooperative_groups.h"),
    ),
    (
        "hip-shim/device_launch_parameters.h",
        include_str!("../include/hip-shim/device_launch_parameters.h"),
    ),    (
        "hip-shim/cuda_runtime_api.h",
        include_str!("../include/hip-shim/cuda_runtime_api.h"),
    ),
    (
        "hip-shim/cuda_fp8.h",
        include_str!("../include/hip-shim/cuda_fp8.h"),
    ),
    (
        "hip-shim/cuda.h",
        include_str!("../include/hip-shim/cuda.h"),
    ),
    (
        "hip-shim/driver_types.h",
        include_str!("../include/hip-shim/driver_types.h"),
    ),
    (
        "hip-shim/library_types.h",
        include_str!("../include/hip-shim/library_types.h"),
    ),
    (
        "hip-shim/cuComplex.h",
        include_str!("../include/hip-shim/cuComplex.h"),
    ),
    (
        "hip-shim/cub/cub.cuh",
        include_str!("../include/hip-shim/cub/cub.cuh"),
    ),
    (
        "hip-shim/cuda/std/limits",
        include_str!("../include/hip-shim/cuda/std/limits"),
    ),
];

/// The symbolic root compile arguments use for the written include dir.
pub const ROOT: &str = "$KBUILD_INCLUDE";

/// The include dir of a build writing to `out_dir`.
pub fn include_dir(out_dir: &Path) -> PathBuf {
    out_dir.join("include")
}

/// blake3 over the names and bytes of [`FILES`]: part of every action key that uses them, so
/// a kbuild with a changed header recompiles.
pub fn digest() -> String {
    // Once per process: every compile command of a build carries it.
    static DIGEST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIGEST.get_or_init(|| digest_of(FILES)).clone()
}

fn digest_of(files: &[(&str, &str)]) -> String {
    let mut h = blake3::Hasher::new();
    for (name, bytes) in files {
        h.update(name.as_bytes());
        h.update(&[0]);
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

#[derive(Debug, thiserror::Error)]
#[error("writing kbuild's compat header {}: {source}", .path.display())]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Write [`FILES`] under `<out_dir>/include/`, each atomically and only where its bytes differ
/// (an unchanged header keeps its mtime). Returns the include dir.
pub fn write(out_dir: &Path) -> Result<PathBuf, WriteError> {
    let dir = include_dir(out_dir);
    for (name, bytes) in FILES {
        let path = dir.join(name);
        fsutil::write_if_changed(&path, bytes.as_bytes())
            .map_err(|source| WriteError { path, source })?;
    }
    Ok(dir)
}

/// `arg` with a leading [`ROOT`] (bare, or after `-I`) replaced by `dir`.
pub fn resolve(arg: &str, dir: &Path) -> String {
    for prefix in ["-I", ""] {
        if let Some(rest) = arg.strip_prefix(prefix).and_then(|a| a.strip_prefix(ROOT)) {
            if rest.is_empty() || rest.starts_with('/') {
                return format!("{prefix}{}{rest}", dir.display());
            }
        }
    }
    arg.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_once_and_only_when_different() {
        let d = tempfile::tempdir().unwrap();
        let dir = write(d.path()).unwrap();
        assert_eq!(dir, d.path().join("include"));
        for (name, bytes) in FILES {
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), *bytes);
        }
        let h = dir.join("kcompat.h");
        let before = std::fs::metadata(&h).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(d.path()).unwrap();
        assert_eq!(std::fs::metadata(&h).unwrap().modified().unwrap(), before);
        // A stale copy (an older kbuild's) is replaced.
        std::fs::write(&h, "// old").unwrap();
        write(d.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&h).unwrap(), KCOMPAT_H);
    }

    #[test]
    fn the_digest_follows_the_bytes() {
        let base = [("kcompat.h", "a"), ("hip-shim/cuda_fp16.h", "b")];
        let changed = [("kcompat.h", "a "), ("hip-shim/cuda_fp16.h", "b")];
        let moved = [("kcompat.h", ""), ("hip-shim/cuda_fp16.h", "ab")];
        assert_ne!(digest_of(&base), digest_of(&changed));
        assert_ne!(digest_of(&base), digest_of(&moved));
        assert_eq!(digest(), digest_of(FILES));
    }

    #[test]
    fn resolve_replaces_only_the_root() {
        let dir = Path::new("/out/include");
        assert_eq!(resolve("-I$KBUILD_INCLUDE", dir), "-I/out/include");
        assert_eq!(
            resolve("-I$KBUILD_INCLUDE/hip-shim", dir),
            "-I/out/include/hip-shim"
        );
        assert_eq!(resolve("$KBUILD_INCLUDE/x.h", dir), "/out/include/x.h");
        assert_eq!(resolve("-I$KBUILD_INCLUDEX", dir), "-I$KBUILD_INCLUDEX");
        assert_eq!(resolve("kcompat.h", dir), "kcompat.h");
    }
}
