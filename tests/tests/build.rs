//! End-to-end tests of `kbuild build` with the real compilers (nvcc from NVIDIA's wheels,
//! Debian's clang-19), on the project's kernels and on small scratch projects.

use crate::kbuild_tests;

use std::path::Path;

use kbuild_tests::{manifest, summary, text, Scratch};
use object::elf::FileHeader64;
use object::read::elf::FileHeader;
use object::LittleEndian as LE;

/// (e_machine, arch) read straight from the ELF header, independently of kbuild's readers:
/// AMDGPU `e_flags & 0xff`; cubin SM from `e_flags` (ABI V1: low byte; V2: second byte).
fn elf_machine_arch(bytes: &[u8]) -> (u16, u32) {
    let h = FileHeader64::<LE>::parse(bytes).expect("an ELF64 file");
    let machine = h.e_machine(LE);
    let flags = h.e_flags(LE);
    let arch = match (machine, h.e_ident().abi_version) {
        (190, 8) => (flags >> 8) & 0xff,
        _ => flags & 0xff,
    };
    (machine, arch)
}

fn job_count(project: &serde_json::Value) -> usize {
    project["objects"].as_array().map(Vec::len).unwrap_or(0)
}

/// Objects a Kbuild.toml must produce for `targets`, counted straight from the file (not via
/// kbuild's planner): per kernel, the variant matrix size times the targets it builds for
/// (a `targets` restriction, `language = "hip"` → AMD only).
fn expected_objects(
    kbuild_toml: &Path,
    targets: &[&str],
) -> (usize, std::collections::BTreeMap<String, usize>) {
    let doc: toml::Value = toml::from_str(&std::fs::read_to_string(kbuild_toml).unwrap()).unwrap();
    let mut per_kernel = std::collections::BTreeMap::new();
    for (name, k) in doc["kernels"].as_table().unwrap() {
        let variants: usize = k
            .get("variants")
            .and_then(|v| v.as_table())
            .map(|t| {
                t.values()
                    .map(|a| a.as_array().map_or(1, Vec::len))
                    .product()
            })
            .unwrap_or(1);
        let hip_only = k.get("language").and_then(|l| l.as_str()) == Some("hip");
        let restriction: Option<Vec<&str>> = k
            .get("targets")
            .and_then(|t| t.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str()).collect());
        let n = targets
            .iter()
            .filter(|t| !hip_only || t.starts_with("gfx"))
            .filter(|t| restriction.as_ref().is_none_or(|r| r.contains(t)))
            .count();
        per_kernel.insert(name.clone(), variants * n);
    }
    (per_kernel.values().sum(), per_kernel)
}

/// The README's main job: `kbuild --targets gfx1100,sm_89` on the project's kernels, from a
/// copy with new mtimes, run from the repository root (kbuild finds kernels/Kbuild.toml).
#[test]
fn readme_main_job_builds_gfx1100_and_sm_89_objects() {
    let s = Scratch::with_repo_kernels_shared_cache("clone");
    let root = s.path().join("clone");
    let out = s.kbuild(&root, &["--targets", "gfx1100,sm_89", "--out", "out"]);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("compiled") && stderr.contains("failed in"),
        "summary line missing\n{stderr}"
    );
    let out_dir = root.join("out");
    let m = manifest(&out_dir);
    let (expected, _) = expected_objects(&root.join("kernels/Kbuild.toml"), &["gfx1100", "sm_89"]);
    assert_eq!(job_count(&m), expected, "{m:#}");
    let mut amd = 0;
    let mut cuda = 0;
    for o in m["objects"].as_array().unwrap() {
        let path = out_dir.join(o["path"].as_str().unwrap());
        let bytes = std::fs::read(&path).unwrap();
        let (machine, arch) = elf_machine_arch(&bytes);
        match o["target"].as_str().unwrap() {
            "gfx1100" => {
                assert_eq!((machine, arch), (224, 0x41), "{}", path.display());
                assert!(path.extension().unwrap() == "hsaco");
                amd += 1;
            }
            "sm_89" => {
                assert_eq!((machine, arch), (190, 89), "{}", path.display());
                assert!(path.extension().unwrap() == "cubin");
                cuda += 1;
            }
            other => panic!("unexpected target {other}"),
        }
        assert_eq!(o["size"].as_u64().unwrap(), bytes.len() as u64);
    }
    assert_eq!(amd + cuda, expected);
    assert!(
        amd >= 6 && cuda >= 6,
        "rmsnorm, softmax and 4 gemv variants at least, per target"
    );
    for variant in [
        "rows_per_block1",
        "rows_per_block2",
        "rows_per_block4",
        "rows_per_block8",
    ] {
        assert!(out_dir
            .join(format!("gfx1100/gemv_bf16.{variant}.hsaco"))
            .is_file());
        assert!(out_dir
            .join(format!("sm_89/gemv_bf16.{variant}.cubin"))
            .is_file());
    }
}

