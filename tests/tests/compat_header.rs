//! kbuild's compat header (issue 14 item 2) and the -O3 default of both vendors (item 3): a
//! plain CUDA file with no kcompat.h and no include dirs builds for gfx and sm targets, the
//! header lands in the out-dir, and the manifest records every object's compiler arguments.

use crate::kbuild_tests;

use std::path::{Path, PathBuf};

use kbuild_tests::{manifest, repo_root, text, Scratch};

/// A plain CUDA file: what a CUDA project has, with none of kbuild's macros.
const PLAIN_CUDA: &str = r#"#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void __launch_bounds__(256)
plain(float* x, int* count, float* total, __half* h, __nv_bfloat16* b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = x[i];
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_down_sync(0xffffffffu, v, 2);
  atomicAdd(count, 1);
  atomicAdd(total, v);
  h[i] = __float2half(__half2float(h[i]) + v);
  b[i] = __float2bfloat16(__bfloat162float(b[i]) * v);
}
"#;

const VECTOR_ADD: &str = r#"extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
"#;

/// A one-kernel project in `<dir>/proj` with `build` appended to its `[build]` table and no
/// include dirs.
fn project(dir: &Path, entry: &str, source: &str, build: &str) -> PathBuf {
    let p = dir.join("proj");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("k.cu"), source).unwrap();
    std::fs::write(
        p.join("Kbuild.toml"),
        format!(
            "[package]\nname = \"plain\"\nversion = \"0.1.0\"\n\n[build]\nout-dir = \"out\"\n{build}\n\
             [kernels.k]\nsource = \"k.cu\"\nentries = [\"{entry}\"]\n"
        ),
    )
    .unwrap();
    p
}

fn object<'a>(m: &'a serde_json::Value, target: &str) -> &'a serde_json::Value {
    m["objects"]
        .as_array()
        .and_then(|a| a.iter().find(|o| o["target"] == target))
        .unwrap_or_else(|| panic!("no {target} object in {m:#}"))
}

fn compile_args(o: &serde_json::Value) -> Vec<String> {
    o["compile_args"]
        .as_array()
        .unwrap_or_else(|| panic!("no compile_args in {o:#}"))
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_plain_cuda_kernel_builds_for_gfx1100_and_sm_89_without_include_dirs() {
    let s = Scratch::new();
    let p = project(s.path(), "plain", PLAIN_CUDA, "");
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100,sm_89"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&p.join("out"));
    assert_eq!(m["objects"].as_array().map(Vec::len), Some(2), "{m:#}");

    let amd = object(&m, "gfx1100");
    assert_eq!(amd["entries"], serde_json::json!(["plain"]));
    // __launch_bounds__(256) reached the code object's .max_flat_workgroup_size.
    let r = &amd["resources"]["plain"];
    assert_eq!(r["max_threads"], 256, "{r:#}");
    assert_eq!(r["occupancy"]["block_size"], 256, "{r:#}");
    assert_eq!(
        r["occupancy"]["block_size_from"], "max-flat-workgroup-size",
        "{r:#}"
    );
    let args = compile_args(amd);
    for a in [
        "-I$KBUILD_INCLUDE",
        "-I$KBUILD_INCLUDE/hip-shim",
        "-include",
    ] {
        assert!(args.iter().any(|x| x == a), "{a} not in {args:?}");
    }
    // Reproducible: no machine path in what the manifest records.
    assert!(
        args.iter()
            .all(|a| !a.contains("/usr") && !a.contains(".local")),
        "{args:?}"
    );

    let nv = object(&m, "sm_89");
    assert_eq!(nv["entries"], serde_json::json!(["plain"]));
    assert_eq!(nv["resources"]["plain"]["max_threads"], 256);
    let args = compile_args(nv);
    // nvcc sees kcompat.h's dir but not the hip-shim one: its cuda_*.h are the toolkit's.
    assert!(args.iter().any(|a| a == "-I$KBUILD_INCLUDE"), "{args:?}");
    assert!(
        !args
            .iter()
            .any(|a| a.contains("hip-shim") || a == "-include"),
        "{args:?}"
    );
}

#[test]
fn the_header_lands_in_the_out_dir_is_restored_and_does_not_key_on_the_out_dir() {
    let s = Scratch::new();
    let p = project(s.path(), "vector_add", VECTOR_ADD, "");
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.compiles(), 1);
    let inc = p.join("out/include");
    let shipped = repo_root().join("build-system/include");
    for f in [
        "kcompat.h",
        "hip-shim/cuda_runtime.h",
        "hip-shim/cuda_fp16.h",
        "hip-shim/cuda_bf16.h",
    ] {
        assert_eq!(
            std::fs::read(inc.join(f)).unwrap_or_default(),
            std::fs::read(shipped.join(f)).unwrap(),
            "{f}"
        );
    }

    // An edited copy in the out-dir is kbuild's to rewrite; the object stays cached (the key
    // holds the shipped bytes, not the file's).
    std::fs::write(inc.join("kcompat.h"), "#error not kbuild's\n").unwrap();
    s.reset_count();
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.compiles(), 0, "{}", text(&o));
    assert_eq!(
        std::fs::read(inc.join("kcompat.h")).unwrap(),
        std::fs::read(shipped.join("kcompat.h")).unwrap()
    );

    // Another out-dir: the header is written there too, and the cache still hits.
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100", "--out", "elsewhere"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(s.compiles(), 0, "{}", text(&o));
    assert!(p.join("elsewhere/include/kcompat.h").is_file());
    assert_eq!(
        manifest(&p.join("elsewhere"))["objects"],
        manifest(&p.join("out"))["objects"]
    );
}

