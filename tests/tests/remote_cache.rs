//! `kbuild build --remote-cache oci://...` against a real distribution registry: machine A
//! (one cache dir) compiles and uploads, machine B (another, empty cache dir, project cloned
//! elsewhere) builds with zero compiles; a dead or silent remote and a tampered entry never
//! fail a build, they cost local compiles and say so.

use crate::kbuild_tests;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use kbuild_registry::oci::{Descriptor, ImageManifest, OciClient, OciOptions};
use kbuild_registry::progress::Silent;
use kbuild_tests::registry::{write_project, Registry, SMALL_A, SMALL_B};
use kbuild_tests::{copy_dir, manifest, summary, text, Scratch};

const TARGETS: [&str; 2] = ["sm_89", "gfx1100"];
/// 2 kernels × 2 targets.
const JOBS: usize = 4;

/// A machine: its own cache dir and counting launcher, and its own clone of the project.
struct Machine {
    s: Scratch,
    project: PathBuf,
}

impl Machine {
    fn new(source: Option<&Path>) -> Machine {
        let s = Scratch::new();
        let project = match source {
            Some(src) => {
                let dst = s.path().join("elsewhere/kernels");
                copy_dir(src, &dst);
                dst
            }
            None => write_project(
                s.path(),
                "kb-remote",
                &TARGETS,
                &[("scale", SMALL_A), ("shift", SMALL_B)],
            ),
        };
        Machine { s, project }
    }

