//! `amd_occupancy` against clang-19: for every AMD catalogue processor clang-19 builds, a
//! source of many kernels (VGPR, AGPR and SGPR pressure, static LDS, launch bounds) is
//! compiled with `-Rpass-analysis=kernel-resource-usage`; the model, fed each kernel's
//! code-object metadata, must equal the remark's "Occupancy [waves/SIMD]" for every kernel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use kbuild_manifest::occupancy::{amd_occupancy, AmdUsage};
use kbuild_manifest::read::amdgpu::read_hsaco;
use kbuild_manifest::read::parse_clang_resource_remarks;
use kbuild_manifest::target::{processor, Vendor, Version, PROCESSORS};

const CLANG: &str = "clang++-19";
const INSTALL_HINT: &str = "run `cargo run -p kbuild -- toolchain install hip`";

/// The kernels: one source for every target; AGPR kernels only where AGPRs exist.
fn source() -> String {
    let mut s = String::from(
        r#"#include <hip/hip_runtime.h>
typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef float float16 __attribute__((ext_vector_type(16)));

// Static LDS of BYTES at a launch bound of BLOCK, with a clobbered register CLOB.
#define LDS(name, block, bytes, clob)                                            \
  extern "C" __global__ void __launch_bounds__(block) name(float *p) {          \
    __shared__ float buf[(bytes) / 4];                                           \
    buf[threadIdx.x % ((bytes) / 4)] = p[threadIdx.x];                           \
    __syncthreads();                                                             \
    asm volatile("" ::: clob);                                                   \
    p[threadIdx.x] = buf[(threadIdx.x + 1) % ((bytes) / 4)];                     \
  }
// No LDS, a clobbered register CLOB (its number + 1 is the register count).
#define REG(name, block, clob)                                                   \
  extern "C" __global__ void __launch_bounds__(block) name(float *p) {          \
    asm volatile("" ::: clob);                                                   \
    p[threadIdx.x] = 1.0f;                                                       \
  }

extern "C" __global__ void tiny(float *p) { p[threadIdx.x] = 1.0f; }

// Real register pressure: 96 live values, uncapped and capped.
#define PRESSURE_BODY                                                            \
  float v[96];                                                                   \
  _Pragma("unroll") for (int i = 0; i < 96; ++i) v[i] = p[threadIdx.x + i * 256]; \
  float acc = 0.0f;                                                              \
  _Pragma("unroll") for (int r = 0; r < 4; ++r)                                  \
  _Pragma("unroll") for (int i = 0; i < 96; ++i) acc += v[i] * v[(i + r) % 96];  \
  _Pragma("unroll") for (int i = 0; i < 96; ++i) p[threadIdx.x + i * 256] = v[i] + acc;
extern "C" __global__ void __launch_bounds__(256) pressure(float *p) { PRESSURE_BODY }
extern "C" __global__ void __launch_bounds__(256) __attribute__((amdgpu_num_vgpr(40)))
pressure_capped(float *p) { PRESSURE_BODY }
extern "C" __global__ void pressure_1024(float *p) { PRESSURE_BODY }
"#,
    );
    for n in [23, 24, 31, 40, 63, 64, 84, 96, 127, 128, 167, 191, 255] {
        s += &format!("REG(v{n}, 256, \"v{n}\")\n");
    }
    for n in [63, 127] {
        s += &format!("REG(v{n}_b1024, 1024, \"v{n}\")\n");
        s += &format!("REG(v{n}_b64, 64, \"v{n}\")\n");
    }
    for n in [79, 89, 93, 95, 99] {
        s += &format!("REG(s{n}, 256, \"s{n}\")\n");
    }
    for b in [
        32, 64, 96, 128, 192, 256, 320, 448, 512, 576, 640, 704, 832, 960, 1024,
    ] {
        s += &format!("REG(b{b}, {b}, \"v1\")\n");
    }
    for (block, bytes, clob) in [
        (256, 1024, "v1"),
        (256, 4096, "v1"),
        (256, 8192, "v1"),
        (256, 16384, "v1"),
        (256, 20000, "v1"),
        (256, 32768, "v1"),
        (256, 40000, "v1"),
        (256, 49152, "v1"),
        (256, 65536, "v1"),
        (64, 2048, "v1"),
        (64, 8192, "v1"),
        (32, 4096, "v1"),
        (128, 12000, "v1"),
        (448, 20000, "v1"),
        (512, 30000, "v1"),
        (1024, 16384, "v1"),
        (1024, 65536, "v1"),
        (256, 16384, "v127"),
        (128, 8192, "v95"),
        (256, 24576, "s99"),
    ] {
        s += &format!("LDS(lds{bytes}_b{block}_{clob}, {block}, {bytes}, \"{clob}\")\n");
    }
    s += r#"
#if defined(__gfx90a__) || defined(__gfx942__)
REG(a31, 256, "a31")
REG(a127, 256, "a127")
REG(a255, 256, "a255")
extern "C" __global__ void __launch_bounds__(256) a63_v127(float *p) {
  asm volatile("" ::: "a63", "v127");
  p[threadIdx.x] = 1.0f;
}
// MFMA: the accumulators live in AGPRs (or unified VGPRs).
extern "C" __global__ void __launch_bounds__(256) mfma(const half4 *a, float16 *c) {
  float16 acc[4] = {};
  for (int k = 0; k < 64; ++k)
    for (int j = 0; j < 4; ++j)
      acc[j] = __builtin_amdgcn_mfma_f32_32x32x8f16(a[threadIdx.x + k * 256 + j],
                                                   a[threadIdx.x + j], acc[j], 0, 0, 0);
  for (int j = 0; j < 4; ++j) c[threadIdx.x * 4 + j] = acc[j];
}
extern "C" __global__ void __launch_bounds__(1024) mfma_b1024(const half4 *a, float16 *c) {
  float16 acc[2] = {};
  for (int k = 0; k < 64; ++k)
    for (int j = 0; j < 2; ++j)
      acc[j] = __builtin_amdgcn_mfma_f32_32x32x8f16(a[threadIdx.x + k * 1024],
                                                   a[threadIdx.x + j], acc[j], 0, 0, 0);
  for (int j = 0; j < 2; ++j) c[threadIdx.x * 2 + j] = acc[j];
}
#endif
"#;
    s
}

