//! Faults on the build side (issue 8): compilers that crash, print garbage or write truncated
//! objects (wrapper scripts in front of the real compilers); 8 concurrent builds into one
//! cache; builds killed with SIGKILL at random points. Nothing bad is listed, cached or torn.

use crate::kbuild_tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kbuild_tests::{manifest, text, Scratch};

/// A small project: two kernels, one with two variants.
fn project(dir: &Path) -> PathBuf {
    let k = dir.join("kernels");
    std::fs::create_dir_all(k.join("include")).unwrap();
    for name in ["alpha", "beta"] {
        std::fs::write(
            k.join(format!("{name}.cu")),
            format!("#include \"kcompat.h\"\nKC_KERNEL(64) void {name}(float* x, float s) {{ x[threadIdx.x] = x[threadIdx.x] * s + KB_OFFSET; }}\n"),
        )
        .unwrap();
    }
    std::fs::write(
        k.join("Kbuild.toml"),
        "[package]\nname = \"faults\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_89\", \"gfx1100\"]\ninclude-dirs = [\"include\"]\nout-dir = \"out\"\ndefines = { KB_OFFSET = 1 }\n\n\
         [kernels.alpha]\nsource = \"alpha.cu\"\nentries = [\"alpha\"]\n\n\
         [kernels.beta]\nsource = \"beta.cu\"\nentries = [\"beta\"]\nvariants = { KB_FAULT_V = [1, 2] }\n",
    )
    .unwrap();
    k
}

/// A launcher that misbehaves (`mode`) for compiles whose command line contains `matching`, and
/// runs the real compiler otherwise.
fn faulty_launcher(dir: &Path, mode: &str, matching: &str) -> PathBuf {
    let action = match mode {
        "crash" => "kill -SEGV $$",
        "garbage" => "echo 'garbage: \u{1}\u{2} ??? not a compiler message' >&2; head -c 3000 /dev/urandom > \"$out\"; echo \"$out: \" > \"$dep\"; exit 0",
        "truncate" => "\"$@\" || exit $?; head -c 200 \"$out\" > \"$out.t\" && mv \"$out.t\" \"$out\"; exit 0",
        other => panic!("unknown mode {other}"),
    };
    let p = dir.join(format!("launcher-{mode}.sh"));
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nout=''; dep=''; prev=''\nfor a in \"$@\"; do [ \"$prev\" = -o ] && out=\"$a\"; [ \"$prev\" = -MF ] && dep=\"$a\"; prev=\"$a\"; done\n\
             case \"$*\" in *{matching}*) {action} ;; *) exec \"$@\" ;; esac\n"
        ),
    )
    .unwrap();
    kbuild_tests::make_executable(&p);
    p
}

fn kbuild(dir: &Path, cache: &Path, launcher: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(kbuild_tests::kbuild_bin());
    c.args(args)
        .current_dir(dir)
        .env("KBUILD_CACHE_DIR", cache)
        .env("NO_COLOR", "1");
    match launcher {
        Some(l) => c.env("KBUILD_LAUNCHER", l),
        None => c.env_remove("KBUILD_LAUNCHER"),
    };
    c.output().expect("running kbuild")
}

