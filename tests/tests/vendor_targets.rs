//! Issue 27, items 1, 2 and 9: a unit that fails on one vendor is kept to that vendor's group,
//! init says per target how many kernels build and groups failures by cause, prints a line
//! per unit off a terminal and names the package after the library; a target left without
//! objects warns, fails under `--strict`, and makes `package` refuse or mark the bundle
//! partial; `package --build-dir` refuses a build made before `[package]` was edited.
//!
//! NVIDIA is a fake toolkit (PTX for `compute_XY`, entry `scale`, failing on a source that
//! says `NV_BROKEN`); AMD is the installed hip-clang, which fails on `thrust/device_vector.h`.

use crate::kbuild_tests;

use std::path::PathBuf;
use std::process::{Command, Output};

use kbuild_tests::text;

/// Fails a source holding `NV_BROKEN`, as nvcc fails an undefined name.
fn fake_nvcc() -> String {
    kbuild_tests::fake_nvcc(
        "",
        r#"while IFS= read -r line; do
  case "$line" in
    *NV_BROKEN*) echo "$src(1): error: identifier \"nv_broken\" is undefined" >&2; exit 2 ;;
  esac
done < "$src""#,
    )
}

const BOTH: &str = "extern \"C\" __global__ void scale(float* x) { x[0] = 1.0f; }\n";
const NVIDIA_ONLY: &str =
    "#include <thrust/device_vector.h>\nextern \"C\" __global__ void scale(float* x) { x[0] = 1.0f; }\n";
const AMD_ONLY: &str =
    "// NV_BROKEN\nextern \"C\" __global__ void scale(float* x) { x[0] = 2.0f; }\n";

struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let t = Tree {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let bin = t.dir.path().join("cuda/bin");
        std::fs::create_dir_all(&bin).expect("mkdir");
        std::fs::write(bin.join("nvcc"), fake_nvcc()).expect("write nvcc");
        kbuild_tests::make_executable(&bin.join("nvcc"));
        std::fs::create_dir_all(t.proj().join("src")).expect("mkdir");
        t
    }

    fn proj(&self) -> PathBuf {
        self.dir.path().join("lib-0.11.1")
    }

    fn kbuild(&self, args: &[&str]) -> Output {
        Command::new(kbuild_tests::kbuild_bin())
            .args(args)
            .current_dir(self.proj())
            .env("CUDA_HOME", self.dir.path().join("cuda"))
            .env("KBUILD_CACHE_DIR", self.dir.path().join("cache"))
            .env("NO_COLOR", "1")
            .env_remove("KBUILD_LAUNCHER")
            .env_remove("CI")
            .output()
            .expect("running kbuild")
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.proj().join(rel), text).expect("write");
    }

    fn manifest(&self) -> serde_json::Value {
        let p = self.proj().join("target/kbuild/manifest.json");
        serde_json::from_slice(&std::fs::read(p).expect("manifest")).expect("json")
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn init_keeps_a_unit_to_its_vendor_and_says_why_per_target() {
    let t = Tree::new();
    t.write("src/both.cu", BOTH);
    t.write("src/fp8_a.cu", NVIDIA_ONLY);
    t.write("src/fp8_b.cu", NVIDIA_ONLY);
    t.write("src/amd.cu", AMD_ONLY);
    t.write(
        "CMakeLists.txt",
        "cmake_minimum_required(VERSION 3.18)\nproject(FastLib VERSION 0.11.1 LANGUAGES CXX CUDA)\n",
    );
    let o = t.kbuild(&["init", "--targets", "compute_89,gfx1100"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = stderr(&o);
    // One line per unit (stderr is not a terminal here), with its count and time.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.trim_start().starts_with('['))
        .collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(lines.iter().any(|l| l.contains("[4/4] ")), "{err}");
    assert!(
        lines.iter().any(|l| l
            .contains("src/fp8_a.cu: built for compute_89, failed for gfx1100 (")
            && l.ends_with(" s)")),
        "{err}"
    );

    let file = std::fs::read_to_string(t.proj().join("Kbuild.toml")).expect("Kbuild.toml");
    let doc: toml::Table = toml::from_str(&file).unwrap_or_else(|e| panic!("{e}\n{file}"));
    let k = doc["kernels"].as_table().expect("kernels");
    let targets = |name: &str| {
        k.get(name)
            .unwrap_or_else(|| panic!("no {name}\n{file}"))
            .get("targets")
            .map(|v| v.to_string())
    };
    assert_eq!(targets("fp8_a").as_deref(), Some("[\"nvidia\"]"), "{file}");
    assert_eq!(targets("fp8_b").as_deref(), Some("[\"nvidia\"]"), "{file}");
    assert_eq!(targets("amd").as_deref(), Some("[\"amd\"]"), "{file}");
    assert_eq!(targets("both"), None, "{file}");
    // The library's own name and version, from CMakeLists.txt.
    assert_eq!(doc["package"]["name"].as_str(), Some("fastlib"), "{file}");
    assert_eq!(doc["package"]["version"].as_str(), Some("0.11.1"), "{file}");
    assert!(
        out.contains("package `fastlib` (from CMakeLists.txt)"),
        "{out}"
    );
    // Per target, and failures grouped by cause with the known fix.
    assert!(
        out.contains("kernels per target: compute_89 3 of 4, gfx1100 2 of 4"),
        "{out}"
    );
    assert!(
        out.contains(
            "2 units for gfx1100: `thrust/device_vector.h` not found (src/fp8_a.cu, src/fp8_b.cu)"
        ),
        "{out}"
    );
    assert!(
        out.contains("help: `thrust/device_vector.h` is part of the CUDA toolkit"),
        "{out}"
    );
    assert!(
        out.contains("1 unit for compute_89: `nv_broken` undeclared (src/amd.cu)"),
        "{out}"
    );

    // A target of the vendor added later builds the restricted units too.
    let o = t.kbuild(&["build", "--targets", "compute_90"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains(
            "kbuild: per target: compute_90 3 of 4 kernels (1 restricted by Kbuild.toml)"
        ),
        "{}",
        text(&o)
    );
    let m = t.manifest();
    let built: Vec<&str> = m["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .filter_map(|o| o["kernel"].as_str())
        .collect();
    assert_eq!(built, ["both", "fp8_a", "fp8_b"], "{m:#}");
    assert_eq!(m["restricted"]["compute_90"], serde_json::json!(["amd"]));

    // Without a project file naming the library: the directory's name, and a note.
    std::fs::remove_file(t.proj().join("CMakeLists.txt")).expect("rm");
    let o = t.kbuild(&["init", "--force", "--targets", "compute_89"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .contains("package `lib-0.11.1` is named after the directory"),
        "{}",
        text(&o)
    );
}

const NV_PROJECT: &str = "[package]\nname = \"nvlib\"\nversion = \"1.0.0\"\n\n[kernels.scale]\nsource = \"src/both.cu\"\nentries = [\"scale\"]\ntargets = [\"cuda\"]\n";

#[test]
fn a_target_without_objects_warns_fails_under_strict_and_is_not_packaged_silently() {
    let t = Tree::new();
    t.write("src/both.cu", BOTH);
    t.write("Kbuild.toml", NV_PROJECT);
    let o = t.kbuild(&["build", "--targets", "compute_89,gfx1100"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("warning: target gfx1100 built no object: gfx1100: 0 of 1 kernel (1 restricted by Kbuild.toml)"),
        "{err}"
    );
    assert!(
        err.contains("per target: compute_89 1 of 1 kernel, gfx1100 0 of 1 kernel"),
        "{err}"
    );
    let o = t.kbuild(&["build", "--strict", "--targets", "compute_89,gfx1100"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("--strict: a requested target is without objects"),
        "{}",
        text(&o)
    );

    let dist = t.dir.path().join("dist");
    let dist_s = dist.display().to_string();
    let o = t.kbuild(&["package", "target/kbuild", "--out", &dist_s]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("1 target without objects (gfx1100"),
        "{}",
        text(&o)
    );
    let o = t.kbuild(&[
        "package",
        "target/kbuild",
        "--out",
        &dist_s,
        "--allow-partial",
    ]);
    assert!(o.status.success(), "{}", text(&o));

    // `[package]` edited after the build: package refuses the stale build dir, and a package
    // that builds takes the current name.
    t.write("Kbuild.toml", &NV_PROJECT.replace("nvlib", "nvlib-renamed"));
    let o = t.kbuild(&["build", "--targets", "compute_89"]);
    assert!(o.status.success(), "{}", text(&o));
    t.write("Kbuild.toml", &NV_PROJECT.replace("nvlib", "nvlib-final"));
    let o = t.kbuild(&["package", "target/kbuild", "--out", &dist_s]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("was built as `nvlib-renamed 1.0.0`, but")
            && stderr(&o).contains("now says `nvlib-final 1.0.0`"),
        "{}",
        text(&o)
    );
    let o = t.kbuild(&["package", "--targets", "compute_89", "--out", &dist_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        dist.join("nvlib-final-1.0.0.kbundle").is_file(),
        "{}",
        text(&o)
    );
}

/// Issue 27, item 10: explain's hint for a kernel with no object says why from the build's
/// manifest: the Kbuild.toml restriction, or the compile that failed for that target, not a
/// `--targets` that would add nothing.
#[test]
fn explain_says_why_the_build_left_a_kernel_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let kernel = |name: &str, body: &str| {
        std::fs::write(
            p.join(format!("{name}.hip")),
            format!("{body}\nextern \"C\" __global__ void {name}(float* x) {{ x[0] = 1.0f; }}\n"),
        )
        .unwrap();
        format!("[kernels.{name}]\nsource = \"{name}.hip\"\nlanguage = \"hip\"\nentries = [\"{name}\"]\n")
    };
    let toml = format!(
        "[package]\nname = \"why\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"gfx942\", \"gfx1100\"]\nout-dir = \"out\"\n\n{}{}targets = [\"gfx942\"]\n{}",
        kernel("everywhere", ""),
        kernel("kept_off", ""),
        kernel("broken", "#if defined(__gfx1100__)\n#error no RDNA3 port yet\n#endif"),
    );
    std::fs::write(p.join("Kbuild.toml"), toml).unwrap();
    let kbuild = |args: &[&str]| {
        Command::new(kbuild_tests::kbuild_bin())
            .args(args)
            .current_dir(p)
            .env("KBUILD_CACHE_DIR", p.join("cache"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let o = kbuild(&["--keep-going"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = kbuild(&["explain", "--device", "gfx1100", "out"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    let line = |k: &str| {
        err.lines()
            .find(|l| l.contains(&format!("kernel `{k}`")))
            .unwrap_or_else(|| panic!("no error for {k}: {err}"))
            .to_string()
    };
    assert!(
        line("kept_off").contains("the build made none: Kbuild.toml keeps it off gfx1100"),
        "{err}"
    );
    assert!(
        line("broken").contains("the build made none: its compile failed for gfx1100"),
        "{err}"
    );
    assert!(
        !err.contains("build it with `kbuild --targets gfx1100`"),
        "{err}"
    );
    assert!(!err.contains("kernel `everywhere`"), "{err}");
}
