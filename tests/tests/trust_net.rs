//! Trust on the network, end to end: what a hostile registry can make `kbuild` send or hold.
//! Each test runs the `kbuild` binary against a small hostile HTTP server on loopback (a Rust
//! thread server, below) and, where a registry is needed, the real CNCF distribution server
//! (Debian's docker-registry) with htpasswd auth.
//!
//! - Credentials are scoped to their origin: `KBUILD_REGISTRY_USER`/`PASSWORD` only go to
//!   `KBUILD_REGISTRY_HOST` (or the host `--registry` names), a docker config.json entry only to
//!   its own host, and no `Authorization` follows an absolute `Link`, an upload `Location` or a
//!   redirect to another origin, nor goes to a token realm elsewhere.
//! - Bounded resources: a declared 1 TiB layer and an endless tag list each fail fast with a
//!   clear error, the process's peak RSS (VmHWM) ≤ 256 MiB and its wall time < 10 s; a registry
//!   that stalls or drips hits the read timeout.

use crate::kbuild_tests;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kbuild_tests::registry::{Env, Registry, PASSWORD, USER};
use kbuild_tests::text;

const SECRET: &str = "s3cret-never-leaves-its-host";

// ---------------------------------------------------------------------------------------------
// A hostile HTTP/1.1 server: one request per connection (`Connection: close`), every request
// logged with its Authorization header, the answer decided by a closure.

#[derive(Debug, Clone)]
struct Req {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
}

impl Req {
    fn authorization(&self) -> Option<&str> {
        self.headers.get("authorization").map(String::as_str)
    }
}

enum Body {
    Bytes(Vec<u8>),
    /// Declare `Content-Length: len`, then send zeros until the client goes away.
    Endless {
        len: u64,
    },
    /// Send the head, then nothing (hold the connection open).
    Stall,
    /// Declare `len`, then one byte every `ms` milliseconds.
    Drip {
        len: u64,
        ms: u64,
    },
}

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Body,
}

impl Resp {
    fn new(status: u16) -> Resp {
        Resp {
            status,
            headers: Vec::new(),
            body: Body::Bytes(Vec::new()),
        }
    }
    fn json(status: u16, body: impl Into<Vec<u8>>) -> Resp {
        Resp::new(status)
            .header("Content-Type", "application/json")
            .body(body)
    }
    fn header(mut self, k: &str, v: impl Into<String>) -> Resp {
        self.headers.push((k.to_string(), v.into()));
        self
    }
    fn body(mut self, b: impl Into<Vec<u8>>) -> Resp {
        self.body = Body::Bytes(b.into());
        self
    }
    fn with(mut self, b: Body) -> Resp {
        self.body = b;
        self
    }
}

type Handler = dyn Fn(&Req) -> Resp + Send + Sync;

struct Hostile {
    port: u16,
    log: Arc<Mutex<Vec<Req>>>,
    stop: Arc<AtomicBool>,
}

