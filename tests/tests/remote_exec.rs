//! Remote execution against a real REAPI service (issue 29): BuildGrid 0.9.1 with PostgreSQL,
//! started on 127.0.0.1 by tests/reapi/serve.py, and its stand-in host-tools workers (a test
//! fixture: no REAPI worker can be installed here). A project of an NVIDIA and an AMD target
//! built remotely equals a local build byte for byte; a second build from an empty local cache
//! is all action-cache hits; a worker killed while it runs a compile still ends in a correct
//! build;
//! actions no worker may run (another toolchain identity) are not run and compile locally
//! after the queue deadline; the service's refusal is named with its gRPC code and the action.
//! So do the default targets (all 18, one kernel of the project's). A hermetic build (the
//! toolchain carried as input directories) equals a local one too.
//! The first farm checks bearer tokens: every call carries KBUILD_REMOTE_HEADERS' token, and
//! a build without it is refused by the service and compiles here.

use crate::kbuild_tests;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kbuild_tests::{kbuild_bin, manifest, repo_root, summary, text};
use serde_json::Value;

/// A BuildGrid farm for one test: torn down (stdin closed) when dropped.
struct Farm {
    child: Child,
    info: Value,
}

impl Farm {
    /// serve.py in `dir` with `workers` workers advertising `properties`, and `flags`
    /// (`--auth`: every call must carry a bearer token the service checks, JWT HS256;
    /// `--no-operations`: no Operations API).
    fn start(dir: &Path, workers: usize, properties: &[String], flags: &[&str]) -> Farm {
        let install = Command::new(repo_root().join("tests/reapi/install.sh"))
            .output()
            .expect("tests/reapi/install.sh");
        assert!(install.status.success(), "install.sh: {}", text(&install));
        let mut cmd = Command::new("python3");
        cmd.arg(repo_root().join("tests/reapi/serve.py"))
            .arg(dir)
            .args(["--workers", &workers.to_string(), "--tls"]);
        cmd.args(flags);
        for p in properties {
            cmd.args(["--property", p]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("serve.py");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("serve.py's line");
        let info: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("serve.py printed {line:?}: {e} (logs in {})", dir.display())
        });
        Farm { child, info }
    }

    fn remote(&self) -> &str {
        self.info["remote"].as_str().expect("remote")
    }

    fn instance(&self) -> &str {
        self.info["instance"].as_str().expect("instance")
    }

    /// KBUILD_REMOTE_HEADERS with the service's bearer token.
    fn headers(&self) -> String {
        let token = self.info["token"]
            .as_str()
            .expect("token (serve.py --auth)");
        format!("authorization=Bearer {token}\n")
    }