#[test]
fn compat_header_false_leaves_the_include_path_alone() {
    let s = Scratch::new();
    let p = project(
        s.path(),
        "vector_add",
        VECTOR_ADD,
        "compat-header = false\n",
    );
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100,sm_89"]);
    // Without the header hip-clang has no blockIdx for a plain CUDA file: the issue's failure.
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("k for gfx1100") && err.contains("undeclared identifier 'blockIdx'"),
        "{}",
        text(&o)
    );
    assert!(!p.join("out/include").exists());
    let nv = object(&manifest(&p.join("out")), "sm_89").clone();
    assert!(
        !compile_args(&nv)
            .iter()
            .any(|a| a.contains("KBUILD_INCLUDE")),
        "{nv:#}"
    );
}

#[test]
fn o3_is_the_default_for_both_vendors_and_a_project_level_is_kept() {
    let s = Scratch::new();
    let p = project(s.path(), "vector_add", VECTOR_ADD, "");
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100,sm_89"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&p.join("out"));
    for t in ["gfx1100", "sm_89"] {
        let args = compile_args(object(&m, t));
        assert_eq!(
            args.iter()
                .filter(|a| a.starts_with("-O"))
                .collect::<Vec<_>>(),
            ["-O3"],
            "{t}: {args:?}"
        );
    }

    let q = s.path().join("o1");
    std::fs::create_dir_all(&q).unwrap();
    let p = project(
        &q,
        "vector_add",
        VECTOR_ADD,
        "flags.cuda = [\"-O1\"]\nflags.hip = [\"-O1\"]\n",
    );
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100,sm_89"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&p.join("out"));
    for t in ["gfx1100", "sm_89"] {
        let args = compile_args(object(&m, t));
        assert_eq!(
            args.iter()
                .filter(|a| a.starts_with("-O"))
                .collect::<Vec<_>>(),
            ["-O1"],
            "{t}: {args:?}"
        );
    }
}

