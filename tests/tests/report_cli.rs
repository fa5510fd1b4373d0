//! Reports of a real library's size (issue 27, items 4, 5, 6 and 8): `diff --format md` fits
//! a PR comment and `--full-report` has the rest, kernels renamed by a compiler hash are the
//! same kernel, `--fail-on removed`, `inspect` shows what a bundle's manifest records with
//! demangled names, and no command panics on a closed stdout. Nothing here compiles: builds
//! are made from `kbuild_manifest::fixtures` and the readers' fixture objects.

use crate::kbuild_tests;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kbuild_manifest::fixtures;
use kbuild_manifest::resources::{CudaResources, Resources};
use kbuild_tests::registry::Env;
use kbuild_tests::text;

fn cuda(registers: u32) -> Resources {
    Resources::Cuda(CudaResources {
        registers,
        lds_bytes: 0,
        reserved_shared_bytes: 0,
        scratch_bytes: 0,
        spill_store_bytes: Some(0),
        spill_load_bytes: Some(0),
        const_bytes: 380,
        barriers: 0,
        max_threads: None,
        occupancy: None,
        note: None,
    })
}

/// A build output dir at `dir` of package `lib`: one sm_89 object `mmq` exporting `entries`
/// (symbol, registers) with their resource records.
fn release(dir: &Path, entries: &[(String, u32)]) -> PathBuf {
    let bytes = format!("{entries:?}").into_bytes();
    let mut o = fixtures::object("mmq", "sm_89", "cubin", &bytes);
    o.entries = entries.iter().map(|(e, _)| e.clone()).collect();
    o.resources = entries.iter().map(|(e, r)| (e.clone(), cuda(*r))).collect();
    std::fs::create_dir_all(dir.join("sm_89")).unwrap();
    std::fs::write(dir.join(&o.path), &bytes).unwrap();
    let m = fixtures::manifest("lib", "0.1.0", vec![o]);
    std::fs::write(dir.join("manifest.json"), m.to_json()).unwrap();
    dir.to_path_buf()
}