    fn worker_pids(&self) -> Vec<i32> {
        self.info["pids"]["workers"]
            .as_array()
            .expect("workers")
            .iter()
            .map(|p| p.as_i64().expect("pid") as i32)
            .collect()
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        // Closing stdin tears the farm down (workers, server, PostgreSQL).
        drop(self.child.stdin.take());
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two kernels, one reading a project header through `include-dirs`, for an NVIDIA and an
/// AMD target.
fn project(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("proj");
    std::fs::create_dir_all(p.join("k/inc")).unwrap();
    std::fs::write(p.join("k/inc/common.h"), "#define SCALE 2.0f\n").unwrap();
    std::fs::write(
        p.join("k/a.cu"),
        "#include \"common.h\"\nextern \"C\" __global__ void scale_a(float* x) { x[threadIdx.x] *= SCALE; }\n",
    )
    .unwrap();
    std::fs::write(
        p.join("k/b.cu"),
        "extern \"C\" __global__ void add_b(float* x, float y) { x[threadIdx.x] += y; }\n",
    )
    .unwrap();
    std::fs::write(
        p.join("Kbuild.toml"),
        format!(
            r#"[package]
name = "rx"
version = "0.1.0"

[build]
targets = ["sm_89", "gfx1100"]
out-dir = "out"

[kernels.a]
source = "k/a.cu"
entries = ["scale_a"]
include-dirs = ["k/inc"]

[kernels.b]
source = "k/b.cu"
entries = ["add_b"]
{extra}"#
        ),
    )
    .unwrap();
    p
}

fn kbuild_command(proj: &Path, cache: &Path, out: &str, args: &[&str]) -> Command {
    let mut c = Command::new(kbuild_bin());
    c.args(["build", "--json", "--out", out])
        .args(args)
        .current_dir(proj)
        .env("KBUILD_CACHE_DIR", cache)
        .env("NO_COLOR", "1")
        .env_remove("KBUILD_LAUNCHER");
    c
}

fn kbuild(proj: &Path, cache: &Path, out: &str, args: &[&str]) -> Output {
    kbuild_command(proj, cache, out, args)
        .output()
        .expect("kbuild")
}

/// The `kbuild-toolchain` values the project's compiles need.
fn toolchain_ids(proj: &Path, cache: &Path) -> Vec<String> {
    let o = Command::new(kbuild_bin())
        .args(["build", "--print-commands"])
        .current_dir(proj)
        .env("KBUILD_CACHE_DIR", cache)
        .output()
        .expect("kbuild");
    assert!(o.status.success(), "{}", text(&o));
    let mut ids: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["remote_toolchain"].as_str().expect("id").to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2, "one toolchain per vendor: {ids:?}");
    ids
}

/// Every object and the manifest of `a` equal `b`'s, byte for byte.
fn same_build(a: &Path, b: &Path) {
    let m = manifest(a);
    for o in m["objects"].as_array().expect("objects") {
        let rel = o["path"].as_str().expect("path");
        let (x, y) = (std::fs::read(a.join(rel)), std::fs::read(b.join(rel)));
        assert!(
            x.is_ok() && x.ok() == y.ok(),
            "{rel} differs between {} and {}",
            a.display(),
            b.display()
        );
    }
    assert_eq!(
        std::fs::read(a.join("manifest.json")).unwrap(),
        std::fs::read(b.join("manifest.json")).unwrap(),
        "manifest.json"
    );
}

fn remote_stats(o: &Output) -> Value {
    summary(o)["remote_execution"].clone()
}

/// `o` succeeded, its `n` actions all executed remotely (none given back); its stats.
fn all_executed(o: &Output, n: u64) -> Value {
    assert!(o.status.success(), "{}", text(o));
    let st = remote_stats(o);
    assert_eq!(
        (st["executed"].as_u64(), st["fell_back"].as_u64()),
        (Some(n), Some(0)),
        "{}",
        text(o)
    );
    st
}

/// A local build of `proj` (`args`, `cache`) into `local_out` equals the build in `remote_out`.
fn equals_local(proj: &Path, cache: &Path, local_out: &str, remote_out: &str, args: &[&str]) {
    let local = kbuild(proj, cache, local_out, args);
    assert!(local.status.success(), "{}", text(&local));
    same_build(&proj.join(local_out), &proj.join(remote_out));
}

#[test]
fn builds_run_on_a_real_reapi_service_equal_a_local_build() {
    let s = tempfile::tempdir().unwrap();
    // One execution at a time watched over a stream; the others poll their operation.
    let proj = project(s.path(), "\n[remote]\nstreams = 1\n");
    let caches = s.path().join("caches");
    let local = kbuild(&proj, &caches.join("local"), "out-local", &[]);
    assert!(local.status.success(), "{}", text(&local));
    let ids = toolchain_ids(&proj, &caches.join("local"));
    let properties: Vec<String> = ids
        .iter()
        .map(|i| format!("kbuild-toolchain={i}"))
        .collect();
    let farm = Farm::start(&s.path().join("farm"), 2, &properties, &["--auth"]);
    let remote = [
        "--remote-execution",
        farm.remote(),
        "--remote-instance",
        farm.instance(),
        "-j",
        "4",
    ];
    let headers = farm.headers();
    // Every call carries the service's bearer token (KBUILD_REMOTE_HEADERS).
    let kbuild = |proj: &Path, cache: &Path, out: &str, args: &[&str]| {
        kbuild_command(proj, cache, out, args)
            .env("KBUILD_REMOTE_HEADERS", &headers)
            .output()
            .expect("kbuild")
    };

    // Without the token the service refuses the first call: a warning naming the code, and
    // the build compiles here (from the local cache: the local build above).
    let o = kbuild_command(&proj, &caches.join("local"), "out-noauth", &remote)
        .output()
        .expect("kbuild");
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("UNAUTHENTICATED") && err.contains("compiling locally"),
        "{err}"
    );
    same_build(&proj.join("out-local"), &proj.join("out-noauth"));

