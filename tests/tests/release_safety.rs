//! Issue 14's release-safety items, through the `kbuild` binary: failed and partial builds are
//! recorded and never released by accident (4), interrupts stop every compiler and leave
//! nothing behind (7), occupancy says which block size it assumed (9), target lists (`all`,
//! `-TARGET`, repeated `--targets`) (10), and progress output (`-q`, `-v`, the bar at 80
//! columns, no escape codes without a terminal or under TERM=dumb, help text) (13).
//!
//! Real compiles (sm_89 cubins only) are few: fake compilers (a launcher in front of nvcc)
//! stand in wherever the object does not matter.

use crate::kbuild_tests;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kbuild_tests::{manifest, text};

/// A scratch area: its own compile cache, kbuild config and registry dir.
struct Area {
    dir: tempfile::TempDir,
}

impl Area {
    fn new() -> Area {
        Area {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `kbuild ARGS` in `cwd`, isolated from the user's cache, config and registry.
    fn command(&self, cwd: &Path, launcher: Option<&Path>, args: &[&str]) -> Command {
        let mut c = Command::new(kbuild_tests::kbuild_bin());
        c.args(args)
            .current_dir(cwd)
            .env("KBUILD_CACHE_DIR", self.path().join("cache"))
            .env("KBUILD_CONFIG", self.path().join("config.toml"))
            .env("NO_COLOR", "1")
            .env_remove("KBUILD_REGISTRY")
            .env_remove("KBUILD_SIGNATURE_POLICY")
            .env_remove("CI");
        match launcher {
            Some(l) => c.env("KBUILD_LAUNCHER", l),
            None => c.env_remove("KBUILD_LAUNCHER"),
        };
        c
    }

    fn kbuild(&self, cwd: &Path, launcher: Option<&Path>, args: &[&str]) -> Output {
        self.command(cwd, launcher, args)
            .output()
            .expect("running kbuild")
    }

    /// A project in `<area>/<name>` with `Kbuild.toml` = `toml` and `files` (name, text).
    fn project(&self, name: &str, toml: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Kbuild.toml"), toml).unwrap();
        for (f, body) in files {
            std::fs::write(dir.join(f), body).unwrap();
        }
        dir
    }

    /// A launcher script `name` with `body` (sh; `"$@"` is the real compiler command).
    fn launcher(&self, name: &str, body: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        kbuild_tests::make_executable(&p);
        p
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const TWO_KERNELS: &str = "[package]\nname = \"rs-partial\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\"]\nout-dir = \"out\"\n\n\
    [kernels.alpha]\nsource = \"alpha.cu\"\nentries = [\"alpha\"]\n\n\
    [kernels.beta]\nsource = \"beta.cu\"\nentries = [\"beta\"]\n";

fn two_kernel_sources() -> [(&'static str, &'static str); 2] {
    [
        (
            "alpha.cu",
            "extern \"C\" __global__ void alpha(float* x) { x[threadIdx.x] *= 2.0f; }\n",
        ),
        (
            "beta.cu",
            "extern \"C\" __global__ void beta(float* x) { x[threadIdx.x] += 1.0f; }\n",
        ),
    ]
}

/// Item 4: a build with a failed job records it; `package` and `publish` refuse it unless
/// `--allow-partial`, which marks the bundle; pull and explain show the mark. A build that
/// stops at its first failure records the jobs it never ran as missing.
#[test]
fn failed_builds_are_recorded_and_not_released_by_accident() {
    let area = Area::new();
    let dir = area.project("p", TWO_KERNELS, &two_kernel_sources());
    let fail_beta = area.launcher(
        "fail-beta.sh",
        "case \"$*\" in *beta.cu*) echo 'beta.cu(1): error: injected' >&2; exit 1 ;; esac\nexec \"$@\"",
    );
    let o = area.kbuild(&dir, Some(&fail_beta), &["build", "--keep-going"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let m = manifest(&dir.join("out"));
    let failed = m["failed"].as_array().expect("failed is listed");
    assert_eq!(failed.len(), 1, "{m:#}");
    assert_eq!(failed[0]["kernel"], "beta");
    assert_eq!(failed[0]["target"], "sm_89");
    assert!(failed[0]["error"].as_str().unwrap_or("").contains("exited"));
    assert!(m.get("missing").is_none(), "--keep-going ran every job");
    assert_eq!(m["objects"].as_array().unwrap().len(), 1);

    // package: refused, nothing written.
    let o = area.kbuild(&dir, None, &["package", "out"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains("partial build") && e.contains("1 failed (beta for sm_89)"),
        "{e}"
    );
    assert!(e.contains("--allow-partial"), "{e}");
    assert!(
        !dir.join("dist").exists(),
        "a refused package writes nothing"
    );

    // package --allow-partial: the bundle's manifest is marked.
    let o = area.kbuild(&dir, None, &["package", "out", "--allow-partial"]);
    assert!(o.status.success(), "{}", text(&o));
    let bundle = dir.join("dist/rs-partial-0.1.0.kbundle");
    assert!(bundle.is_file());

    // publish: refused without the flag, nothing uploaded.
    let reg = area.path().join("reg");
    let reg_s = reg.display().to_string();
    let bundle_s = bundle.display().to_string();
    let o = area.kbuild(&dir, None, &["publish", &bundle_s, "--registry", &reg_s]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("refusing to publish"), "{}", text(&o));
    assert!(
        !reg.exists() || std::fs::read_dir(&reg).unwrap().next().is_none(),
        "nothing may reach the registry"
    );
    let o = area.kbuild(
        &dir,
        None,
        &[
            "publish",
            &bundle_s,
            "--registry",
            &reg_s,
            "--allow-partial",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));

    // pull and explain show the mark.
    let o = area.kbuild(
        &dir,
        None,
        &[
            "pull",
            "rs-partial@0.1.0",
            "--registry",
            &reg_s,
            "--signature-policy",
            "off",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(stderr(&o).contains("PARTIAL build"), "{}", text(&o));
    // With --json the mark is a field too.
    let o = area.kbuild(
        &dir,
        None,
        &[
            "explain",
            &bundle_s,
            "--device",
            "sm_89",
            "--signature-policy",
            "off",
            "--json",
        ],
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("explain --json");
    assert!(
        doc["partial"]
            .as_str()
            .unwrap_or("")
            .contains("PARTIAL build"),
        "{doc:#}"
    );
    let pulled: serde_json::Value = serde_json::from_slice(&o.stdout).expect("pull --json");
    assert!(
        pulled["partial"]
            .as_str()
            .unwrap_or("")
            .contains("beta for sm_89"),
        "{pulled:#}"
    );
    let o = area.kbuild(
        &dir,
        None,
        &[
            "explain",
            &bundle_s,
            "--device",
            "sm_89",
            "--signature-policy",
            "off",
        ],
    );
    assert!(stderr(&o).contains("PARTIAL build"), "{}", text(&o));

    // Stopping at the first failure (-j 1, no --keep-going): the other job is missing.
    let fail_all = area.launcher("fail-all.sh", "echo 'error: injected' >&2; exit 1");
    let o = area.kbuild(&dir, Some(&fail_all), &["build", "-j", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let m = manifest(&dir.join("out"));
    assert_eq!(m["failed"].as_array().map(Vec::len), Some(1), "{m:#}");
    assert_eq!(m["missing"].as_array().map(Vec::len), Some(1), "{m:#}");
    assert!(m["missing"][0].get("error").is_none());
    assert_eq!(m["objects"].as_array().map(Vec::len), Some(0));
}

/// Item 4: a build with nothing to compile is an error that says why.
#[test]
fn a_build_with_nothing_to_compile_is_an_error() {
    let area = Area::new();
    let dir = area.project(
        "hip",
        "[package]\nname = \"hip-only\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"gfx1100\"]\nout-dir = \"out\"\n\n\
         [kernels.h]\nsource = \"h.hip\"\nlanguage = \"hip\"\nentries = [\"h\"]\n",
        &[("h.hip", "extern \"C\" __global__ void h() {}\n")],
    );
    let o = area.kbuild(&dir, None, &["build", "--targets", "sm_89"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = stderr(&o);
    assert!(e.contains("nothing to build for sm_89"), "{e}");
    assert!(e.contains("kernel `h` has language = \"hip\""), "{e}");
    assert!(!dir.join("out/manifest.json").exists(), "no empty manifest");
}

/// Whether process `pid` still runs (a zombie does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Item 7: SIGINT and SIGTERM kill every compiler's process group (the fake compilers start
/// a child each, in their own group), remove the scratch dirs, write nothing, exit 130.
#[test]
fn interrupts_kill_the_compilers_and_leave_nothing_behind() {
    for signal in ["INT", "TERM"] {
        let area = Area::new();
        let dir = area.project("p", TWO_KERNELS, &two_kernel_sources());
        let pids = area.path().join("pids");
        std::fs::create_dir_all(&pids).unwrap();
        let hang = area.launcher(
            "hang.sh",
            &format!(
                "sleep 300 &\necho $! > '{}'/sleep.$$\nwait\n",
                pids.display()
            ),
        );
        let mut child = area
            .command(&dir, Some(&hang), &["build", "-j", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kbuild");
        let children = || -> Vec<u32> {
            std::fs::read_dir(&pids)
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                        .filter_map(|s| s.trim().parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        wait_for("both fake compilers", Duration::from_secs(60), || {
            children().len() == 2
        });
        let sleeps = children();
        assert!(sleeps.iter().all(|p| alive(*p)));
        let ok = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok);
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("kbuild did not exit after SIG{signal}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        assert_eq!(status.code(), Some(130), "SIG{signal}: {status:?}\n{err}");
        assert!(
            !err.contains("FAILED"),
            "a killed compiler is no job failure:\n{err}"
        );
        wait_for(
            "the compilers' children to die",
            Duration::from_secs(5),
            || sleeps.iter().all(|p| !alive(*p)),
        );
        assert!(
            !dir.join("out").join("manifest.json").exists(),
            "SIG{signal}: no manifest"
        );
        // kbuild's compat header and the out-dir's marker are written whole (temp file +
        // rename) before any job; nothing else may stay, and no temp file at all.
        let include = dir.join("out").join("include");
        let marker = dir.join("out").join(".kbuild-out");
        let leftovers: Vec<PathBuf> = walk(&dir.join("out"))
            .into_iter()
            .filter(|p| {
                (!p.starts_with(&include) && *p != marker)
                    || p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(".tmp"))
            })
            .collect();
        assert!(
            leftovers.is_empty(),
            "SIG{signal}: out-dir holds {leftovers:?}"
        );
        let scratch: Vec<PathBuf> = walk(&area.path().join("cache/tmp"))
            .into_iter()
            .chain(walk(&area.path().join("cache/scratch")))
            .collect();
        assert!(scratch.is_empty(), "SIG{signal}: scratch left: {scratch:?}");
    }
}

/// Every file under `dir` (none when it does not exist).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

const OCCUPANCY_SOURCE: &str = "extern \"C\" __global__ void plain(float* x) { x[threadIdx.x] *= 2.0f; }\n\
    extern \"C\" __global__ void __launch_bounds__(64) bounded(float* x) { x[threadIdx.x] += 1.0f; }\n";

/// Item 9: occupancy names its block size and where it came from (Kbuild.toml `block-size`,
/// the kernel's launch bounds, `inspect --block-size`); without one it is unknown, not 1024.
#[test]
fn occupancy_states_its_block_size() {
    let area = Area::new();
    let dir = area.project(
        "occ",
        "[package]\nname = \"occ\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\"]\nout-dir = \"out\"\n\n\
         [kernels.own]\nsource = \"k.cu\"\nentries = [\"plain\", \"bounded\"]\n\n\
         [kernels.sized]\nsource = \"k.cu\"\nentries = [\"plain\", \"bounded\"]\nblock-size = 128\n",
        &[("k.cu", OCCUPANCY_SOURCE)],
    );
    let o = area.kbuild(&dir, None, &["build"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&dir.join("out"));
    let res = |kernel: &str, entry: &str| -> serde_json::Value {
        m["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kernel"] == kernel)
            .unwrap_or_else(|| panic!("no object of {kernel}"))["resources"][entry]
            .clone()
    };
    let plain = res("own", "plain");
    assert!(
        plain.get("occupancy").is_none(),
        "no hidden 1024: {plain:#}"
    );
    assert!(
        plain["note"]
            .as_str()
            .unwrap_or("")
            .contains("occupancy unknown"),
        "{plain:#}"
    );
    let bounded = res("own", "bounded");
    assert_eq!(bounded["occupancy"]["block_size"], 64, "{bounded:#}");
    assert_eq!(bounded["occupancy"]["block_size_from"], "launch-bounds");
    for entry in ["plain", "bounded"] {
        let sized = res("sized", entry);
        assert_eq!(sized["occupancy"]["block_size"], 128, "{sized:#}");
        assert_eq!(sized["occupancy"]["block_size_from"], "block-size");
    }

    let cubin = dir.join("out/sm_89/own.cubin").display().to_string();
    let o = area.kbuild(&dir, None, &["inspect", &cubin]);
    assert!(o.status.success(), "{}", text(&o));
    let t = stdout(&o);
    assert!(t.contains("unknown"), "{t}");
    assert!(t.contains("at 64 threads (launch-bounds)"), "{t}");

    let o = area.kbuild(
        &dir,
        None,
        &["inspect", &cubin, "--block-size", "256", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("inspect --json");
    let kernels = j["objects"][0]["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 2);
    for k in kernels {
        assert_eq!(k["occupancy"]["block_size"], 256, "{k:#}");
        assert_eq!(k["occupancy"]["block_size_from"], "--block-size");
    }
    let o = area.kbuild(&dir, None, &["inspect", &cubin, "--block-size", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Item 10: `all` is what the found toolchains build (a warning names the rest: gfx950 needs
/// LLVM 20, the installed clang is 19), `-TARGET` excludes, `--targets` repeats.
#[test]
fn target_lists_all_exclusions_and_repeats() {
    let area = Area::new();
    let dir = area.project(
        "t",
        "[package]\nname = \"t\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\"]\nout-dir = \"out\"\n\n\
         [kernels.k]\nsource = \"k.cu\"\nentries = [\"k\"]\n",
        &[("k.cu", "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n")],
    );
    let targets_of = |o: &Output| -> Vec<String> {
        stdout(o)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| v["target"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let o = area.kbuild(
        &dir,
        None,
        &["build", "--print-commands", "--targets", "all"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let e = stderr(&o);
    assert!(
        e.contains("warning: targets `all`: skipping") && e.contains("gfx950"),
        "{e}"
    );
    let all = targets_of(&o);
    assert!(all.contains(&"sm_89".to_string()) && all.contains(&"gfx1100".to_string()));
    assert!(!all.contains(&"gfx950".to_string()) && !all.contains(&"gfx1250".to_string()));

    let o = area.kbuild(
        &dir,
        None,
        &[
            "build",
            "--print-commands",
            "--targets",
            "all,-gfx950,-gfx1250,-rdna3",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stderr(&o).contains("warning"), "{}", text(&o));
    let some = targets_of(&o);
    let expected: Vec<String> = all
        .iter()
        .filter(|t| !t.starts_with("gfx11"))
        .cloned()
        .collect();
    assert_eq!(some, expected, "rdna3 is gfx11*");

    let o = area.kbuild(
        &dir,
        None,
        &[
            "build",
            "--print-commands",
            "--targets",
            "sm_89",
            "--targets",
            "gfx1100",
            "--targets",
            "-sm_89",
            "--targets",
            "sm_90",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(targets_of(&o), ["gfx1100", "sm_90"]);

    // The same in Kbuild.toml: `all` skips, `-ITEM` excludes across the array's items.
    let toml = std::fs::read_to_string(dir.join("Kbuild.toml")).unwrap();
    let with_targets = |list: &str| {
        std::fs::write(
            dir.join("Kbuild.toml"),
            toml.replace("targets = [\"sm_89\"]", &format!("targets = {list}")),
        )
        .unwrap()
    };
    with_targets("[\"all\", \"-gfx950\", \"-gfx1250\", \"-rdna3\"]");
    let o = area.kbuild(&dir, None, &["build", "--print-commands"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stderr(&o).contains("warning"), "{}", text(&o));
    assert_eq!(targets_of(&o), expected);
    with_targets("[\"all\"]");
    let o = area.kbuild(&dir, None, &["build", "--print-commands"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(stderr(&o).contains("gfx950"), "{}", text(&o));
    with_targets("[\"sm_89\"]");

    let o = area.kbuild(
        &dir,
        None,
        &["build", "--targets", "sm_89", "--targets=-sm_89"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(stderr(&o).contains("empty target list"), "{}", text(&o));
}

/// Runs `cmd` (a shell command line) under a pseudo-terminal of `cols` columns via
/// util-linux `script`; returns what the terminal got.
fn under_pty(cwd: &Path, envs: &[(&str, &str)], cols: u16, cmd: &str) -> String {
    assert!(
        Command::new("script").arg("--version").output().is_ok(),
        "the terminal part needs util-linux `script` (Debian's bsdutils)"
    );
    let mut c = Command::new("script");
    c.args([
        "-q",
        "-e",
        "-c",
        &format!("stty cols {cols} rows 24; {cmd}"),
        "/dev/null",
    ])
    .current_dir(cwd)
    .stdin(Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c.output().expect("script");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Item 13: `-q` says nothing but errors, `-v` says more; on an 80-column terminal the bar
/// fits and shows how many jobs run and which; no escape codes under TERM=dumb or without a
/// terminal.
#[test]
fn progress_is_quiet_verbose_and_fits_the_terminal() {
    let area = Area::new();
    let dir = area.project("p", TWO_KERNELS, &two_kernel_sources());
    // Compiles that take long enough for the bar to draw both of them running.
    let slow = area.launcher("slow.sh", "sleep 2\nexec \"$@\"");

    let o = area.kbuild(&dir, Some(&slow), &["build", "-q", "-j", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(stderr(&o), "", "-q prints nothing on success");
    let o = area.kbuild(&dir, None, &["build", "-v"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("cached alpha for sm_89"),
        "{}",
        text(&o)
    );
    let o = area.kbuild(&dir, None, &["build", "-q", "-v"]);
    assert_eq!(o.status.code(), Some(2), "-q and -v conflict: {}", text(&o));

    // Without a terminal, with colour allowed: no escape codes.
    let o = area
        .command(&dir, None, &["build", "-v"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .expect("kbuild");
    assert!(!o.stderr.contains(&0x1b), "escape codes without a terminal");

    let bin = kbuild_tests::kbuild_bin().display().to_string();
    let cache = area.path().join("cache2").display().to_string();
    let config = area.path().join("config.toml").display().to_string();
    let slow_s = slow.display().to_string();
    let base_env: Vec<(&str, &str)> = vec![
        ("KBUILD_CACHE_DIR", cache.as_str()),
        ("KBUILD_CONFIG", config.as_str()),
        ("KBUILD_LAUNCHER", slow_s.as_str()),
    ];
    let mut env = base_env.clone();
    env.push(("TERM", "xterm"));
    let shown = under_pty(
        &dir,
        &env,
        80,
        &format!("env -u NO_COLOR -u CI '{bin}' build -j 2 --out out-tty"),
    );
    assert!(
        shown.contains("2 running: "),
        "the bar names both jobs:\n{shown:?}"
    );
    assert!(
        shown.contains("alpha for sm_89") && shown.contains("beta for sm_89"),
        "{shown:?}"
    );
    for line in strip_ansi(&shown).split(['\r', '\n']) {
        assert!(
            line.chars().count() <= 80,
            "a line wider than the terminal: {line:?}"
        );
    }

    let mut env = base_env;
    env.push(("TERM", "dumb"));
    let shown = under_pty(
        &dir,
        &env,
        80,
        &format!("env -u NO_COLOR -u CI '{bin}' build -j 2 --out out-dumb"),
    );
    assert!(shown.contains("kbuild: "), "{shown:?}");
    assert!(
        !shown.contains('\u{1b}'),
        "escape codes under TERM=dumb: {shown:?}"
    );
}

/// Removes CSI escape sequences (`ESC [ ... letter`) and other lone ESC pairs.
fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    out
}
