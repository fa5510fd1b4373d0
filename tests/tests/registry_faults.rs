//! Registry faults and registry security, end to end: `kbuild publish | pull | ls` through a
//! loopback fault proxy (`kbuild_tests::fault_proxy`) in front of a real CNCF distribution
//! server (Debian's docker-registry), real compilers building the bundle. Every fault kind
//! during publish and pull → retried with backoff and the bytes verified (success with the
//! same bytes as a clean pull), or a clear failure with nothing half-written in the cache,
//! the lockfile or the registry; an interrupted publish leaves no visible version. Then a
//! replayed older signed manifest under a newer tag, TLS verification on by default, and an
//! oversize manifest.

use crate::kbuild_tests;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use kbuild_tests::fault_proxy::{http, put_blob, tags, Fault, FaultProxy, Rule};
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
    let lock = std::fs::read_to_string(work.join("Kbuild.lock"))
        .ok()
        .map(|t| {
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
    assert!(
        l.refs == 1 && l.lock.is_some() && !l.blobs.is_empty(),
        "{l:?}"
    );
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
        assert_eq!(
            left(&env, &work),
            good,
            "{what}: other bytes than a clean pull"
        );
        let err = stderr(&o);
        if !matches!(injected[0].fault, Some(Fault::Slow { .. })) {
            assert!(err.contains("retrying in"), "{what}: no retry noted: {err}");
        }
        eprintln!(
            "{what}: {} faults injected, pulled the same bytes",
            injected.len()
        );
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
        assert!(
            !proxy.injected().is_empty(),
            "{what}: no fault was injected"
        );
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
    // (A signature tag `sha256-<hex>.sig` may be there: it names no version.)
    let t = tags(reg.port, repo);
    assert!(
        !t.iter().any(|t| t == "0.1.0"),
        "{what}: the version's tag is visible: {t:?}"
    );
    let (code, _) = http(
        reg.port,
        "GET",
        &format!("/v2/{repo}/manifests/0.1.0"),
        &[("Accept", "application/vnd.oci.image.manifest.v1+json")],
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
    assert!(
        !out.contains("0.1.0"),
        "{what}: kbuild ls shows it: {}",
        text(&o)
    );
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
    assert!(
        err.contains("PATCH") && err.contains("/blobs/uploads/"),
        "{err}"
    );
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
        proxy.set(vec![Rule::new(
            method,
            path,
            Fault::Hold { ms: 1500 },
            1000,
        )]);
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

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn get_manifest(port: u16, repo: &str, reference: &str) -> Vec<u8> {
    let (code, body) = http(
        port,
        "GET",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("Accept", OCI_MANIFEST)],
        &[],
    )
    .expect("registry answers");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    body
}

fn put_manifest(port: u16, repo: &str, reference: &str, bytes: &[u8]) {
    let (code, body) = http(
        port,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("Content-Type", OCI_MANIFEST)],
        bytes,
    )
    .expect("registry answers");
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
}

#[test]
fn replayed_older_signed_manifest_under_a_newer_tag_is_refused() {
    let reg = Registry::start(false);
    let env = Env::new();
    let url = reg.url("kb-small");
    let o = publish(&env, &url, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let keys = env.path().join("keys");
    env.ok(
        env.path(),
        &["keygen", "--out", &keys.display().to_string()],
    );
    let key = keys.join("kbuild.key").display().to_string();
    let pubkey = keys.join("kbuild.pub").display().to_string();
    env.ok(
        env.path(),
        &[
            "sign",
            "kb-small@0.1.0",
            "--registry",
            &url,
            "--plain-http",
            "--key",
            &key,
        ],
    );
    let require = ["--signature-policy", "require", "--trusted-key", &pubkey];
    let work = env.path().join("work");
    let o = pull(&env, &work, &url, &require);
    assert!(o.status.success(), "the genuine 0.1.0: {}", text(&o));

    // 1. The signed 0.1.0 manifest, byte for byte, under tag 0.1.1 (its signature tag
    //    follows it: it names the same digest).
    let old = get_manifest(reg.port, "kb-small", "0.1.0");
    put_manifest(reg.port, "kb-small", "0.1.1", &old);
    // 2. The same objects with the config's version rewritten to 0.1.1, pushed as 0.1.1 of
    //    another repository with the old signature copied onto it.
    let m: serde_json::Value = serde_json::from_slice(&old).unwrap();
    let cfg_digest = m["config"]["digest"].as_str().unwrap().to_string();
    let (_, cfg) = http(
        reg.port,
        "GET",
        &format!("/v2/kb-small/blobs/{cfg_digest}"),
        &[],
        &[],
    )
    .unwrap();
    let mut cfg_v: serde_json::Value = serde_json::from_slice(&cfg).unwrap();
    cfg_v["package"]["version"] = "0.1.1".into();
    let new_cfg = serde_json::to_vec(&cfg_v).unwrap();
    for l in m["layers"].as_array().unwrap() {
        let d = l["digest"].as_str().unwrap();
        let (_, b) = http(
            reg.port,
            "GET",
            &format!("/v2/kb-small/blobs/{d}"),
            &[],
            &[],
        )
        .unwrap();
        put_blob(reg.port, "forged", &b);
    }
    let new_cfg_digest = put_blob(reg.port, "forged", &new_cfg);
    let mut nm = m.clone();
    nm["config"]["digest"] = new_cfg_digest.clone().into();
    nm["config"]["size"] = new_cfg.len().into();
    let nm = serde_json::to_vec(&nm).unwrap();
    put_manifest(reg.port, "forged", "0.1.1", &nm);
    let old_sig_tag = format!("sha256-{}.sig", sha256_hex(&old));
    let sig_manifest = get_manifest(reg.port, "kb-small", &old_sig_tag);
    let sm: serde_json::Value = serde_json::from_slice(&sig_manifest).unwrap();
    for d in std::iter::once(&sm["config"]).chain(sm["layers"].as_array().unwrap()) {
        let d = d["digest"].as_str().unwrap();
        let (_, b) = http(
            reg.port,
            "GET",
            &format!("/v2/kb-small/blobs/{d}"),
            &[],
            &[],
        )
        .unwrap();
        put_blob(reg.port, "forged", &b);
    }
    put_manifest(
        reg.port,
        "forged",
        &format!("sha256-{}.sig", sha256_hex(&nm)),
        &sig_manifest,
    );

    for (what, repo, req, says) in [
        (
            "old manifest under a new tag",
            "kb-small",
            "kb-small@0.1.1",
            "tag 0.1.1 holds version 0.1.0",
        ),
        (
            "newest matching a range is the replay",
            "kb-small",
            "kb-small@^0.1",
            "tag 0.1.1 holds version 0.1.0",
        ),
        (
            "version rewritten, old signature attached",
            "forged",
            "kb-small@0.1.1",
            "signature check failed",
        ),
    ] {
        let env = Env::new();
        let work = env.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let url = reg.url(repo);
        let mut args = vec![
            "pull",
            req,
            "--registry",
            url.as_str(),
            "--plain-http",
            "--device",
            "sm_89",
        ];
        args.extend_from_slice(&require);
        let o = env.kb(&work, &args);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", text(&o));
        let err = stderr(&o);
        assert!(err.contains(says), "{what}: {err}");
        let l = left(&env, &work);
        assert_eq!((l.refs, l.lock), (0, None), "{what}: something kept");
        eprintln!("{what}: refused: {}", err.trim());
    }
}

/// docker-registry serving HTTPS with a certificate from a CA made here with openssl.
struct TlsRegistry {
    child: std::process::Child,
    port: u16,
    ca: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(o.status.success(), "openssl {args:?}: {}", text(&o));
}

fn tls_registry() -> TlsRegistry {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut a = vec!["req", "-x509", "-nodes", "-days", "2"];
    a.extend_from_slice(&ec);
    a.extend_from_slice(&[
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-subj",
        "/CN=kbuild test CA",
    ]);
    openssl(d, &a);
    let mut a = vec!["req", "-nodes"];
    a.extend_from_slice(&ec);
    a.extend_from_slice(&[
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(d, &a);
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "srv.pem",
            "-extfile",
            "ext.cnf",
        ],
    );
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let cfg = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: kbuild-test-secret\n  tls:\n    certificate: {}\n    key: {}\n",
            d.join("storage").display(),
            d.join("srv.pem").display(),
            d.join("srv.key").display()
        );
        std::fs::write(d.join("config.yml"), cfg).unwrap();
        let log = std::fs::File::create(d.join("registry.log")).unwrap();
        let mut child = Command::new("/usr/bin/docker-registry")
            .arg("serve")
            .arg(d.join("config.yml"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting docker-registry");
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return TlsRegistry {
                    child,
                    port,
                    ca: d.join("ca.pem"),
                    _dir: dir,
                };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("docker-registry with TLS did not start");
}

#[test]
fn registry_tls_is_verified_by_default_and_a_private_ca_is_trusted_by_option() {
    let reg = tls_registry();
    let env = Env::new();
    let url = format!("oci://127.0.0.1:{}/kb-small", reg.port);
    let b = bundle().display().to_string();
    // Self-signed (private CA) and not trusted: refused at once, not retried, with the hint.
    for args in [
        vec!["publish", b.as_str(), "--registry", url.as_str()],
        vec!["pull", "kb-small@0.1.0", "--registry", url.as_str()],
        vec!["ls", "kb-small", "--registry", url.as_str()],
    ] {
        let t0 = std::time::Instant::now();
        let o = env.kb(env.path(), &args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        let err = stderr(&o);
        assert!(
            err.contains("is not trusted") && err.contains("KBUILD_REGISTRY_CA_FILE"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("retrying"), "{args:?}: retried: {err}");
        assert!(t0.elapsed() < Duration::from_secs(20), "{args:?}: slow");
        eprintln!("{args:?}: {}", err.trim());
    }
    // Not a PEM file: a clear error.
    let o = env.kb_env(
        env.path(),
        &["ls", "kb-small", "--registry", &url],
        &[("KBUILD_REGISTRY_CA_FILE", "/etc/hostname")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("KBUILD_REGISTRY_CA_FILE=/etc/hostname"),
        "{}",
        text(&o)
    );
    // Trusted through KBUILD_REGISTRY_CA_FILE: publish and pull over verified TLS.
    let ca = reg.ca.display().to_string();
    let trust = [("KBUILD_REGISTRY_CA_FILE", ca.as_str())];
    let o = env.kb_env(env.path(), &["publish", &b, "--registry", &url], &trust);
    assert!(o.status.success(), "{}", text(&o));
    let work = env.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let o = env.kb_env(
        &work,
        &[
            "pull",
            "kb-small@0.1.0",
            "--registry",
            &url,
            "--device",
            "sm_89",
        ],
        &trust,
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(left(&env, &work).refs, 1);
}

#[test]
fn oversize_manifests_are_refused() {
    let reg = Registry::start(false);
    let env = Env::new();
    let o = publish(&env, &reg.url("kb-small"), &[]);
    assert!(o.status.success(), "{}", text(&o));

    // An OCI manifest over 4 MiB (a hostile registry; distribution itself refuses to store one).
    let proxy = FaultProxy::start(reg.port);
    proxy.set(vec![Rule::new(
        "GET",
        "/manifests/0.1.0",
        Fault::Inflate(5 << 20),
        1000,
    )]);
    let work = env.path().join("w1");
    let o = pull(&env, &work, &proxy.url("kb-small"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(err.contains("refusing an oversize manifest"), "{err}");
    assert!(!err.contains("retrying"), "{err}");
    assert_eq!(left(&env, &work).refs, 0);

    // A kbuild artifact whose config (the kbuild manifest) declares 1 GiB.
    let old = get_manifest(reg.port, "kb-small", "0.1.0");
    let mut m: serde_json::Value = serde_json::from_slice(&old).unwrap();
    m["config"]["size"] = (1u64 << 30).into();
    put_manifest(
        reg.port,
        "kb-small",
        "0.2.0",
        &serde_json::to_vec(&m).unwrap(),
    );
    let work = env.path().join("w2");
    std::fs::create_dir_all(&work).unwrap();
    let url = reg.url("kb-small");
    let o = env.kb(
        &work,
        &["pull", "kb-small@0.2.0", "--registry", &url, "--plain-http"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("declares 1073741824 bytes") && err.contains("oversize"),
        "{err}"
    );

    // A bundle whose manifest.json is 65 MiB (of JSON whitespace: a few KiB compressed).
    let mut big = b"{".to_vec();
    big.resize(65 << 20, b' ');
    big.push(b'}');
    let bytes = kbuild_bundle::archive::write(
        &[kbuild_bundle::archive::Entry {
            name: "manifest.json".into(),
            data: big,
        }],
        0,
    )
    .unwrap();
    let f = env.path().join("big-0.1.0.kbundle");
    std::fs::write(&f, &bytes).unwrap();
    let dir = env.path().join("dirreg");
    let o = env.kb(
        env.path(),
        &[
            "publish",
            &f.display().to_string(),
            "--registry",
            &dir.display().to_string(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("over kbuild's limit") && err.contains("oversize"),
        "{err}"
    );
    assert!(files_under(&dir).is_empty(), "registry written");
}

#[test]
fn a_signed_publish_attaches_its_signatures_before_the_version_becomes_visible() {
    let reg = Registry::start(false);
    let env = Env::new();
    let dist = env.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let b = dist.join("kb-small-0.1.0.kbundle");
    std::fs::copy(bundle(), &b).unwrap();
    let keys = env.path().join("keys");
    env.ok(
        env.path(),
        &["keygen", "--out", &keys.display().to_string()],
    );
    let key = keys.join("kbuild.key").display().to_string();
    let pubkey = keys.join("kbuild.pub").display().to_string();
    let bs = b.display().to_string();
    env.ok(env.path(), &["sign", &bs, "--key", &key]);

    // Killed while the tag's PUT is held: the signatures went up before it, nothing visible.
    let proxy = FaultProxy::start(reg.port);
    proxy.set(vec![Rule::new(
        "PUT",
        "/manifests/0.1.0",
        Fault::Hold { ms: 1500 },
        1,
    )]);
    let url = proxy.url("kb-small");
    let mut child = Command::new(kbuild_tests::kbuild_bin())
        .args(["publish", &bs, "--registry", &url, "--plain-http"])
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
    assert!(!proxy.injected().is_empty(), "never reached the tag's PUT");
    let _ = child.kill();
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(1600));
    let puts: Vec<String> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "PUT" && s.path.contains("/manifests/"))
        .map(|s| s.path)
        .collect();
    assert!(
        puts.len() == 2 && puts[0].contains(".sig") && puts[1].ends_with("/manifests/0.1.0"),
        "manifest PUTs in this order: {puts:?}"
    );
    assert_invisible(
        &env,
        &reg,
        "kb-small",
        "SIGKILL before the tag of a signed publish",
    );

    // The retry publishes; a `require` pull verifies the signature.
    let o = env.kb(
        env.path(),
        &["publish", &bs, "--registry", &url, "--plain-http"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let work = env.path().join("work");
    let o = pull(
        &env,
        &work,
        &reg.url("kb-small"),
        &["--signature-policy", "require", "--trusted-key", &pubkey],
    );
    assert!(o.status.success(), "{}", text(&o));
}
