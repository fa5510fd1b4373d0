//! End-to-end tests of `kbuild diff`, its gates and allowlist, and the resource baseline, on
//! objects built by the real compilers (nvcc from NVIDIA's wheels, Debian's clang-19).
//!
//! The fixture (`tests/fixtures/diff/`, see its README) is one project in two versions,
//! built once per test run for sm_89 + gfx1100 (+ compute_89 in base, + gfx1201 in head).

use crate::kbuild_tests;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use kbuild_tests::{copy_dir, kbuild_bin, repo_root, text, Scratch};

/// The built fixture: `<root>/{base,head}/out/manifest.json`, built with `<root>/cache`.
struct Fixture {
    root: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // Under the target dir, so a rerun finds the compile cache warm.
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diff-fixture");
        for side in ["base", "head"] {
            let dir = root.join(side);
            let _ = std::fs::remove_dir_all(&dir);
            copy_dir(&repo_root().join("tests/fixtures/diff").join(side), &dir);
            let out = kb(&dir, &["build"]);
            assert!(
                out.status.success(),
                "building the {side} fixture\n{}",
                text(&out)
            );
        }
        Fixture { root }
    })
}

/// `kbuild ARGS` in `cwd` with the fixture's cache, no colour, no launcher.
fn kb(cwd: &Path, args: &[&str]) -> Output {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diff-fixture/cache");
    Command::new(kbuild_bin())
        .args(args)
        .current_dir(cwd)
        .env("KBUILD_CACHE_DIR", cache)
        .env("NO_COLOR", "1")
        .env_remove("KBUILD_LAUNCHER")
        .output()
        .expect("running kbuild")
}

