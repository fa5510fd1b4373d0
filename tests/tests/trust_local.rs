//! Trust of what is local to the builder: the working directory, the environment, the
//! lockfile, and the files a remote cache entry may make kbuild read. One test per attack;
//! each reproduces the attack against the real kbuild binary (and the real docker-registry
//! where a registry is needed) and checks where it is refused.
//!
//! `KBUILD_TRUST_LOCAL_BIN` runs them against another kbuild binary (an older build, to
//! watch them fail).

use crate::kbuild_tests;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use kbuild_registry::oci::{ImageManifest, OciClient, OciOptions};
use kbuild_registry::progress::Silent;
use kbuild_tests::registry::{files_under, json, write_project, Registry, SMALL_A, SMALL_B};
use kbuild_tests::{text, Scratch};

fn kbuild_bin() -> PathBuf {
    match std::env::var_os("KBUILD_TRUST_LOCAL_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => kbuild_tests::kbuild_bin().to_path_buf(),
    }
}

/// Variables a test must not inherit from the runner.
const SCRUB: &[&str] = &[
    "KBUILD_REGISTRY_USER",
    "KBUILD_REGISTRY_PASSWORD",
    "KBUILD_REGISTRY",
    "KBUILD_SIGNATURE_POLICY",
    "KBUILD_CONFIG",
    "SOURCE_DATE_EPOCH",
    "PIP_FIND_LINKS",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
];