fn device_libs() -> PathBuf {
    let home = std::env::var_os("HOME").unwrap_or_default();
    Path::new(&home).join(".local/share/kbuild/toolchains/hip-device-libs-llvm19")
}

/// One build: a processor name and an optional wave size override.
struct Build {
    processor: &'static str,
    wave64: bool,
}

impl Build {
    fn label(&self) -> String {
        let wave = if self.wave64 { " w64" } else { "" };
        format!("{}{wave}", self.processor)
    }
}

/// One kernel's comparison.
struct Row {
    kernel: String,
    clang: u32,
    model: u32,
    limiter: String,
    usage: AmdUsage,
}

fn compile(dir: &Path, src: &Path, b: &Build) -> Result<Vec<Row>, String> {
    let out = dir.join(format!(
        "{}{}.hsaco",
        b.processor,
        if b.wave64 { "-w64" } else { "" }
    ));
    let mut cmd = Command::new(CLANG);
    cmd.args([
        "-x",
        "hip",
        "--offload-device-only",
        "--no-gpu-bundle-output",
        "-O3",
    ])
    .arg(format!("--offload-arch={}", b.processor))
    .arg("--rocm-path=/usr")
    .arg(format!(
        "--rocm-device-lib-path={}",
        device_libs().display()
    ))
    .arg("-Rpass-analysis=kernel-resource-usage")
    .arg(src)
    .arg("-o")
    .arg(&out);
    let p = processor(b.processor).ok_or("not in the catalogue")?;
    if p.is_generic() {
        cmd.arg("-mcode-object-version=6");
    }
    if b.wave64 {
        cmd.arg("-mwavefrontsize64");
    }
    let output = cmd
        .output()
        .map_err(|e| format!("{CLANG}: {e} ({INSTALL_HINT})"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("{CLANG} failed:\n{stderr}"));
    }
    let remarks = parse_clang_resource_remarks(&stderr);
    let bytes = std::fs::read(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let obj = read_hsaco(&bytes).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut rows = Vec::new();
    for k in &obj.kernels {
        let m = k
            .metadata
            .as_ref()
            .ok_or(format!("{}: no metadata", k.name))?;
        let r = remarks
            .iter()
            .find(|r| r.function == k.name)
            .ok_or(format!("{}: no remark", k.name))?;
        let clang = r
            .occupancy
            .ok_or(format!("{}: remark without occupancy", k.name))?;
        if r.lds_bytes != Some(m.group_segment_fixed_size) {
            return Err(format!(
                "{}: remark LDS {:?} vs metadata {}",
                k.name, r.lds_bytes, m.group_segment_fixed_size
            ));
        }
        let usage = AmdUsage {
            vgprs: m.vgpr_count,
            agprs: m.agpr_count.unwrap_or(0),
            sgprs: m.sgpr_count,
            lds_bytes: u32::try_from(m.group_segment_fixed_size).unwrap_or(u32::MAX),
            block_size: m.max_flat_workgroup_size,
            wave_size: m.wavefront_size,
        };
        let o = amd_occupancy(p, &usage).ok_or("no AMD model")?;
        rows.push(Row {
            kernel: k.name.clone(),
            clang,
            model: o.value,
            limiter: o.limiter,
            usage,
        });
    }
    if rows.len() != remarks.len() {
        return Err(format!(
            "{} kernels in the object, {} remarks",
            rows.len(),
            remarks.len()
        ));
    }
    Ok(rows)
}

#[test]
fn model_equals_clang_remark_for_every_kernel_and_processor() {
    let libs = device_libs();
    let clang_ok = Command::new(CLANG)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(clang_ok, "{CLANG} not found: {INSTALL_HINT}");
    assert!(libs.is_dir(), "{} missing: {INSTALL_HINT}", libs.display());

    let mut builds: Vec<Build> = PROCESSORS
        .iter()
        .filter(|p| p.vendor() == Vendor::Amd && p.min_toolchain <= Version(19, 0))
        .map(|p| Build {
            processor: p.name,
            wave64: false,
        })
        .collect();
    // wave64 on gfx11/gfx12 (HIP refuses wave64 on gfx10).
    for wave64 in ["gfx1100", "gfx1201"] {
        builds.push(Build {
            processor: wave64,
            wave64: true,
        });
    }

    let dir = std::env::temp_dir().join(format!("kbuild-occupancy-amd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("occupancy.hip");
    std::fs::write(&src, source()).unwrap();

    // Two compilers at a time (the machine this runs on is small).
    let next = AtomicUsize::new(0);
    let results: Mutex<BTreeMap<usize, Result<Vec<Row>, String>>> = Mutex::default();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(b) = builds.get(i) else { break };
                let r = compile(&dir, &src, b);
                results.lock().unwrap().insert(i, r);
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);

    let mut failures = Vec::new();
    let mut total = 0;
    println!(
        "{:<16} {:>7} {:>6}  waves/SIMD values (count)        limiters",
        "target", "kernels", "equal"
    );
    for (i, r) in results.into_inner().unwrap() {
        let b = &builds[i];
        let rows = match r {
            Ok(rows) => rows,
            Err(e) => {
                failures.push(format!("{}: {e}", b.label()));
                continue;
            }
        };
        let equal = rows.iter().filter(|r| r.clang == r.model).count();
        let mut values: BTreeMap<u32, usize> = BTreeMap::new();
        let mut limiters: BTreeMap<&str, usize> = BTreeMap::new();
        for r in &rows {
            *values.entry(r.clang).or_default() += 1;
            *limiters.entry(r.limiter.as_str()).or_default() += 1;
            if r.clang != r.model {
                failures.push(format!(
                    "{} {}: clang {} model {} ({}) from {:?}",
                    b.label(),
                    r.kernel,
                    r.clang,
                    r.model,
                    r.limiter,
                    r.usage
                ));
            }
        }
        let values: Vec<String> = values
            .iter()
            .rev()
            .map(|(v, n)| format!("{v}×{n}"))
            .collect();
        let limiters: Vec<String> = limiters.iter().map(|(l, n)| format!("{l}:{n}")).collect();
        println!(
            "{:<16} {:>7} {:>6}  {:<32} {}",
            b.label(),
            rows.len(),
            equal,
            values.join(" "),
            limiters.join(" ")
        );
        total += rows.len();
    }
    println!(
        "{total} kernel builds compared over {} builds",
        builds.len()
    );
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
