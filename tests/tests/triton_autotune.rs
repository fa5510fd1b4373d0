//! `autotune = true` and `heuristics = true` (issue 28): a Triton kernel's variants read from
//! its function's `@triton.autotune` config list (a list that is no matrix, one object per
//! config, named from its values), the `@triton.heuristics` constexprs filled by the worker;
//! an edited list rebuilds what changed and drops what it removed; the mistakes named; and
//! FLA's chunk kernel built from its own list equal, byte for byte, to its hand-written matrix.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use kbuild_tests::{copy_dir, kbuild_bin, manifest, repo_root, text, Scratch};
use serde_json::Value;

use crate::kbuild_tests;
use crate::triton::{compiled, kbuild, num};

/// `tests/tests/triton/tuned.py`'s `tuned_kernel`: three configs (BLOCK 128/256/1024 with
/// 2/4/8 warps and 2/3/1 stages) under a heuristic that computes `HAS_BIAS`.
fn kbuild_toml(extra: &str) -> String {
    format!(
        r#"[package]
name = "tuned"
version = "0.1.0"

[build]
targets = ["sm_80", "sm_90a", "gfx1100"]
out-dir = "out"

[kernels.tuned]
language = "triton"
source = "k/tuned.py"
function = "tuned_kernel"
autotune = true
heuristics = true
signature = {{ x_ptr = "*fp32", bias_ptr = "*fp32", out_ptr = "*fp32", n = "i32" }}
divisible-16 = ["x_ptr", "bias_ptr", "out_ptr"]
{extra}"#
    )
}

fn project(dir: &Path, extra: &str) -> std::path::PathBuf {
    let p = dir.join("proj");
    copy_dir(&repo_root().join("tests/tests/triton"), &p.join("k"));
    std::fs::write(p.join("Kbuild.toml"), kbuild_toml(extra)).unwrap();
    p
}

/// (variant, target) → (num_warps, num_stages, constexprs) of every object of `kernel`.
fn launches(out: &Path, kernel: &str) -> BTreeMap<(String, String), (u64, u64, Value)> {
    let m = manifest(out);
    m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kernel"] == kernel)
        .map(|o| {
            let t = &o["triton"];
            (
                (
                    o["variant"].as_str().unwrap().to_string(),
                    o["target"].as_str().unwrap().to_string(),
                ),
                (
                    num(t, "num_warps"),
                    num(t, "num_stages"),
                    t["constexprs"].clone(),
                ),
            )
        })
        .collect()
}