/// `kbuild diff base/out head/out ARGS` from the fixture root.
fn diff(args: &[&str]) -> Output {
    let f = fixture();
    let mut all = vec!["diff", "base/out", "head/out"];
    all.extend_from_slice(args);
    kb(&f.root, &all)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Write `kbuild-allow.toml` into the fixture root under a unique name; returns that name.
fn allowlist(name: &str, body: &str) -> String {
    let file = format!("{name}.allow.toml");
    std::fs::write(fixture().root.join(&file), body).unwrap();
    file
}

// ------------------------------------------------------------------------------- snapshots

#[test]
fn markdown_report_snapshot() {
    let o = diff(&["--format", "md", "--fail-on", "spills,occupancy"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let md = stdout(&o);
    // Both vendors, every kind of row.
    for want in [
        "- **sm_89**: 2 regressions, 1 improvement, 2 unchanged, 1 added, 1 removed",
        "- **gfx1201**: new target, 6 kernels",
        "- **compute_89**: target removed, 6 kernels",
        "#### sm_89 (CUDA)",
        "#### gfx1100 (AMD)",
        "(-24 warps/SM)",
        "(+4 waves/SIMD)",
        "scale_by<4>(float*) [shift0]",
        ":x: `spills` tripped",
        ":x: `occupancy` tripped",
    ] {
        assert!(md.contains(want), "missing {want:?}\n{md}");
    }
    insta::assert_snapshot!("diff_md", md);
}

#[test]
fn text_report_snapshot() {
    let o = diff(&["--format", "text"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let t = stdout(&o);
    assert!(
        !t.contains('\x1b'),
        "NO_COLOR and not a terminal: no colour\n{t}"
    );
    insta::assert_snapshot!("diff_text", t);
}

#[test]
fn json_report_snapshot() {
    let allow = allowlist(
        "json",
        "[[allow]]\nkernel = \"tile_spill\"\ntarget = \"gfx*\"\nrule = \"spills\"\n\
         justification = \"AMD spills are accepted until the rewrite\"\nexpires = 2999-12-31\n",
    );
    let o = diff(&[
        "--format",
        "json",
        "--fail-on",
        "spills,registers:+1000",
        "--allow",
        &allow,
    ]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(j["schema"], "kbuild.diff/v1");
    assert_eq!(j["passed"], false);
    let s = &j["summary"];
    assert_eq!(
        (&s["regressions"], &s["improvements"], &s["unchanged"]),
        (&4.into(), &2.into(), &4.into())
    );
    assert_eq!(s["added"], 8, "new_kernel twice + the 6 kernels of gfx1201");
    assert_eq!(
        s["removed"], 8,
        "old_kernel twice + the 6 kernels of compute_89"
    );
    let change = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["target"] == "gfx1100" && c["kernel"] == "tile_spill" && c["field"] == "vgpr_spills"
        })
        .expect("the gfx1100 spill change");
    assert_eq!((&change["base"], &change["head"]), (&0.into(), &91.into()));
    let gates = j["gates"].as_array().unwrap();
    let tripped: Vec<(&str, &str)> = gates
        .iter()
        .filter(|g| g["tripped"] == true)
        .map(|g| (g["rule"].as_str().unwrap(), g["target"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tripped,
        [("spills", "sm_89")],
        "only the CUDA spill is not allowed"
    );
    assert!(gates
        .iter()
        .any(|g| g["rule"] == "spills" && g["allowed_by"]["origin"] == "json.allow.toml:1"));
    assert!(gates
        .iter()
        .any(|g| g["rule"] == "registers:+1000" && g["tripped"] == false));
    insta::assert_snapshot!("diff_json", stdout(&o));
}

#[test]
fn identical_sides_report_no_changes() {
    let o = diff(&["--format", "text"]);
    assert_eq!(code(&o), 0);
    let f = fixture();
    let same = kb(&f.root, &["diff", "head/out", "head/out/manifest.json"]);
    assert_eq!(code(&same), 0, "{}", text(&same));
    let t = stdout(&same);
    assert!(
        t.contains("gfx1100: 0 regressions, 0 improvements, 6 unchanged"),
        "{t}"
    );
    assert!(t.contains("no resource changes"), "{t}");
}

#[test]
fn a_bundle_and_a_baseline_are_sides_too() {
    let f = fixture();
    let dist = tempfile::tempdir().unwrap();
    let dist_dir = dist.path().display().to_string();
    let o = kb(&f.root, &["package", "head/out", "--out", &dist_dir]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let bundle = dist.path().join("diff-fixture-0.2.0.kbundle");
    let reference = diff(&["--format", "json"]);
    let bundle_side = bundle.display().to_string();
    let o = kb(
        &f.root,
        &["diff", "base/out", &bundle_side, "--format", "json"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let without_labels = |o: &Output| {
        let mut j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        j["head"] = serde_json::Value::Null;
        j
    };
    assert_eq!(without_labels(&o), without_labels(&reference));

    let baseline = f.root.join("head-baseline.json");
    let b = baseline.display().to_string();
    let o = kb(
        &f.root.join("head"),
        &["baseline", "update", "--from", "out", "--baseline", &b],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    let o = kb(
        &f.root,
        &["diff", "base/out", "head-baseline.json", "--format", "json"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(without_labels(&o), without_labels(&reference));
}

// ----------------------------------------------------------------------------------- gates

/// Exit code, stdout and stderr of `kbuild diff ... --fail-on RULES` (text format).
fn gate(rules: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["--fail-on", rules];
    args.extend_from_slice(extra);
    let o = diff(&args);
    (code(&o), stdout(&o), stderr(&o))
}

#[test]
fn gate_spills_trips_on_new_spills() {
    let (c, out, err) = gate("spills", &[]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(
        out.contains(
            "FAIL    spills: sm_89 tile_spill: spill_store_bytes 0 → 388 (+388 B spill stores)"
        ),
        "{out}"
    );
    assert!(
        out.contains("FAIL    spills: gfx1100 tile_spill: vgpr_spills 0 → 91 (+91 VGPR spills)"),
        "{out}"
    );
    assert!(err.contains("error: gate tripped: spills"), "{err}");
}

#[test]
fn gate_occupancy_trips_on_a_drop() {
    let (c, out, err) = gate("occupancy", &[]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(
        out.contains("FAIL    occupancy: sm_89 wide_dot: occupancy 48 → 24 (-24 warps/SM)"),
        "{out}"
    );
    assert!(
        out.contains("FAIL    occupancy: gfx1100 wide_dot: occupancy 16 → 10 (-6 waves/SIMD)"),
        "{out}"
    );
    // tile_spill and lean_scale gained occupancy: not a case.
    assert!(!out.contains("occupancy: sm_89 tile_spill"), "{out}");
    assert!(err.contains("error: gate tripped: occupancy"), "{err}");
}

#[test]
fn gate_registers_absolute_threshold_is_inclusive() {
    // wide_dot: sm_89 36 → 76 registers (+40), gfx1100 35 → 140 VGPRs (+105).
    let (c, out, err) = gate("registers:+105", &[]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(
        out.contains("FAIL    registers:+105: gfx1100 wide_dot: vgprs 35 → 140 (+105 VGPRs)"),
        "{out}"
    );
    assert!(!out.contains("registers:+105: sm_89"), "{out}");
    assert!(err.contains("error: gate tripped: registers:+105"), "{err}");
    let (c, out, _) = gate("registers:+106", &[]);
    assert_eq!(c, 0, "{out}");
    assert!(
        out.contains("ok      registers:+106: no kernel trips it"),
        "{out}"
    );
}

#[test]
fn gate_registers_percent_threshold() {
    // +40/36 = 111% on sm_89, +105/35 = 300% on gfx1100.
    let (c, out, _) = gate("registers:+10%", &[]);
    assert_eq!(c, 1, "{out}");
    assert!(
        out.contains("FAIL    registers:+10%: sm_89 wide_dot: registers 36 → 76 (+40 registers)"),
        "{out}"
    );
    let (c, out, _) = gate("registers:+300%", &[]);
    assert_eq!(c, 1, "{out}");
    assert!(
        out.contains("FAIL    registers:+300%: gfx1100 wide_dot"),
        "{out}"
    );
    assert!(!out.contains("registers:+300%: sm_89"), "{out}");
    let (c, out, _) = gate("registers:+301%", &[]);
    assert_eq!(c, 0, "{out}");
}

#[test]
fn gate_lds_threshold() {
    let (c, out, err) = gate("lds:+1024", &[]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(
        out.contains("FAIL    lds:+1024: sm_89 wide_dot: lds_bytes 1024 → 8192 (+7168 B)"),
        "{out}"
    );
    assert!(
        out.contains("FAIL    lds:+1024: gfx1100 wide_dot: lds_bytes 1024 → 8192 (+7168 B)"),
        "{out}"
    );
    assert!(err.contains("error: gate tripped: lds:+1024"), "{err}");
    let (c, out, _) = gate("lds:+7169", &[]);
    assert_eq!(c, 0, "{out}");
}

#[test]
fn gate_scratch_trips_on_more_stack_or_scratch() {
    let (c, out, err) = gate("scratch", &[]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(
        out.contains("FAIL    scratch: sm_89 tile_spill: scratch_bytes 0 → 200 (+200 B)"),
        "{out}"
    );
    assert!(
        out.contains("FAIL    scratch: gfx1100 tile_spill: scratch_bytes 0 → 136 (+136 B)"),
        "{out}"
    );
    assert!(
        out.contains("FAIL    scratch: gfx1201 tile_spill: scratch_bytes 136 (new kernel)"),
        "{out}"
    );
    assert!(err.contains("error: gate tripped: scratch"), "{err}");
}

#[test]
fn every_format_names_the_tripped_rule() {
    let md = diff(&["--format", "md", "--fail-on", "scratch"]);
    assert_eq!(code(&md), 1);
    assert!(
        stdout(&md).contains(":x: `scratch` tripped: sm_89 tile_spill"),
        "{}",
        text(&md)
    );
    let json = diff(&["--format", "json", "--fail-on", "scratch"]);
    assert_eq!(code(&json), 1);
    let j: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(j["gates"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["rule"] == "scratch" && g["tripped"] == true && g["kernel"] == "tile_spill"));
    let txt = diff(&["--format", "text", "--fail-on", "scratch"]);
    assert_eq!(code(&txt), 1);
    assert!(stdout(&txt).contains("FAIL    scratch:"));
    for o in [&md, &json, &txt] {
        assert!(
            stderr(o).contains("error: gate tripped: scratch"),
            "{}",
            text(o)
        );
    }
}

#[test]
fn allowlist_entry_suppresses_a_known_case() {
    let allow = allowlist(
        "valid",
        "# Known: the capped kernel spills by design.\n[[allow]]\nkernel = \"tile_*\"\n\
         rule = \"spills\"\njustification = \"capped on purpose, see #12\"\nexpires = 2999-12-31\n",
    );
    let (c, out, err) = gate("spills", &["--allow", &allow]);
    assert_eq!(c, 0, "{out}{err}");
    assert!(
        out.contains("allowed spills: sm_89 tile_spill: spill_store_bytes 0 → 388")
            && out.contains("(by valid.allow.toml:2 until 2999-12-31: capped on purpose, see #12)"),
        "{out}"
    );
    assert!(!out.contains("FAIL"), "{out}");
}

#[test]
fn allowlist_entry_that_matches_nothing_does_not_suppress() {
    let allow = allowlist(
        "nonmatching",
        "[[allow]]\nkernel = \"lean_scale\"\ntarget = \"sm_*\"\nrule = \"spills\"\n\
         justification = \"wrong kernel\"\nexpires = 2999-12-31\n\n\
         [[allow]]\nkernel = \"tile_spill\"\ntarget = \"sm_*\"\nrule = \"occupancy\"\n\
         justification = \"wrong rule\"\nexpires = 2999-12-31\n",
    );
    let (c, out, err) = gate("spills", &["--allow", &allow]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(out.contains("FAIL    spills: sm_89 tile_spill"), "{out}");
    assert!(out.contains("warning: nonmatching.allow.toml:1: the entry for kernel `lean_scale`, target `sm_*`, rule `spills` matches nothing; remove it"), "{out}");
    assert!(err.contains("error: gate tripped: spills"), "{err}");
}

#[test]
fn expired_allowlist_entry_fails_the_gate_itself() {
    let allow = allowlist(
        "expired",
        "[[allow]]\nkernel = \"tile_spill\"\nrule = \"spills\"\n\
         justification = \"was fine last year\"\nexpires = 2000-01-01\n",
    );
    let (c, out, err) = gate("spills", &["--allow", &allow]);
    assert_eq!(c, 1, "{out}{err}");
    assert!(
        out.contains("FAIL    allowlist: expired.allow.toml:1: the entry for kernel `tile_spill`, target `*`, rule `spills` expired on 2000-01-01 (today is 20"),
        "{out}"
    );
    // Expired, it suppresses nothing either.
    assert!(out.contains("FAIL    spills: gfx1100 tile_spill"), "{out}");
    assert!(
        err.contains("error: gate tripped: spills, allowlist"),
        "{err}"
    );
    // Even a gate nothing trips fails on it.
    let (c, out, _) = gate("lds:+100000", &["--allow", &allow]);
    assert_eq!(c, 1, "{out}");
    assert!(out.contains("expired on 2000-01-01"), "{out}");
}

#[test]
fn usage_errors_and_bad_inputs_exit_2_with_the_file_named() {
    let f = fixture();
    let o = diff(&["--fail-on", "spils"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        stderr(&o).contains("unknown gate rule `spils`"),
        "{}",
        text(&o)
    );
    let o = diff(&["--fail-on", "registers:8"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let o = kb(&f.root, &["diff", "base/out"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let o = kb(&f.root, &["diff", "base/out", "head/out", "--base", "HEAD"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    let o = kb(&f.root, &["diff", "base/out", "nowhere/manifest.json"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        stderr(&o).contains("NEW `nowhere/manifest.json` does not exist"),
        "{}",
        text(&o)
    );

    std::fs::write(
        f.root.join("inspect.json"),
        r#"{"schema": "kbuild.inspect/v1", "objects": []}"#,
    )
    .unwrap();
    let o = kb(&f.root, &["diff", "inspect.json", "head/out"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        stderr(&o).contains(
            "error: inspect.json: schema \"kbuild.inspect/v1\" is neither a build manifest"
        ),
        "{}",
        text(&o)
    );
    std::fs::write(f.root.join("garbage.json"), b"\x00\x01not json").unwrap();
    let o = kb(&f.root, &["diff", "garbage.json", "head/out"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        stderr(&o).contains("error: garbage.json: not JSON"),
        "{}",
        text(&o)
    );
    let o = kb(&f.root, &["diff", "base", "head/out"]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        stderr(&o).contains("base: a directory without manifest.json"),
        "{}",
        text(&o)
    );

    let allow = allowlist(
        "broken",
        "[[allow]]\nkernel = \"x\"\nrule = \"spils\"\njustification = \"j\"\nexpires = 2999-01-01\n",
    );
    let o = diff(&["--fail-on", "spills", "--allow", &allow]);
    assert_eq!(code(&o), 2, "{}", text(&o));
    assert!(
        stderr(&o)
            .contains("broken.allow.toml:1: allow entry `rule = \"spils\"` is not a gate rule"),
        "{}",
        text(&o)
    );
    assert!(o.stdout.is_empty(), "no report from a broken allowlist");
}

// -------------------------------------------------------------------------------- baseline

/// A copy of the head fixture (sources and include/) in a temp dir, sharing the cache.
fn head_copy() -> tempfile::TempDir {
    let f = fixture();
    let d = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(f.root.join("head")).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            if e.file_name() == "include" {
                copy_dir(&p, &d.path().join("include"));
            }
        } else {
            std::fs::copy(&p, d.path().join(e.file_name())).unwrap();
        }
    }
    d
}

#[test]
fn baseline_update_writes_one_sorted_line_per_object_and_check_passes() {
    let d = head_copy();
    let o = kb(d.path(), &["baseline", "update"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(
        stderr(&o).contains("wrote resources.json: 18 objects, 3 targets"),
        "{}",
        text(&o)
    );
    let file = d.path().join("resources.json");
    let body = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = body.lines().filter(|l| l.contains("\"target\":")).collect();
    assert_eq!(lines.len(), 18, "one line per object\n{body}");
    let keys: Vec<(String, String, String)> = lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l.trim_end_matches(',')).unwrap();
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (s("target"), s("kernel"), s("variant"))
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "(target, kernel, variant) order");
    assert!(
        !body.contains("sha256") && !body.contains("/tmp"),
        "no hashes or paths\n{body}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp + rename leaves nothing behind");

    let again = kb(d.path(), &["baseline", "update"]);
    assert!(
        stderr(&again).contains("unchanged resources.json"),
        "{}",
        text(&again)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        body,
        "stable bytes"
    );

    let check = kb(d.path(), &["build", "--check-baseline"]);
    assert_eq!(code(&check), 0, "{}", text(&check));
    assert!(
        stderr(&check).contains("baseline resources.json: up to date (18 objects, 3 targets)"),
        "{}",
        text(&check)
    );
    let subset = kb(d.path(), &["--targets", "sm_89", "--check-baseline"]);
    assert_eq!(code(&subset), 0, "{}", text(&subset));
    assert!(
        stderr(&subset).contains("2 more targets in it were not built"),
        "{}",
        text(&subset)
    );
}

#[test]
fn check_baseline_fails_on_drift_with_the_diff() {
    let d = head_copy();
    assert_eq!(code(&kb(d.path(), &["baseline", "update"])), 0);
    let file = d.path().join("resources.json");
    let body = std::fs::read_to_string(&file).unwrap();
    // Pretend the committed baseline had one VGPR fewer for wide_dot on gfx1100.
    let line = body
        .lines()
        .find(|l| l.contains("\"target\":\"gfx1100\",\"kernel\":\"pressure\""))
        .unwrap();
    std::fs::write(
        &file,
        body.replace(line, &line.replace("\"vgprs\":140", "\"vgprs\":139")),
    )
    .unwrap();
    let o = kb(d.path(), &["build", "--check-baseline"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("kernel resources: resources.json → this build"),
        "{err}"
    );
    assert!(
        err.contains("gfx1100: 1 regression, 0 improvements, 5 unchanged"),
        "{err}"
    );
    assert!(err.contains("139 → 140 (+1 VGPR)"), "{err}");
    assert!(
        err.contains("error: kernel resources drifted from resources.json; if the change is intended, run `kbuild baseline update` and commit resources.json"),
        "{err}"
    );
    // A baseline at another path, and a missing one.
    let o = kb(d.path(), &["build", "--check-baseline=elsewhere.json"]);
    assert_eq!(code(&o), 1, "{}", text(&o));
    assert!(
        stderr(&o).contains(
            "no resource baseline at elsewhere.json; create it with `kbuild baseline update`"
        ),
        "{}",
        text(&o)
    );
    // Updating fixes it.
    assert_eq!(code(&kb(d.path(), &["baseline", "update"])), 0);
    assert_eq!(code(&kb(d.path(), &["build", "--check-baseline"])), 0);
}

// ---------------------------------------------------------------------------- --base REV

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git");
    assert!(o.status.success(), "git {args:?}\n{}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn base_rev_builds_in_a_worktree_reuses_the_cache_and_finds_the_changed_kernel() {
    let s = Scratch::new();
    let repo = s.path().join("repo");
    let k = repo.join("kernels");
    std::fs::create_dir_all(&k).unwrap();
    std::fs::write(repo.join(".gitignore"), "out/\n").unwrap();
    std::fs::write(
        k.join("Kbuild.toml"),
        "[package]\nname = \"two\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\", \"gfx1100\"]\n\
         out-dir = \"out\"\n\n[kernels.a]\nsource = \"a.cu\"\n\
         entries = [\"a_kernel\"]\nblock-size = 256\n\n[kernels.b]\nsource = \"b.cu\"\n\
         entries = [\"b_kernel\"]\nblock-size = 256\n",
    )
    .unwrap();
    std::fs::write(
        k.join("a.cu"),
        "#include \"kcompat.h\"\nKC_KERNEL(256) void a_kernel(float* x) { x[threadIdx.x] += 1.0f; }\n",
    )
    .unwrap();
    let b_v1 = "#include \"kcompat.h\"\nKC_KERNEL(256) void b_kernel(float* x) { x[threadIdx.x] *= 2.0f; }\n";
    std::fs::write(k.join("b.cu"), b_v1).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "two kernels"]);
    // The change under review: b stages through shared memory.
    std::fs::write(
        k.join("b.cu"),
        "#include \"kcompat.h\"\nKC_KERNEL(256) void b_kernel(float* x) {\n  __shared__ float t[256];\n\
         t[threadIdx.x] = x[threadIdx.x];\n  __syncthreads();\n  x[threadIdx.x] = 2.0f * t[255 - threadIdx.x];\n}\n",
    )
    .unwrap();
    git(&repo, &["commit", "-qam", "b through shared memory"]);
    let head_before = git(&repo, &["rev-parse", "HEAD"]);

    let o = s.kbuild(&k, &["diff", "--base", "HEAD~1", "--format", "json"]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    let changed: Vec<(&str, &str, &str)> = j["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["target"].as_str().unwrap(),
                c["kernel"].as_str().unwrap(),
                c["field"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(!changed.is_empty(), "{}", text(&o));
    assert!(
        changed.iter().all(|c| c.1 == "b_kernel"),
        "only b changed: {changed:?}"
    );
    assert!(
        changed.contains(&("sm_89", "b_kernel", "lds_bytes")),
        "{changed:?}"
    );
    assert!(
        changed.contains(&("gfx1100", "b_kernel", "lds_bytes")),
        "{changed:?}"
    );
    assert_eq!(j["summary"]["unchanged"], 2, "a on both targets");
    assert_eq!(j["summary"]["added"], 0);
    assert_eq!(j["summary"]["removed"], 0);
    assert!(
        j["base"].as_str().unwrap().starts_with("HEAD~1 ("),
        "{}",
        j["base"]
    );
    assert_eq!(j["head"], "working tree");

    // Head: a and b for 2 targets; base: only the old b (a came from the cache).
    let lines = s.compile_lines();
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("a.cu")).count(),
        2,
        "{lines:#?}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("b.cu")).count(),
        4,
        "{lines:#?}"
    );

    // The main checkout is untouched and the worktree is gone.
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);

    // A revision that does not exist is a usage error that says so.
    let bad = s.kbuild(&k, &["diff", "--base", "no-such-rev"]);
    assert_eq!(code(&bad), 2, "{}", text(&bad));
    assert!(
        stderr(&bad).contains("unknown git revision `no-such-rev`"),
        "{}",
        text(&bad)
    );
}