/// The issue's vector add: built without project flags, hip-clang used to run at -O0 (41
/// VGPRs, 308 B scratch, 16/17 spills). At the -O3 default nothing goes to scratch.
#[test]
fn a_plain_vector_add_on_gfx1100_has_no_scratch_and_no_spills() {
    let s = Scratch::new();
    let p = project(s.path(), "vector_add", VECTOR_ADD, "");
    let o = s.kbuild(&p, &["build", "--targets", "gfx1100"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&p.join("out"));
    let r = &object(&m, "gfx1100")["resources"]["vector_add"];
    assert_eq!(r["scratch_bytes"], 0, "{r:#}");
    assert_eq!(r["vgpr_spills"], 0, "{r:#}");
    assert_eq!(r["sgpr_spills"], 0, "{r:#}");
    assert!(r["vgprs"].as_u64().is_some_and(|v| v < 41), "{r:#}");
}

/// The compat header precompiled for the AMD compiles (build-system/src/pch.rs) changes no
/// byte of a build: every compile of the project's kernels for gfx1100 loads it, and the
/// objects, their logs, the manifest, and each cache entry's dependency list and compiler log
/// equal a build with `KBUILD_PCH=0`.
#[test]
fn the_precompiled_compat_header_changes_no_byte_of_a_build() {
    let s = Scratch::with_repo_kernels("proj");
    let kernels = s.path().join("proj/kernels");
    let build = |pch: &str| {
        let o = std::process::Command::new(kbuild_tests::kbuild_bin())
            .args([
                "build",
                "--targets",
                "gfx1100",
                "--out",
                &format!("out-{pch}"),
            ])
            .current_dir(&kernels)
            .env("KBUILD_CACHE_DIR", s.path().join(format!("cache-{pch}")))
            .env("KBUILD_PCH", pch)
            .env("KBUILD_LOG", "kbuild_build::build::compile=debug")
            .env("NO_COLOR", "1")
            // A launcher turns it off (a compiler cache keys on the command line).
            .env_remove("KBUILD_LAUNCHER")
            .output()
            .expect("running kbuild");
        assert!(o.status.success(), "KBUILD_PCH={pch}: {}", text(&o));
        String::from_utf8_lossy(&o.stderr)
            .matches("compiled with the precompiled compat header")
            .count()
    };
    assert_eq!(build("0"), 0);
    let loaded = build("1");

    let (plain, pch) = (kernels.join("out-0"), kernels.join("out-1"));
    let objects: Vec<PathBuf> = std::fs::read_dir(plain.join("gfx1100"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let hsaco = objects
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "hsaco"))
        .count();
    assert!(hsaco >= 20, "{objects:?}");
    assert_eq!(loaded, hsaco, "every compile loads the precompiled header");
    for p in &objects {
        let name = p.file_name().unwrap();
        assert!(
            std::fs::read(p).unwrap() == std::fs::read(pch.join("gfx1100").join(name)).unwrap(),
            "{} differs",
            name.to_string_lossy()
        );
    }
    assert_eq!(
        std::fs::read_to_string(plain.join("manifest.json")).unwrap(),
        std::fs::read_to_string(pch.join("manifest.json")).unwrap()
    );

    // The cache entries: the same action keys, dependency lists and compiler logs.
    let entries = |cache: &str| -> Vec<PathBuf> {
        let mut v = Vec::new();
        for shard in std::fs::read_dir(s.path().join(cache).join("objects")).unwrap() {
            for e in std::fs::read_dir(shard.unwrap().path()).unwrap() {
                v.push(e.unwrap().path());
            }
        }
        v.sort();
        v
    };
    let (a, b) = (entries("cache-0"), entries("cache-1"));
    let names = |v: &[PathBuf]| -> Vec<String> {
        v.iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(names(&a), names(&b), "the same action keys");
    assert!(a.len() >= 20);
    for (x, y) in a.iter().zip(&b) {
        let meta = |d: &Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(d.join("meta.json")).unwrap()).unwrap()
        };
        let (mx, my) = (meta(x), meta(y));
        for field in ["deps", "object_blake3", "size"] {
            assert_eq!(mx[field], my[field], "{field} of {}", x.display());
        }
        assert!(
            std::fs::read(x.join("log")).unwrap() == std::fs::read(y.join("log")).unwrap(),
            "log of {}",
            x.display()
        );
    }
}

/// The precompiled header is kept in the cache between builds: the next build that compiles
/// an AMD kernel uses it without precompiling again, and one whose inputs changed (a header's
/// mtime, as clang checks) precompiles it again in its place; the objects stay the plain
/// compile's.
#[test]
fn the_precompiled_header_is_kept_between_builds_while_its_inputs_are_unchanged() {
    let s = Scratch::new();
    let p = project(s.path(), "vector_add", VECTOR_ADD, "");
    let build = |tag: &str| {
        // An edit per build, so that each compiles (the action key changes).
        std::fs::write(p.join("k.cu"), format!("{VECTOR_ADD}// {tag}\n")).unwrap();
        let o = std::process::Command::new(kbuild_tests::kbuild_bin())
            .args(["build", "--targets", "gfx1100"])
            .current_dir(&p)
            .env("KBUILD_CACHE_DIR", &s.cache)
            .env(
                "KBUILD_LOG",
                "kbuild_build::pch=debug,kbuild_build::build::compile=debug",
            )
            .env("NO_COLOR", "1")
            .env_remove("KBUILD_LAUNCHER")
            .env_remove("KBUILD_PCH")
            .output()
            .expect("running kbuild");
        assert!(o.status.success(), "{tag}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        let count = |needle: &str| err.matches(needle).count();
        (
            count("precompiled the compat header into"),
            count("is current"),
            count("compiled with the precompiled compat header"),
        )
    };
    assert_eq!(build("first"), (1, 0, 1));
    assert_eq!(build("second"), (0, 1, 1));
    // Same bytes, a new mtime: clang would refuse the stored header, so it is built again.
    let header = p.join("out/include/kcompat.h");
    let bytes = std::fs::read(&header).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&header, bytes).unwrap();
    assert_eq!(build("third"), (1, 0, 1));
    assert_eq!(build("fourth"), (0, 1, 1));
    let stored = std::fs::read_dir(s.cache.join("pch")).unwrap().count();
    assert_eq!(stored, 1, "one stored header for one target and flag set");
}