    // Every compile runs on a worker; the output equals the local build's.
    let o = kbuild(&proj, &caches.join("r1"), "out-r1", &remote);
    assert!(o.status.success(), "{}", text(&o));
    let st = remote_stats(&o);
    assert_eq!(
        (
            st["actions"].as_u64(),
            st["executed"].as_u64(),
            st["fell_back"].as_u64()
        ),
        (Some(4), Some(4), Some(0)),
        "{}",
        text(&o)
    );
    assert!(st["uploaded_blobs"].as_u64().unwrap_or(0) > 0);
    // Four at once, one stream: the others were watched by GetOperation.
    assert!(st["polled"].as_u64().unwrap_or(0) >= 1, "{}", text(&o));
    same_build(&proj.join("out-local"), &proj.join("out-r1"));

    // An empty local cache: every action answered from the service's action cache.
    let o = kbuild(&proj, &caches.join("r2"), "out-r2", &remote);
    assert!(o.status.success(), "{}", text(&o));
    let st = remote_stats(&o);
    assert_eq!(
        (st["cache_hits"].as_u64(), st["executed"].as_u64()),
        (Some(4), Some(0)),
        "{}",
        text(&o)
    );
    same_build(&proj.join("out-local"), &proj.join("out-r2"));

    // Every default target of the project's kernels (18 of them, both vendors, PTX and a
    // generic target among them), one kernel's worth: built remotely, equal to the run's
    // local build of them (the shared cache the default build warmed).
    let repo = kbuild_tests::Scratch::with_repo_kernels_shared_cache("default");
    let kernels = repo.path().join("default/kernels");
    let mut doc: toml::Table = std::fs::read_to_string(kernels.join("Kbuild.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let all = doc["kernels"].as_table_mut().unwrap();
    all.retain(|name, _| name == "rmsnorm");
    std::fs::write(kernels.join("Kbuild.toml"), toml::to_string(&doc).unwrap()).unwrap();
    let shared = kbuild_tests::shared_cache();
    let o = kbuild(&kernels, &shared, "out-local", &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = kbuild(&kernels, &caches.join("default"), "out-remote", &remote);
    all_executed(&o, 18);
    same_build(&kernels.join("out-local"), &kernels.join("out-remote"));

    // A header edited, and the worker that starts one of the two compiles that include it is
    // SIGKILLed while the compiler runs (its lease stays with it until the service gives up on
    // it and requeues the action): the build still ends correct, within its deadline. The
    // inputs come from the dependency set the first build recorded.
    std::fs::write(
        proj.join("k/inc/common.h"),
        "// edited\n#define SCALE 3.0f\n",
    )
    .unwrap();
    let farm_dir = s.path().join("farm");
    let running = |i: usize| {
        std::fs::read_to_string(farm_dir.join(format!("worker-{i}.log")))
            .unwrap_or_default()
            .matches(" running: ")
            .count()
    };
    let before = [running(0), running(1)];
    let started = Instant::now();
    let child = kbuild_command(&proj, &caches.join("r1"), "out-r3", &remote)
        .env("KBUILD_REMOTE_HEADERS", &headers)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kbuild");
    let mut killed = None;
    while killed.is_none() && started.elapsed() < Duration::from_secs(60) {
        killed = (0..2).find(|&i| running(i) > before[i]);
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed = killed.expect("a worker ran one of the compiles");
    let pid = farm.worker_pids()[killed];
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let o = child.wait_with_output().expect("kbuild");
    assert!(o.status.success(), "{}", text(&o));
    let st = remote_stats(&o);
    assert_eq!(st["actions"].as_u64(), Some(2), "{}", text(&o));
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{:?}",
        started.elapsed()
    );
    equals_local(&proj, &caches.join("local"), "out-local3", "out-r3", &[]);

    // Over TLS, the service's certificate from a private CA: trusted through
    // KBUILD_REMOTE_CA_FILE (every action from the service's cache), else refused with a
    // warning naming it, and the build compiles here.
    let tls = farm.info["remote_tls"]
        .as_str()
        .expect("remote_tls")
        .to_string();
    let ca = farm.info["ca"].as_str().expect("ca").to_string();
    let over_tls = [
        "--remote-execution",
        tls.as_str(),
        "--remote-instance",
        farm.instance(),
    ];
    let o = kbuild_command(&proj, &caches.join("tls1"), "out-tls1", &over_tls)
        .env("KBUILD_REMOTE_CA_FILE", &ca)
        .env("KBUILD_REMOTE_HEADERS", &headers)
        .output()
        .expect("kbuild");
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        remote_stats(&o)["cache_hits"].as_u64(),
        Some(4),
        "{}",
        text(&o)
    );
    same_build(&proj.join("out-local3"), &proj.join("out-tls1"));
    let o = kbuild(&proj, &caches.join("tls2"), "out-tls2", &over_tls);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("invalid peer certificate") && err.contains("compiling locally"),
        "{err}"
    );
    same_build(&proj.join("out-local3"), &proj.join("out-tls2"));

    // A header the recorded dependency sets do not know yet: the compile with the recorded
    // inputs fails on the worker, the one with freshly scanned ones builds.
    std::fs::write(proj.join("k/inc/more.h"), "#define MORE 1.0f\n").unwrap();
    std::fs::write(
        proj.join("k/a.cu"),
        "#include \"common.h\"\n#include \"more.h\"\nextern \"C\" __global__ void scale_a(float* x) { x[threadIdx.x] *= SCALE + MORE; }\n",
    )
    .unwrap();
    let o = kbuild(&proj, &caches.join("r1"), "out-r3b", &remote);
    assert!(o.status.success(), "{}", text(&o));
    // a.cu for both targets, each run twice: with the recorded inputs, then the scanned ones.
    assert_eq!(
        remote_stats(&o)["actions"].as_u64(),
        Some(4),
        "{}",
        text(&o)
    );
    equals_local(&proj, &caches.join("local"), "out-local3", "out-r3b", &[]);

    // A platform key the service does not know: refused with its code, the job named, and
    // compiled here.
    let mut args = remote.to_vec();
    args.extend(["--remote-platform", "no-such-key=1"]);
    let o = kbuild(&proj, &caches.join("r4"), "out-r4", &args);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("remote execution refused: FAILED_PRECONDITION from grpc://")
            && (err.contains("a for sm_89") || err.contains("b for sm_89")),
        "{err}"
    );
    assert_eq!(remote_stats(&o)["executed"].as_u64(), Some(0));
    same_build(&proj.join("out-local3"), &proj.join("out-r4"));

