//! The user path without sharp edges (issue 14): signatures follow their bundle, one spelling
//! per directory registry, `diff`/`explain` exit codes, one error per failure in the user's
//! terms, and `inspect` reading everything kbuild writes. Nothing here compiles: builds are
//! made from `kbuild_manifest::fixtures`.

use crate::kbuild_tests;

use std::path::{Path, PathBuf};
use std::process::Output;

use kbuild_manifest::fixtures;
use kbuild_tests::registry::Env;
use kbuild_tests::text;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A build output dir of package `name` 0.1.0 at `dir`: one sm_89 object of kernel `k` whose
/// bytes are `seed` repeated, and its manifest.json.
fn build_dir(dir: &Path, name: &str, seed: &str) -> PathBuf {
    let data = seed.repeat(64).into_bytes();
    let o = fixtures::object("k", "sm_89", "cubin", &data);
    std::fs::create_dir_all(dir.join("sm_89")).unwrap();
    std::fs::write(dir.join(&o.path), &data).unwrap();
    let m = fixtures::manifest(name, "0.1.0", vec![o]);
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
    dir.to_path_buf()
}

// ------------------------------------------------------------ 5. signatures follow the bundle

#[test]
fn package_removes_a_stale_sig_and_publish_refuses_one() {
    let env = Env::new();
    let root = env.path();
    let keys = root.join("keys");
    env.ok(root, &["keygen", "--out", &s(&keys)]);
    let dist = root.join("dist");
    let bundle = dist.join("kb-sig-0.1.0.kbundle");
    let sig = dist.join("kb-sig-0.1.0.kbundle.sig");

    build_dir(&root.join("out"), "kb-sig", "first");
    env.ok(root, &["package", "out", "--out", &s(&dist)]);
    let key = s(&keys.join("kbuild.key"));
    env.ok(root, &["sign", &s(&bundle), "--key", &key]);
    let first_sig = std::fs::read(&sig).unwrap();

    // Packaging the same build again keeps the signature: it still matches.
    env.ok(root, &["package", "out", "--out", &s(&dist)]);
    assert_eq!(std::fs::read(&sig).unwrap(), first_sig);

    // A rebuild with other objects: the old signature is removed, and the note says so.
    build_dir(&root.join("out"), "kb-sig", "second");
    let o = env.kb(root, &["package", "out", "--out", &s(&dist)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!sig.exists(), "the stale .sig is gone\n{}", text(&o));
    let e = stderr(&o);
    assert!(e.contains(&format!("removed {}", s(&sig))), "{e}");

    // Publish checks the .sig against the bundle before uploading anything.
    std::fs::write(&sig, &first_sig).unwrap();
    let reg = root.join("reg");
    let o = env.kb(root, &["publish", &s(&bundle), "--registry", &s(&reg)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&format!("{} does not match {}", s(&sig), s(&bundle))),
        "{e}"
    );
    assert!(e.contains("nothing was published"), "{e}");
    assert_eq!(e.matches("error:").count(), 1, "{e}");
    assert!(
        kbuild_tests::registry::files_under(&reg).is_empty(),
        "nothing uploaded"
    );

    // Signed again (the stale signature beside it is dropped, not kept), it publishes.
    let o = env.kb(root, &["sign", &s(&bundle), "--key", &key]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("dropped 1 signature(s) that do not match"),
        "{}",
        text(&o)
    );
    env.ok(root, &["publish", &s(&bundle), "--registry", &s(&reg)]);
}

// ------------------------------------------------- 6. one spelling per directory registry

#[test]
fn a_relative_and_an_absolute_registry_path_are_one_registry() {
    let env = Env::new();
    let root = std::fs::canonicalize(env.path()).unwrap();
    build_dir(&root.join("out"), "kb-path", "x");
    env.ok(&root, &["package", "out", "--out", "dist"]);
    let proj = root.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    // Published through a path with `..` in it.
    env.ok(
        &root,
        &[
            "publish",
            "dist/kb-path-0.1.0.kbundle",
            "--registry",
            "proj/../reg",
        ],
    );
    env.ok(&proj, &["pull", "kb-path@0.1", "--registry", "../reg"]);
    let lock = std::fs::read_to_string(proj.join("Kbuild.lock")).unwrap();
    let abs = root.join("reg");
    assert!(
        lock.contains(&format!("registry = \"file://{}\"", s(&abs))),
        "{lock}"
    );
    // The same registry spelled absolutely: no drift, the same lock entry, one cache entry.
    let o = env.kb(
        &proj,
        &["pull", "kb-path@0.1", "--registry", &s(&abs), "--locked"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stderr(&o).contains("drifted"), "{}", text(&o));
    let o = env.kb(
        &proj,
        &["pull", "kb-path@0.1", "--registry", "./../proj/../reg/."],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(proj.join("Kbuild.lock")).unwrap(),
        lock
    );
    let ls: serde_json::Value = serde_json::from_str(&env.ok(
        &proj,
        &["ls", "--offline", "--json", "--registry", &s(&abs)],
    ))
    .unwrap();
    let cached = ls["cached"].as_array().unwrap();
    assert_eq!(cached.len(), 1, "{ls}");
    assert_eq!(cached[0]["registry"], format!("file://{}", s(&abs)));
}

// ------------------------------------------------------------------------ 8. exit codes

#[test]
fn diff_exits_1_only_for_a_tripped_gate_and_2_for_bad_input() {
    let env = Env::new();
    let root = env.path();
    build_dir(&root.join("a"), "kb-diff", "x");
    build_dir(&root.join("b"), "kb-diff", "y");
    let code = |args: &[&str]| {
        let o = env.kb(root, args);
        (o.status.code(), stderr(&o), text(&o))
    };
    assert_eq!(code(&["diff", "a", "b"]).0, Some(0));
    // A gate that trips (an expired allowlist entry trips it): 1.
    std::fs::write(
        root.join("allow.toml"),
        "[[allow]]\nkernel = \"k\"\nrule = \"spills\"\njustification = \"j\"\nexpires = 2000-01-01\n",
    )
    .unwrap();
    let (c, _, t) = code(&[
        "diff",
        "a",
        "b",
        "--fail-on",
        "spills",
        "--allow",
        "allow.toml",
    ]);
    assert_eq!(c, Some(1), "{t}");
    // Bad input: 2, the file named, once.
    std::fs::write(root.join("garbage.json"), b"\x00\x01not json").unwrap();
    std::fs::write(
        root.join("inspect.json"),
        r#"{"schema": "kbuild.inspect/v1", "objects": []}"#,
    )
    .unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("broken.toml"), "[[allow]]\nrule = 3\n").unwrap();
    for (args, names) in [
        (vec!["diff", "garbage.json", "b"], "garbage.json"),
        (vec!["diff", "a", "inspect.json"], "inspect.json"),
        (vec!["diff", "a", "nowhere.json"], "nowhere.json"),
        (vec!["diff", "empty", "b"], "empty"),
        (
            vec![
                "diff",
                "a",
                "b",
                "--fail-on",
                "spills",
                "--allow",
                "broken.toml",
            ],
            "broken.toml",
        ),
        (vec!["diff", "a", "b", "--fail-on", "spils"], "spils"),
        (vec!["diff", "a", "b", "--no-such-flag"], "--no-such-flag"),
    ] {
        let (c, e, t) = code(&args);
        assert_eq!(c, Some(2), "{args:?}: {t}");
        assert!(e.contains(names), "{args:?}: {e}");
        assert_eq!(e.matches("error:").count(), 1, "{args:?}: {e}");
    }
    // Stated in --help.
    let help = env.ok(root, &["diff", "--help"]);
    assert!(help.contains("Exit status:"), "{help}");
    assert!(help.contains("1  a --fail-on gate tripped"), "{help}");
    assert!(
        help.contains("2  no diff was made: bad input or usage"),
        "{help}"
    );
}

#[test]
fn explain_exits_1_for_no_match_said_once_and_2_for_bad_input() {
    let env = Env::new();
    let root = env.path();
    build_dir(&root.join("out"), "kb-explain", "x");
    let o = env.kb(root, &["explain", "out", "--device", "sm_89"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // No match: 1; the error on stderr only, once.
    let o = env.kb(root, &["explain", "out", "--device", "gfx1100"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(out.contains("k: NO MATCH"), "{out}");
    assert!(
        !out.contains("error"),
        "the error is not on stdout too\n{out}"
    );
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    assert!(
        err.contains("no code object of kernel `k` runs on gfx1100"),
        "{err}"
    );
    // Bad input: 2.
    std::fs::write(root.join("garbage.json"), b"{not json").unwrap();
    for (args, names) in [
        (
            vec!["explain", "garbage.json", "--device", "sm_89"],
            "garbage.json",
        ),
        (vec!["explain", "nowhere", "--device", "sm_89"], "nowhere"),
        (
            vec!["explain", "out", "--device", "sm_89", "--kernel", "nope"],
            "nope",
        ),
        (vec!["explain", "out", "--device", "sm89"], "sm89"),
    ] {
        let o = env.kb(root, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let e = stderr(&o);
        assert!(e.contains(names), "{args:?}: {e}");
        assert_eq!(e.matches("error:").count(), 1, "{args:?}: {e}");
    }
    let help = env.ok(root, &["explain", "--help"]);
    assert!(help.contains("Exit status:"), "{help}");
    assert!(help.contains("1  no match"), "{help}");
    assert!(help.contains("2  bad input or usage"), "{help}");
}

// --------------------------------------------------------------------------- 11. messages

/// A project at `dir` with kernel `k` (k.cu) for sm_89 and `extra` lines in its table.
fn project(dir: &Path, extra: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("Kbuild.toml"),
        format!(
            "[package]\nname = \"kb-msg\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\"]\nout-dir = \"out\"\n\n[kernels.k]\nsource = \"k.cu\"\nentries = [\"k\"]\n{extra}"
        ),
    )
    .unwrap();
    dir.to_path_buf()
}

#[test]
fn kbuild_toml_errors_speak_the_users_terms() {
    let env = Env::new();
    for (i, (extra, want)) in [
        (
            "block-size = \"64\"\n",
            "Kbuild.toml:12:14: block-size: expected an integer, found a string",
        ),
        (
            "entry = [\"k\"]\n",
            "Kbuild.toml:12:1: unknown key `entry` (did you mean `entries`?)",
        ),
        (
            "defines = { N = [1, 2] }\n",
            "Kbuild.toml:12:17: N: expected a string, an integer, a float or a boolean, found an array",
        ),
        (
            "block-size = -1\n",
            "block-size: expected a non-negative integer, found -1",
        ),
    ]
    .iter()
    .enumerate()
    {
        let dir = project(&env.path().join(format!("p{i}")), extra);
        let o = env.kb(&dir, &["build"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let e = stderr(&o);
        assert!(e.contains(want), "{extra}: {e}");
        for serde in ["u32", "untagged", "DefineValue", "unknown field"] {
            assert!(!e.contains(serde), "{extra}: {e}");
        }
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(!dir.join("out").exists());
    }
}

#[test]
fn a_cause_is_said_once() {
    let env = Env::new();
    let root = env.path();
    std::fs::write(root.join("garbage.json"), b"{not json").unwrap();
    std::fs::write(root.join("m.json"), br#"{"schema": "kbuild.manifest/v1"}"#).unwrap();
    for f in ["garbage.json", "m.json"] {
        let o = env.kb(root, &["explain", f, "--device", "sm_89"]);
        let e = stderr(&o);
        assert_eq!(e.matches("not a JSON manifest").count(), 1, "{e}");
        assert_eq!(e.matches(f).count(), 1, "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn a_failed_job_is_one_error_naming_kernel_and_target() {
    let env = Env::new();
    let dir = project(&env.path().join("p"), "");
    // `false` as the launcher: the job fails without a compiler running.
    let o = env.kb(&dir, &["build", "--launcher", "false"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(!e.contains("FAILED"), "{e}");
    assert_eq!(e.matches("k for sm_89").count(), 1, "{e}");
    assert!(
        e.contains("error: k for sm_89: compiler exited with"),
        "{e}"
    );
    // One failure, one `error:` line; the summary after it is not a second error.
    assert_eq!(e.matches("error:").count(), 1, "{e}");
}

// ------------------------------------------------ 12. inspect reads everything kbuild writes

#[test]
fn inspect_reads_build_dirs_manifests_and_bundles_and_lists_what_failed() {
    let env = Env::new();
    let root = env.path();
    let fx = kbuild_tests::repo_root().join("manifests/tests/fixtures");
    // A build dir of two real objects (a cubin and an hsaco), as kbuild lays them out.
    let out = root.join("out");
    let mut records = Vec::new();
    for (file, target, format) in [
        ("kern_sm89.cubin", "sm_89", "cubin"),
        ("kern_gfx1100.hsaco", "gfx1100", "hsaco"),
    ] {
        let bytes = std::fs::read(fx.join(file)).unwrap();
        let o = fixtures::object("kern", target, format, &bytes);
        std::fs::create_dir_all(out.join(target)).unwrap();
        std::fs::write(out.join(&o.path), &bytes).unwrap();
        std::fs::copy(fx.join(file), root.join(file)).unwrap();
        records.push(o);
    }
    let m = fixtures::manifest("kb-inspect", "0.1.0", records);
    std::fs::write(out.join("manifest.json"), m.to_json()).unwrap();
    env.ok(root, &["package", "out", "--out", "dist"]);

    let objects = |args: &[&str]| -> Vec<(String, serde_json::Value)> {
        let mut all = vec!["inspect", "--json"];
        all.extend_from_slice(args);
        let v: serde_json::Value = serde_json::from_str(&env.ok(root, &all)).unwrap();
        assert_eq!(v["errors"], serde_json::json!([]), "{v}");
        let mut got: Vec<(String, serde_json::Value)> = v["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["target"].as_str().unwrap().to_string(),
                    o["kernels"].clone(),
                )
            })
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        got
    };
    let alone = objects(&["kern_sm89.cubin", "kern_gfx1100.hsaco"]);
    assert_eq!(alone.len(), 2);
    for what in ["out", "out/manifest.json", "dist/kb-inspect-0.1.0.kbundle"] {
        assert_eq!(objects(&[what]), alone, "{what}");
    }
    // Bundle members are named after the bundle.
    let table = env.ok(root, &["inspect", "dist/kb-inspect-0.1.0.kbundle"]);
    assert!(
        table.contains("dist/kb-inspect-0.1.0.kbundle#sm_89/kern.cubin"),
        "{table}"
    );

    // A file that fails to parse is in the JSON with its error, and on stderr once.
    std::fs::write(root.join("junk.bin"), b"not a code object").unwrap();
    std::fs::write(root.join("bad.json"), b"{not json").unwrap();
    let o = env.kb(
        root,
        &[
            "inspect",
            "--json",
            "kern_sm89.cubin",
            "junk.bin",
            "bad.json",
            "missing.cubin",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["objects"].as_array().unwrap().len(), 1, "{v}");
    let errors = v["errors"].as_array().unwrap();
    let paths: Vec<&str> = errors.iter().map(|e| e["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["junk.bin", "bad.json", "missing.cubin"], "{v}");
    assert!(
        errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("unrecognised input"),
        "{v}"
    );
    assert!(
        errors[1]["error"]
            .as_str()
            .unwrap()
            .contains("not a JSON manifest"),
        "{v}"
    );
    let e = stderr(&o);
    for p in paths {
        assert_eq!(e.matches(&format!("error: {p}: ")).count(), 1, "{e}");
    }
}
