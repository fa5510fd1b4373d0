//! Registry faults and registry security, end to end: `kbuild publish | pull | ls` through a
//! loopback fault proxy (`kbuild_tests::fault_proxy`) in front of a real CNCF distribution
//! server (Debian's docker-registry), real compilers building the bundle. Every fault kind
//! during publish and pull → retried with backoff and the bytes verified (success with the
//! same bytes as a clean pull), or a clear failure with nothing half-written in the cache,
//! the lockfile or the registry; an interrupted publish leaves no visible version. Then a
//! replayed older signed manifest under a newer tag, TLS verification on by default, and an
//! oversize manifest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kbuild_tests::fault_proxy::{http, tags, Fault, FaultProxy, Rule};
use kbuild_tests::registry::{files_under, json, write_project, Env, Registry, SMALL_A, SMALL_B};
use kbuild_tests::text;

/// The small project's bundle (sm_89 + gfx1100, two kernels), built and packaged once.
fn bundle() -> &'static Path {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let env = Env::new();
        let k = write_project(
            env.path(),
            "kb-small",
            &["sm_89", "gfx1100"],
            &[("scale", SMALL_A), ("shift", SMALL_B)],
        );
        env.ok(&k, &["package", "--out", "dist"]);
        env.dir.keep().join("kernels/dist/kb-small-0.1.0.kbundle")
    })
}

/// What a pull left: the cache's blob names (each checked to hash to its name), its refs,
/// stray temp files, and the work dir's lockfile (manifest digest and layers).
#[derive(Debug, PartialEq, Eq)]
struct Left {
    blobs: BTreeSet<String>,
    refs: usize,
    temps: usize,
    lock: Option<String>,
}

fn left(env: &Env, work: &Path) -> Left {
    use sha2::{Digest, Sha256};
    let reg = env.cache().join("registry");
    let mut blobs = BTreeSet::new();
    for f in files_under(&reg.join("blobs/sha256")) {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with(".tmp") {
            continue;
        }
        let bytes = std::fs::read(&f).unwrap_or_default();
        let hex: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, name, "torn cache blob {}", f.display());
        blobs.insert(name);
    }
    let all = files_under(&reg);
    let temps = all
        .iter()
        .chain(files_under(work).iter())
        .filter(|p| p.to_string_lossy().contains(".tmp"))
        .count();
    let lock = std::fs::read_to_string(work.join("Kbuild.lock")).ok().map(|t| {
        let v: toml::Value = toml::from_str(&t).expect("lockfile parses");
        let p = &v["package"][0];
        format!("{} {}", p["manifest"], p["layers"])
    });
    Left {
        blobs,
        refs: files_under(&reg.join("refs")).len(),
        temps,
        lock,
    }
}

fn pull(env: &Env, work: &Path, url: &str, extra: &[&str]) -> std::process::Output {
    std::fs::create_dir_all(work).unwrap();
    let mut args = vec![
        "pull",
        "kb-small@0.1.0",
        "--registry",
        url,
        "--plain-http",
        "--device",
        "sm_89",
    ];
    args.extend_from_slice(extra);
    env.kb(work, &args)
}

fn publish(env: &Env, url: &str, extra: &[&str]) -> std::process::Output {
    let b = bundle().display().to_string();
    let mut args = vec!["publish", b.as_str(), "--registry", url, "--plain-http"];
    args.extend_from_slice(extra);
    env.kb(env.path(), &args)
}