impl Hostile {
    fn start(handler: impl Fn(&Req) -> Resp + Send + Sync + 'static) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind hostile server");
        let port = listener.local_addr().expect("address").port();
        let log: Arc<Mutex<Vec<Req>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let (l, s) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = conn else { continue };
                let (h, l, s) = (handler.clone(), l.clone(), s.clone());
                std::thread::spawn(move || serve(stream, &*h, &l, &s));
            }
        });
        Hostile { port, log, stop }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn url(&self, repo: &str) -> String {
        format!("oci://127.0.0.1:{}/{repo}", self.port)
    }

    fn seen(&self) -> Vec<Req> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Every Authorization header value it was sent.
    fn authorizations(&self) -> Vec<String> {
        self.seen()
            .iter()
            .filter_map(|r| r.authorization().map(str::to_string))
            .collect()
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(stream: TcpStream, handler: &Handler, log: &Mutex<Vec<Req>>, stop: &AtomicBool) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: u64 = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let _ = std::io::copy(&mut (&mut reader).take(len), &mut std::io::sink());
    let req = Req {
        method,
        path,
        headers,
    };
    if let Ok(mut l) = log.lock() {
        l.push(req.clone());
    }
    let resp = handler(&req);
    let mut out = stream;
    let reason = match resp.status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        307 => "Temporary Redirect",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\nConnection: close\r\n", resp.status);
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let declared = match &resp.body {
        Body::Bytes(b) => b.len() as u64,
        Body::Endless { len } | Body::Drip { len, .. } => *len,
        Body::Stall => 1 << 20,
    };
    head.push_str(&format!("Content-Length: {declared}\r\n\r\n"));
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    match resp.body {
        Body::Bytes(b) => {
            let _ = out.write_all(&b);
        }
        Body::Endless { len } => {
            let zeros = vec![0u8; 1 << 20];
            let mut left = len;
            while left > 0 && !stop.load(Ordering::SeqCst) {
                let n = left.min(zeros.len() as u64) as usize;
                if out.write_all(&zeros[..n]).is_err() {
                    break;
                }
                left -= n as u64;
            }
        }
        Body::Stall => {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(30) && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Body::Drip { len, ms } => {
            for _ in 0..len {
                if stop.load(Ordering::SeqCst) || out.write_all(b" ").is_err() {
                    break;
                }
                let _ = out.flush();
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
    }
    let _ = out.flush();
}

// ---------------------------------------------------------------------------------------------
// Running kbuild with a watch on its peak memory and time.

struct Run {
    output: std::process::Output,
    /// Peak resident set, bytes: the kernel's maxrss of the exited process as GNU time
    /// reports it, else the largest VmHWM seen while it ran.
    peak_rss: u64,
    elapsed: Duration,
    /// Killed by the watch (over the memory or time ceiling).
    killed: Option<String>,
}

fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

const RSS_CEILING: u64 = 256 << 20;
const TIME_CEILING: Duration = Duration::from_secs(10);

/// The pid of `parent`'s first child (kbuild under GNU time).
fn child_of(parent: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

const GNU_TIME: &str = "/usr/bin/time";

/// `kbuild ARGS` in `env`'s scratch area, watched: killed above 2× the RSS ceiling or after 30 s
/// (so a failing run on unbounded code ends), its peak RSS and time recorded. Run under GNU
/// time (`-f %M`, the maxrss at exit) where it is installed.
fn watched(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Run {
    let time_out = env.path().join("maxrss.txt");
    let _ = std::fs::remove_file(&time_out);
    let gnu_time = Path::new(GNU_TIME).exists();
    let mut c = if gnu_time {
        let mut c = Command::new(GNU_TIME);
        c.arg("-o").arg(&time_out).args(["-f", "%M"]);
        c.arg(kbuild_tests::kbuild_bin());
        c
    } else {
        Command::new(kbuild_tests::kbuild_bin())
    };
    c.args(args)
        .current_dir(env.path())
        .env("KBUILD_CACHE_DIR", env.cache())
        .env("KBUILD_CONFIG", env.path().join("kbuild-config.toml"))
        .env("DOCKER_CONFIG", env.path().join("docker"))
        .env("NO_COLOR", "1")
        .env_remove("KBUILD_REGISTRY_USER")
        .env_remove("KBUILD_REGISTRY_PASSWORD")
        .env_remove("KBUILD_REGISTRY_HOST")
        .env_remove("KBUILD_REGISTRY")
        .env_remove("KBUILD_SIGNATURE_POLICY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in vars {
        c.env(k, v);
    }
    let t0 = Instant::now();
    let mut child = c.spawn().expect("running kbuild");
    let pid = child.id();
    // Drain the pipes on threads so a chatty child never blocks.
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let mut peak = 0;
    let mut killed = None;
    let mut kb_pid = (!gnu_time).then_some(pid);
    let status = loop {
        if kb_pid.is_none() {
            kb_pid = child_of(pid);
        }
        if let Some(h) = kb_pid.and_then(vm_hwm) {
            peak = peak.max(h);
        }
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => panic!("waiting for kbuild: {e}"),
        }
        if killed.is_none() && (peak > 2 * RSS_CEILING || t0.elapsed() > Duration::from_secs(30)) {
            killed = Some(format!(
                "killed by the test after {:.1}s at {} MiB peak RSS",
                t0.elapsed().as_secs_f64(),
                peak >> 20
            ));
            if let Some(k) = kb_pid.filter(|k| *k != pid) {
                let _ = Command::new("kill").args(["-9", &k.to_string()]).status();
            }
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = t0.elapsed();
    if let Some(kb) = std::fs::read_to_string(&time_out)
        .ok()
        .and_then(|t| t.lines().last().and_then(|l| l.trim().parse::<u64>().ok()))
    {
        peak = peak.max(kb * 1024);
    }
    Run {
        output: std::process::Output {
            status,
            stdout: out_t.join().unwrap_or_default(),
            stderr: err_t.join().unwrap_or_default(),
        },
        peak_rss: peak,
        elapsed,
        killed,
    }
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    fn report(&self) -> String {
        format!(
            "{}\npeak RSS {} MiB, {:.2}s{}",
            text(&self.output),
            self.peak_rss >> 20,
            self.elapsed.as_secs_f64(),
            self.killed
                .as_deref()
                .map(|k| format!(" ({k})"))
                .unwrap_or_default()
        )
    }
    /// Failed (exit 1, not killed) within the resource ceilings.
    fn assert_bounded_failure(&self, what: &str) {
        assert!(self.killed.is_none(), "{what}: {}", self.report());
        assert_eq!(
            self.output.status.code(),
            Some(1),
            "{what}: {}",
            self.report()
        );
        assert!(
            self.peak_rss <= RSS_CEILING,
            "{what}: peak RSS over 256 MiB: {}",
            self.report()
        );
        assert!(
            self.elapsed < TIME_CEILING,
            "{what}: took 10 s or more: {}",
            self.report()
        );
        eprintln!(
            "{what}: peak RSS {} MiB, {:.2}s: {}",
            self.peak_rss >> 20,
            self.elapsed.as_secs_f64(),
            self.stderr().trim()
        );
    }
}

fn basic(user: &str, password: &str) -> String {
    let raw = format!("{user}:{password}");
    // base64, by hand (no extra dev-dependency).
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = raw.as_bytes();
    let mut s = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    format!("Basic {s}")
}

/// A handler that wants `Basic user:SECRET` on every request (401 with a Basic challenge
/// otherwise) and then answers with `ok`.
fn basic_gate(ok: impl Fn(&Req) -> Resp + Send + Sync + 'static) -> impl Fn(&Req) -> Resp {
    let want = basic("u", SECRET);
    move |r: &Req| {
        if r.authorization() == Some(want.as_str()) {
            ok(r)
        } else {
            Resp::new(401).header("WWW-Authenticate", "Basic realm=\"hostile\"")
        }
    }
}

/// `kbuild ARGS --registry <registry's REPO> --plain-http --retries 0`, with the env
/// credentials bound to that registry's host (`KBUILD_REGISTRY_HOST`).
fn kb_bound(env: &Env, args: &[&str], registry: &Hostile, repo: &str) -> Output {
    let url = registry.url(repo);
    let host = registry.host();
    let mut all = args.to_vec();
    all.extend(["--registry", url.as_str(), "--plain-http", "--retries", "0"]);
    env.kb_env(
        env.path(),
        &all,
        &[
            ("KBUILD_REGISTRY_USER", "u"),
            ("KBUILD_REGISTRY_PASSWORD", SECRET),
            ("KBUILD_REGISTRY_HOST", host.as_str()),
        ],
    )
}

fn assert_no_secret(server: &Hostile, what: &str) {
    let leaked: Vec<String> = server.authorizations();
    assert!(
        leaked.is_empty(),
        "{what}: Authorization sent to another origin ({}): {leaked:?}\n{:?}",
        server.host(),
        server.seen()
    );
}

// ---------------------------------------------------------------------------------------------
// Attack 2: credentials leak.

/// `KBUILD_REGISTRY_USER`/`PASSWORD` with `KBUILD_REGISTRY_HOST` naming the real registry: the
/// real one (htpasswd) accepts them, a hostile registry named by `--registry` that asks for
/// Basic credentials gets none. Refused in `AuthConfig::find` (registry/src/auth.rs).
#[test]
fn env_credentials_reach_only_kbuild_registry_host() {
    let reg = Registry::start(true);
    let env = Env::new();
    let host = reg.host();
    let vars = [
        ("KBUILD_REGISTRY_USER", USER),
        ("KBUILD_REGISTRY_PASSWORD", PASSWORD),
        ("KBUILD_REGISTRY_HOST", host.as_str()),
    ];
    // The configured host gets them (an empty repository: no versions, but authenticated).
    let o = env.kb_env(
        env.path(),
        &[
            "ls",
            "kb-small",
            "--registry",
            &reg.url("kb-small"),
            "--plain-http",
        ],
        &vars,
    );
    assert!(o.status.success(), "{}", text(&o));
    // Another registry asking for them does not.
    let evil = Hostile::start(|_| {
        Resp::new(401).header("WWW-Authenticate", "Basic realm=\"give me your password\"")
    });
    let o = env.kb_env(
        env.path(),
        &[
            "ls",
            "kb-small",
            "--registry",
            &evil.url("kb-small"),
            "--plain-http",
            "--retries",
            "0",
        ],
        &vars,
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_no_secret(&evil, "a registry other than KBUILD_REGISTRY_HOST");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&evil.host()) && err.contains("KBUILD_REGISTRY_HOST"),
        "{err}"
    );
}

/// A Bearer challenge whose token realm is on another origin over plain http: neither the
/// env credentials (bound to the registry by `KBUILD_REGISTRY_HOST`) nor the registry's docker
/// config.json entry go there. Refused in `OciClient::authorize` through `auth::realm_access`.
#[test]
fn foreign_token_realm_gets_no_credentials() {
    let realm = Hostile::start(|_| Resp::json(200, r#"{"token":"stolen-or-not"}"#));
    let realm_url = format!("{}/token", realm.base());
    let challenge = format!(
        "Bearer realm=\"{realm_url}\",service=\"hostile\",scope=\"repository:kb-small:pull\""
    );
    let registry = Hostile::start(move |r| {
        if r.authorization() == Some("Bearer stolen-or-not") {
            Resp::json(200, r#"{"name":"kb-small","tags":["0.1.0"]}"#)
        } else {
            Resp::new(401).header("WWW-Authenticate", challenge.clone())
        }
    });
    let env = Env::new();
    let args = [
        "ls",
        "kb-small",
        "--registry",
        &registry.url("kb-small"),
        "--plain-http",
        "--retries",
        "0",
    ];
    // Env credentials bound to the registry's host.
    let host = registry.host();
    let o = env.kb_env(
        env.path(),
        &args,
        &[
            ("KBUILD_REGISTRY_USER", "u"),
            ("KBUILD_REGISTRY_PASSWORD", SECRET),
            ("KBUILD_REGISTRY_HOST", host.as_str()),
        ],
    );
    assert_no_secret(&realm, "env credentials to a foreign token realm");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&realm_url), "the error names the realm: {err}");
    // A docker config.json entry for the registry's host.
    std::fs::create_dir_all(env.path().join("docker")).unwrap();
    let auth = basic("u", SECRET);
    let auth = auth.trim_start_matches("Basic ");
    std::fs::write(
        env.path().join("docker/config.json"),
        format!(r#"{{"auths":{{"{host}":{{"auth":"{auth}"}}}}}}"#),
    )
    .unwrap();
    let o = env.kb_env(env.path(), &args, &[]);
    assert_no_secret(&realm, "a docker config entry to a foreign token realm");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

/// The real registry's tag list carries an absolute `Link: rel=next` to another origin:
/// the cached `Authorization` does not follow it. Refused in `OciClient::tags`
/// (registry/src/oci/transport.rs, `same_origin`).
#[test]
fn tag_link_to_another_origin_gets_no_authorization() {
    let evil = Hostile::start(|_| Resp::json(200, r#"{"name":"kb-small","tags":["9.9.9"]}"#));
    let next = format!(
        "<{}/v2/kb-small/tags/list?last=0.1.0&n=100>; rel=\"next\"",
        evil.base()
    );
    let registry = Hostile::start(basic_gate(move |_| {
        Resp::json(200, r#"{"name":"kb-small","tags":["0.1.0"]}"#).header("Link", next.clone())
    }));
    let env = Env::new();
    let o = kb_bound(&env, &["ls", "kb-small"], &registry, "kb-small");
    assert_no_secret(&evil, "Link: rel=next");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("Link") && err.contains(&evil.host()), "{err}");
}

/// A publish whose upload `Location` points to another origin: the blob's PATCH/PUT never
/// carry the registry's `Authorization`. Refused in `OciClient::put_blob` (`same_origin`).
#[test]
fn upload_location_to_another_origin_gets_no_authorization() {
    let evil = Hostile::start(|r| {
        if r.method == "PATCH" {
            Resp::new(202).header("Location", r.path.clone())
        } else {
            Resp::new(201)
        }
    });
    let evil_base = evil.base();
    let registry = Hostile::start(basic_gate(move |r| match r.method.as_str() {
        "POST" => Resp::new(202).header(
            "Location",
            format!("{evil_base}/v2/pkg/blobs/uploads/u-1?state=x"),
        ),
        _ => Resp::json(404, r#"{"errors":[{"code":"NOT_FOUND"}]}"#),
    }));
    let env = Env::new();
    let (m, o) = kbuild_manifest::fixtures::bundle_parts(&["sm_89"]);
    let bundle = kbuild_bundle::bundle::Bundle::from_parts(m, o, None).expect("bundle");
    let file = env.path().join("pkg-1.2.3.kbundle");
    std::fs::write(&file, bundle.to_bytes(0).expect("bundle bytes")).unwrap();
    let o = kb_bound(
        &env,
        &["publish", &file.display().to_string()],
        &registry,
        "pkg",
    );
    assert_no_secret(&evil, "upload Location");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Location") && err.contains(&evil.host()),
        "{err}"
    );
}

/// A redirect (307) to another origin: followed for the body, never with `Authorization`
/// (`OciClient::new`, `RedirectAuthHeaders::Never`); a 401 from the redirect's target is not
/// answered (`OciClient::exchange`, the final URL's origin).
#[test]
fn redirect_to_another_origin_gets_no_authorization() {
    let evil = Hostile::start(|_| Resp::json(200, r#"{"name":"kb-small","tags":["0.2.0"]}"#));
    let evil_base = evil.base();
    let registry = Hostile::start(basic_gate(move |r| {
        Resp::new(307).header("Location", format!("{evil_base}{}", r.path))
    }));
    let env = Env::new();
    let o = kb_bound(&env, &["ls", "kb-small"], &registry, "kb-small");
    assert_no_secret(&evil, "a 307 redirect");
    assert!(o.status.success(), "{}", text(&o));
    // The redirect's target asks for credentials itself (a Bearer challenge naming a token
    // realm): it is not answered, so neither it nor the realm gets anything.
    let realm = Hostile::start(|_| Resp::json(200, r#"{"token":"t"}"#));
    let challenge = format!("Bearer realm=\"{}/token\",service=\"evil\"", realm.base());
    let evil =
        Hostile::start(move |_| Resp::new(401).header("WWW-Authenticate", challenge.clone()));
    let evil_base = evil.base();
    let registry = Hostile::start(move |r| {
        Resp::new(307).header("Location", format!("{evil_base}{}", r.path))
    });
    let o = kb_bound(&env, &["ls", "kb-small"], &registry, "kb-small");
    assert_no_secret(&evil, "a redirect target's challenge");
    assert_no_secret(&realm, "the token realm of a redirect target's challenge");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&evil.host()) && err.contains("own origin"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Attack 3: memory and time.

/// A hostile registry serving the fixture bundle `pkg` whose one layer declares `declared`
/// bytes, the layer's blob being that many zeros streamed for as long as it is read. Returns
/// the server and the manifest digest to pull.
fn oversize_layer_registry(declared: u64) -> (Hostile, String) {
    use kbuild_registry::oci::{Artifact, ImageManifest};
    let (m, o) = kbuild_manifest::fixtures::bundle_parts(&["sm_89"]);
    let bundle = kbuild_bundle::bundle::Bundle::from_parts(m, o, None).expect("bundle");
    let art = Artifact::from_bundle(&bundle, 0).expect("artifact");
    let mut im: ImageManifest = serde_json::from_slice(&art.manifest).unwrap();
    im.layers[0].size = declared;
    let manifest = serde_json::to_vec(&im).unwrap();
    let digest = kbuild_base::digest::oci_digest(&manifest);
    let config = art.config.clone();
    let config_digest = im.config.digest.clone();
    let layer_digest = im.layers[0].digest.clone();
    let (d, md) = (digest.clone(), manifest.clone());
    let registry = Hostile::start(move |r| {
        if r.path.ends_with(&format!("/manifests/{d}")) {
            Resp::new(200)
                .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
                .header("Docker-Content-Digest", d.clone())
                .body(md.clone())
        } else if r.path.ends_with(&format!("/blobs/{config_digest}")) {
            Resp::new(200).body(config.clone())
        } else if r.path.ends_with(&format!("/blobs/{layer_digest}")) {
            Resp::new(200).with(Body::Endless { len: declared })
        } else {
            Resp::json(404, r#"{"errors":[{"code":"NOT_FOUND"}]}"#)
        }
    });
    (registry, digest)
}

fn pull_watched(env: &Env, registry: &Hostile, digest: &str, vars: &[(&str, &str)]) -> Run {
    let spec = format!("pkg@{digest}");
    watched(
        env,
        &[
            "pull",
            &spec,
            "--registry",
            &registry.url("pkg"),
            "--plain-http",
            "--device",
            "sm_89",
            "--retries",
            "0",
        ],
        vars,
    )
}

/// A kbuild artifact whose one layer declares 1 TiB, and a blob endpoint that streams zeros
/// for as long as it is read: the pull fails at once, naming the cap, in bounded memory and
/// time. Refused in `OciClient::blob_request` (registry/src/oci/blobs.rs) before any byte.
/// Then a layer under the cap (48 MiB of zeros, not its digest): it streams to a spool file
/// under the cache (`store::spooled_blob`, `OciClient::get_blob_to`) with a peak RSS below
/// the layer's size, fails the digest check there, and leaves no file behind.
#[test]
fn declared_1tib_layer_fails_fast_in_bounded_memory() {
    let (registry, digest) = oversize_layer_registry(1 << 40);
    let env = Env::new();
    let run = pull_watched(&env, &registry, &digest, &[]);
    run.assert_bounded_failure("a declared 1 TiB layer");
    let err = run.stderr();
    assert!(
        err.contains("1099511627776") && err.contains("KBUILD_MAX_LAYER_BYTES"),
        "the error names the declared size and the knob: {err}"
    );
    // The cap is configurable: 1 MiB refuses a 2 MiB layer the default would fetch.
    let (registry, digest) = oversize_layer_registry(2 << 20);
    let run = pull_watched(
        &env,
        &registry,
        &digest,
        &[("KBUILD_MAX_LAYER_BYTES", "1048576")],
    );
    run.assert_bounded_failure("a 2 MiB layer over KBUILD_MAX_LAYER_BYTES=1 MiB");
    assert!(
        run.stderr().contains("over the limit of 1048576 bytes"),
        "{}",
        run.report()
    );
    // Streamed to disk, not memory.
    let (registry, digest) = oversize_layer_registry(48 << 20);
    let run = pull_watched(&env, &registry, &digest, &[]);
    // Its time is the debug build's sha256 over 48 MiB, not a bound: the watch's 30 s only.
    assert!(run.killed.is_none(), "{}", run.report());
    assert_eq!(run.output.status.code(), Some(1), "{}", run.report());
    assert!(run.stderr().contains("digest mismatch"), "{}", run.report());
    eprintln!(
        "a 48 MiB layer with the wrong digest: peak RSS {} MiB, {:.2}s",
        run.peak_rss >> 20,
        run.elapsed.as_secs_f64()
    );
    assert!(
        run.peak_rss < 48 << 20,
        "the layer was held in memory: {}",
        run.report()
    );
    let left: Vec<_> = kbuild_tests::registry::files_under(&env.cache())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "spool files left behind: {left:?}");
}

/// `tags/list` whose `Link` always points to a next page: with big pages (1000 new tags each)
/// and with tiny ones (one tag each), `kbuild ls` stops with a clear error in bounded memory
/// and time. Refused in `OciClient::tags` (`MAX_TAGS`, `MAX_TAG_PAGES`).
#[test]
fn endless_tag_list_stops_in_bounded_memory() {
    for per_page in [1000usize, 1] {
        let registry = Hostile::start(move |r| {
            let page: u64 = r
                .path
                .split("last=p")
                .nth(1)
                .and_then(|s| s.split(['-', '&']).next())
                .and_then(|s| s.parse().ok())
                .map(|p: u64| p + 1)
                .unwrap_or(0);
            let tags: Vec<String> = (0..per_page)
                .map(|i| format!("\"p{page}-{i}.0.0-{}\"", "x".repeat(40)))
                .collect();
            Resp::json(
                200,
                format!(r#"{{"name":"kb-small","tags":[{}]}}"#, tags.join(",")),
            )
            .header(
                "Link",
                format!("</v2/kb-small/tags/list?last=p{page}-0&n={per_page}>; rel=\"next\""),
            )
        });
        let env = Env::new();
        let run = watched(
            &env,
            &[
                "ls",
                "kb-small",
                "--registry",
                &registry.url("kb-small"),
                "--plain-http",
                "--retries",
                "0",
            ],
            &[],
        );
        run.assert_bounded_failure(&format!("an endless tag list, {per_page} per page"));
        let err = run.stderr();
        assert!(
            err.contains("tags/list") && (err.contains("pages") || err.contains("tags")),
            "{err}"
        );
    }
}

/// A registry that accepts and then stalls, and one that drips a document a byte at a time:
/// both end with a timeout error naming the URL, within `KBUILD_REGISTRY_TIMEOUT`. Bounded by
/// `OciClient::new` (connect/read/write timeouts) and the per-document deadline in
/// `OciClient::exchange`.
#[test]
fn stalled_or_dripping_registry_times_out() {
    for (what, body) in [
        ("stall", Body::Stall),
        (
            "drip",
            Body::Drip {
                len: 100_000,
                ms: 100,
            },
        ),
    ] {
        let body = Arc::new(Mutex::new(Some(body)));
        let registry = Hostile::start(move |_| {
            let b = body
                .lock()
                .ok()
                .and_then(|mut b| b.take())
                .unwrap_or(Body::Stall);
            Resp::new(200)
                .header("Content-Type", "application/json")
                .with(b)
        });
        let env = Env::new();
        let run = watched(
            &env,
            &[
                "ls",
                "kb-small",
                "--registry",
                &registry.url("kb-small"),
                "--plain-http",
                "--retries",
                "0",
            ],
            &[("KBUILD_REGISTRY_TIMEOUT", "1")],
        );
        run.assert_bounded_failure(what);
        let err = run.stderr();
        assert!(
            err.contains(&registry.host()) && err.contains("timed out"),
            "{what}: {err}"
        );
    }
}
