//! A real CNCF distribution registry (Debian's `docker-registry`, distribution 2.8) started
//! per test on 127.0.0.1 with a random free port and a temp storage dir, with or without
//! htpasswd basic auth; and a counting TCP proxy in front of it (bytes on the wire, injected
//! 503s for retry tests). Both stop when dropped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const USER: &str = "kbuild-ci";
pub const PASSWORD: &str = "pw-7f3a9c2e-not-printed";

/// Whether the registry binary is installed (scripts/test installs it).
pub fn available() -> bool {
    Path::new("/usr/bin/docker-registry").exists()
}

pub struct Registry {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    pub auth: bool,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Registry {
    pub fn start(auth: bool) -> Registry {
        assert!(
            available(),
            "/usr/bin/docker-registry missing: run scripts/test (apt-get install docker-registry)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let mut auth_cfg = String::new();
        if auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("htpasswd (apache2-utils)");
            assert!(out.status.success());
            std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
            auth_cfg = format!(
                "auth:\n  htpasswd:\n    realm: kbuild-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            );
        }
        for _ in 0..5 {
            let port = free_port();
            let cfg = format!(
                "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: kbuild-test-secret\n{auth_cfg}",
                dir.path().join("storage").display()
            );
            let cfg_path = dir.path().join("config.yml");
            std::fs::write(&cfg_path, cfg).unwrap();
            let log = dir.path().join("registry.log");
            let logf = std::fs::File::create(&log).unwrap();
            let child = Command::new("/usr/bin/docker-registry")
                .arg("serve")
                .arg(&cfg_path)
                .stdout(Stdio::from(logf.try_clone().unwrap()))
                .stderr(Stdio::from(logf))
                .spawn()
                .expect("starting docker-registry");
            let mut child = child;
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(15) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Registry {
                        child,
                        port,
                        dir,
                        log,
                        auth,
                    };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // Port taken between probe and bind, or slow start: try another port.
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("docker-registry did not start");
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/REPO`.
    pub fn url(&self, repo: &str) -> String {
        format!("oci://{}/{repo}", self.host())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The blob data file of a digest in the filesystem storage driver.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback TCP proxy counting bytes each way; the first `fail_first` connections get an
/// HTTP 503 instead of being forwarded.
pub struct Proxy {
    pub port: u16,
    pub down: Arc<AtomicU64>,
    pub up: Arc<AtomicU64>,
    pub failed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(upstream: u16, fail_first: usize) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicU64::new(0));
        let up = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, u, f, s) = (down.clone(), up.clone(), failed.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut client) = conn else { continue };
                if f.load(Ordering::SeqCst) < fail_first {
                    f.fetch_add(1, Ordering::SeqCst);
                    let mut buf = [0u8; 4096];
                    let _ = client.set_read_timeout(Some(Duration::from_secs(2)));
                    let _ = client.read(&mut buf);
                    let _ = client.write_all(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream, n: Arc<AtomicU64>| {
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 64 << 10];
                        loop {
                            match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(k) => {
                                    n.fetch_add(k as u64, Ordering::SeqCst);
                                    if to.write_all(&buf[..k]).is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    })
                };
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    u.clone(),
                );
                pipe(server, client, d.clone());
            }
        });
        Proxy {
            port,
            down,
            up,
            failed,
            stop,
        }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("oci://127.0.0.1:{}/{repo}", self.port)
    }

    pub fn reset(&self) {
        self.down.store(0, Ordering::SeqCst);
        self.up.store(0, Ordering::SeqCst);
    }

    pub fn down_bytes(&self) -> u64 {
        self.down.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A scratch area: its own kbuild cache, config and docker config (nothing from $HOME).
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Default for Env {
    fn default() -> Self {
        Env::new()
    }
}

impl Env {
    pub fn new() -> Env {
        Env {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn cache(&self) -> PathBuf {
        self.path().join("cache")
    }
    pub fn kb(&self, cwd: &Path, args: &[&str]) -> Output {
        self.kb_env(cwd, args, &[])
    }
    pub fn kb_env(&self, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(super::kbuild_bin());
        c.args(args)
            .current_dir(cwd)
            .env("KBUILD_CACHE_DIR", self.cache())
            .env("KBUILD_CONFIG", self.path().join("kbuild-config.toml"))
            .env("DOCKER_CONFIG", self.path().join("docker"))
            .env("NO_COLOR", "1")
            .env_remove("KBUILD_REGISTRY_USER")
            .env_remove("KBUILD_REGISTRY_PASSWORD")
            .env_remove("KBUILD_REGISTRY")
            .env_remove("KBUILD_SIGNATURE_POLICY")
            .env_remove("SOURCE_DATE_EPOCH");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("running kbuild")
    }
    pub fn ok(&self, cwd: &Path, args: &[&str]) -> String {
        let o = self.kb(cwd, args);
        assert!(o.status.success(), "kbuild {args:?}\n{}", super::text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    pub fn fails(&self, cwd: &Path, args: &[&str]) -> String {
        let o = self.kb(cwd, args);
        assert_eq!(
            o.status.code(),
            Some(1),
            "kbuild {args:?}\n{}",
            super::text(&o)
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    }
}

/// Files under `dir` (recursively), for "nothing left behind" checks.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

pub const SMALL_A: &str = "KC_KERNEL(64) void scale(float* x, float s) { x[threadIdx.x] *= s; }";
pub const SMALL_B: &str =
    "KC_KERNEL(128) void shift(float* x, float s) { x[blockIdx.x * 128 + threadIdx.x] += s; }";

/// A project in `dir/kernels`: name `kb-small`, the given targets and kernels.
pub fn write_project(
    dir: &Path,
    name: &str,
    targets: &[&str],
    kernels: &[(&str, &str)],
) -> PathBuf {
    let k = dir.join("kernels");
    std::fs::create_dir_all(k.join("include")).unwrap();
    // A project copy of the shipped kcompat.h: it shadows kbuild's (project include dirs come
    // first), so a test can change a header the kernels include.
    std::fs::copy(
        super::repo_root().join("build-system/include/kcompat.h"),
        k.join("include/kcompat.h"),
    )
    .unwrap();
    let t: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
    let mut toml = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [{}]\ninclude-dirs = [\"include\"]\nout-dir = \"out\"\n",
        t.join(", ")
    );
    for (kname, body) in kernels {
        std::fs::write(
            k.join(format!("{kname}.cu")),
            format!("#include \"kcompat.h\"\n{body}\n"),
        )
        .unwrap();
        toml.push_str(&format!(
            "\n[kernels.{kname}]\nsource = \"{kname}.cu\"\nentries = [\"{kname}\"]\n"
        ));
    }
    std::fs::write(k.join("Kbuild.toml"), toml).unwrap();
    k
}

/// Parse one JSON document (a `--json` output).
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}