/// sha256 of every object a manifest lists, by (target, path).
fn object_shas(out: &Path) -> BTreeMap<String, String> {
    manifest(out)["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["path"].as_str().unwrap().to_string(),
                o["sha256"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The objects of [`project`] for sm_89, sm_90, gfx1100 and gfx1030 from one clean serial
/// build into its own cache, made once per test run for the tests that compare against it.
fn serial_objects() -> &'static BTreeMap<String, String> {
    static SERIAL: std::sync::OnceLock<(Scratch, BTreeMap<String, String>)> =
        std::sync::OnceLock::new();
    &SERIAL
        .get_or_init(|| {
            let s = Scratch::new();
            let k = project(s.path());
            let o = kbuild(
                &k,
                &s.path().join("serial-cache"),
                None,
                &["--targets", SERIAL_TARGETS, "--out", "serial"],
            );
            assert!(o.status.success(), "{}", text(&o));
            let objects = object_shas(&k.join("serial"));
            (s, objects)
        })
        .1
}

const SERIAL_TARGETS: &str = "sm_89,sm_90,gfx1100,gfx1030";

/// Every cache entry is whole: meta.json, object and log present, object hashing to its meta.
/// Returns the number of entries.
fn assert_cache_whole(cache: &Path) -> usize {
    let mut n = 0;
    let objects = cache.join("objects");
    let Ok(shards) = std::fs::read_dir(&objects) else {
        return 0;
    };
    for shard in shards.flatten() {
        for e in std::fs::read_dir(shard.path()).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp") {
                continue; // a writer's private temp dir, never looked up
            }
            let dir = e.path();
            let meta: serde_json::Value = serde_json::from_slice(
                &std::fs::read(dir.join("meta.json"))
                    .unwrap_or_else(|_| panic!("torn entry {name}: no meta.json")),
            )
            .unwrap();
            let object = std::fs::read(dir.join("object"))
                .unwrap_or_else(|_| panic!("torn entry {name}: no object"));
            assert!(dir.join("log").is_file(), "torn entry {name}: no log");
            assert_eq!(
                meta["size"].as_u64(),
                Some(object.len() as u64),
                "torn entry {name}"
            );
            assert_eq!(
                meta["object_blake3"].as_str(),
                Some(blake3_hex(&object).as_str()),
                "torn entry {name}"
            );
            n += 1;
        }
    }
    n
}

fn blake3_hex(b: &[u8]) -> String {
    blake3::hash(b).to_hex().to_string()
}

#[test]
fn faulty_compilers_fail_their_job_only_and_never_poison_the_cache() {
    let s = Scratch::new();
    let k = project(s.path());

    for (mode, matching, expect, broken) in [
        (
            "crash",
            "offload-arch=gfx1100",
            "compiler exited with signal: 11",
            vec![
                "alpha for gfx1100",
                "beta.kb_fault_v1 for gfx1100",
                "beta.kb_fault_v2 for gfx1100",
            ],
        ),
        (
            "garbage",
            "offload-arch=gfx1100",
            "compiler output rejected: object is not a readable hsaco",
            vec![
                "alpha for gfx1100",
                "beta.kb_fault_v1 for gfx1100",
                "beta.kb_fault_v2 for gfx1100",
            ],
        ),
        (
            "truncate",
            "sm_89*alpha.cu",
            "compiler output rejected: object is not a readable cubin",
            vec!["alpha for sm_89"],
        ),
    ] {
        // Each mode starts from its own empty cache, so the faulty compile really runs.
        let cache = s.path().join(format!("cache-{mode}"));
        let _ = std::fs::remove_dir_all(k.join("out"));
        let l = faulty_launcher(s.path(), mode, matching);
        let o = kbuild(&k, &cache, Some(&l), &["--keep-going", "--json"]);
        assert_eq!(o.status.code(), Some(1), "{mode}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(expect), "{mode}: {err}");
        for job in &broken {
            assert!(
                err.contains(&format!("error: {job}: ")),
                "{mode}: {job} not named\n{err}"
            );
        }
        let sum = kbuild_tests::summary(&o);
        assert_eq!(sum["failed"].as_u64(), Some(broken.len() as u64), "{mode}");
        assert_eq!(
            sum["compiled"].as_u64(),
            Some(6 - broken.len() as u64),
            "{mode}: the other jobs finished"
        );
        let m = manifest(&k.join("out"));
        let listed: Vec<String> = m["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| match o["variant"].as_str() {
                Some(v) => format!(
                    "{}.{v} for {}",
                    o["kernel"].as_str().unwrap(),
                    o["target"].as_str().unwrap()
                ),
                None => format!(
                    "{} for {}",
                    o["kernel"].as_str().unwrap(),
                    o["target"].as_str().unwrap()
                ),
            })
            .collect();
        assert_eq!(listed.len(), 6 - broken.len(), "{mode}: {listed:?}");
        for job in &broken {
            assert!(!listed.contains(&job.to_string()), "{mode}: {job} listed");
        }
        assert_cache_whole(&cache);

        // With the real compiler again: exactly the broken jobs compile (nothing bad was
        // cached), the others come from the cache.
        let _ = std::fs::remove_dir_all(k.join("out"));
        let o = kbuild(&k, &cache, None, &["--json"]);
        assert!(o.status.success(), "{mode}: {}", text(&o));
        let sum = kbuild_tests::summary(&o);
        assert_eq!(
            sum["compiled"].as_u64(),
            Some(broken.len() as u64),
            "{mode}: {}",
            text(&o)
        );
        assert_eq!(
            sum["cached"].as_u64(),
            Some(6 - broken.len() as u64),
            "{mode}"
        );
        assert_eq!(object_shas(&k.join("out")).len(), 6);
    }
}

