//! End-to-end test helpers, compiled into every test target: the kbuild binary, copies of the project's
//! kernels into scratch directories, count real compiler invocations through a launcher.

pub mod fault_proxy;
pub mod registry;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root (the tests are targets of the `kbuild` package, build-system/cli).
pub fn repo_root() -> PathBuf {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    cli.ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("../.."))
}

/// The kbuild binary the tests drive: this package's, or `KBUILD_TEST_BIN` (an older build,
/// to watch a test of a fix fail against it).
pub fn kbuild_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("KBUILD_TEST_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_kbuild")),
    })
}

/// The cache for tests of the whole default build: `KBUILD_CACHE_DIR` when the test run has
/// one (CI sets it, so its main job and baseline check warm it), else `<repo>/target/kbuild-cache`.
pub fn shared_cache() -> PathBuf {
    match std::env::var_os("KBUILD_CACHE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo_root().join("target/kbuild-cache"),
    }
}

/// Builds the repository's kernels for their default target set into [`shared_cache`], once
/// per test process; later callers wait for the first. A warm cache makes this a no-op
/// (CI's baseline check warms it before the tests).
pub fn warm_shared_cache() {
    static WARM: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    WARM.get_or_init(|| {
        let s = Scratch::with_repo_kernels("warm");
        let kernels = s.path().join("warm/kernels");
        let o = Command::new(kbuild_bin())
            .args(["build", "-q", "--out", "out"])
            .current_dir(&kernels)
            .env("KBUILD_CACHE_DIR", shared_cache())
            .env("NO_COLOR", "1")
            .output()
            .expect("running kbuild");
        assert!(o.status.success(), "warming the shared cache: {}", text(&o));
    });
}

/// A scratch copy of a project: its own directory, cache and counting launcher.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub cache: PathBuf,
    pub count_file: PathBuf,
    launcher: PathBuf,
}

impl Scratch {
    /// An empty scratch area with a fresh cache.
    pub fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = dir.path().join("cache");
        let count_file = dir.path().join("compiles.log");
        let launcher = dir.path().join("count-compiles.sh");
        std::fs::write(
            &launcher,
            format!(
                "#!/bin/sh\n# Counts real compiler invocations, then runs the compiler.\necho \"$*\" >> '{}'\nexec \"$@\"\n",
                count_file.display()
            ),
        )
        .expect("write launcher");
        make_executable(&launcher);
        Scratch {
            dir,
            cache,
            count_file,
            launcher,
        }
    }

    /// Like [`Scratch::with_repo_kernels`], but with the cache shared by every test that builds
    /// the project's whole default target set (see [`shared_cache`]): the cache is
    /// content-addressed, so sharing it is safe, and it spares CI the same 450 compiles twice.
    ///
    /// The first call in a test run builds the default target set into that cache once (see
    /// [`warm_shared_cache`]), so tests that run at the same time do not compile the same jobs
    /// side by side.
    pub fn with_repo_kernels_shared_cache(name: &str) -> Scratch {
        warm_shared_cache();
        let mut s = Scratch::with_repo_kernels(name);
        s.cache = shared_cache();
        s
    }

    /// A scratch area holding a copy of the repository's `kernels/` at `<dir>/<name>/kernels`.
    pub fn with_repo_kernels(name: &str) -> Scratch {
        let s = Scratch::new();
        copy_dir(
            &repo_root().join("kernels"),
            &s.dir.path().join(name).join("kernels"),
        );
        s
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `kbuild ARGS` in `cwd` with this scratch's cache and counting launcher.
    pub fn kbuild(&self, cwd: &Path, args: &[&str]) -> Output {
        Command::new(kbuild_bin())
            .args(args)
            .current_dir(cwd)
            .env("KBUILD_CACHE_DIR", &self.cache)
            .env("KBUILD_LAUNCHER", &self.launcher)
            .env("NO_COLOR", "1")
            .output()
            .expect("running kbuild")
    }

    /// How many compiler invocations the launcher has seen so far.
    pub fn compiles(&self) -> usize {
        std::fs::read_to_string(&self.count_file)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// The compiler command lines seen so far.
    pub fn compile_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.count_file)
            .map(|s| s.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    pub fn reset_count(&self) {
        let _ = std::fs::remove_file(&self.count_file);
    }
}

impl Default for Scratch {
    fn default() -> Self {
        Self::new()
    }
}

/// A stand-in for nvcc, as far as kbuild sees it: `--version`, then `prelude`, then the
/// arguments read into `out`, `dep` (from `-MF` or `-Xcompiler -MD,-MF,FILE`, both ways
/// kbuild asks for a depfile), `arch` (of `-arch=compute_XY`) and `src`, then `body`, then
/// PTX with one entry `scale` for `compute_<arch>` written to `out` and a depfile.
pub fn fake_nvcc(prelude: &str, body: &str) -> String {
    format!(
        r#"#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "nvcc: NVIDIA (R) Cuda compiler driver"
  echo "Cuda compilation tools, release 13.5, V13.5.37"
  exit 0
fi
{prelude}
out=; dep=; arch=; src=
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift ;;
    -MF) dep="$2"; shift ;;
    -Xcompiler) case "$2" in -MD,-MF,*) dep="${{2#-MD,-MF,}}" ;; esac; shift ;;
    -arch=compute_*) arch="${{1#-arch=compute_}}" ;;
    -*) ;;
    *) src="$1" ;;
  esac
  shift