#[test]
fn triton_autotune_list_becomes_the_variants_and_an_edit_rebuilds_what_changed() {
    let s = Scratch::new();
    let proj = project(s.path(), "");
    let cache = s.path().join("cache");
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let got = launches(&proj.join("out"), "tuned");
    let configs = [
        ("BLOCK128.w2.s2", 2, 2, 128),
        ("BLOCK256.w4.s3", 4, 3, 256),
        ("BLOCK1024.w8.s1", 8, 1, 1024),
    ];
    assert_eq!(got.len(), 9, "{got:#?}");
    for (name, warps, stages, block) in configs {
        for target in ["sm_80", "sm_90a", "gfx1100"] {
            let (w, st, c) = &got[&(name.to_string(), target.to_string())];
            assert_eq!((*w, *st), (warps, stages), "{name} {target}");
            // BLOCK from the config; HAS_BIAS from the heuristic (bias_ptr has a type).
            assert_eq!(
                c,
                &serde_json::json!({"BLOCK": block, "HAS_BIAS": true}),
                "{name} {target}"
            );
        }
    }
    // The names are what the reports and the loader's selection use.
    let o = Command::new(kbuild_bin())
        .args([
            "explain", "--json", "--device", "sm_90", "--kernel", "tuned",
        ])
        .arg(proj.join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let picked: Vec<(&str, &str)> = doc["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["variant"].as_str().unwrap(),
                k["selected"]["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        picked,
        [
            ("BLOCK1024.w8.s1", "sm_90a/tuned.BLOCK1024.w8.s1.cubin"),
            ("BLOCK128.w2.s2", "sm_90a/tuned.BLOCK128.w2.s2.cubin"),
            ("BLOCK256.w4.s3", "sm_90a/tuned.BLOCK256.w4.s3.cubin"),
        ],
        "{doc}"
    );

    // A warm build reads the list again and compiles nothing.
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(compiled(&o).is_empty(), "{}", text(&o));

    // Edit the list (lines kept where they are: Triton's source key holds the function's line):
    // the 256 config gets 2 warps, the 1024 one goes.
    let py = proj.join("k/tuned.py");
    let src = std::fs::read_to_string(&py).unwrap();
    let edited = src
        .replace(
            r#"{"BLOCK": 256}, num_warps=4"#,
            r#"{"BLOCK": 256}, num_warps=2"#,
        )
        .replace(
            r#"    triton.Config({"BLOCK": 1024}, num_warps=8, num_stages=1),"#,
            "    # (the 1024 config was here)",
        );
    assert_ne!(src, edited);
    std::fs::write(&py, edited).unwrap();
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let mut rebuilt: Vec<String> = compiled(&o).into_iter().map(|(k, _)| k).collect();
    rebuilt.dedup();
    assert_eq!(rebuilt, ["tuned.BLOCK256.w2.s3"], "{}", text(&o));
    let got = launches(&proj.join("out"), "tuned");
    let names: std::collections::BTreeSet<&str> = got.keys().map(|(v, _)| v.as_str()).collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["BLOCK128.w2.s2", "BLOCK256.w2.s3"]
    );
}

#[test]
fn triton_autotune_and_heuristics_mistakes_are_named() {
    let s = Scratch::new();
    let cache = s.path().join("cache");
    let runs = std::cell::Cell::new(0);
    let run = |extra: &str, edit: &dyn Fn(String) -> String| {
        runs.set(runs.get() + 1);
        let dir = s.path().join(format!("p{}", runs.get()));
        let proj = project(&dir, extra);
        let toml = std::fs::read_to_string(proj.join("Kbuild.toml")).unwrap();
        std::fs::write(proj.join("Kbuild.toml"), edit(toml)).unwrap();
        kbuild(&proj, &cache, &["--targets", "sm_80"])
    };
    // Both sources of a variant set: a Kbuild.toml error naming the kernel and both keys.
    let o = run("\n[kernels.tuned.variants]\nBLOCK = [64]\n", &|t| t);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("kernel `tuned`: `autotune = true` and a `variants` table"),
        "{err}"
    );
    // Launch options are the configs' own.
    let o = run("", &|t| {
        t.replace("heuristics = true", "heuristics = true\nnum-warps = 4")
    });
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("kernel `tuned`: `autotune = true` and num-warps"),
        "{err}"
    );
    // A function with no autotune wrapper: the file and the function named.
    let o = run("", &|t| {
        t.replace("tuned_kernel", "untuned_kernel")
            .replace(
                r#"{ x_ptr = "*fp32", bias_ptr = "*fp32", out_ptr = "*fp32", n = "i32" }"#,
                r#"{ out_ptr = "*fp32", n = "i32" }"#,
            )
            .replace(r#"["x_ptr", "bias_ptr", "out_ptr"]"#, r#"["out_ptr"]"#)
    });
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "kernel `tuned`: autotune = true, but `untuned_kernel` in k/tuned.py has no @triton.autotune wrapper"
        ),
        "{err}"
    );
    // A constexpr the heuristics compute otherwise: named, with both values.
    let o = run("constexprs = { HAS_BIAS = false }\n", &|t| t);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("constexpr `HAS_BIAS` = False, but the heuristics compute True"),
        "{err}"
    );
    // A constexpr a config sets.
    let o = run("constexprs = { BLOCK = 64 }\n", &|t| t);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "constexpr `BLOCK` is in `constexprs` and set by autotune config `BLOCK128.w2.s2`"
        ),
        "{err}"
    );
    // A config with a pre_hook builds, with a warning that hooks do not run ahead of time.
    let o = run("", &|t| {
        t.replace("tuned_kernel", "hooked_kernel")
            .replace("heuristics = true\n", "")
            .replace(
                r#"{ x_ptr = "*fp32", bias_ptr = "*fp32", out_ptr = "*fp32", n = "i32" }"#,
                r#"{ out_ptr = "*fp32", n = "i32" }"#,
            )
            .replace(r#"divisible-16 = ["x_ptr", "bias_ptr", "out_ptr"]"#, "")
    });
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: kernel `tuned`: autotune config(s) BLOCK64.w1.s3 of `hooked_kernel` have a pre_hook; hooks do not run ahead of time"),
        "{err}"
    );
}

/// FLA's chunk kernel (`fla` holds the wheel's tree, `m` the manifest of its build with the
/// hand-written 12-config matrix) built again from its own autotune list, in a fresh cache:
/// the same configs, each object byte-identical to the matrix's.
pub(crate) fn chunk_h_autotuned_equals_its_matrix(scratch: &Path, fla: &Path, m: &Value) {
    let proj = scratch.join("fla-autotune");
    copy_dir(&fla.join("fla"), &proj.join("fla"));
    let toml = std::fs::read_to_string(repo_root().join("tests/tests/triton/fla.toml")).unwrap();
    let mut doc: toml::Table = toml
        .replace("TARGETS", r#"["sm_90a", "gfx942"]"#)
        .parse()
        .unwrap();
    let kernels = doc["kernels"].as_table_mut().unwrap();
    kernels.remove("gdn_fused_recurrent_fwd");
    let chunk = kernels["gdn_chunk_h"].as_table_mut().unwrap();
    chunk.remove("variants");
    chunk.insert("autotune".into(), true.into());
    std::fs::write(proj.join("Kbuild.toml"), toml::to_string(&doc).unwrap()).unwrap();
    let o = kbuild(&proj, &scratch.join("cache-autotune"), &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    // (target, BV, num_warps, num_stages) → sha256 and blake3.
    let by_config = |m: &Value| -> BTreeMap<(String, u64, u64, u64), (String, String)> {
        m["objects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["kernel"] == "gdn_chunk_h")
            .map(|o| {
                let t = &o["triton"];
                (
                    (
                        o["target"].as_str().unwrap().to_string(),
                        num(&t["constexprs"], "BV"),
                        num(t, "num_warps"),
                        num(t, "num_stages"),
                    ),
                    (
                        o["sha256"].as_str().unwrap().to_string(),
                        o["blake3"].as_str().unwrap().to_string(),
                    ),
                )
            })
            .collect()
    };
    let tuned = manifest(&proj.join("out"));
    let (want, got) = (by_config(m), by_config(&tuned));
    assert_eq!(
        got.keys().filter(|k| k.0 == "sm_90a").count(),
        12,
        "{got:#?}"
    );
    assert_eq!(got, want, "autotune = true against the hand-written matrix");
    let names: Vec<&str> = tuned["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["target"] == "sm_90a")
        .map(|o| o["variant"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"BV64.w4.s2"), "{names:?}");
}