    // Hermetic: the actions carry the compiler's installation (clang's prefix and the device
    // libraries, hashed and uploaded once for the build) and run it from the input root, so
    // they name no toolchain a worker must have. Same objects as a local build.
    let o = kbuild(
        &proj,
        &caches.join("h1"),
        "out-h1",
        &[&remote[..], &["--remote-hermetic", "--targets", "gfx1100"]].concat(),
    );
    let st = all_executed(&o, 2);
    assert!(
        st["uploaded_bytes"].as_u64().unwrap_or(0) > 50 << 20,
        "the toolchain was uploaded: {st}"
    );
    equals_local(
        &proj,
        &caches.join("local"),
        "out-localh",
        "out-h1",
        &["--targets", "gfx1100"],
    );

    // A compile that reads a file outside its input root (an absolute include the worker
    // happens to see) is refused, naming the file, rather than cached as hermetic.
    let outside = s.path().join("outside/extra.h");
    std::fs::create_dir_all(outside.parent().unwrap()).unwrap();
    std::fs::write(&outside, "#define EXTRA 1.0f\n").unwrap();
    std::fs::write(
        proj.join("k/c.cu"),
        format!(
            "#include \"{}\"\nextern \"C\" __global__ void c_k(float* x) {{ x[0] = EXTRA; }}\n",
            outside.display()
        ),
    )
    .unwrap();
    let toml = std::fs::read_to_string(proj.join("Kbuild.toml")).unwrap();
    std::fs::write(
        proj.join("Kbuild.toml"),
        toml + "\n[kernels.c]\nsource = \"k/c.cu\"\nentries = [\"c_k\"]\n",
    )
    .unwrap();
    let o = kbuild(
        &proj,
        &caches.join("r1"),
        "out-r5",
        &[&remote[..], &["--keep-going"]].concat(),
    );
    assert!(!o.status.success(), "{}", text(&o));
    let all = text(&o);
    assert!(
        all.contains("the remote compile read a file outside its input root")
            && all.contains(&outside.display().to_string()),
        "{all}"
    );
}