done
{body}
printf '.version 8.0\n.target sm_%s\n.address_size 64\n\n.visible .entry scale(\n\t.param .u64 scale_param_0\n)\n{{\n\tret;\n}}\n' "$arch" > "$out"
printf '%s: %s\n' "$out" "$src" > "$dep"
"#
    )
}

pub fn make_executable(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = std::fs::metadata(p).expect("metadata").permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(p, perm).expect("chmod");
}

/// Recursive copy (files get new mtimes, as in a fresh clone). Skips dot-directories.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(&name));
        } else {
            std::fs::copy(&p, to.join(&name)).expect("copy");
        }
    }
}

/// stdout + stderr as text, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "exit: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The JSON events of a `--json` run.
pub fn events(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The summary event of a `--json` run.
pub fn summary(o: &Output) -> serde_json::Value {
    events(o)
        .into_iter()
        .find(|e| e["event"] == "summary")
        .unwrap_or_else(|| panic!("no summary event\n{}", text(o)))
}

/// Read a build's manifest.json.
pub fn manifest(out_dir: &Path) -> serde_json::Value {
    let p = out_dir.join("manifest.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .expect("manifest is JSON")
}

/// The C example (`examples/c/explain.c`) built with gcc against this workspace's cdylib
/// (built first, with the tests' profile) into `dir`: (the executable, the library dir for
/// `LD_LIBRARY_PATH`).
pub fn c_example(dir: &Path) -> (PathBuf, PathBuf) {
    c_program(dir, "examples/c/explain.c", "explain")
}

/// The C program `source` (repository-relative) built as [`c_example`] is, as `dir/name`.
pub fn c_program(dir: &Path, source: &str, name: &str) -> (PathBuf, PathBuf) {
    // `target/<profile>/deps`, where a test build leaves the shared library (only `cargo build`
    // copies it up to `target/<profile>`).
    let exe = std::env::current_exe().expect("test executable");
    let libdir = exe.parent().expect("target/<profile>/deps").to_path_buf();
    let release = libdir
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The library as the workspace's test build makes it (kbuild-capi's integration test needs
    // it): nothing to do after `cargo test --workspace`, where `cargo build -p kbuild-capi`
    // would resolve other features and compile kbuild's crates a second time.
    // scripts/test says the workspace's test build is done (KBUILD_TESTS_PREBUILT=1): cargo
    // would only wait for the build lock, held by the Python wheel's build in another lane.
    let library = libdir.join("libkbuild_capi.so");
    let prebuilt =
        std::env::var_os("KBUILD_TESTS_PREBUILT").is_some_and(|v| v == "1") && library.is_file();
    if !prebuilt {
        let mut c = Command::new(cargo);
        c.args(["test", "--workspace", "--no-run", "-q"])
            .current_dir(repo_root());
        if release {
            c.arg("--release");
        }
        assert!(c.status().expect("cargo build").success());
    }
    let out = dir.join(name);
    let root = repo_root();
    let o = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("loader/include"))
        .arg(root.join(source))
        .arg("-L")
        .arg(&libdir)
        .args(["-lkbuild_capi", "-o"])
        .arg(&out)
        .output()
        .expect("gcc");
    assert!(o.status.success(), "{}", text(&o));
    (out, libdir)
}

/// The cuobjdump of the CUDA toolchain `kbuild toolchain install` puts in place.
pub fn cuobjdump() -> std::path::PathBuf {
    let home = std::env::var("HOME").unwrap_or_default();
    let p = std::path::PathBuf::from(home)
        .join(".local/share/kbuild/toolchains/cuda-13.5.37/nvidia/cu13/bin/cuobjdump");
    assert!(
        p.is_file(),
        "cuobjdump missing at {}: run `cargo run -p kbuild -- toolchain install cuda`",
        p.display()
    );
    p
}

/// A vendor tool's stdout; panics naming the command when it fails.
pub fn tool_output(cmd: &mut std::process::Command) -> String {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
