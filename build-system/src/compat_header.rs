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
    ),
    (
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
    use kbuild_base::env::Env;

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

    /// clang-19 with the device libraries, found as a build finds them (the test fails, naming
    /// the fix, where they are missing: `kbuild toolchain install hip`).
    fn hip_clang() -> crate::toolchain::HipToolchain {
        let cache = tempfile::tempdir().unwrap();
        let mut env = Env::empty();
        for name in ["HOME", "PATH", "ROCM_PATH", "XDG_DATA_HOME"] {
            if let Some(v) = std::env::var_os(name) {
                env = env.with(name, v);
            }
        }
        crate::toolchain::Toolchains::discover(&Default::default(), cache.path(), &env)
            .hip
            .expect("no HIP toolchain: run `kbuild toolchain install hip`")
    }

    /// Compile `source` as a plain CUDA file for gfx1100 the way the driver does (device only,
    /// the shims on the path, kcompat.h forced in) plus `extra`; the compiler's log on failure.
    fn compile_for_gfx1100(source: &str, extra: &[&str]) -> Result<(), String> {
        let tc = hip_clang();
        let d = tempfile::tempdir().unwrap();
        let inc = write(d.path()).unwrap();
        let src = d.path().join("k.cu");
        std::fs::write(&src, source).unwrap();
        let out = std::process::Command::new(&tc.clang)
            .args([
                "-x",
                "hip",
                "--offload-arch=gfx1100",
                "--offload-device-only",
            ])
            .args(["--no-gpu-bundle-output", "-O3", "-fuse-cuid=none"])
            .arg(format!("--rocm-path={}", tc.rocm_path.display()))
            .arg(format!(
                "--rocm-device-lib-path={}",
                tc.device_libs.display()
            ))
            .arg(format!("-I{}", inc.display()))
            .arg(format!("-I{}", inc.join("hip-shim").display()))
            .args(["-include", "kcompat.h"])
            .args(extra)
            .arg(&src)
            .arg("-o")
            .arg(d.path().join("k.hsaco"))
            .output()
            .unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[test]
    fn the_cuda_names_of_real_libraries_compile_for_gfx1100() {
        // One small file per piece a real library needed (issue 27): each line is the use.
        let source = r#"
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda/std/limits>
#include <library_types.h>
#include <cuComplex.h>
#if __CUDA_ARCH__ < 600
#error "__CUDA_ARCH__ must be defined to KC_CUDA_ARCH in the device pass"
#endif
static void host_side(cudaStream_t s, CUdevice d) {
  cudaDeviceProp p; (void)p; (void)d;
  if (cudaMemsetAsync(nullptr, 0, 0, s) != cudaSuccess) (void)cudaGetErrorString(cudaGetLastError());
}
__global__ void k(unsigned* u, int* i, long long* l, unsigned short* s, __half* h,
                  __nv_bfloat16* b, __nv_fp8_e4m3* f8, float* f) {
  if (u[0] == 7u) __trap();
  u[1] = __vsubss4(u[2], u[3]) ^ __vadd4(u[2], u[3]) ^ __vcmpeq4(u[2], u[3]);
  i[0] = __dp4a(i[1], i[2], i[3]);
  atomicMax(l, 5ll);
  atomicMin(l + 1, -5ll);
  atomicCAS(s, (unsigned short)1, (unsigned short)2);
  atomicAdd(h + 3, h[4]);
  h[0] = __hmax(h[1], h[2]);
  h[1] = __hmin(h[1], h[2]);
  b[0] = hsqrt(b[1]); b[1] = hexp(b[2]); b[2] = hlog(b[3]); b[3] = hsin(b[4]); b[4] = hcos(b[5]);
  if (__hisnan(b[6])) b[7] += b[0];
  f8[0] = __nv_fp8_e4m3(f[0] * 2.0f);
  f[1] = __half2float(__nv_cvt_fp8_to_halfraw(f8[1].__x, __NV_E4M3)) + (float)f8[2];
  f[2] = cuda::std::numeric_limits<float>::max() + (float)min(u[4], blockDim.x);
}
"#;
        compile_for_gfx1100(source, &[]).unwrap();
    }

    #[test]
    fn cuda_arch_follows_the_flags() {
        let probe = "#if __CUDA_ARCH__ != 800\n#error wrong\n#endif\n__global__ void k() {}\n";
        compile_for_gfx1100(probe, &["-DKC_CUDA_ARCH=800"]).unwrap();
        let undefined = "#ifdef __CUDA_ARCH__\n#error defined\n#endif\n__global__ void k() {}\n";
        compile_for_gfx1100(undefined, &["-DKC_NO_CUDA_ARCH"]).unwrap();
        // The default: 610 (docs/compat-header.md says why).
        let default = "#if __CUDA_ARCH__ != 610\n#error wrong\n#endif\n__global__ void k() {}\n";
        compile_for_gfx1100(default, &[]).unwrap();
    }

    #[test]
    fn cub_is_refused_with_a_reason() {
        let log = compile_for_gfx1100("#include <cub/cub.cuh>\n", &[]).unwrap_err();
        assert!(log.contains("has no HIP mapping"), "{log}");
    }

    #[test]
    fn a_library_fallback_of_a_shimmed_name_wins_over_the_shim() {
        // candle defines __hmax_nan itself behind an arch guard; a plain function must not
        // collide with kcompat's.
        let source = "__device__ __half __hmax_nan(__half a, __half b) { return a; }\n\
                      __global__ void k(__half* h) { h[0] = __hmax_nan(h[1], h[2]); }\n";
        compile_for_gfx1100(source, &[]).unwrap();
    }

    /// The fp8 value of `code` (positive half, `code` up to the largest finite + 1), exact.
    fn fp8_value(code: u32, e4m3: bool) -> f64 {
        let (man, bias): (u32, i32) = if e4m3 { (3, 7) } else { (2, 15) };
        let (e, m) = (code >> man, code & ((1 << man) - 1));
        if e == 0 {
            m as f64 * 2f64.powi(1 - bias - man as i32)
        } else {
            (1.0 + m as f64 / (1 << man) as f64) * 2f64.powi(e as i32 - bias)
        }
    }

    /// The reference encoding: the nearest code, ties to the even code, past the largest
    /// finite value the overflow code (saturating: that value).
    fn fp8_reference(x: f32, e4m3: bool, sat: bool) -> u32 {
        let max_code = if e4m3 { 0x7e } else { 0x7b };
        let overflow = if sat {
            max_code
        } else if e4m3 {
            0x7f
        } else {
            0x7c
        };
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return sign | 0x7f;
        }
        if x.is_infinite() {
            return sign | overflow;
        }
        let a = (x as f64).abs();
        let mut best = 0u32;
        for c in 0..=max_code + 1 {
            let (d, db) = (
                (fp8_value(c, e4m3) - a).abs(),
                (fp8_value(best, e4m3) - a).abs(),
            );
            if d < db || (d == db && c % 2 == 0) {
                best = c;
            }
        }
        sign | if best > max_code { overflow } else { best }
    }

    /// `program` (C++) built for the host with `clang` and `args` in `dir`, run; its stdout.
    fn run_on_cpu(clang: &Path, dir: &Path, name: &str, program: &str, args: &[String]) -> String {
        let src = dir.join(format!("{name}.cpp"));
        std::fs::write(&src, program).unwrap();
        let exe = dir.join(name);
        let out = std::process::Command::new(clang)
            .args(["-x", "c++", "-std=c++17", "-O2"])
            .args(args)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = std::process::Command::new(&exe).output().unwrap();
        String::from_utf8(run.stdout).unwrap()
    }

    #[test]
    fn fp8_conversions_match_a_cpu_reference() {
        // The shim's formulas, compiled for the CPU (KC_FP8_CORE_ONLY), against the nearest
        // representable value computed here.
        let tc = hip_clang();
        let d = tempfile::tempdir().unwrap();
        let inc = write(d.path()).unwrap();
        let mut values: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            1.0625,
            1.125,
            1.1875,
            448.0,
            464.0,
            465.0,
            500.0,
            57344.0,
            61440.0,
            61441.0,
            1e9,
            2f32.powi(-9),
            2f32.powi(-10),
            3.0 * 2f32.powi(-11),
            2f32.powi(-16),
            2f32.powi(-17),
            1e-30,
            f32::INFINITY,
            f32::NAN,
        ];
        // A sweep over the whole range, both signs.
        let mut v = 1e-6f32;
        while v < 1e5 {
            values.push(v);
            values.push(-v * 1.37);
            v *= 1.0173;
        }
        let bits: Vec<String> = values
            .iter()
            .map(|v| format!("0x{:08x}u", v.to_bits()))
            .collect();
        let program = format!(
            "#include <cstdio>\n#include \"hip-shim/cuda_fp8.h\"\n\
             static const unsigned in[] = {{{}}};\n\
             int main() {{\n\
               for (unsigned b : in) {{\n\
                 float f; __builtin_memcpy(&f, &b, 4);\n\
                 std::printf(\"%u %u %u %u\\n\",\n\
                   __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3), __nv_cvt_float_to_fp8(f, __NV_NOSAT, __NV_E4M3),\n\
                   __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2), __nv_cvt_float_to_fp8(f, __NV_NOSAT, __NV_E5M2));\n\
               }}\n\
               for (unsigned c = 0; c < 256; ++c) {{\n\
                 std::printf(\"%u %u\\n\", kc_fp8::bits(kc_fp8::decode(c, __NV_E4M3)),\n\
                   kc_fp8::bits(kc_fp8::decode(c, __NV_E5M2)));\n\
               }}\n\
             }}\n",
            bits.join(",")
        );
        let text = run_on_cpu(
            &tc.clang,
            d.path(),
            "fp8",
            &program,
            &["-DKC_FP8_CORE_ONLY".into(), format!("-I{}", inc.display())],
        );
        let mut lines = text.lines();
        for x in &values {
            let got: Vec<u32> = lines
                .next()
                .unwrap()
                .split(' ')
                .map(|n| n.parse().unwrap())
                .collect();
            let want = [
                fp8_reference(*x, true, true),
                fp8_reference(*x, true, false),
                fp8_reference(*x, false, true),
                fp8_reference(*x, false, false),
            ];
            assert_eq!(got, want, "{x:e} (e4m3 sat, nosat, e5m2 sat, nosat)");
        }
        for code in 0u32..256 {
            let got: Vec<f64> = lines
                .next()
                .unwrap()
                .split(' ')
                .map(|n| f32::from_bits(n.parse().unwrap()) as f64)
                .collect();
            let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
            let c = code & 0x7f;
            if c == 0x7f {
                assert!(got[0].is_nan(), "e4m3 {code:#x}");
            } else {
                assert_eq!(got[0], sign * fp8_value(c, true), "e4m3 {code:#x}");
            }
            match c {
                0x7c => assert_eq!(got[1], sign * f64::INFINITY),
                0x7d..=0x7f => assert!(got[1].is_nan(), "e5m2 {code:#x}"),
                _ => assert_eq!(got[1], sign * fp8_value(c, false), "e5m2 {code:#x}"),
            }
        }
    }

    #[test]
    fn simd_intrinsics_match_a_cpu_reference() {
        // __vsubss4 and __dp4a as the shim writes them, compiled for the CPU, against the
        // per-byte definitions computed here.
        let tc = hip_clang();
        let d = tempfile::tempdir().unwrap();
        write(d.path()).unwrap();
        let kc = std::fs::read_to_string(d.path().join("include/kcompat.h")).unwrap();
        // The shim section as plain C++: the templates have no HIP dependency.
        let start = kc
            .find("namespace kc_detail {\ntemplate <typename Lane, int N")
            .unwrap();
        let end = kc.find("// Atomics HIP 5.2 lacks").unwrap();
        let program = format!(
            "#include <cstdio>\n#define KC_DEVICE inline\n\
             #define KC_SHIM template <typename KcShim = void> KC_DEVICE\n\
             struct char4 {{ signed char x, y, z, w; }};\n{}\n\
             int main() {{\n\
               unsigned s = 12345u;\n\
               for (int i = 0; i < 2000; ++i) {{\n\
                 s = s * 1103515245u + 12345u; unsigned a = s;\n\
                 s = s * 1103515245u + 12345u; unsigned b = s;\n\
                 std::printf(\"%u %u %u %d\\n\", a, b, __vsubss4(a, b), __dp4a((int)a, (int)b, 7));\n\
               }}\n\
             }}\n",
            &kc[start..end]
        );
        let text = run_on_cpu(&tc.clang, d.path(), "simd", &program, &[]);
        assert_eq!(text.lines().count(), 2000);
        for line in text.lines() {
            let n: Vec<i64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
            let (a, b) = (n[0] as u32, n[1] as u32);
            let byte = |w: u32, i: u32| (w >> (8 * i)) as u8 as i8 as i64;
            let mut sub = 0u32;
            let mut dot = 7i64;
            for i in 0..4 {
                let d = (byte(a, i) - byte(b, i)).clamp(-128, 127);
                sub |= ((d as i8 as u8) as u32) << (8 * i);
                dot += byte(a, i) * byte(b, i);
            }
            assert_eq!(n[2] as u32, sub, "__vsubss4({a:#x}, {b:#x})");
            assert_eq!(n[3], dot, "__dp4a({a:#x}, {b:#x})");
        }
    }
}