#[test]
fn an_action_for_another_toolchain_is_not_run_and_a_hermetic_one_is() {
    let s = tempfile::tempdir().unwrap();
    let proj = project(s.path(), "\n[remote]\nqueue-timeout = 5\n");
    let caches = s.path().join("caches");
    // The only worker has another compiler.
    let farm = Farm::start(
        &s.path().join("farm"),
        1,
        &["kbuild-toolchain=0123456789abcdef0123456789abcdef".to_string()],
        &["--no-operations"],
    );
    let started = Instant::now();
    let o = kbuild(
        &proj,
        &caches.join("r"),
        "out-r",
        &[
            "--remote-execution",
            farm.remote(),
            "--remote-instance",
            farm.instance(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let st = remote_stats(&o);
    assert_eq!(st["executed"].as_u64(), Some(0), "{}", text(&o));
    assert_eq!(st["cache_hits"].as_u64(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no worker took it in time"),
        "the deadline is named: {err}"
    );
    assert!(started.elapsed() < Duration::from_secs(90));
    equals_local(&proj, &caches.join("local"), "out-local", "out-r", &[]);
    // The worker never ran a command.
    let log = std::fs::read_to_string(s.path().join("farm/worker-0.log")).unwrap_or_default();
    assert!(!log.contains("clang") && !log.contains("nvcc"), "{log}");

    // Hermetic actions carry their compiler, so that same worker runs them. And this service
    // has no Operations API: an execution without a stream cannot poll, so it waits for one.
    let toml = std::fs::read_to_string(proj.join("Kbuild.toml")).unwrap();
    std::fs::write(
        proj.join("Kbuild.toml"),
        toml.replace("queue-timeout = 5", "queue-timeout = 120\nstreams = 1"),
    )
    .unwrap();
    let o = kbuild(
        &proj,
        &caches.join("h"),
        "out-h",
        &[
            "--remote-execution",
            farm.remote(),
            "--remote-instance",
            farm.instance(),
            "--remote-hermetic",
            "--targets",
            "gfx1100",
            "-j",
            "4",
        ],
    );
    let st = all_executed(&o, 2);
    // One of the two asked GetOperation once (UNIMPLEMENTED), then waited for the stream.
    assert_eq!(st["polled"].as_u64(), Some(1), "{}", text(&o));
    equals_local(
        &proj,
        &caches.join("local"),
        "out-local-h",
        "out-h",
        &["--targets", "gfx1100"],
    );
}