    fn build(&self, extra: &[&str], env: &[(&str, &str)]) -> Output {
        let mut args = vec!["build", "--json", "--out", "out"];
        args.extend_from_slice(extra);
        let mut cmd = std::process::Command::new(kbuild_tests::kbuild_bin());
        cmd.args(&args)
            .current_dir(&self.project)
            .env("KBUILD_CACHE_DIR", &self.s.cache)
            .env("KBUILD_LAUNCHER", self.s.path().join("count-compiles.sh"))
            .env("DOCKER_CONFIG", self.s.path().join("docker"))
            .env_remove("KBUILD_REGISTRY_USER")
            .env_remove("KBUILD_REGISTRY_PASSWORD")
            .env("NO_COLOR", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd.output().expect("running kbuild");
        assert!(o.status.success(), "kbuild {args:?}\n{}", text(&o));
        o
    }

    fn out(&self) -> PathBuf {
        self.project.join("out")
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn remote_args(url: &str, mode: &str) -> Vec<String> {
    vec![
        "--remote-cache".into(),
        url.into(),
        "--remote-cache-mode".into(),
        mode.into(),
        "--plain-http".into(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Object sha256s by (kernel, target), from a build's manifest.json.
fn objects(out: &Path) -> Vec<(String, String, String, String)> {
    let m = manifest(out);
    let mut v: Vec<_> = m["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .map(|o| {
            (
                o["kernel"].as_str().unwrap_or_default().to_string(),
                o["target"].as_str().unwrap_or_default().to_string(),
                o["sha256"].as_str().unwrap_or_default().to_string(),
                o["cache_key"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn machine_b_reuses_what_machine_a_compiled_with_zero_compiles() {
    let reg = Registry::start(false);
    let url = reg.url("team/kbuild-cache");

    let a = Machine::new(None);
    let o = a.build(&strs(&remote_args(&url, "read-write")), &[]);
    assert_eq!(a.s.compiles(), JOBS, "{}", text(&o));
    let sum = summary(&o);
    assert_eq!(sum["remote_cache"]["uploads"], JOBS, "{sum:#}");
    assert_eq!(sum["remote_cache"]["hits"], 0, "{sum:#}");

    // B: an empty cache dir, the project cloned to another path, read-only remote.
    let b = Machine::new(Some(&a.project));
    let o = b.build(&strs(&remote_args(&url, "read")), &[]);
    assert_eq!(b.s.compiles(), 0, "B compiled\n{}", text(&o));
    let sum = summary(&o);
    assert_eq!(sum["compiled"], 0, "{sum:#}");
    assert_eq!(sum["remote_cache"]["hits"], JOBS, "{sum:#}");
    assert_eq!(sum["remote_cache"]["uploads"], 0, "{sum:#}");
    assert!(sum["remote_cache"].get("unavailable").is_none(), "{sum:#}");
    // The same objects, byte for byte.
    let (oa, ob) = (objects(&a.out()), objects(&b.out()));
    assert_eq!(oa, ob);
    assert_eq!(oa.len(), JOBS);

    // What B fetched is now in its local cache: without the remote, still zero compiles.
    let o = b.build(&[], &[]);
    assert_eq!(b.s.compiles(), 0, "{}", text(&o));

    // Change a header's content on B: its entries are misses everywhere and compile locally.
    let h = b.project.join("include/kcompat.h");
    let mut src = std::fs::read_to_string(&h).expect("kcompat.h");
    src.push_str("\n// changed on B\n");
    std::fs::write(&h, src).expect("write kcompat.h");
    let o = b.build(&strs(&remote_args(&url, "read")), &[]);
    assert_eq!(b.s.compiles(), JOBS, "{}", text(&o));
    assert_eq!(summary(&o)["remote_cache"]["hits"], 0);
}

#[test]
fn a_dead_or_silent_remote_compiles_locally_and_says_so_once() {
    // A closed port: connection refused.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let url = format!("oci://127.0.0.1:{port}/cache");
    let m = Machine::new(None);
    let o = m.build(&strs(&remote_args(&url, "read-write")), &[]);
    assert_eq!(m.s.compiles(), JOBS, "{}", text(&o));
    let err = stderr(&o);
    assert_eq!(
        err.matches("unavailable").count(),
        1,
        "one line about the remote\n{err}"
    );
    assert!(
        err.contains(&url) && err.contains("compiling locally"),
        "{err}"
    );
    let sum = summary(&o);
    assert!(sum["remote_cache"]["unavailable"].is_string(), "{sum:#}");
    assert_eq!(sum["compiled"], JOBS);

    // A remote that accepts connections and never answers: bounded by the timeout.
    let silent = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = silent.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming().flatten() {
            held.push(c);
        }
    });
    let url = format!("oci://127.0.0.1:{port}/cache");
    let m = Machine::new(None);
    let t0 = Instant::now();
    let o = m.build(
        &strs(&remote_args(&url, "read")),
        &[("KBUILD_REMOTE_CACHE_TIMEOUT", "1")],
    );
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(m.s.compiles(), JOBS, "{}", text(&o));
    assert_eq!(stderr(&o).matches("unavailable").count(), 1, "{}", text(&o));
}

#[test]
fn a_tampered_remote_entry_is_refused_and_compiled_locally() {
    let reg = Registry::start(false);
    let url = reg.url("cache");
    let a = Machine::new(None);
    a.build(&strs(&remote_args(&url, "read-write")), &[]);
    assert_eq!(a.s.compiles(), JOBS);
    let objs = objects(&a.out());

    let client = OciClient::new(
        &reg.host(),
        "cache",
        OciOptions {
            plain_http: true,
            ..OciOptions::default()
        },
    );
    // 1. Re-point one entry's object layer at other bytes (valid sha256, wrong blake3).
    let key1 = &objs[0].3;
    let tag = format!("r-{key1}");
    let fetched = client
        .get_manifest(&tag, &Silent)
        .expect("manifest")
        .expect("entry uploaded");
    let mut m: ImageManifest = serde_json::from_slice(&fetched.bytes).expect("manifest JSON");
    let evil = b"\x7fELF not what was compiled".to_vec();
    client.put_blob(&evil, "evil", &Silent).expect("push blob");
    let layer: &mut Descriptor = m
        .layers
        .iter_mut()
        .find(|l| l.media_type.contains("object"))
        .expect("object layer");
    layer.digest = kbuild_base::digest::oci_digest(&evil);
    layer.size = evil.len() as u64;
    let bytes = serde_json::to_vec(&m).expect("JSON");
    client
        .put_manifest(&tag, &bytes, &Silent)
        .expect("push manifest");

    // 2. Corrupt another entry's object blob in the registry's storage (sha256 mismatch).
    let key2 = &objs[1].3;
    let fetched = client
        .get_manifest(&format!("r-{key2}"), &Silent)
        .expect("manifest")
        .expect("entry uploaded");
    let m: ImageManifest = serde_json::from_slice(&fetched.bytes).expect("manifest JSON");
    let digest = &m
        .layers
        .iter()
        .find(|l| l.media_type.contains("object"))
        .expect("object layer")
        .digest;
    let f = reg.blob_file(digest);
    let mut data = std::fs::read(&f).expect("blob file");
    if let Some(b) = data.last_mut() {
        *b ^= 0xff;
    }
    std::fs::write(&f, data).expect("write blob file");

    let b = Machine::new(Some(&a.project));
    let o = b.build(&strs(&remote_args(&url, "read")), &[]);
    assert_eq!(
        b.s.compiles(),
        2,
        "the two tampered entries compile\n{}",
        text(&o)
    );
    let err = stderr(&o);
    assert_eq!(err.matches("refused").count(), 2, "{err}");
    assert!(err.contains("blake3"), "{err}");
    assert!(err.contains("digest mismatch"), "{err}");
    let sum = summary(&o);
    assert_eq!(sum["remote_cache"]["hits"], JOBS - 2, "{sum:#}");
    assert_eq!(sum["remote_cache"]["refused"], 2, "{sum:#}");
    // Nothing tampered reached the output: B's objects are A's.
    assert_eq!(objects(&b.out()), objs);
}
