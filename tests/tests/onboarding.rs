//! Onboarding (issue 14 item 1): `entries` patterns (globs, demangled C++ patterns, `*`) and
//! their audit, and `kbuild init` on a tree of kernels, with the real compilers (nvcc for
//! sm_89, hip-clang for gfx1100).

use crate::kbuild_tests;

use std::path::Path;

use kbuild_tests::{manifest, text, Scratch};

/// kcompat.h (single-source CUDA on gfx targets) into `dir`.
fn copy_kcompat(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(
        kbuild_tests::repo_root().join("build-system/include/kcompat.h"),
        dir.join("kcompat.h"),
    )
    .unwrap();
}

/// Three extern "C" kernels and two explicit instantiations of a template.
const OPS: &str = r#"#include "kcompat.h"
KC_KERNEL(64) void fast_add(float* x) { x[threadIdx.x] += 1.0f; }
KC_KERNEL(64) void fast_mul(float* x) { x[threadIdx.x] *= 2.0f; }
KC_KERNEL(64) void slow_add(float* x) { x[threadIdx.x] += 3.0f; }
template <typename T>
__global__ void scale(T* x, int n) { int i = threadIdx.x; if (i < n) x[i] = x[i] * (T)2; }
template __global__ void scale<float>(float*, int);
template __global__ void scale<int>(int*, int);
"#;

/// A kernel the CUDA targets export and the AMD ones do not.
const GUARDED: &str = r#"#include "kcompat.h"
KC_KERNEL(64) void both(float* x) { x[threadIdx.x] += 1.0f; }
#if defined(KC_CUDA)
KC_KERNEL(64) void cuda_only(float* x) { x[threadIdx.x] += 2.0f; }
#endif
"#;

/// A project at `dir`: include/kcompat.h, the sources, and Kbuild.toml with `kernels`.
fn project(dir: &Path, sources: &[(&str, &str)], kernels: &str) {
    copy_kcompat(&dir.join("include"));
    for (name, body) in sources {
        std::fs::write(dir.join(name), body).unwrap();
    }
    std::fs::write(
        dir.join("Kbuild.toml"),
        format!(
            "[package]\nname = \"pat\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\", \"gfx1100\"]\ninclude-dirs = [\"include\"]\nout-dir = \"out\"\n\n{kernels}"
        ),
    )
    .unwrap();
}

fn objects<'a>(m: &'a serde_json::Value, kernel: &str) -> Vec<&'a serde_json::Value> {
    m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kernel"] == kernel)
        .collect()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn globs_demangled_patterns_and_star_become_concrete_entries() {
    let s = Scratch::new();
    let dir = s.path().join("p");
    std::fs::create_dir_all(&dir).unwrap();
    project(
        &dir,
        &[("ops.cu", OPS)],
        r#"[kernels.fast]
source = "ops.cu"
entries = ["fast_*"]

[kernels.scaled]
source = "ops.cu"
entries = ["scale<*>"]

[kernels.spaced]
source = "ops.cu"
entries = ["scale<float>(float *,int)", "slow_add"]

[kernels.every]
source = "ops.cu"
entries = ["*"]
"#,
    );
    let out = s.kbuild(&dir, &["build"]);
    assert!(out.status.success(), "{}", text(&out));
    let m = manifest(&dir.join("out"));
    let float = "_Z5scaleIfEvPT_i";
    let int = "_Z5scaleIiEvPT_i";
    for t in ["sm_89", "gfx1100"] {
        let pick = |k: &str| {
            objects(&m, k)
                .into_iter()
                .find(|o| o["target"] == t)
                .unwrap_or_else(|| panic!("{k} for {t}\n{m:#}"))
                .clone()
        };
        assert_eq!(strings(&pick("fast")["entries"]), ["fast_add", "fast_mul"]);
        let scaled = pick("scaled");
        assert_eq!(strings(&scaled["entries"]), [float, int]);
        assert_eq!(
            scaled["demangled"][float], "void scale<float>(float*, int)",
            "{scaled:#}"
        );
        assert_eq!(scaled["demangled"][int], "void scale<int>(int*, int)");
        assert_eq!(strings(&pick("spaced")["entries"]), [float, "slow_add"]);
        let mut every = strings(&pick("every")["entries"]);
        every.sort();
        assert_eq!(every, [float, int, "fast_add", "fast_mul", "slow_add"]);
    }
    // The loader selects by kernel and finds the entries by their concrete names.
    let package = kbuild_loader::Package::open(&dir.join("out")).unwrap();
    assert!(package.has_load_index());
    for spec in ["sm_89", "gfx1100"] {
        let device = kbuild_manifest::compat::Device::parse(spec, None, None).unwrap();
        let selection = package.select(&device);
        let choice = selection.kernel("scaled", None).unwrap();
        let picked = selection.require(choice).unwrap();
        assert_eq!(picked.target, spec);
        let object = package.object(picked.object).unwrap();
        assert!(object.entry(float).is_some() && object.entry(int).is_some());
        assert!(
            object.entry("fast_add").is_none(),
            "not one of `scaled`'s entries"
        );
        let fast = selection
            .require(selection.kernel("fast", None).unwrap())
            .unwrap();
        assert!(package
            .object(fast.object)
            .unwrap()
            .entry("fast_mul")
            .is_some());
    }
}

