//! The build.rs API through cargo itself: a copy of `examples/buildrs` (at a new path, so its
//! build script and crate are built from scratch; dependencies come from the workspace's
//! `target`) builds its kernels through kbuild, a second `cargo build` reruns nothing,
//! touching a kernel header reruns the build script (and kbuild's cache serves it), and the
//! example's own tests (explain for simulated devices, on CPU) pass.

use crate::kbuild_tests;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use kbuild_tests::{copy_dir, repo_root, text, Scratch};

/// 2 kernels × 2 targets (examples/buildrs/kernels/Kbuild.toml).
const JOBS: usize = 4;

fn copy_example(s: &Scratch) -> PathBuf {
    let root = repo_root();
    let dst = s.path().join("buildrs");
    copy_dir(&root.join("examples/buildrs"), &dst);
    let _ = std::fs::remove_dir_all(dst.join("target"));
    let abs = |rel: &str| root.join(rel).display().to_string();
    let rewrite = |file: &Path, from: &str, to: &str| {
        let t = std::fs::read_to_string(file).expect("read");
        assert!(t.contains(from), "{} has no {from}", file.display());
        std::fs::write(file, t.replace(from, to)).expect("write");
    };
    let cargo_toml = dst.join("Cargo.toml");
    rewrite(
        &cargo_toml,
        "\"../../loader\"",
        &format!("{:?}", abs("loader")),
    );
    rewrite(
        &cargo_toml,
        "\"../../build-system\"",
        &format!("{:?}", abs("build-system")),
    );
    dst
}

fn cargo(s: &Scratch, dir: &Path, args: &[&str]) -> Output {
    let o = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .args(["--offline", "-v"])
        .current_dir(dir)
        // The workspace's target dir: the dependencies (kbuild's crates and theirs, at the
        // versions of the workspace's lockfile) are mostly built already by this test run.
        // Cargo holds that dir's lock only while it compiles, not while tests run.
        .env("CARGO_TARGET_DIR", repo_root().join("target"))
        .env("KBUILD_CACHE_DIR", &s.cache)
        .env("KBUILD_LAUNCHER", s.path().join("count-compiles.sh"))
        .env_remove("RUSTFLAGS")
        .output()
        .expect("running cargo");
    assert!(o.status.success(), "cargo {args:?}\n{}", text(&o));
    o
}

/// Whether cargo ran the example's build script in this invocation.
fn ran_build_script(o: &Output) -> bool {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .any(|l| l.contains("Running `") && l.contains("build-script-build`"))
}

#[test]
fn buildrs_example_builds_then_reruns_nothing_then_reruns_on_a_header_touch() {
    let s = Scratch::new();
    let ex = copy_example(&s);

    // 1. From scratch: the build script runs and compiles every kernel for both targets.
    let o = cargo(&s, &ex, &["build"]);
    assert!(ran_build_script(&o), "{}", text(&o));
    assert_eq!(s.compiles(), JOBS, "{}", text(&o));

    // 2. Nothing changed: the build script is not rerun, nothing is compiled.
    let o = cargo(&s, &ex, &["build"]);
    assert!(
        !ran_build_script(&o),
        "the build script reran\n{}",
        text(&o)
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("Fresh kbuild-buildrs-example"),
        "{}",
        text(&o)
    );
    assert_eq!(s.compiles(), JOBS);

    // 3. A kernel header touched (content unchanged): the build script reruns, and kbuild's
    //    content-addressed cache serves every object (no compiles).
    let header = ex.join("kernels/example.h");
    let f = std::fs::File::options()
        .append(true)
        .open(&header)
        .expect("example.h");
    f.set_modified(SystemTime::now() + Duration::from_secs(2))
        .expect("touch example.h");
    drop(f);
    let o = cargo(&s, &ex, &["build"]);
    assert!(
        ran_build_script(&o),
        "touching example.h did not rerun it\n{}",
        text(&o)
    );
    assert_eq!(s.compiles(), JOBS, "{}", text(&o));

    // 4. The example's tests: the embedded bundle, explained for simulated devices.
    let o = cargo(&s, &ex, &["test"]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("3 passed"), "{}", text(&o));
    assert_eq!(s.compiles(), JOBS);
}