#[test]
fn eight_concurrent_builds_into_one_cache_agree_with_a_serial_build() {
    let s = Scratch::new();
    let k = project(s.path());
    let serial = serial_objects();

    let shared = s.path().join("shared-cache");
    let target_sets = [
        "sm_89,gfx1100",
        "sm_90,gfx1030",
        "sm_89,sm_90",
        "gfx1100,gfx1030",
        "sm_89,gfx1030",
        "sm_90,gfx1100",
        "sm_89,sm_90,gfx1100,gfx1030",
        "gfx1100,sm_89",
    ];
    let children: Vec<_> = target_sets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Command::new(kbuild_tests::kbuild_bin())
                .args(["--targets", t, "--out", &format!("par{i}"), "-j", "2"])
                .current_dir(&k)
                .env("KBUILD_CACHE_DIR", &shared)
                .env_remove("KBUILD_LAUNCHER")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "build {i}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for (path, sha) in object_shas(&k.join(format!("par{i}"))) {
            assert_eq!(
                serial.get(&path),
                Some(&sha),
                "build {i}: {path} differs from the serial build"
            );
            let bytes = std::fs::read(k.join(format!("par{i}")).join(&path)).unwrap();
            assert_eq!(
                sha256_hex(&bytes),
                sha,
                "build {i}: {path} on disk is not what its manifest says"
            );
        }
    }
    let entries = assert_cache_whole(&shared);
    assert!(
        entries >= 12,
        "every distinct object cached once at least: {entries}"
    );
}

#[test]
fn builds_killed_at_random_points_leave_no_torn_entry_and_the_next_build_succeeds() {
    let s = Scratch::new();
    let k = project(s.path());
    let serial = serial_objects();
    let targets = SERIAL_TARGETS;

    let cache = s.path().join("cache");
    let trials: u64 = std::env::var("KBUILD_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    // Kill points by progress, not by the clock (a loaded machine and an idle one differ
    // tenfold): after 0 to 3 finished jobs of the build's `--json` events, then 0–199 ms
    // into the compiles that follow (xorshift, deterministic). Even trials start cold; odd
    // ones resume from the torn cache the kill before left.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut killed_mid_build = 0;
    for trial in 0..trials {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if trial % 2 == 0 {
            let _ = std::fs::remove_dir_all(&cache);
        }
        let mut child = Command::new(kbuild_tests::kbuild_bin())
            .args(["--targets", targets, "--out", "killed", "--json"])
            .current_dir(&k)
            .env("KBUILD_CACHE_DIR", &cache)
            .env_remove("KBUILD_LAUNCHER")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (jobs, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains(r#""event":"job""#) && jobs.send(()).is_err() {
                    break;
                }
            }
        });
        for _ in 0..x % 4 {
            // Ends early when the build does (the channel closes) or hangs.
            if finished.recv_timeout(Duration::from_secs(120)).is_err() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis((x >> 8) % 200));
        if child.try_wait().unwrap().is_none() {
            killed_mid_build += 1;
        }
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        assert_cache_whole(&cache);
    }
    assert!(
        killed_mid_build >= trials / 3,
        "only {killed_mid_build} of {trials} kills hit a running build"
    );
    // Let orphaned compilers of the last kill finish (they write only to private scratch dirs).
    std::thread::sleep(Duration::from_secs(2));
    let o = kbuild(
        &k,
        &cache,
        None,
        &["--targets", targets, "--out", "after", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        &object_shas(&k.join("after")),
        serial,
        "objects after the kills equal a clean serial build"
    );
    assert_cache_whole(&cache);
    eprintln!(
        "{trials} SIGKILL trials, {killed_mid_build} mid-build; the next build: {}",
        kbuild_tests::summary(&o)
    );
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}