#[test]
fn a_pattern_matching_nothing_is_an_audit_error_naming_it() {
    let s = Scratch::new();
    let dir = s.path().join("p");
    std::fs::create_dir_all(&dir).unwrap();
    project(
        &dir,
        &[("ops.cu", OPS)],
        "[kernels.ops]\nsource = \"ops.cu\"\nentries = [\"fast_*\", \"nope_*\"]\ntargets = [\"sm_89\"]\n",
    );
    let out = s.kbuild(&dir, &["build"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kernel `ops`, target sm_89: entry pattern(s) `nope_*` match no exported symbol (it exports: ")
            && err.contains("_Z5scaleIfEvPT_i (void scale<float>(float*, int))"),
        "{}",
        text(&out)
    );
    // A bad pattern is a Kbuild.toml error at its line.
    project(
        &dir,
        &[],
        "[kernels.ops]\nsource = \"ops.cu\"\nentries = [\"fast_[ab\"]\n",
    );
    let out = s.kbuild(&dir, &["build"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Kbuild.toml:12:")
            && err.contains("kernel `ops`: entry pattern `fast_[ab`: `[` without a closing `]`"),
        "{}",
        text(&out)
    );
}

/// The cross-target audit per variant: the target lacking `cuda_only` (gfx1100) fails, the
/// sm_89 objects that export it stay (issue 27, item 7); `entries` per vendor lets both pass.
#[test]
fn a_target_guarded_kernel_fails_the_cross_target_audit_per_variant() {
    let s = Scratch::new();
    let dir = s.path().join("p");
    std::fs::create_dir_all(&dir).unwrap();
    project(
        &dir,
        &[("guarded.cu", GUARDED)],
        r#"[kernels.guarded]
source = "guarded.cu"
entries = ["*"]
variants = { KB_GUARD = [1, 2] }

[kernels.exact]
source = "guarded.cu"
entries = ["both"]
"#,
    );
    let out = s.kbuild(&dir, &["build", "--keep-going"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for v in ["kb_guard1", "kb_guard2"] {
        let want = format!(
            "kernel `guarded` variant `{v}`: gfx1100 does not export 1 entry that sm_89 exports for entries `*`: `cuda_only`"
        );
        assert!(err.contains(&want), "{want}\n{}", text(&out));
    }
    // Exact names keep today's meaning: `both` is everywhere, so that kernel passes.
    let m = manifest(&dir.join("out"));
    assert_eq!(objects(&m, "exact").len(), 2, "{m:#}");
    let kept: Vec<&str> = objects(&m, "guarded")
        .iter()
        .map(|o| o["target"].as_str().unwrap())
        .collect();
    assert_eq!(kept, ["sm_89", "sm_89"], "{m:#}");
    for o in objects(&m, "guarded") {
        assert!(dir.join("out").join(o["path"].as_str().unwrap()).is_file());
    }
    let failed: Vec<_> = m["failed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kernel"] == "guarded")
        .collect();
    assert_eq!(failed.len(), 2, "{m:#}");
    assert!(failed
        .iter()
        .all(|f| f["target"] == "gfx1100" && f["error"].as_str().unwrap().contains("cuda_only")));

    // Per vendor: `cuda_only` is NVIDIA's own; every object passes.
    project(
        &dir,
        &[],
        "[kernels.guarded]\nsource = \"guarded.cu\"\nentries = { all = [\"*\"], nvidia = [\"cuda_only\"] }\n",
    );
    let out = s.kbuild(&dir, &["build"]);
    assert!(out.status.success(), "{}", text(&out));
    let m = manifest(&dir.join("out"));
    let mut entries: Vec<(String, usize)> = objects(&m, "guarded")
        .iter()
        .map(|o| {
            (
                o["target"].as_str().unwrap().to_string(),
                o["entries"].as_array().unwrap().len(),
            )
        })
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        [("gfx1100".to_string(), 1), ("sm_89".to_string(), 2)]
    );
}

/// A tree to onboard: two TUs in two directories, a header that only declares, a TU that does
/// not compile, and a compile_commands.json giving `-Iinc -DFOO=1 -std=c++17`.
fn onboarding_tree(dir: &Path) {
    copy_kcompat(&dir.join("inc"));
    for d in ["ops", "act", "broken", "build"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join("inc/common.cuh"),
        "#pragma once\n#include \"kcompat.h\"\n#ifndef FOO\n#error FOO must be defined\n#endif\n\
         __global__ void declared_only(float* x);\n\
         __device__ inline float twice(float v) { return 2.0f * v * FOO; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("ops/scale.cu"),
        "#include \"common.cuh\"\n// __global__ void commented_out() {}\n\
         template <typename T>\n__global__ void scale(T* x, int n) { int i = threadIdx.x; if (i < n) x[i] = x[i] * (T)2; }\n\
         template __global__ void scale<float>(float*, int);\ntemplate __global__ void scale<int>(int*, int);\n\
         KC_KERNEL(64) void fast_add(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("act/relu.cu"),
        "#include \"common.cuh\"\nKC_KERNEL(64) void relu(float* x) { float v = x[threadIdx.x]; x[threadIdx.x] = v > 0.f ? v : 0.f; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("broken/oops.cu"),
        "#include \"common.cuh\"\n__global__ void oops(float* x) { x[0] = undefined_thing; }\n",
    )
    .unwrap();
    let root = dir.display().to_string();
    let cc = serde_json::json!([
        {"directory": format!("{root}/build"), "file": "../ops/scale.cu",
         "command": "nvcc -I../inc -DFOO=1 -std=c++17 -c ../ops/scale.cu -o scale.o"},
        {"directory": root, "file": "act/relu.cu",
         "arguments": ["nvcc", "-Iinc", "-DFOO=1", "-std=c++17", "-c", "act/relu.cu"]}
    ]);
    std::fs::write(dir.join("compile_commands.json"), cc.to_string()).unwrap();
}

#[test]
fn init_writes_a_kbuild_toml_that_builds() {
    let s = Scratch::new();
    let dir = s.path().join("My Lib");
    onboarding_tree(&dir);
    let out = s.kbuild(&dir, &["init", "--targets", "sm_89,gfx1100", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("init --json");
    assert_eq!(report["schema"], "kbuild.init/v1");
    assert_eq!(report["kernels"], 2, "{report:#}");
    assert_eq!(report["failures"], 1, "{report:#}");
    assert_eq!(report["units"].as_array().unwrap().len(), 3, "{report:#}");
    assert_eq!(
        report["discovery_targets"],
        serde_json::json!(["sm_89", "gfx1100"])
    );

    let file = std::fs::read_to_string(dir.join("Kbuild.toml")).unwrap();
    let doc: toml::Value = toml::from_str(&file).unwrap_or_else(|e| panic!("{e}\n{file}"));
    assert_eq!(doc["package"]["name"].as_str(), Some("my-lib"), "{file}");
    assert_eq!(doc["package"]["version"].as_str(), Some("0.1.0"));
    let b = &doc["build"];
    assert_eq!(
        b["targets"],
        toml::Value::try_from(["sm_89", "gfx1100"]).unwrap()
    );
    assert_eq!(
        b["include-dirs"],
        toml::Value::try_from(["inc"]).unwrap(),
        "{file}"
    );
    assert_eq!(b["defines"]["FOO"].as_integer(), Some(1), "{file}");
    assert_eq!(b["flags"]["cuda"][0].as_str(), Some("-std=c++17"));
    let k = doc["kernels"].as_table().unwrap();
    assert_eq!(k.keys().collect::<Vec<_>>(), ["relu", "scale"], "{file}");
    assert_eq!(k["relu"]["source"].as_str(), Some("act/relu.cu"));
    assert_eq!(
        k["relu"]["entries"],
        toml::Value::try_from(["relu"]).unwrap()
    );
    assert_eq!(
        k["scale"]["entries"],
        toml::Value::try_from(["scale<float>", "scale<int>", "fast_add"]).unwrap(),
        "{file}"
    );
    // A person's file: what made it, groups per directory, the mangled names, the failure.
    assert!(file.starts_with("# Kbuild.toml") && file.contains("kbuild init --force"));
    assert!(
        file.contains("# ── act/") && file.contains("# ── ops/"),
        "{file}"
    );
    assert!(file.contains("# _Z5scaleIfEvPT_i"), "{file}");
    assert!(
        file.contains("# kbuild init: does not compile for sm_89: ")
            && file.contains("undefined_thing")
            && file.contains("# [kernels.oops]"),
        "{file}"
    );
    assert!(!file.contains("declared_only") && !file.contains("[kernels.common"));

    let built = s.kbuild(&dir, &["build"]);
    assert!(built.status.success(), "{}", text(&built));
    let m = manifest(&dir.join("target/kbuild"));
    assert_eq!(m["objects"].as_array().unwrap().len(), 4, "{m:#}");

    // No overwrite without --force; with it, the same file again.
    let again = s.kbuild(&dir, &["init", "--targets", "sm_89,gfx1100"]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("Kbuild.toml already exists; pass --force to replace it"),
        "{}",
        text(&again)
    );
    let forced = s.kbuild(&dir, &["init", "--force", "--targets", "sm_89,gfx1100"]);
    assert!(forced.status.success(), "{}", text(&forced));
    let stdout = String::from_utf8_lossy(&forced.stdout);
    assert!(
        stdout.contains("3 translation unit(s), 2 kernel(s), 4 entries")
            && stdout.contains("1 failed")
            && stdout.contains("undeclared (broken/oops.cu)")
            && stdout.contains("kernels per target: sm_89 2 of 2, gfx1100 2 of 2"),
        "{}",
        text(&forced)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("Kbuild.toml")).unwrap(),
        file
    );
}

/// A tree without compile_commands.json whose settings come from init's command line, with a
/// template-instance file (its kernels come from a header's macro: no `__global__` in its own
/// text, as ggml's `template-instances/*.cu`) and a host-only file.
#[test]
fn init_takes_command_line_settings_and_finds_template_instances() {
    let s = Scratch::new();
    let dir = s.path().join("lib");
    for d in ["inc", "inst", "host"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join("inc/tile.cuh"),
        "#pragma once\n#ifndef BLOCK\n#error BLOCK must be defined\n#endif\n\
         template <int N>\n__global__ void tile(float* x) { x[threadIdx.x % BLOCK] *= (float)N; }\n\
         #define DECL_TILE(N) template __global__ void tile<N>(float*)\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("inst/tile-4.cu"),
        "#include \"tile.cuh\"\nDECL_TILE(4);\nDECL_TILE(8);\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("host/helper.cu"),
        "#include \"tile.cuh\"\nint host_helper(int v) { return v * BLOCK; }\n",
    )
    .unwrap();
    let out = s.kbuild(
        &dir,
        &[
            "init",
            "--targets",
            "sm_89",
            "-I",
            "inc",
            "-D",
            "BLOCK=64",
            "-D",
            "A=1",
            "-D",
            "B",
            "-D",
            "C=two",
            "-D",
            "D=4",
            "--cuda-flag=-use_fast_math",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("init --json");
    assert_eq!(report["kernels"], 1, "{report:#}");
    assert_eq!(report["host_only"], 1, "{report:#}");
    assert_eq!(report["failures"], 0, "{report:#}");
    let file = std::fs::read_to_string(dir.join("Kbuild.toml")).unwrap();
    let doc: toml::Value = toml::from_str(&file).unwrap_or_else(|e| panic!("{e}\n{file}"));
    let b = &doc["build"];
    assert_eq!(b["include-dirs"], toml::Value::try_from(["inc"]).unwrap());
    assert_eq!(b["defines"]["BLOCK"].as_integer(), Some(64), "{file}");
    // More than four: one per line in their own table.
    assert!(
        file.contains("\n[build.defines]\nA = 1\nB = 1\nBLOCK = 64\nC = \"two\"\nD = 4\n"),
        "{file}"
    );
    assert_eq!(
        b["flags"]["cuda"],
        toml::Value::try_from(["-use_fast_math"]).unwrap(),
        "{file}"
    );
    let k = doc["kernels"].as_table().unwrap();
    assert_eq!(k.keys().collect::<Vec<_>>(), ["tile_4"], "{file}");
    assert_eq!(
        k["tile_4"]["entries"],
        toml::Value::try_from(["tile<4>", "tile<8>"]).unwrap(),
        "{file}"
    );
    assert!(
        file.contains("# kbuild init: host/helper.cu compiles but exports no kernel (host code only); not listed"),
        "{file}"
    );
    let built = s.kbuild(&dir, &["build"]);
    assert!(built.status.success(), "{}", text(&built));
    // A bad -D is refused before anything is written.
    std::fs::remove_file(dir.join("Kbuild.toml")).unwrap();
    let bad = s.kbuild(&dir, &["init", "-D", "=1"]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(text(&bad).contains("is not a macro name"), "{}", text(&bad));
    assert!(!dir.join("Kbuild.toml").exists());
}