/// Every default target builds for every kernel; then a no-op rebuild runs no compiler, and a
/// copy of the project elsewhere (new mtimes) with the same cache rebuilds nothing.
#[test]
fn every_default_target_builds_then_noop_and_fresh_clone_compile_nothing() {
    let s = Scratch::with_repo_kernels_shared_cache("a");
    let kernels = s.path().join("a/kernels");
    let out = s.kbuild(&kernels, &["--json", "--out", "out"]);
    assert!(out.status.success(), "{}", text(&out));
    let m = manifest(&kernels.join("out"));
    let targets = m["targets"].as_array().unwrap().len();
    assert_eq!(targets, 18, "default target list");
    let names: Vec<&str> = m["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    let (expected, per_kernel) = expected_objects(&kernels.join("Kbuild.toml"), &names);
    assert_eq!(
        job_count(&m),
        expected,
        "every kernel × variant × default target: {per_kernel:?}"
    );
    for (kernel, n) in &per_kernel {
        let built = m["objects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["kernel"] == kernel.as_str())
            .count();
        assert_eq!(built, *n, "{kernel}");
    }
    let sum = summary(&out);
    assert_eq!(sum["failed"], 0);
    // The cache is shared with other whole-build tests: every job either compiled (one compiler
    // run each) or came from the cache.
    assert_eq!(
        sum["compiled"].as_u64().unwrap() + sum["cached"].as_u64().unwrap(),
        expected as u64
    );
    assert_eq!(
        s.compiles() as u64,
        sum["compiled"].as_u64().unwrap(),
        "one compiler run per compiled job"
    );
    for o in m["objects"].as_array().unwrap() {
        let t = o["target"].as_str().unwrap();
        let bytes = std::fs::read(kernels.join("out").join(o["path"].as_str().unwrap())).unwrap();
        if t.starts_with("compute_") {
            assert!(bytes.starts_with(b"//"), "PTX text for {t}");
        } else {
            let (machine, _) = elf_machine_arch(&bytes);
            assert_eq!(machine, if t.starts_with("gfx") { 224 } else { 190 }, "{t}");
        }
        assert!(!o["entries"].as_array().unwrap().is_empty());
    }

    s.reset_count();
    let again = s.kbuild(&kernels, &["--json", "--out", "out"]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(s.compiles(), 0, "no-op rebuild ran a compiler");
    assert_eq!(summary(&again)["cached"], expected);

    // A fresh clone elsewhere: same bytes, new paths and mtimes, same cache.
    kbuild_tests::copy_dir(&kernels, &s.path().join("b/kernels"));
    let clone = s.path().join("b/kernels");
    let _ = std::fs::remove_dir_all(clone.join("out"));
    let fresh = s.kbuild(&clone, &["--json", "--out", "out"]);
    assert!(fresh.status.success(), "{}", text(&fresh));
    assert_eq!(
        s.compiles(),
        0,
        "fresh clone with a warm cache ran a compiler"
    );
    assert_eq!(manifest(&clone.join("out"))["objects"], m["objects"]);
}

/// A scratch project: `a.cu` includes `a.h`, `b.cu` includes `b.h`, both include `common.h`.
fn two_kernel_project(dir: &Path) {
    let k = dir.join("kernels");
    std::fs::create_dir_all(k.join("include")).unwrap();
    std::fs::write(
        k.join("include/common.h"),
        "#pragma once\n#define SCALE 2.0f\n",
    )
    .unwrap();
    std::fs::write(
        k.join("include/a.h"),
        "#pragma once\n#define A_OFFSET 1.0f\n",
    )
    .unwrap();
    std::fs::write(
        k.join("include/b.h"),
        "#pragma once\n#define B_OFFSET 3.0f\n",
    )
    .unwrap();
    for (name, header, offset) in [("a", "a.h", "A_OFFSET"), ("b", "b.h", "B_OFFSET")] {
        std::fs::write(
            k.join(format!("{name}.cu")),
            format!(
                "#include \"kcompat.h\"\n#include \"common.h\"\n#include \"{header}\"\n\
                 KC_KERNEL(64) void {name}_kernel(float* x) {{ x[threadIdx.x] = x[threadIdx.x] * SCALE + {offset}; }}\n"
            ),
        )
        .unwrap();
    }
    std::fs::write(
        k.join("Kbuild.toml"),
        r#"[package]
name = "two"
version = "0.1.0"

[build]
targets = ["sm_89", "gfx1100"]
include-dirs = ["include"]
out-dir = "out"

[kernels.a]
source = "a.cu"
entries = ["a_kernel"]

[kernels.b]
source = "b.cu"
entries = ["b_kernel"]
variants = { KB_TEST_VARIANT = [1, 2] }
"#,
    )
    .unwrap();
}

#[test]
fn editing_a_header_rebuilds_exactly_its_dependents() {
    let s = Scratch::new();
    two_kernel_project(s.path());
    let k = s.path().join("kernels");
    let first = s.kbuild(&k, &["--json"]);
    assert!(first.status.success(), "{}", text(&first));
    assert_eq!(
        s.compiles(),
        6,
        "a × 2 targets + b × 2 variants × 2 targets"
    );

    // b.h is included by the two b variants only.
    s.reset_count();
    std::fs::write(
        k.join("include/b.h"),
        "#pragma once\n#define B_OFFSET 4.0f\n",
    )
    .unwrap();
    let after_b = s.kbuild(&k, &["--json"]);
    assert!(after_b.status.success(), "{}", text(&after_b));
    assert_eq!(s.compiles(), 4, "{:?}", s.compile_lines());
    assert!(s.compile_lines().iter().all(|l| l.contains("b.cu")));

    // a.h: only a's two objects.
    s.reset_count();
    std::fs::write(
        k.join("include/a.h"),
        "#pragma once\n#define A_OFFSET 5.0f\n",
    )
    .unwrap();
    let after_a = s.kbuild(&k, &["--json"]);
    assert!(after_a.status.success(), "{}", text(&after_a));
    assert_eq!(s.compiles(), 2, "{:?}", s.compile_lines());
    assert!(s.compile_lines().iter().all(|l| l.contains("a.cu")));

    // A change that leaves the bytes as they were (touch) rebuilds nothing.
    s.reset_count();
    let bytes = std::fs::read(k.join("include/common.h")).unwrap();
    std::fs::write(k.join("include/common.h"), bytes).unwrap();
    let touched = s.kbuild(&k, &["--json"]);
    assert!(touched.status.success(), "{}", text(&touched));
    assert_eq!(s.compiles(), 0);

    // common.h: everything.
    std::fs::write(
        k.join("include/common.h"),
        "#pragma once\n#define SCALE 3.0f\n",
    )
    .unwrap();
    let all = s.kbuild(&k, &["--json"]);
    assert!(all.status.success(), "{}", text(&all));
    assert_eq!(s.compiles(), 6);
}

#[test]
fn json_events_and_fat_containers() {
    let s = Scratch::new();
    two_kernel_project(s.path());
    let k = s.path().join("kernels");
    let out = s.kbuild(
        &k,
        &[
            "--json",
            "--fat",
            "--targets",
            "sm_89,compute_90,gfx1100,gfx1030",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let events = kbuild_tests::events(&out);
    let jobs: Vec<_> = events.iter().filter(|e| e["event"] == "job").collect();
    assert_eq!(jobs.len(), 12);
    for j in &jobs {
        for key in ["kernel", "variant", "target", "status", "seconds"] {
            assert!(j.get(key).is_some(), "job event lacks {key}: {j}");
        }
        assert_eq!(j["status"], "compiled");
    }
    let sum = summary(&out);
    assert_eq!(
        (
            sum["compiled"].as_u64(),
            sum["cached"].as_u64(),
            sum["failed"].as_u64()
        ),
        (Some(12), Some(0), Some(0))
    );
    assert!(sum["seconds"].as_f64().is_some());

    let m = manifest(&k.join("out"));
    let containers = m["containers"].as_array().expect("containers listed");
    // a, b.v1, b.v2 — one fatbin and one offload bundle each.
    assert_eq!(containers.len(), 6, "{m:#}");
    for c in containers {
        let bytes = std::fs::read(k.join("out").join(c["path"].as_str().unwrap())).unwrap();
        match c["format"].as_str().unwrap() {
            "fatbin" => {
                assert_eq!(&bytes[..4], &0xBA55_ED50u32.to_le_bytes());
                assert_eq!(c["targets"], serde_json::json!(["compute_90", "sm_89"]));
            }
            "offload-bundle" => {
                assert!(bytes.starts_with(b"__CLANG_OFFLOAD_BUNDLE__"));
                assert_eq!(c["targets"], serde_json::json!(["gfx1030", "gfx1100"]));
            }
            f => panic!("unexpected container format {f}"),
        }
    }
}

/// Maximum number of compiles in flight, from a launcher that logs start/end times.
fn max_concurrency(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .filter_map(|l| {
            let (kind, t) = l.split_once(' ')?;
            let t: u128 = t.trim().parse().ok()?;
            Some((t, if kind == "start" { 1 } else { -1 }))
        })
        .collect();
    events.sort();
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        max = max.max(cur);
    }
    max as usize
}

#[test]
fn a_make_jobserver_bounds_parallel_compiles() {
    let s = Scratch::new();
    two_kernel_project(s.path());
    let k = s.path().join("kernels");
    let log = s.path().join("spans.log");
    let launcher = s.path().join("spans.sh");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\necho \"start $(date +%s%N)\" >> '{0}'\n\"$@\"\nrc=$?\nsleep 0.3\necho \"end $(date +%s%N)\" >> '{0}'\nexit $rc\n",
            log.display()
        ),
    )
    .unwrap();
    kbuild_tests::make_executable(&launcher);
    let targets = "sm_89,sm_90,gfx1100,gfx1030";

    // Alone, -j 4 runs four compiles at once.
    let alone = std::process::Command::new(kbuild_tests::kbuild_bin())
        .args(["-j", "4", "--targets", targets, "--out", "alone"])
        .current_dir(&k)
        .env("KBUILD_CACHE_DIR", s.path().join("cache-alone"))
        .env("KBUILD_LAUNCHER", &launcher)
        .env_remove("MAKEFLAGS")
        .env_remove("CARGO_MAKEFLAGS")
        .output()
        .unwrap();
    assert!(alone.status.success(), "{}", text(&alone));
    assert!(
        max_concurrency(&log) > 2,
        "without a jobserver -j 4 should overlap more than 2"
    );

    // Under `make -j2`, the same -j 4 build holds at most 2 compiles (1 implicit + 1 token).
    std::fs::remove_file(&log).unwrap();
    std::fs::write(
        s.path().join("Makefile"),
        format!(
            "all:\n\t+cd '{}' && KBUILD_CACHE_DIR='{}' KBUILD_LAUNCHER='{}' '{}' -j 4 --targets {targets} --out viamake\n",
            k.display(),
            s.path().join("cache-make").display(),
            launcher.display(),
            kbuild_tests::kbuild_bin().display()
        ),
    )
    .unwrap();
    let make = std::process::Command::new("make")
        .args(["-j2", "-C"])
        .arg(s.path())
        .output()
        .expect("make");
    assert!(make.status.success(), "{}", text(&make));
    let max = max_concurrency(&log);
    assert!(
        (1..=2).contains(&max),
        "under make -j2 at most 2 compiles at once, saw {max}"
    );
}

#[test]
fn toolchain_list_names_paths_versions_and_buildable_targets_and_clean_removes_output() {
    let s = Scratch::new();
    let list = s.kbuild(s.path(), &["toolchain", "list", "--json"]);
    assert!(list.status.success(), "{}", text(&list));
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v["schema"], "kbuild.toolchains/v1");
    let cuda = &v["cuda"];
    assert!(
        cuda["path"].as_str().unwrap().ends_with("bin/nvcc"),
        "{cuda}"
    );
    assert_eq!(cuda["version"], "13.5");
    let cuda_targets: Vec<&str> = cuda["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    for t in ["sm_75", "sm_89", "sm_90a", "sm_100f", "sm_121"] {
        assert!(cuda_targets.contains(&t), "{t} in {cuda_targets:?}");
    }
    let hip = &v["hip"];
    assert_eq!(hip["version"], "19.1");
    let hip_targets: Vec<&str> = hip["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    for t in [
        "gfx90a",
        "gfx942",
        "gfx1100",
        "gfx1151",
        "gfx1201",
        "gfx11-generic",
    ] {
        assert!(hip_targets.contains(&t), "{t} in {hip_targets:?}");
    }
    assert!(
        !hip_targets.contains(&"gfx950"),
        "clang-19 cannot build gfx950"
    );

    two_kernel_project(s.path());
    let k = s.path().join("kernels");
    let b = s.kbuild(&k, &["--targets", "sm_89"]);
    assert!(b.status.success(), "{}", text(&b));
    assert!(k.join("out/manifest.json").is_file());
    let c = s.kbuild(&k, &["clean"]);
    assert!(c.status.success(), "{}", text(&c));
    assert!(!k.join("out").exists());
}

/// A cloned project's `out-dir = ".."` does not make `kbuild clean` remove the directory that
/// holds the project (with its siblings), and a directory kbuild did not make (no
/// `.kbuild-out` marker) is not removed either; both refusals name the directory and why.
#[test]
fn clean_removes_only_an_out_dir_kbuild_made() {
    let s = Scratch::new();
    let parent = s.path().join("parent");
    let k = parent.join("proj");
    std::fs::create_dir_all(&k).unwrap();
    std::fs::write(parent.join("sibling.txt"), "keep me").unwrap();
    std::fs::write(k.join("a.cu"), "__global__ void a() {}\n").unwrap();
    std::fs::write(
        k.join("Kbuild.toml"),
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\"]\n\
         out-dir = \"..\"\n\n[kernels.a]\nsource = \"a.cu\"\nentries = [\"a\"]\n",
    )
    .unwrap();
    let o = s.kbuild(&k, &["clean"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("refusing to remove") && e.contains("holds the project itself"),
        "{e}"
    );
    assert!(parent.join("sibling.txt").is_file() && k.join("Kbuild.toml").is_file());

    let mine = s.path().join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine").unwrap();
    let o = s.kbuild(&k, &["clean", "--out", mine.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("no .kbuild-out marker"), "{e}");
    assert!(mine.join("notes.txt").is_file());
}
