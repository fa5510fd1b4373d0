//! Trust of a scanned or cloned tree (issue 26, classes 1–3): nothing in it may run a command
//! or configure kbuild, and a build never writes outside it through a planted link. Each test
//! reproduces the attack with a fake CUDA toolkit whose `nvcc`, like the real one, runs a
//! sub-step through `sh` with its arguments on the command line (so a `$(…)` in any argument
//! would run), and checks that nothing ran, nothing was written outside and the error or note
//! names the value. No real compiler: the refusals come before any compile.

use crate::kbuild_tests;

use std::path::PathBuf;
use std::process::{Command, Output};

use kbuild_tests::text;

/// nvcc as far as kbuild sees it: `--version`, and PTX with one entry `scale` plus a depfile
/// for `-arch=compute_XY`. Its first step is what makes the attack real: nvcc hands its
/// sub-steps to `sh`.
fn shell_nvcc() -> String {
    kbuild_tests::fake_nvcc(r#"sh -c "true $*""#, "")
}

const KERNEL: &str = "__global__ void scale(float* x) { x[0] = 1.0f; }\n";

/// A scratch area: the fake toolkit, a cache, the project directory `proj` (with
/// `tools/x.sh`, which creates `MARKER` outside the project when anything runs it) and a
/// directory `outside` the project.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Tree { dir };
        let bin = t.cuda().join("bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::write(bin.join("nvcc"), shell_nvcc()).expect("write nvcc");
        kbuild_tests::make_executable(&bin.join("nvcc"));
        std::fs::create_dir_all(t.proj().join("tools")).expect("mkdir");
        std::fs::create_dir_all(t.outside()).expect("mkdir");
        for script in ["x.sh", "cc-wrap.sh"] {
            let p = t.proj().join("tools").join(script);
            std::fs::write(&p, format!("#!/bin/sh\ntouch '{}'\n", t.marker().display()))
                .expect("write script");
            kbuild_tests::make_executable(&p);
        }
        std::fs::write(t.proj().join("ok.cu"), KERNEL).expect("write source");
        t
    }

    fn cuda(&self) -> PathBuf {
        self.dir.path().join("cuda")
    }

    fn proj(&self) -> PathBuf {
        self.dir.path().join("proj")
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    fn marker(&self) -> PathBuf {
        self.dir.path().join("MARKER")
    }

    /// `kbuild ARGS` in the project with the fake toolkit and no launcher.
    fn kbuild(&self, args: &[&str]) -> Output {
        Command::new(kbuild_tests::kbuild_bin())
            .args(args)
            .current_dir(self.proj())
            .env("CUDA_HOME", self.cuda())
            .env("KBUILD_CACHE_DIR", self.dir.path().join("cache"))
            .env("NO_COLOR", "1")
            .env_remove("KBUILD_LAUNCHER")
            .output()
            .expect("running kbuild")
    }

    /// `kbuild init --json` for compute_89 (the fake toolkit's PTX target): its report.
    fn init(&self) -> serde_json::Value {
        let o = self.kbuild(&["init", "--targets", "compute_89", "--json"]);
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice(&o.stdout).expect("init --json")
    }

    /// The written Kbuild.toml, parsed.
    fn written(&self) -> toml::Table {
        let t = std::fs::read_to_string(self.proj().join("Kbuild.toml")).expect("Kbuild.toml");
        toml::from_str(&t).unwrap_or_else(|e| panic!("{e}\n{t}"))
    }

    fn skipped(report: &serde_json::Value) -> String {
        report["skipped"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    fn compile_commands(&self, arguments: &[&str]) {
        let cc = serde_json::json!([{
            "directory": self.proj().display().to_string(),
            "file": "ok.cu",
            "arguments": arguments,
        }]);
        std::fs::write(self.proj().join("compile_commands.json"), cc.to_string())
            .expect("write compile_commands.json");
    }
}

fn kernels(file: &toml::Table) -> Vec<String> {
    file.get("kernels")
        .and_then(|k| k.as_table())
        .map(|k| k.keys().cloned().collect())
        .unwrap_or_default()
}

/// Class 1: a source file named to run a command when nvcc's `sh` sees its name.
#[test]
fn init_skips_a_source_file_whose_name_runs_a_command() {
    let t = Tree::new();
    let evil = "k$(sh tools$(printf \\\\057)x.sh).cu";
    std::fs::write(t.proj().join(evil), KERNEL).expect("write source");
    // The fake nvcc really runs such a name (what init's discovery build used to hand it).
    let probe = Command::new("sh")
        .args(["-c", &format!("true {evil}")])
        .current_dir(t.proj())
        .status()
        .expect("sh");
    assert!(probe.success() && t.marker().exists(), "the attack is real");
    std::fs::remove_file(t.marker()).expect("rm marker");

    let report = t.init();
    assert!(!t.marker().exists(), "init ran tools/x.sh");
    let skipped = Tree::skipped(&report);
    assert!(
        skipped.contains("source file `k$(sh tools$(printf")
            && skipped.contains("holds `$`, which a shell acts on")
            && skipped.contains("; skipped"),
        "{report:#}"
    );
    assert_eq!(kernels(&t.written()), ["ok"]);

    // The written file builds, and still nothing ran.
    let o = t.kbuild(&["build", "-q"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!t.marker().exists(), "build ran tools/x.sh");
}

/// Class 1: a define from compile_commands.json, and the same define in Kbuild.toml.
#[test]
fn a_define_that_runs_a_command_is_refused_by_init_and_by_build() {
    let t = Tree::new();
    t.compile_commands(&[
        "nvcc",
        "-DVERSION=$(sh tools/x.sh)",
        "-DOK=1",
        "-c",
        "ok.cu",
    ]);
    let report = t.init();
    assert!(!t.marker().exists(), "init ran tools/x.sh");
    let skipped = Tree::skipped(&report);
    assert!(
        skipped.contains("compile_commands.json entry 0: -D `VERSION=$(sh tools/x.sh)` holds `$`"),
        "{report:#}"
    );
    let file = t.written();
    let defines = file["build"].get("defines").and_then(|d| d.as_table());
    assert_eq!(
        defines.map(|d| d.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["OK".to_string()]),
        "{file:#?}"
    );

    std::fs::write(
        t.proj().join("Kbuild.toml"),
        "[package]\nname = \"gdn\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"compute_89\"]\n\n\
         [kernels.gdn]\nsource = \"ok.cu\"\nentries = [\"scale\"]\n\
         defines = { VERSION = \"$(sh tools/x.sh)\" }\n",
    )
    .expect("write Kbuild.toml");
    let o = t.kbuild(&["build"]);
    assert!(!o.status.success(), "{}", text(&o));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("Kbuild.toml:")
            && e.contains("kernels.gdn.defines.VERSION `$(sh tools/x.sh)` holds `$`"),
        "{e}"
    );
    assert!(!t.marker().exists(), "build ran tools/x.sh");
    assert!(!t.proj().join("target").exists(), "build wrote an out-dir");
}

/// Class 2: an include directory whose name ends init's comment line and adds a launcher.
#[test]
fn compile_commands_cannot_write_a_launcher_into_kbuild_toml() {
    let t = Tree::new();
    let evil_missing = "x\nlauncher = \"./tools/cc-wrap.sh\"\n#";
    let evil_present = "inc\n[toolchain]\ncuda = \"./tools\"\n#";
    std::fs::create_dir_all(t.proj().join(evil_present)).expect("mkdir");
    t.compile_commands(&[
        "nvcc",
        &format!("-I{evil_missing}"),
        &format!("-I{evil_present}"),
        "-c",
        "ok.cu",
    ]);
    let report = t.init();
    let skipped = Tree::skipped(&report);
    assert!(
        skipped.contains(
            "-I `x\\nlauncher = \\\"./tools/cc-wrap.sh\\\"\\n#` holds the control character U+000A"
        ),
        "{report:#}"
    );
    let file = t.written();
    let keys: Vec<&String> = file.keys().collect();
    assert_eq!(keys, ["build", "kernels", "package"], "{file:#?}");
    let build = file["build"].as_table().expect("[build]");
    assert!(
        build.keys().all(|k| k == "targets"),
        "only targets were meant: {build:#?}"
    );
    // The build init suggests next runs no launcher.
    let o = t.kbuild(&["build", "-q"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!t.marker().exists(), "the planted launcher ran");
}

/// Class 3: per-target dirs, `include` and the out-dir's parent planted as links to outside.
#[cfg(unix)]
#[test]
fn a_build_never_writes_through_a_link_planted_in_the_out_dir() {
    let t = Tree::new();
    std::fs::write(
        t.proj().join("Kbuild.toml"),
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\"]\n\n\
         [kernels.ok]\nsource = \"ok.cu\"\nentries = [\"scale\"]\n",
    )
    .expect("write Kbuild.toml");
    let out = t.proj().join("target/kbuild");
    std::fs::create_dir_all(&out).expect("mkdir");
    for planted in ["sm_89", "include"] {
        let link = out.join(planted);
        std::os::unix::fs::symlink(t.outside(), &link).expect("symlink");
        let o = t.kbuild(&["build"]);
        assert!(!o.status.success(), "{}", text(&o));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains(&format!("target/kbuild/{planted} is a symbolic link")),
            "{e}"
        );
        assert_eq!(
            std::fs::read_dir(t.outside()).expect("ls").count(),
            0,
            "written outside through {planted}"
        );
        std::fs::remove_file(&link).expect("rm link");
    }
    // `target -> outside`: the default out-dir would be made through it.
    std::fs::remove_dir_all(t.proj().join("target")).expect("rm target");
    std::os::unix::fs::symlink(t.outside(), t.proj().join("target")).expect("symlink");
    let o = t.kbuild(&["build"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("proj/target is a symbolic link"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_dir(t.outside()).expect("ls").count(), 0);
    assert!(!t.marker().exists());
}