/// `kbuild ARGS` in `cwd` with `env` (`None` unsets), killed after `limit`.
fn kb(cwd: &Path, args: &[&str], env: &[(&str, Option<&str>)], limit: Duration) -> Output {
    let mut c = Command::new(kbuild_bin());
    c.args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in SCRUB {
        c.env_remove(k);
    }
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let mut child = c.spawn().expect("running kbuild");
    let (mut out, mut err) = (
        child.stdout.take().expect("stdout"),
        child.stderr.take().expect("stderr"),
    );
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for kbuild") {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "kbuild {args:?} still running after {limit:?}: killed (it hangs)\n{}",
                String::from_utf8_lossy(&t_err.join().unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const MINUTE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Attack 4: `kbuild toolchain install cuda` runs code from the current directory.
// ---------------------------------------------------------------------------------------

/// The wheels of the pinned CUDA install, as `(dist name, version)`.
fn wheel_names() -> Vec<(String, String)> {
    kbuild_build::toolchain::CUDA_WHEELS
        .iter()
        .map(|w| (w.name.replace('-', "_"), w.version.to_string()))
        .collect()
}

/// A tiny valid wheel file for `name`==`version` (not NVIDIA's: its sha256 differs).
fn fake_wheel(dir: &Path, name: &str, version: &str) {
    let script = format!(
        r#"
import zipfile, sys
n, v, d = "{name}", "{version}", sys.argv[1]
with zipfile.ZipFile(f"{{d}}/{{n}}-{{v}}-py3-none-any.whl", "w") as z:
    di = f"{{n}}-{{v}}.dist-info"
    z.writestr("nvidia/planted.txt", "planted by a fake wheel\n")
    z.writestr(f"{{di}}/METADATA", f"Metadata-Version: 2.1\nName: {{n}}\nVersion: {{v}}\n")
    z.writestr(f"{{di}}/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(f"{{di}}/RECORD", "")
"#
    );
    let o = Command::new("python3")
        .args(["-c", &script])
        .arg(dir)
        .output()
        .expect("python3");
    assert!(o.status.success(), "{}", text(&o));
}

fn install_cuda(s: &Scratch, cwd: &Path, extra: &[(&str, Option<&str>)]) -> Output {
    let data = s.path().join("data").display().to_string();
    let mut env: Vec<(&str, Option<&str>)> = vec![
        ("KBUILD_DATA_DIR", Some(data.as_str())),
        ("PIP_NO_CACHE_DIR", Some("1")),
    ];
    env.extend_from_slice(extra);
    kb(cwd, &["toolchain", "install", "cuda"], &env, 5 * MINUTE)
}

/// Attack 4. A `pip/` package in the cwd must not run (it would write a marker and plant a
/// toolchain); pip refuses wheels whose sha256 is not pinned; and whatever a (fake) pip
/// leaves in the `--target` dir is not renamed into the managed dir unless the pinned
/// binaries' hashes and `nvcc --version` check out. Refused in
/// `kbuild_build::toolchain::install_cuda` (`pip_args`: `-I`, `--require-hashes`, a fresh cwd;
/// `verify_cuda_install` before the rename).
#[test]
fn toolchain_install_runs_nothing_from_the_cwd_and_installs_only_pinned_hashes() {
    let s = Scratch::new();
    let work = s.path().join("work");
    let managed = s.path().join("data/toolchains");
    let dest = managed.join(format!("cuda-{}", kbuild_build::toolchain::CUDA_VERSION));
    let marker = s.path().join("cwd-pip-ran");

    // 1. A planted `pip` package in the cwd that writes a marker and a fake toolchain.
    std::fs::create_dir_all(work.join("pip")).unwrap();
    std::fs::write(work.join("pip/__init__.py"), "").unwrap();
    std::fs::write(
        work.join("pip/__main__.py"),
        format!(
            r##"import os, sys
open({marker:?}, "w").write(" ".join(sys.argv))
t = sys.argv[sys.argv.index("--target") + 1]
for d in ("nvidia/cu13/bin", "nvidia/cu13/nvvm/bin"):
    os.makedirs(os.path.join(t, d), exist_ok=True)
for f in ("nvidia/cu13/bin/nvcc", "nvidia/cu13/nvvm/bin/cicc", "nvidia/cu13/bin/ptxas"):
    p = os.path.join(t, f)
    open(p, "w").write("#!/bin/sh\necho 'Cuda compilation tools, release 13.5, V13.5.37'\n")
    os.chmod(p, 0o755)
"##,
            marker = marker.display().to_string()
        ),
    )
    .unwrap();
    // The real pip gets no network: only local fake wheels of the pinned names and versions.
    let wheels = s.path().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    for (n, v) in wheel_names() {
        fake_wheel(&wheels, &n, &v);
    }
    let links = wheels.display().to_string();
    let offline = [
        ("PIP_NO_INDEX", Some("1")),
        ("PIP_FIND_LINKS", Some(links.as_str())),
    ];
    let o = install_cuda(&s, &work, &offline);
    assert!(
        !marker.exists(),
        "the cwd's pip/ ran: {}\n{}",
        std::fs::read_to_string(&marker).unwrap_or_default(),
        text(&o)
    );
    assert!(!o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.to_ascii_lowercase().contains("do not match the hashes"),
        "pip refused the fake wheels by hash\n{err}"
    );
    assert!(
        err.contains("pinned sha256"),
        "kbuild says what failed\n{err}"
    );
    assert!(!dest.exists(), "installed: {}", dest.display());
    assert_eq!(files_under(&managed), Vec::<PathBuf>::new(), "left behind");

    // 2. A python3 on PATH that records how it is run and fakes a whole install.
    let shim = s.path().join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    let record = s.path().join("pip-call");
    let dist_infos: Vec<String> = wheel_names()
        .iter()
        .map(|(n, v)| format!("{n}-{v}.dist-info"))
        .collect();
    std::fs::write(
        shim.join("python3"),
        format!(
            r#"#!/bin/sh
printf '%s\n' "$@" > '{r}.argv'
pwd > '{r}.cwd'
ls -A > '{r}.ls'
t=""; prev=""
for a in "$@"; do [ "$prev" = "--target" ] && t="$a"; prev="$a"; done
for d in {dist}; do mkdir -p "$t/$d"; : > "$t/$d/RECORD"; done
mkdir -p "$t/nvidia/cu13/bin" "$t/nvidia/cu13/nvvm/bin"
for b in bin/nvcc bin/ptxas bin/fatbinary nvvm/bin/cicc; do
  printf '#!/bin/sh\necho "Cuda compilation tools, release 13.5, V13.5.37"\n' > "$t/nvidia/cu13/$b"
  chmod +x "$t/nvidia/cu13/$b"
done
exit 0
"#,
            r = record.display(),
            dist = dist_infos.join(" ")
        ),
    )
    .unwrap();
    kbuild_tests::make_executable(&shim.join("python3"));
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = install_cuda(&s, &work, &[("PATH", Some(path.as_str()))]);
    let argv = std::fs::read_to_string(record.with_extension("argv")).unwrap_or_default();
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!(argv.get(..3), Some(&["-I", "-m", "pip"][..]), "{argv:?}");
    for a in ["--require-hashes", "--only-binary=:all:", "--no-deps", "-r"] {
        assert!(argv.contains(&a), "{a} missing: {argv:?}");
    }
    let cwd = std::fs::read_to_string(record.with_extension("cwd")).unwrap_or_default();
    assert_ne!(Path::new(cwd.trim()), work, "pip ran in the caller's cwd");
    let listing = std::fs::read_to_string(record.with_extension("ls")).unwrap_or_default();
    assert_eq!(listing.trim(), "requirements.txt", "pip's cwd is not empty");
    assert!(
        !o.status.success(),
        "a fake install was accepted\n{}",
        text(&o)
    );
    let err = stderr(&o);
    assert!(
        err.contains("is not the pinned CUDA") && err.contains("nvidia/cu13/bin/nvcc has sha256"),
        "{err}"
    );
    assert!(!dest.exists(), "renamed in: {}", dest.display());
    assert_eq!(files_under(&managed), Vec::<PathBuf>::new(), "left behind");

    // 3. The real install of this machine (if there is one) is accepted as it is: fast.
    let home_data = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share/kbuild"));
    if let Some(data) = home_data.filter(|d| {
        d.join("toolchains")
            .join(dest.file_name().unwrap())
            .is_dir()
    }) {
        let d = data.display().to_string();
        let t0 = Instant::now();
        let o = kb(
            &work,
            &["toolchain", "install", "cuda"],
            &[("KBUILD_DATA_DIR", Some(d.as_str()))],
            MINUTE,
        );
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("already installed"),
            "{}",
            text(&o)
        );
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        assert!(!marker.exists());
    }
}

// ---------------------------------------------------------------------------------------
// Attack 7: remote-cache dependency paths are not confined.
// ---------------------------------------------------------------------------------------

fn remote_build(s: &Scratch, project: &Path, url: &str, mode: &str) -> Output {
    let cache = s.cache.display().to_string();
    let launcher = s.path().join("count-compiles.sh").display().to_string();
    let docker = s.path().join("docker").display().to_string();
    let o = kb(
        project,
        &[
            "build",
            "--json",
            "--out",
            "out",
            "--remote-cache",
            url,
            "--remote-cache-mode",
            mode,
            "--plain-http",
        ],
        &[
            ("KBUILD_CACHE_DIR", Some(cache.as_str())),
            ("KBUILD_LAUNCHER", Some(launcher.as_str())),
            ("DOCKER_CONFIG", Some(docker.as_str())),
        ],
        3 * MINUTE,
    );
    assert!(o.status.success(), "{}", text(&o));
    o
}

/// `(kernel, target, cache_key)` of every object of a build.
fn cache_keys(out: &Path) -> Vec<(String, String)> {
    let m = kbuild_tests::manifest(out);
    let mut v: Vec<(String, String)> = m["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .map(|o| {
            (
                o["kernel"].as_str().unwrap_or_default().to_string(),
                o["cache_key"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

type Dep = (String, String);

#[derive(serde::Serialize, serde::Deserialize)]
struct DepSets {
    sets: Vec<Vec<Dep>>,
}

/// Attack 7. A remote writer lists `/dev/zero` among an action's dependencies (on main the
/// build hangs hashing it) and, for another action, a file outside the project and the
/// toolchains with its true hash plus a matching entry (on main the build uses that entry:
/// the remote writer learns the guess was right, from the registry's access log). Both
/// records are refused by name, both jobs compile locally, the registry never sees the
/// probe's entry requested, and the outside file is not read. Refused in
/// `kbuild_build::remote_cache::DepRoots::check` (from `RemoteCache::set_matches`).
#[test]
fn remote_cache_dep_paths_are_confined_bounded_and_never_probe_outside_files() {
    let reg = Registry::start(false);
    let url = reg.url("cache");
    let a = Scratch::new();
    let project_a = write_project(
        a.path(),
        "kb-trust",
        &["sm_89"],
        &[("scale", SMALL_A), ("shift", SMALL_B)],
    );
    remote_build(&a, &project_a, &url, "read-write");
    assert_eq!(a.compiles(), 2);
    let keys = cache_keys(&project_a.join("out"));
    assert_eq!(keys.len(), 2, "{keys:?}");

    let client = OciClient::new(
        &reg.host(),
        "cache",
        OciOptions {
            plain_http: true,
            ..OciOptions::default()
        },
    );
    // Each action's record, by the result key its one set leads to.
    let tags = client.tags(&Silent).expect("tags");
    let mut actions: Vec<(String, Vec<Dep>)> = Vec::new();
    for t in tags.iter().filter(|t| t.starts_with("a-")) {
        let m = client.get_manifest(t, &Silent).unwrap().unwrap();
        let m: ImageManifest = serde_json::from_slice(&m.bytes).unwrap();
        let sets: DepSets = serde_json::from_slice(&client.get_blob(&m.config, &Silent).unwrap())
            .expect("dep sets");
        actions.push((t["a-".len()..].to_string(), sets.sets[0].clone()));
    }
    assert_eq!(actions.len(), 2);
    let push_record = |tag: &str, config_json: &[u8], media: &str, layers| {
        client.put_blob(config_json, "c", &Silent).expect("blob");
        let m = ImageManifest {
            schema_version: 2,
            media_type: Some(kbuild_registry::oci::IMAGE_MANIFEST.into()),
            artifact_type: Some(media.into()),
            config: kbuild_registry::oci::Descriptor {
                media_type: media.into(),
                digest: kbuild_base::digest::oci_digest(config_json),
                size: config_json.len() as u64,
                artifact_type: None,
                annotations: Default::default(),
            },
            layers,
            subject: None,
            annotations: Default::default(),
        };
        client
            .put_manifest(tag, &serde_json::to_vec(&m).unwrap(), &Silent)
            .expect("manifest");
    };
    use kbuild_build::remote_cache::{DEPS_TYPE, ENTRY_TYPE};

    // Action 0: /dev/zero first.
    let (act0, set0) = &actions[0];
    let mut evil0 = vec![("/dev/zero".to_string(), "0".repeat(64))];
    evil0.extend(set0.iter().cloned());
    push_record(
        &format!("a-{act0}"),
        &serde_json::to_vec(&DepSets { sets: vec![evil0] }).unwrap(),
        DEPS_TYPE,
        Vec::new(),
    );

    // Action 1: a probe for a file outside the project and the toolchains.
    let secret_dir = a.path().join("home");
    std::fs::create_dir_all(&secret_dir).unwrap();
    let secret = secret_dir.join("secret.txt");
    std::fs::write(&secret, "the builder's secret\n").unwrap();
    let (act1, set1) = &actions[1];
    let mut probe = set1.clone();
    probe.push((
        secret.display().to_string(),
        kbuild_base::digest::blake3_file(&secret).unwrap(),
    ));
    // The matching entry: the real object, its meta listing the probe set.
    let key1 = kbuild_build::cache::Cache::result_key(act1, set1);
    let probe_key = kbuild_build::cache::Cache::result_key(act1, &probe);
    let m = client
        .get_manifest(&format!("r-{key1}"), &Silent)
        .unwrap()
        .expect("entry of action 1");
    let m: ImageManifest = serde_json::from_slice(&m.bytes).unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_slice(&client.get_blob(&m.config, &Silent).unwrap()).unwrap();
    meta["deps"] = serde_json::to_value(&probe).unwrap();
    push_record(
        &format!("r-{probe_key}"),
        &serde_json::to_vec(&meta).unwrap(),
        ENTRY_TYPE,
        m.layers.clone(),
    );
    push_record(
        &format!("a-{act1}"),
        &serde_json::to_vec(&DepSets { sets: vec![probe] }).unwrap(),
        DEPS_TYPE,
        Vec::new(),
    );
    // A read of the secret would move its access time (relatime: it is older than a day).
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
    std::fs::File::options()
        .write(true)
        .open(&secret)
        .and_then(|f| f.set_times(std::fs::FileTimes::new().set_accessed(old)))
        .expect("set atime");

    // Machine B: a clone elsewhere, an empty cache, the remote read-only.
    let b = Scratch::new();
    let project_b = b.path().join("elsewhere/kernels");
    kbuild_tests::copy_dir(&project_a, &project_b);
    let log_before = reg.log_text().len();
    let o = remote_build(&b, &project_b, &url, "read");
    let err = stderr(&o);
    assert_eq!(b.compiles(), 2, "both compile locally\n{}", text(&o));
    let sum = kbuild_tests::summary(&o);
    assert_eq!(sum["remote_cache"]["hits"], 0, "{sum:#}");
    assert_eq!(sum["remote_cache"]["refused"], 2, "{sum:#}");
    for (act, why) in [
        (
            act0,
            "/dev/zero is outside the project and the toolchain roots",
        ),
        (
            act1,
            "secret.txt is outside the project and the toolchain roots",
        ),
    ] {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("a-{act}")))
            .unwrap_or_else(|| panic!("no warning names a-{act}\n{err}"));
        assert!(
            line.contains("refused") && line.contains(why) && line.contains("compiling locally"),
            "{line}"
        );
    }
    let log = &reg.log_text()[log_before..];
    assert!(
        !log.contains(&format!("r-{probe_key}")),
        "the probe's entry was requested: the remote learns the guess was right"
    );
    let atime = std::fs::metadata(&secret).unwrap().accessed().unwrap();
    assert_eq!(atime, old, "{} was read", secret.display());
    // Nothing the remote offered reached the output: B's objects are its own compiles.
    assert_eq!(cache_keys(&project_b.join("out")), keys);
}

// ---------------------------------------------------------------------------------------
// Attacks 8 and 11: a plain pull ignores Kbuild.lock; a registry rolls a pull back.
// ---------------------------------------------------------------------------------------

struct Work {
    s: Scratch,
    dir: PathBuf,
}

impl Work {
    fn new() -> Work {
        let s = Scratch::new();
        let dir = s.path().join("work");
        std::fs::create_dir_all(&dir).unwrap();
        Work { s, dir }
    }

    fn kb(&self, cwd: &Path, args: &[&str]) -> Output {
        let cache = self.s.cache.display().to_string();
        let config = self.s.path().join("config.toml").display().to_string();
        let docker = self.s.path().join("docker").display().to_string();
        kb(
            cwd,
            args,
            &[
                ("KBUILD_CACHE_DIR", Some(cache.as_str())),
                ("KBUILD_CONFIG", Some(config.as_str())),
                ("DOCKER_CONFIG", Some(docker.as_str())),
            ],
            3 * MINUTE,
        )
    }

    fn ok(&self, cwd: &Path, args: &[&str]) -> String {
        let o = self.kb(cwd, args);
        assert!(o.status.success(), "kbuild {args:?}\n{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn fails(&self, cwd: &Path, args: &[&str]) -> String {
        let o = self.kb(cwd, args);
        assert_eq!(o.status.code(), Some(1), "kbuild {args:?}\n{}", text(&o));
        stderr(&o)
    }

    fn locked(&self) -> (String, String) {
        let t = std::fs::read_to_string(self.dir.join("Kbuild.lock")).expect("Kbuild.lock");
        let v: toml::Value = toml::from_str(&t).expect("lockfile");
        let p = &v["package"][0];
        (
            p["version"].as_str().unwrap_or_default().to_string(),
            p["artifact"].as_str().unwrap_or_default().to_string(),
        )
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Build a one-kernel sm_89 project and package it as 0.1.0 and 0.2.0 into `dist`.
fn two_versions(w: &Work) -> (PathBuf, PathBuf) {
    let k = write_project(w.s.path(), "kb-lock", &["sm_89"], &[("scale", SMALL_A)]);
    w.ok(&k, &["build"]);
    let dist = w.s.path().join("dist");
    let d = dist.display().to_string();
    w.ok(&k, &["package", "out", "--out", &d]);
    let v2 = w.s.path().join("v2");
    kbuild_tests::copy_dir(&k.join("out"), &v2);
    let m = std::fs::read_to_string(v2.join("manifest.json")).unwrap();
    std::fs::write(
        v2.join("manifest.json"),
        m.replace("\"version\": \"0.1.0\"", "\"version\": \"0.2.0\""),
    )
    .unwrap();
    w.ok(&k, &["package", &v2.display().to_string(), "--out", &d]);
    (
        dist.join("kb-lock-0.1.0.kbundle"),
        dist.join("kb-lock-0.2.0.kbundle"),
    )
}

/// Attack 8. The registry re-points the locked version's tag at another manifest; a plain
/// pull (no `--locked`) must refuse it rather than rewrite the lock; `--update` accepts it.
/// Attack 11 (rollback): the registry hides the newest version; a plain pull of the same
/// requirement must refuse the older one; an explicit `=0.1.0` or `--update` takes it.
/// Refused in `kbuild_registry::lock::check_keep` (from `pull::pull`).
#[test]
fn plain_pull_with_a_lock_refuses_a_repointed_tag_and_a_rollback() {
    let reg = Registry::start(false);
    let w = Work::new();
    let (v1, v2) = two_versions(&w);
    let url = reg.url("kb-lock");
    let r = ["--registry", url.as_str(), "--plain-http"];
    let with = |head: &[&str]| -> Vec<String> {
        head.iter().chain(r.iter()).map(|s| s.to_string()).collect()
    };
    for b in [&v1, &v2] {
        let b = b.display().to_string();
        w.ok(w.s.path(), &strs(&with(&["publish", &b])));
    }

    // Attack 8: lock 0.1.0, then the tag is re-pointed (same config and layers, another
    // manifest: a digest the lock does not have).
    w.ok(&w.dir, &strs(&with(&["pull", "kb-lock@0.1"])));
    let (ver, artifact) = w.locked();
    assert_eq!(ver, "0.1.0");
    let client = OciClient::new(
        &reg.host(),
        "kb-lock",
        OciOptions {
            plain_http: true,
            ..OciOptions::default()
        },
    );
    let m = client.get_manifest("0.1.0", &Silent).unwrap().unwrap();
    let mut m: ImageManifest = serde_json::from_slice(&m.bytes).unwrap();
    m.annotations
        .insert("org.example.repointed".into(), "yes".into());
    let bytes = serde_json::to_vec(&m).unwrap();
    client.put_manifest("0.1.0", &bytes, &Silent).unwrap();
    let repointed = kbuild_base::digest::oci_digest(&bytes);
    assert_ne!(repointed, artifact);

    let err = w.fails(&w.dir, &strs(&with(&["pull", "kb-lock@0.1"])));
    assert!(
        err.contains("Kbuild.lock: kb-lock 0.1.0 is locked, but the registry's 0.1.0 differs")
            && err.contains(&artifact)
            && err.contains(&repointed)
            && err.contains("--update"),
        "{err}"
    );
    assert_eq!(
        w.locked(),
        (ver.clone(), artifact.clone()),
        "lock rewritten"
    );
    w.ok(&w.dir, &strs(&with(&["pull", "kb-lock@0.1", "--update"])));
    assert_eq!(w.locked(), (ver, repointed));

    // Attack 11: lock the newest (0.2.0), then the registry hides it.
    w.ok(&w.dir, &strs(&with(&["pull", "kb-lock", "--update"])));
    assert_eq!(w.locked().0, "0.2.0");
    let m2 = client.get_manifest("0.2.0", &Silent).unwrap().unwrap();
    let digest2 = kbuild_base::digest::oci_digest(&m2.bytes);
    let del = Command::new("curl")
        .args(["-sS", "-f", "-X", "DELETE"])
        .arg(format!(
            "http://{}/v2/kb-lock/manifests/{digest2}",
            reg.host()
        ))
        .output()
        .expect("curl");
    assert!(del.status.success(), "{}", text(&del));
    let ls = json(&w.ok(&w.dir, &strs(&with(&["ls", "kb-lock", "--json"]))));
    assert_eq!(
        ls["remote"]["kb-lock"],
        serde_json::json!(["0.1.0"]),
        "{ls}"
    );

    let err = w.fails(&w.dir, &strs(&with(&["pull", "kb-lock"])));
    assert!(
        err.contains("kb-lock is locked at 0.2.0")
            && err.contains("older 0.1.0")
            && err.contains("refusing to roll back"),
        "{err}"
    );
    assert_eq!(w.locked().0, "0.2.0", "lock rolled back");
    // The user asks for the old version by name, or passes --update: fine.
    w.ok(&w.dir, &strs(&with(&["pull", "kb-lock@0.1.0"])));
    assert_eq!(w.locked().0, "0.1.0");
    // --locked and --update contradict each other.
    let o = w.kb(
        &w.dir,
        &strs(&with(&["pull", "kb-lock", "--locked", "--update"])),
    );
    assert!(!o.status.success(), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("--update") && err.contains("--locked"),
        "{err}"
    );
}

/// A split release (index and one part per family) of fixture objects for sm_89 and gfx1100,
/// package `pkg` 1.2.3, written into `dir`; `salt` changes the sm_89 object's bytes (the same
/// version re-pointed at other bytes). The index's path.
fn fixture_release(dir: &Path, salt: &str) -> PathBuf {
    use kbuild_bundle::assets::{pack, Packed};
    let (m, mut objects) = kbuild_manifest::fixtures::bundle_parts(&["sm_89", "gfx1100"]);
    let mut m = kbuild_manifest::manifest::Manifest::from_json(&m).unwrap();
    if !salt.is_empty() {
        let data = format!("sm_89 object {salt}").into_bytes();
        let o = &mut m.objects[0];
        objects.remove(&o.sha256);
        o.sha256 = kbuild_base::digest::sha256_hex(&data);
        o.size = data.len() as u64;
        objects.insert(o.sha256.clone(), data);
    }
    let b = kbuild_bundle::Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap();
    let full = b.to_bytes(0).unwrap().len() as u64;
    let Ok(Packed::Split {
        parts,
        index,
        index_bytes,
    }) = pack(&b, full, full - 1, 0)
    else {
        panic!("a split release of the fixture");
    };
    std::fs::create_dir_all(dir).unwrap();
    for p in &parts {
        std::fs::write(dir.join(&p.part.file), &p.bytes).unwrap();
    }
    let path = dir.join(index.file_name());
    std::fs::write(&path, index_bytes).unwrap();
    path
}

/// Issue 26, class 6. The lock is keyed by name and version. A release index downloaded into
/// a new directory used to count as another registry: a plain pull of the same version with
/// other bytes passed and rewrote the entry. Now the download directory is not part of the
/// source, a changed digest is refused and the lock left as it is, and a pull of the locked
/// package from another registry is refused without --update, naming both.
#[test]
fn the_lock_holds_a_version_whatever_directory_or_registry_it_comes_from() {
    let w = Work::new();
    let idx = fixture_release(&w.s.path().join("dl-1"), "");
    let lock_path = w.dir.join("Kbuild.lock");
    w.ok(&w.dir, &["pull", idx.to_str().unwrap()]);
    let (ver, artifact) = w.locked();
    assert_eq!(ver, "1.2.3");
    let locked = std::fs::read(&lock_path).unwrap();

    // The same release downloaded again elsewhere: fine, and the entry is not rewritten.
    let again = fixture_release(&w.s.path().join("dl-2"), "");
    w.ok(&w.dir, &["pull", again.to_str().unwrap()]);
    assert_eq!(std::fs::read(&lock_path).unwrap(), locked, "lock rewritten");

    // The attack: 1.2.3 re-pointed at other bytes, in a new download directory.
    let repointed = fixture_release(&w.s.path().join("dl-3"), "forged");
    let err = w.fails(&w.dir, &["pull", repointed.to_str().unwrap()]);
    assert!(
        err.contains("Kbuild.lock: pkg 1.2.3 is locked, but the registry's 1.2.3 differs")
            && err.contains(&artifact)
            && err.contains("--update"),
        "{err}"
    );
    assert_eq!(std::fs::read(&lock_path).unwrap(), locked, "lock rewritten");

    // The locked package from another registry: refused without --update, naming both.
    let reg = w.s.path().join("registry");
    let bundle = w.s.path().join("pkg-1.2.3.kbundle");
    let (m, o) = kbuild_manifest::fixtures::bundle_parts(&["sm_89", "gfx1100"]);
    let b = kbuild_bundle::Bundle::from_parts(m, o, None).unwrap();
    std::fs::write(&bundle, b.to_bytes(0).unwrap()).unwrap();
    let r = reg.to_str().unwrap();
    w.ok(
        &w.dir,
        &["publish", bundle.to_str().unwrap(), "--registry", r],
    );
    let err = w.fails(&w.dir, &["pull", "pkg@1.2.3", "--registry", r]);
    assert!(
        err.contains("Kbuild.lock: pkg is locked from file://")
            && err.contains("dl-1/pkg-1.2.3.kbindex, but this pull is from ")
            && err.contains(r),
        "{err}"
    );
    assert!(err.contains("--update"), "{err}");
    assert_eq!(std::fs::read(&lock_path).unwrap(), locked, "lock rewritten");
    w.ok(&w.dir, &["pull", "pkg@1.2.3", "--registry", r, "--update"]);
    assert_ne!(std::fs::read(&lock_path).unwrap(), locked);
}

// ---------------------------------------------------------------------------------------
// Attack 9: with HOME unset, config and caches fall back to /tmp.
// ---------------------------------------------------------------------------------------

/// Attack 9. With HOME and the XDG variables unset, kbuild must not put (or read) its config,
/// keys or caches in /tmp, where another user can plant `policy = "off"` or trusted keys: it
/// fails and names what to set. With only the XDG variables it uses them. Refused in
/// `kbuild_base::dirs::Dirs::from_env`.
#[test]
fn home_unset_never_falls_back_to_tmp() {
    let s = Scratch::new();
    let name = format!(
        "trust-local-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    );
    let no_home: Vec<(&str, Option<&str>)> = [
        "HOME",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_DATA_HOME",
        "KBUILD_CONFIG",
        "KBUILD_CACHE_DIR",
        "KBUILD_DATA_DIR",
    ]
    .iter()
    .map(|v| (*v, None))
    .collect();
    let planted_key = Path::new("/tmp/.config/kbuild/keys").join(format!("{name}.key"));
    let o = kb(s.path(), &["keygen", "--name", &name], &no_home, MINUTE);
    let wrote_tmp = planted_key.exists();
    let _ = std::fs::remove_file(&planted_key);
    let _ = std::fs::remove_file(planted_key.with_extension("pub"));
    // Only what an old kbuild just made, and only if empty.
    for d in ["/tmp/.config/kbuild/keys", "/tmp/.config/kbuild"] {
        let _ = std::fs::remove_dir(d);
    }
    assert!(!wrote_tmp, "wrote {}\n{}", planted_key.display(), text(&o));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = stderr(&o);
    assert!(
        err.contains("HOME is unset")
            && err.contains("XDG_CONFIG_HOME")
            && err.contains("never falls back to a shared directory such as /tmp"),
        "{err}"
    );
    // Reading the (trust) config and the pull cache: the same error, nothing from /tmp.
    let o = kb(s.path(), &["ls", "--offline", "--json"], &no_home, MINUTE);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        stderr(&o).contains("set HOME, or XDG_CACHE_HOME"),
        "{}",
        text(&o)
    );

    // XDG variables alone are enough.
    let x = |d: &str| s.path().join(d).display().to_string();
    let (cfg, cache, data) = (x("cfg"), x("xcache"), x("xdata"));
    let mut xdg = no_home.clone();
    xdg.extend([
        ("XDG_CONFIG_HOME", Some(cfg.as_str())),
        ("XDG_CACHE_HOME", Some(cache.as_str())),
        ("XDG_DATA_HOME", Some(data.as_str())),
    ]);
    let o = kb(s.path(), &["keygen", "--name", &name], &xdg, MINUTE);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        s.path()
            .join("cfg/kbuild/keys")
            .join(format!("{name}.key"))
            .is_file(),
        "{}",
        text(&o)
    );
    let o = kb(s.path(), &["ls", "--offline", "--json"], &xdg, MINUTE);
    assert!(o.status.success(), "{}", text(&o));
}