/// A clean pull of `repo` straight from the registry: the reference of correct bytes.
fn reference(reg: &Registry, repo: &str) -> Left {
    let env = Env::new();
    let work = env.path().join("work");
    let o = pull(&env, &work, &reg.url(repo), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let l = left(&env, &work);
    assert!(l.refs == 1 && l.lock.is_some() && !l.blobs.is_empty(), "{l:?}");
    l
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn pull_through_every_fault_kind_retries_verifies_and_gets_the_same_bytes() {
    let reg = Registry::start(false);
    let env = Env::new();
    let o = publish(&env, &reg.url("kb-small"), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let good = reference(&reg, "kb-small");
    let proxy = FaultProxy::start(reg.port);
    let url = proxy.url("kb-small");

    let cases: Vec<(&str, Vec<Rule>)> = vec![
        (
            "dropped connections",
            vec![
                Rule::new("GET", "/tags/list", Fault::Drop, 1),
                Rule::new("GET", "/manifests/", Fault::Drop, 2),
                Rule::new("GET", "/blobs/", Fault::Drop, 2),
            ],
        ),
        (
            "500 and 503",
            vec![
                Rule::new("GET", "/tags/list", Fault::Status(503), 1),
                Rule::new("GET", "/manifests/", Fault::Status(500), 1),
                Rule::new("GET", "/blobs/", Fault::Status(503), 2),
            ],
        ),
        (
            "slow bodies",
            vec![
                Rule::new("GET", "/manifests/", Fault::Slow { ms: 20 }, 10),
                Rule::new("GET", "/blobs/", Fault::Slow { ms: 20 }, 10),
            ],
        ),
        (
            "truncated bodies",
            vec![
                Rule::new("GET", "/manifests/", Fault::Truncate, 1),
                Rule::new("GET", "/blobs/", Fault::Truncate, 2),
            ],
        ),
        (
            "wrong digests (body bytes altered once)",
            vec![
                Rule::new("GET", "/manifests/", Fault::Corrupt, 1),
                Rule::new("GET", "/blobs/", Fault::Corrupt, 1),
            ],
        ),
        (
            "answers lost after the registry served them",
            vec![Rule::new("GET", "/blobs/", Fault::DropAnswer, 2)],
        ),
    ];
    for (what, rules) in cases {
        let env = Env::new();
        let work = env.path().join("work");
        proxy.clear_log();
        proxy.set(rules);
        let o = pull(&env, &work, &url, &[]);
        assert!(o.status.success(), "{what}: {}", text(&o));
        let injected = proxy.injected();
        assert!(!injected.is_empty(), "{what}: no fault was injected");
        assert_eq!(left(&env, &work), good, "{what}: other bytes than a clean pull");
        let err = stderr(&o);
        if !matches!(injected[0].fault, Some(Fault::Slow { .. })) {
            assert!(err.contains("retrying in"), "{what}: no retry noted: {err}");
        }
        eprintln!("{what}: {} faults injected, pulled the same bytes", injected.len());
    }

    // Faults that do not go away: a clear failure, nothing half-written.
    let cases: Vec<(&str, Vec<Rule>, &str)> = vec![
        (
            "every blob body altered",
            vec![Rule::new("GET", "/blobs/", Fault::Corrupt, 1000)],
            "digest mismatch",
        ),
        (
            "every blob body truncated",
            vec![Rule::new("GET", "/blobs/", Fault::Truncate, 1000)],
            "/blobs/sha256:",
        ),
        (
            "every manifest answer 503",
            vec![Rule::new("GET", "/manifests/", Fault::Status(503), 1000)],
            "HTTP 503",
        ),
        (
            "every connection dropped",
            vec![Rule::new("GET", "/", Fault::Drop, 1000)],
            "127.0.0.1",
        ),
    ];
    for (what, rules, says) in cases {
        let env = Env::new();
        let work = env.path().join("work");
        proxy.set(rules);
        let o = pull(&env, &work, &url, &["--retries", "2"]);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", text(&o));
        let err = stderr(&o);
        assert!(err.contains(says), "{what}: {err}");
        let l = left(&env, &work);
        assert_eq!(
            (l.refs, l.temps, l.lock.as_deref()),
            (0, 0, None),
            "{what}: half-written state {l:?}"
        );
        eprintln!(
            "{what}: fails clearly: {}",
            err.lines().last().unwrap_or_default()
        );
    }
}

#[test]
fn publish_through_every_fault_kind_retries_and_pushes_the_same_artifact() {
    let reg = Registry::start(false);
    let env = Env::new();
    let o = publish(&env, &reg.url("clean"), &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let clean_digest = json(&String::from_utf8_lossy(&o.stdout))["digest"].clone();
    let good = reference(&reg, "clean");
    let proxy = FaultProxy::start(reg.port);

    let cases: Vec<(&str, Vec<Rule>)> = vec![
        (
            "dropped connections",
            vec![
                Rule::new("GET", "/manifests/", Fault::Drop, 1),
                Rule::new("HEAD", "/blobs/", Fault::Drop, 1),
                Rule::new("POST", "/blobs/uploads/", Fault::Drop, 1),
                Rule::new("PUT", "/manifests/", Fault::Drop, 1),
            ],
        ),
        (
            "500 and 503",
            vec![
                Rule::new("POST", "/blobs/uploads/", Fault::Status(503), 1),
                Rule::new("PATCH", "/blobs/uploads/", Fault::Status(500), 1),
                Rule::new("PUT", "/blobs/uploads/", Fault::Status(503), 1),
                Rule::new("PUT", "/manifests/", Fault::Status(500), 2),
            ],
        ),
        (
            "uploads cut mid-body",
            vec![Rule::new("PATCH", "/blobs/uploads/", Fault::CutUpload, 2)],
        ),
        (
            "answers lost after the registry committed",
            vec![
                Rule::new("PUT", "/blobs/uploads/", Fault::DropAnswer, 1),
                Rule::new("PUT", "/manifests/", Fault::DropAnswer, 1),
            ],
        ),
        (
            "slow and truncated answers",
            vec![
                Rule::new("HEAD", "/blobs/", Fault::Slow { ms: 20 }, 3),
                Rule::new("GET", "/manifests/", Fault::Truncate, 1),
            ],
        ),
    ];
    for (i, (what, rules)) in cases.into_iter().enumerate() {
        let repo = format!("faulty{i}");
        proxy.clear_log();
        proxy.set(rules);
        let o = publish(&env, &proxy.url(&repo), &["--json"]);
        assert!(o.status.success(), "{what}: {}", text(&o));
        assert!(!proxy.injected().is_empty(), "{what}: no fault was injected");
        let p = json(&String::from_utf8_lossy(&o.stdout));
        assert_eq!(p["digest"], clean_digest, "{what}: another artifact");
        assert_eq!(tags(reg.port, &repo), ["0.1.0"], "{what}");
        assert_eq!(reference(&reg, &repo), good, "{what}: other bytes");
        eprintln!(
            "{what}: {} faults injected, published the same artifact",
            proxy.injected().len()
        );
    }
}

/// No version visible: not in tags/list, no manifest under the tag, not in `kbuild ls`.
fn assert_invisible(env: &Env, reg: &Registry, repo: &str, what: &str) {
    assert!(tags(reg.port, repo).is_empty(), "{what}: a tag is visible");
    let (code, _) = http(
        reg.port,
        "GET",
        &format!("/v2/{repo}/manifests/0.1.0"),
        &[(
            "Accept",
            "application/vnd.oci.image.manifest.v1+json",
        )],
        &[],
    )
    .expect("registry answers");
    assert_eq!(code, 404, "{what}: the manifest is there");
    let o = env.kb(
        env.path(),
        &[
            "ls",
            "kb-small",
            "--registry",
            &reg.url(repo),
            "--plain-http",
            "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("0.1.0"), "{what}: kbuild ls shows it: {}", text(&o));
}

#[test]
fn interrupted_publish_leaves_no_visible_version_and_a_retry_publishes_cleanly() {
    let reg = Registry::start(false);
    let env = Env::new();
    let proxy = FaultProxy::start(reg.port);

    // The proxy cuts every upload mid-body: publish fails clearly after its retries.
    proxy.set(vec![Rule::new(
        "PATCH",
        "/blobs/uploads/",
        Fault::CutUpload,
        1000,
    )]);
    let o = publish(&env, &proxy.url("cut"), &["--retries", "2"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("PATCH") && err.contains("/blobs/uploads/"), "{err}");
    assert_invisible(&env, &reg, "cut", "cut upload");
    proxy.set(vec![]);
    let o = publish(&env, &proxy.url("cut"), &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(tags(reg.port, "cut"), ["0.1.0"]);
    let good = reference(&reg, "cut");

    // kbuild SIGKILLed mid-publish, while the proxy holds one of its requests: at each step
    // of the upload and at the manifest PUT itself.
    for (i, (method, path)) in [
        ("HEAD", "/blobs/"),
        ("POST", "/blobs/uploads/"),
        ("PATCH", "/blobs/uploads/"),
        ("PUT", "/blobs/uploads/"),
        ("PUT", "/manifests/"),
    ]
    .into_iter()
    .enumerate()
    {
        let repo = format!("killed{i}");
        let what = format!("SIGKILL during {method} {path}");
        proxy.clear_log();
        proxy.set(vec![Rule::new(method, path, Fault::Hold { ms: 1500 }, 1000)]);
        let b = bundle().display().to_string();
        let url = proxy.url(&repo);
        let mut child = Command::new(kbuild_tests::kbuild_bin())
            .args(["publish", &b, "--registry", &url, "--plain-http"])
            .current_dir(env.path())
            .env("KBUILD_CACHE_DIR", env.cache())
            .env("KBUILD_CONFIG", env.path().join("kbuild-config.toml"))
            .env("DOCKER_CONFIG", env.path().join("docker"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kbuild publish");
        let t0 = std::time::Instant::now();
        while proxy.injected().is_empty() && t0.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!proxy.injected().is_empty(), "{what}: never got there");
        std::thread::sleep(Duration::from_millis(300));
        let _ = child.kill();
        let _ = child.wait();
        // Let the held request run out.
        std::thread::sleep(Duration::from_millis(1600));
        assert_invisible(&env, &reg, &repo, &what);
        proxy.set(vec![]);
        let o = publish(&env, &proxy.url(&repo), &[]);
        assert!(o.status.success(), "{what}: retry: {}", text(&o));
        assert_eq!(tags(reg.port, &repo), ["0.1.0"], "{what}");
        assert_eq!(reference(&reg, &repo), good, "{what}: other bytes");
        eprintln!("{what}: no version visible; the retry published cleanly");
    }
}
