//! Every way a build can be wrong gets a message naming what and where, a non-zero exit, and no
//! manifest that lists a broken object.

use crate::kbuild_tests;

use std::path::Path;

use kbuild_tests::{manifest, text, Scratch};

fn project(dir: &Path, kernels: &[(&str, &str, &str)], extra: &str) -> std::path::PathBuf {
    let k = dir.join("kernels");
    std::fs::create_dir_all(k.join("include")).unwrap();
    let mut toml = String::from(
        "[package]\nname = \"errs\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\", \"gfx1100\"]\ninclude-dirs = [\"include\"]\nout-dir = \"out\"\n",
    );
    toml.push_str(extra);
    for (name, body, entry) in kernels {
        std::fs::write(
            k.join(format!("{name}.cu")),
            format!("#include \"kcompat.h\"\n{body}\n"),
        )
        .unwrap();
        toml.push_str(&format!(
            "\n[kernels.{name}]\nsource = \"{name}.cu\"\nentries = [\"{entry}\"]\n"
        ));
    }
    std::fs::write(k.join("Kbuild.toml"), toml).unwrap();
    k
}

const GOOD: (&str, &str, &str) = (
    "good",
    "KC_KERNEL(64) void good(float* x) { x[threadIdx.x] += 1.0f; }",
    "good",
);

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn unknown_target_on_the_command_line_suggests_the_nearest() {
    let s = Scratch::new();
    let k = project(s.path(), &[GOOD], "");
    let o = s.kbuild(&k, &["--targets", "sm89"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("unknown target `sm89` (did you mean sm_89?)"),
        "{}",
        text(&o)
    );
    assert!(!k.join("out/manifest.json").exists());
    assert_eq!(s.compiles(), 0);
}

#[test]
fn too_old_toolchain_names_the_needed_version() {
    let s = Scratch::new();
    let k = project(s.path(), &[GOOD], "");
    // gfx950 needs LLVM 20; Debian's clang is 19.
    let o = s.kbuild(&k, &["--targets", "sm_89,gfx950"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(e.contains("target gfx950 needs LLVM ≥ 20.0"), "{e}");
    assert!(e.contains("is 19.1"), "{e}");
    assert!(
        !k.join("out/manifest.json").exists(),
        "nothing built, no manifest"
    );
    assert_eq!(s.compiles(), 0);
}

#[test]
fn missing_toolchain_says_how_to_install_it() {
    let s = Scratch::new();
    let k = project(s.path(), &[GOOD], "");
    // Hide every CUDA location: no CUDA_HOME, an empty kbuild data dir, a PATH without nvcc.
    let o = std::process::Command::new(kbuild_tests::kbuild_bin())
        .args(["--targets", "sm_89"])
        .current_dir(&k)
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .env("KBUILD_DATA_DIR", s.path().join("empty-data"))
        .env("KBUILD_CACHE_DIR", &s.cache)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(
        !Path::new("/usr/local/cuda/bin/nvcc").exists() && !Path::new("/usr/bin/nvcc").exists(),
        "a system CUDA is installed, so the missing-toolchain case cannot be staged here: run \
         this test on a machine whose only CUDA is kbuild's (as CI's)"
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(e.contains("no CUDA toolchain found"), "{e}");
    assert!(e.contains("run `kbuild toolchain install cuda`"), "{e}");
}

#[test]
fn a_syntax_error_fails_that_job_with_command_and_compiler_output() {
    let s = Scratch::new();
    let broken = (
        "broken",
        "KC_KERNEL(64) void broken(float* x) { x[threadIdx.x] = ; }",
        "broken",
    );
    let k = project(s.path(), &[GOOD, broken], "");
    let o = s.kbuild(&k, &["--keep-going"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    for target in ["sm_89", "gfx1100"] {
        assert!(
            e.contains(&format!("error: broken for {target}: compiler exited with")),
            "{e}"
        );
    }
    assert!(
        e.contains("command: ") && e.contains("nvcc") && e.contains("clang++"),
        "{e}"
    );
    assert!(e.contains("broken.cu"), "compiler stderr quoted\n{e}");
    assert!(
        e.contains("expected an expression") || e.contains("expected expression"),
        "{e}"
    );
    let m = manifest(&k.join("out"));
    let kernels: Vec<&str> = m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(
        kernels,
        ["good", "good"],
        "only the good objects are listed"
    );
    assert!(k.join("out/sm_89/good.cubin").is_file() && k.join("out/gfx1100/good.hsaco").is_file());
    assert!(!k.join("out/sm_89/broken.cubin").exists());
}

#[test]
fn without_keep_going_a_failure_stops_scheduling() {
    let s = Scratch::new();
    let broken = (
        "broken",
        "KC_KERNEL(64) void broken(float* x) { x[threadIdx.x] = ; }",
        "broken",
    );
    let k = project(s.path(), &[broken, GOOD], "");
    let o = s.kbuild(&k, &["-j", "1", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let sum = kbuild_tests::summary(&o);
    assert_eq!(sum["failed"], 1);
    assert_eq!(
        sum["compiled"], 0,
        "nothing scheduled after the first failure with -j 1"
    );
}

#[test]
fn a_missing_entry_symbol_fails_the_coverage_audit() {
    let s = Scratch::new();
    let wrong = (
        "wrong",
        "KC_KERNEL(64) void actual_name(float* x) { x[threadIdx.x] += 1.0f; }",
        "expected_name",
    );
    let k = project(s.path(), &[GOOD, wrong], "");
    let o = s.kbuild(&k, &["--keep-going"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains("wrong for sm_89: coverage audit: object does not export entry symbol(s) expected_name (it exports: actual_name)"),
        "{e}"
    );
    assert!(e.contains("wrong for gfx1100: coverage audit"), "{e}");
    let m = manifest(&k.join("out"));
    assert!(m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o["kernel"] == "good"));
}

#[test]
fn a_malformed_kbuild_toml_names_file_and_line() {
    let s = Scratch::new();
    let k = project(s.path(), &[GOOD], "job-timout = 5\n");
    let o = s.kbuild(&k, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains("Kbuild.toml:9:1: unknown key `job-timout` (did you mean `job-timeout`?)"),
        "{e}"
    );
    assert!(!k.join("out").exists());

    let k2 = project(&s.path().join("two"), &[GOOD], "targets2 = [\n");
    let o = s.kbuild(&k2, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("Kbuild.toml:"), "{}", text(&o));

    let k3 = project(&s.path().join("three"), &[GOOD], "");
    let toml = std::fs::read_to_string(k3.join("Kbuild.toml"))
        .unwrap()
        .replace("\"sm_89\"", "\"sm_8.9\"");
    std::fs::write(k3.join("Kbuild.toml"), toml).unwrap();
    let o = s.kbuild(&k3, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("Kbuild.toml:6:12: unknown target `sm_8.9`"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_hanging_compiler_is_killed_at_the_job_timeout() {
    let s = Scratch::new();
    let k = project(s.path(), &[GOOD], "");
    let hang = s.path().join("hang.sh");
    std::fs::write(&hang, "#!/bin/sh\nsleep 30\n").unwrap();
    kbuild_tests::make_executable(&hang);
    // A bystander in its own process group: killing the compiler must not touch it (kill(1)
    // of procps-ng 4.0.2 once turned the group kill into a kill of every process).
    let mut bystander = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap()
    };
    let start = std::time::Instant::now();
    let o = std::process::Command::new(kbuild_tests::kbuild_bin())
        .args(["--targets", "sm_89", "--job-timeout", "1"])
        .current_dir(&k)
        .env("KBUILD_CACHE_DIR", &s.cache)
        .env("KBUILD_LAUNCHER", &hang)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("good for sm_89: compiler timed out after 1 s"),
        "{}",
        text(&o)
    );
    assert!(
        start.elapsed().as_secs() < 20,
        "the hanging compiler was not killed"
    );
    let alive = bystander.try_wait().unwrap().is_none();
    let _ = bystander.kill();
    let _ = bystander.wait();
    assert!(alive, "killing the compiler's group killed another process");
}