/// `ggml::mul_mat_q_kernel_I<128, 64, 8, true>(float const*, __half const*, float*, ...)`.
fn template_kernel(i: usize) -> String {
    let name = format!("mul_mat_q_kernel_{i}");
    format!(
        "_ZN4ggml{}{name}ILi128ELi64ELi8ELb1EEEvPKfPK6__halfPfiiif",
        name.len()
    )
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn a_908_kernel_release_fits_one_comment_and_the_full_report_has_the_rest() {
    let env = Env::new();
    let root = env.path();
    let old: Vec<(String, u32)> = (0..100).map(|i| (template_kernel(i), 64)).collect();
    let new: Vec<(String, u32)> = (0..1008)
        .map(|i| (template_kernel(i), if i < 30 { 96 } else { 64 }))
        .collect();
    let (a, b) = (
        release(&root.join("a"), &old),
        release(&root.join("b"), &new),
    );
    let full = root.join("full.md");
    let o = env.kb(
        root,
        &[
            "diff",
            &s(&a),
            &s(&b),
            "--format",
            "md",
            "--fail-on",
            "registers:+8",
            "--full-report",
            &s(&full),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(md.chars().count() < 65_536, "{}", md.len());
    for i in 0..30 {
        let row = format!(
            "| `ggml::mul_mat_q_kernel_{i}<128, 64, 8, true>(float const*, __half const*, float*, int, int, int, float)` | **64 → 96"
        );
        assert!(md.contains(&row), "{row}");
    }
    assert!(md.contains("<details><summary>908 added</summary>"), "{md}");
    let full = std::fs::read_to_string(&full).unwrap();
    assert!(full.len() > md.len());
    // The last added kernel by name.
    assert!(full.contains("`ggml::mul_mat_q_kernel_999<"), "{full}");
    assert!(!md.contains("`ggml::mul_mat_q_kernel_999<"));
}

/// nvcc's hash of an anonymous namespace changes with the file: the kernel is the same one,
/// so the register gate sees it, and `removed` does not trip.
#[test]
fn hashed_names_match_across_an_edit_and_removed_gates_renames() {
    let env = Env::new();
    let root = env.path();
    let anon = |hash: &str| format!("_ZN41_GLOBAL__N__{hash}_8_kernel_cu_5b2fa6d16reduceEPfi");
    let a = release(
        &root.join("a"),
        &[(anon("e9d1dda2"), 32), ("_Z4olddPf".into(), 8)],
    );
    let b = release(
        &root.join("b"),
        &[(anon("0c3a77f1"), 48), ("_Z4olddPf".into(), 8)],
    );
    let o = env.kb(
        root,
        &["diff", &s(&a), &s(&b), "--fail-on", "registers:+8,removed"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    // Not "1 removed, 1 added".
    assert!(
        out.contains("  sm_89: 1 regression, 0 improvements, 1 unchanged\n"),
        "{out}"
    );
    assert!(
        out.contains("FAIL    registers:+8: sm_89 (anonymous namespace)::reduce(float*, int)"),
        "{out}"
    );
    assert!(out.contains("ok      removed: no kernel trips it"), "{out}");
    // A rename trips `removed` and `abi`, naming the new name.
    let c = release(
        &root.join("c"),
        &[(anon("e9d1dda2"), 32), ("_Z4neewPf".into(), 8)],
    );
    for rule in ["removed", "abi"] {
        let o = env.kb(root, &["diff", &s(&a), &s(&c), "--fail-on", rule]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(
            out.contains(&format!(
                "FAIL    {rule}: sm_89 oldd(float*): removed (renamed to neew(float*)?)"
            )),
            "{out}"
        );
    }
    let help = env.ok(root, &["diff", "--help"]);
    assert!(
        help.contains("removed (a") && help.contains("--full-report"),
        "{help}"
    );
}

/// A bundle of two real cubins whose manifest records the ptxas logs' spills: inspect shows
/// them (a bundle ships no log) and names kernels demangled, as diff does.
#[test]
fn inspect_shows_what_the_manifest_records_with_demangled_names() {
    let env = Env::new();
    let root = env.path();
    let fx = kbuild_tests::repo_root().join("manifests/tests/fixtures");
    let out = root.join("out");
    let mut records = Vec::new();
    for (file, log, kernel, target) in [
        ("spill_sm90.cubin", "spill_sm90.ptxas.log", "spill", "sm_90"),
        ("kern_sm89.cubin", "kern_sm89.ptxas.log", "kern", "sm_89"),
    ] {
        let bytes = std::fs::read(fx.join(file)).unwrap();
        let log = std::fs::read_to_string(fx.join(log)).unwrap();
        let mut o = fixtures::object(kernel, target, "cubin", &bytes);
        let found = kbuild_manifest::resources::inspect(file, &bytes, Some(&log), None).unwrap();
        for k in &found[0].kernels {
            o.resources.insert(k.name.clone(), k.resources.clone());
        }
        o.entries = o.resources.keys().cloned().collect();
        std::fs::create_dir_all(out.join(target)).unwrap();
        std::fs::write(out.join(&o.path), &bytes).unwrap();
        records.push(o);
    }
    let m = fixtures::manifest("kb-spills", "0.1.0", records);
    std::fs::write(out.join("manifest.json"), m.to_json()).unwrap();
    env.ok(root, &["package", "out", "--out", "dist"]);
    let bundle = "dist/kb-spills-0.1.0.kbundle";
    let table = env.ok(root, &["inspect", bundle]);
    let row = |name: &str| {
        table
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("{name} in\n{table}"))
            .to_string()
    };
    assert!(row("cuda_spill ").contains(" 148/148 "), "{table}");
    assert!(
        row("spill_heavy<32>(float const*, float*, int) ").contains(" 0/0 "),
        "{table}"
    );
    assert!(
        !table.contains("?/?") && !table.contains("_Z11spill_heavy"),
        "{table}"
    );
    assert!(!table.contains("not recorded in a cubin"), "{table}");
    // The JSON keeps the symbols and now has the recorded spills too.
    let v: serde_json::Value =
        serde_json::from_str(&env.ok(root, &["inspect", "--json", bundle])).unwrap();
    let kernels: Vec<&serde_json::Value> = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|o| o["kernels"].as_array().unwrap())
        .collect();
    assert!(kernels
        .iter()
        .any(|k| k["name"] == "_Z11spill_heavyILi32EEvPKfPfi" && k["spill_store_bytes"] == 0));
    // A cubin alone has no record: its spills stay unknown, and say why.
    std::fs::copy(fx.join("spill_sm90.cubin"), root.join("alone.cubin")).unwrap();
    let alone = env.ok(root, &["inspect", "alone.cubin"]);
    assert!(
        alone.contains("?/?") && alone.contains("not recorded in a cubin"),
        "{alone}"
    );
}

/// `kbuild inspect … | head -1`: the reader goes away; kbuild exits quietly with the status a
/// shell gives a process that SIGPIPE ended, no panic, no backtrace.
#[test]
fn every_command_exits_quietly_on_a_closed_stdout() {
    let env = Env::new();
    let root = env.path();
    let fx = kbuild_tests::repo_root().join("manifests/tests/fixtures");
    let cubin = s(&fx.join("kern_sm89.cubin"));
    let a = release(&root.join("a"), &[("_Z4olddPf".into(), 8)]);
    let b = release(
        &root.join("b"),
        &(0..2000)
            .map(|i| (template_kernel(i), 8))
            .collect::<Vec<_>>(),
    );
    // Each writes far more than a pipe holds, so it meets the closed end whatever the timing.
    let many: Vec<String> = std::iter::repeat_n(cubin, 300).collect();
    let runs: Vec<Vec<String>> = vec![
        [vec!["inspect".to_string()], many.clone()].concat(),
        [vec!["inspect".to_string(), "--json".into()], many].concat(),
        vec![
            "diff".into(),
            s(&a),
            s(&b),
            "--format".into(),
            "json".into(),
        ],
        vec!["diff".into(), s(&a), s(&b)],
    ];
    for args in runs {
        let mut child = Command::new(kbuild_tests::kbuild_bin())
            .args(&args)
            .current_dir(root)
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one line, as `head -1` does, then close the pipe.
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 64];
        let n = stdout.read(&mut first).unwrap();
        assert!(n > 0, "{args:?}: no output");
        drop(stdout);
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe") && !err.contains("backtrace"),
            "{:?}: {err}",
            &args[..2]
        );
        assert_eq!(o.status.code(), Some(141), "{:?}: {err}", &args[..2]);
    }
}
