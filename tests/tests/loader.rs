//! End-to-end tests of the loader's CPU-only flows: `kbuild explain` for simulated devices on
//! a real build (nvcc and clang-19), `kbuild devices` with and without the HIP runtime, and
//! the C ABI example built with gcc.

use crate::kbuild_tests;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use kbuild_tests::{text, Scratch};

/// One build shared by the tests of this file: rmsnorm for the H200 acceptance targets plus
/// two AMD ones.
fn build() -> &'static Path {
    static BUILD: OnceLock<(Scratch, PathBuf)> = OnceLock::new();
    let (_, out) = BUILD.get_or_init(|| {
        let s = Scratch::with_repo_kernels_shared_cache("proj");
        let root = s.path().join("proj").join("kernels");
        std::fs::write(
            root.join("Kbuild.toml"),
            r#"[package]
name = "loader-e2e"
version = "0.1.0"

[build]
targets = ["sm_80", "sm_89", "sm_90", "sm_90a", "compute_90", "gfx1100", "gfx11-generic"]

[build.flags]
cuda = ["-O3", "-std=c++17"]
hip = ["-O3", "-std=c++17"]

[kernels.rmsnorm]
source = "rmsnorm.cu"
entries = ["rmsnorm_f32", "rmsnorm_bf16"]
block-size = 256
"#,
        )
        .expect("write Kbuild.toml");
        let o = s.kbuild(&root, &["--out", "out"]);
        assert!(o.status.success(), "{}", text(&o));
        let out = root.join("out");
        (s, out)
    });
    out
}

fn kbuild(args: &[&str], env: &[(&str, &str)]) -> Output {
    kbuild_in(&std::env::temp_dir(), args, env)
}

/// `kbuild` run in `cwd` (a pull writes its Kbuild.lock there, not into the source tree).
fn kbuild_in(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(kbuild_tests::kbuild_bin());
    c.current_dir(cwd)
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("KBUILD_DEVICE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("running kbuild")
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}\n{}", text(o)))
}

fn candidate<'a>(k: &'a serde_json::Value, target: &str) -> &'a serde_json::Value {
    k["candidates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["target"] == target))
        .unwrap_or_else(|| panic!("no candidate {target} in {k:#}"))
}

#[test]
fn explain_h200_picks_sm_90a_and_says_why_the_rest_is_refused() {
    let dir = build().display().to_string();
    let o = kbuild(
        &[
            "explain", &dir, "--device", "sm_90", "--driver", "13.0", "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["schema"], "kbuild.explain/v1");
    assert_eq!(v["device"], "sm_90");
    let kernels = v["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 1);
    let k = &kernels[0];
    assert_eq!(k["kernel"], "rmsnorm");
    assert!(k["variant"].is_null());
    assert_eq!(k["selected"]["target"], "sm_90a");
    assert_eq!(k["selected"]["rule"], "arch_specific");
    assert_eq!(k["selected"]["path"], "sm_90a/rmsnorm.cubin");
    assert_eq!(candidate(k, "sm_90")["rule"], "exact");
    for t in ["sm_80", "sm_89"] {
        let c = candidate(k, t);
        assert_eq!(c["accepted"], false);
        assert_eq!(c["rule"], "other_major");
        assert!(
            c["reason"]
                .as_str()
                .unwrap()
                .contains("runs only within major 8"),
            "{c}"
        );
    }
    let ptx = candidate(k, "compute_90");
    assert_eq!(ptx["rule"], "ptx_isa_too_new");
    assert!(
        ptx["reason"].as_str().unwrap().contains("ISA 9.5 > 9.0"),
        "{ptx}"
    );
    for t in ["gfx1100", "gfx11-generic"] {
        assert_eq!(candidate(k, t)["rule"], "other_vendor");
    }
    // Key order as the issue writes it.
    let raw = String::from_utf8_lossy(&o.stdout);
    assert!(
        raw.starts_with(r#"{"schema":"kbuild.explain/v1","device":"sm_90""#),
        "{raw}"
    );

    // The text form says the same.
    let o = kbuild(
        &["explain", &dir, "--device", "9.0", "--driver", "13.0"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("rmsnorm: sm_90a (arch_specific"), "{t}");
    assert!(
        t.contains("✗ compute_90") && t.contains("ptx_isa_too_new"),
        "{t}"
    );
}

#[test]
fn newer_driver_accepts_the_ptx() {
    let dir = build().display().to_string();
    let o = kbuild(
        &[
            "explain", &dir, "--device", "sm_90", "--driver", "13.5", "--json",
        ],
        &[],
    );
    let v = json(&o);
    assert_eq!(candidate(&v["kernels"][0], "compute_90")["rule"], "ptx_jit");
    // On a newer CC the PTX is the only thing that runs.
    let o = kbuild(&["explain", &dir, "--device", "sm_100", "--json"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["kernels"][0]["selected"]["target"], "compute_90");
    assert_eq!(v["kernels"][0]["selected"]["rule"], "ptx_jit");
}

#[test]
fn amd_exact_generic_and_no_generic() {
    let dir = build().display().to_string();
    let o = kbuild(&["explain", &dir, "--device", "gfx1100", "--json"], &[]);
    let v = json(&o);
    assert_eq!(v["kernels"][0]["selected"]["target"], "gfx1100");
    assert_eq!(
        candidate(&v["kernels"][0], "gfx11-generic")["rule"],
        "amd_generic"
    );
    // gfx1151 has no exact object: the generic one runs, unless the runtime cannot load it.
    let o = kbuild(&["explain", &dir, "--device", "gfx1151", "--json"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["kernels"][0]["selected"]["target"], "gfx11-generic");
    assert_eq!(
        candidate(&v["kernels"][0], "gfx1100")["rule"],
        "amd_other_processor"
    );
    let o = kbuild(
        &[
            "explain",
            &dir,
            "--device",
            "gfx1151",
            "--no-generic",
            "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = json(&o);
    assert!(v["kernels"][0]["selected"].is_null());
    assert_eq!(
        candidate(&v["kernels"][0], "gfx11-generic")["rule"],
        "generic_unsupported"
    );
}

#[test]
fn no_match_names_device_targets_and_the_build_command() {
    let dir = build().display().to_string();
    let o = kbuild(&["explain", &dir, "--device", "gfx1201"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no code object of kernel `rmsnorm` runs on gfx1201"),
        "{err}"
    );
    assert!(
        err.contains("sm_90a") && err.contains("gfx11-generic"),
        "{err}"
    );
    assert!(err.contains("kbuild --targets gfx1201"), "{err}");
    let o = kbuild(&["explain", &dir, "--device", "gfx1201", "--json"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert!(v["kernels"][0]["selected"].is_null());
    assert!(v["kernels"][0]["error"]
        .as_str()
        .unwrap()
        .contains("kbuild --targets gfx1201"));
}

#[test]
fn device_from_the_environment_and_bad_specs() {
    let dir = build().display().to_string();
    let o = kbuild(
        &["explain", &dir, "--json"],
        &[("KBUILD_DEVICE", "gfx1100")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json(&o)["device"], "gfx1100");
    // The flag wins over the environment.
    let o = kbuild(
        &["explain", &dir, "--device", "sm_89", "--json"],
        &[("KBUILD_DEVICE", "gfx1100")],
    );
    assert_eq!(json(&o)["device"], "sm_89");
    // A typo is a usage error with a suggestion.
    let o = kbuild(&["explain", &dir, "--device", "sm89"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("did you mean sm_89"),
        "{}",
        text(&o)
    );
    // --kernel narrows; an unknown kernel says which exist.
    let o = kbuild(
        &["explain", &dir, "--device", "sm_90", "--kernel", "softmax"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("it has: rmsnorm"),
        "{}",
        text(&o)
    );
}

#[test]
fn explain_without_a_gpu_or_device_is_a_clear_error() {
    let dir = build().display().to_string();
    let empty = tempfile::tempdir().unwrap();
    let o = kbuild(
        &["explain", &dir],
        &[("KBUILD_HIP_SEARCH", &empty.path().display().to_string())],
    );
    assert!(
        !std::path::Path::new("/dev/nvidiactl").exists(),
        "this test needs a machine with no NVIDIA GPU (one with a GPU detects it)"
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no GPU found"), "{err}");
    assert!(err.contains("--device TARGET"), "{err}");
}

#[test]
fn devices_reports_the_hip_runtime_and_zero_devices_without_panicking() {
    let o = kbuild(&["devices", "--json"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["schema"], "kbuild.devices/v1");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("panicked"),
        "{}",
        text(&o)
    );
    let hip_installed = Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5").exists();
    if hip_installed {
        let hip = &v["hip"];
        assert_eq!(hip["found"], true, "{v:#}");
        assert!(hip["version"].as_str().unwrap().starts_with("5."), "{v:#}");
        assert_eq!(hip["devices"].as_array().unwrap().len(), 0, "{v:#}");
        assert_eq!(hip["message"], "0 devices");
        assert_eq!(hip["generic_supported"], false);
    }
    if !Path::new("/dev/nvidiactl").exists() {
        assert_eq!(v["cuda"]["found"], false);
        assert!(v["cuda"]["message"]
            .as_str()
            .unwrap()
            .starts_with("no CUDA driver found"));
    }
    let o = kbuild(&["devices"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("hip:"),
        "{}",
        text(&o)
    );
}

#[test]
fn devices_with_the_hip_search_pointed_at_an_empty_dir_is_not_found() {
    let empty = tempfile::tempdir().unwrap();
    let o = kbuild(
        &["devices", "--json"],
        &[("KBUILD_HIP_SEARCH", &empty.path().display().to_string())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["hip"]["found"], false);
    assert!(v["hip"]["message"]
        .as_str()
        .unwrap()
        .starts_with("HIP runtime not found"));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
}

#[test]
fn c_example_builds_with_gcc_and_explains_for_a_simulated_device() {
    let dir = build().display().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (exe, libdir) = kbuild_tests::c_example(tmp.path());
    let run = |args: &[&str]| {
        Command::new(&exe)
            .args(args)
            .env("LD_LIBRARY_PATH", &libdir)
            .output()
            .expect("running the example")
    };
    let o = run(&[&dir, "sm_90"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("rmsnorm on sm_90: sm_90a"), "{out}");
    assert!(
        out.contains("not loaded: device sm_90 is simulated"),
        "{out}"
    );
    let o = run(&[&dir, "gfx1100", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let first = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert_eq!(v["kernels"][0]["selected"]["target"], "gfx1100");
    // No match: the example exits 1 and prints the loader's message.
    let o = run(&[&dir, "gfx1201"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("kbuild --targets gfx1201"));
    // Errors come back through kbuild_last_error.
    let o = run(&["/nonexistent", "sm_90"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("reading the manifest"),
        "{}",
        text(&o)
    );
    let o = run(&[&dir, "sm89"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("did you mean sm_89"),
        "{}",
        text(&o)
    );
}

/// The C ABI's checked launch: sizes that do not fit rmsnorm_f32's parameters are refused
/// with the message naming the argument and the parameter, before any driver (this machine
/// has none: a driver error would say so), for an NVIDIA and an AMD device.
#[test]
fn c_abi_refuses_a_mismatched_launch_before_the_driver() {
    let dir = build().display().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let (exe, libdir) = kbuild_tests::c_program(
        tmp.path(),
        "tests/fixtures/c/launch_check.c",
        "launch_check",
    );
    let run = |device: &str| {
        let o = Command::new(&exe)
            .args([dir.as_str(), device])
            .env("LD_LIBRARY_PATH", &libdir)
            .env("KBUILD_HIP_SEARCH", tmp.path())
            .output()
            .expect("running launch_check");
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for device in ["sm_90", "gfx1100"] {
        let out = run(device);
        let line = |what: &str| {
            out.lines()
                .find(|l| l.starts_with(&format!("{what}: ")))
                .unwrap_or_else(|| panic!("no {what} line in {out}"))
                .to_string()
        };
        assert_eq!(line("good"), "good: 1 ", "{device}: {out}");
        let wide = line("wide");
        assert!(
            wide.starts_with("wide: -1 rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 ("),
            "{device}: {wide}"
        );
        let short = line("short");
        assert!(
            short.starts_with("short: -1 rmsnorm_f32: 5 arguments given, the kernel takes 6"),
            "{device}: {short}"
        );
        // gfx1100's hidden arguments (code object v5: block counts, group sizes, ...) are
        // the runtime's: named, never counted.
        assert_eq!(
            short.contains("hidden the runtime passes"),
            device.starts_with("gfx"),
            "{device}: {short}"
        );
        assert!(
            line("entry").contains("entry `nope` is not exported"),
            "{out}"
        );
        assert_eq!(line("null function"), "null function: -1 function is NULL");
        // A simulated device loads nothing: the checks above needed no function.
        assert!(line("not loaded").contains("is simulated"), "{out}");
        assert!(!out.contains("driver"), "{device}: {out}");
        eprintln!("{device}:\n{out}");
    }
}

/// `kbuild package` → a bundle file: explain reads it like the build dir; `kbuild pull` for
/// one device → the cached (subset) entry and the pulled bundle hold only what that device
/// needs, and the loader's selection over them agrees.
#[test]
fn bundles_and_pulled_cache_entries_explain_like_the_build() {
    let dir = build();
    let tmp = tempfile::tempdir().unwrap();
    let dist = tmp.path().join("dist");
    let o = kbuild(
        &[
            "package",
            &dir.display().to_string(),
            "--out",
            &dist.display().to_string(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bundle = std::fs::read_dir(&dist)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "kbundle"))
        .expect("a .kbundle");
    let b = bundle.display().to_string();
    let explain = |path: &str, device: &str| {
        let o = kbuild(
            &[
                "explain", path, "--device", device, "--driver", "13.0", "--json",
            ],
            &[],
        );
        (o.status.code(), json(&o))
    };
    let (code, from_bundle) = explain(&b, "sm_90");
    assert_eq!(code, Some(0));
    let (_, from_dir) = explain(&dir.display().to_string(), "sm_90");
    assert_eq!(from_bundle["kernels"], from_dir["kernels"]);
    assert_eq!(from_bundle["kernels"][0]["selected"]["target"], "sm_90a");

    // The C ABI opens the bundle too.
    let (exe, libdir) = kbuild_tests::c_example(tmp.path());
    let o = Command::new(&exe)
        .args([&b, "gfx1100"])
        .env("LD_LIBRARY_PATH", &libdir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rmsnorm on gfx1100: gfx1100"));

    // Publish, then pull for one device into a fresh cache.
    let reg = tmp.path().join("registry");
    let cache = tmp.path().join("cache");
    let env = [
        ("KBUILD_CACHE_DIR", cache.to_str().unwrap()),
        ("KBUILD_SIGNATURE_POLICY", "off"),
    ];
    let o = kbuild(&["publish", &b, "--registry", reg.to_str().unwrap()], &env);
    assert!(o.status.success(), "{}", text(&o));
    let pulled = tmp.path().join("pulled");
    let o = kbuild_in(
        tmp.path(),
        &[
            "pull",
            "loader-e2e",
            "--registry",
            reg.to_str().unwrap(),
            "--device",
            "gfx1100",
            "--out",
            pulled.to_str().unwrap(),
        ],
        &env,
    );
    assert!(o.status.success(), "{}", text(&o));
    let entries = kbuild_bundle::cache::BundleCache::new(&cache.join("registry"))
        .refs(None, Some("loader-e2e"));
    assert_eq!(entries.len(), 1, "{entries:?}");
    let cache = kbuild_bundle::cache::BundleCache::new(&cache.join("registry"));
    let package = kbuild_loader::Package::from_cache(
        &cache,
        &entries[0],
        &kbuild_loader::bundle::Trust::default(),
    )
    .unwrap();
    let targets: Vec<&str> = package.objects().iter().map(|o| o.target).collect();
    assert!(targets.contains(&"gfx1100"), "{targets:?}");
    assert!(
        !targets.contains(&"sm_90a"),
        "a subset pulled for gfx1100: {targets:?}"
    );
    let device = kbuild_manifest::compat::Device::parse("gfx1100", None, None).unwrap();
    let sel = package.select(&device);
    let k = sel.kernel("rmsnorm", None).unwrap();
    assert_eq!(k.selected().unwrap().target, "gfx1100");
    let bytes = package.read_verified(k.selected().unwrap().object).unwrap();
    assert!(bytes.starts_with(b"\x7fELF"));
    // The pulled bundle file explains the same way.
    let pulled_file = std::fs::read_dir(&pulled)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "kbundle"))
        .expect("pulled .kbundle");
    let o = kbuild(
        &[
            "explain",
            pulled_file.to_str().unwrap(),
            "--device",
            "gfx1100",
            "--json",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(json(&o)["kernels"][0]["selected"]["target"], "gfx1100");
}

#[test]
fn the_build_writes_a_load_index_that_agrees_with_its_manifest() {
    use kbuild_loader::Package;
    use kbuild_manifest::compat::Device;
    use kbuild_manifest::load_index::{EntryParams, LOAD_INDEX_FILE};
    let out = build();
    assert!(
        out.join(LOAD_INDEX_FILE).is_file(),
        "no {LOAD_INDEX_FILE} in {}",
        out.display()
    );
    let indexed = Package::open(out).unwrap();
    assert!(
        indexed.has_load_index(),
        "the build's own manifest.kbi was not used"
    );
    let json = Package::open_uncached(out).unwrap();
    assert!(!json.has_load_index());
    assert_eq!(indexed.kernels(), json.kernels());
    assert_eq!(indexed.manifest().unwrap(), json.manifest().unwrap());
    for spec in ["sm_90", "sm_89", "gfx1100", "gfx1151", "sm_120"] {
        let device = Device::parse(spec, None, None).unwrap();
        assert_eq!(indexed.select(&device), json.select(&device), "{spec}");
    }
    for i in 0..json.object_count() {
        let (a, b) = (indexed.record(i).unwrap(), json.record(i).unwrap());
        assert_eq!(a, b, "object {i}");
        assert_eq!(
            indexed.read_verified(i).unwrap(),
            json.read_verified(i).unwrap()
        );
        // The index carries every entry's caller-visible launch parameters (a launch checks
        // them), and counts the hidden ones.
        let m = &json.manifest().unwrap().objects[i];
        let carried = indexed
            .params(i)
            .unwrap()
            .expect("launch parameters carried");
        for (entry, got) in m.entries.iter().zip(&carried) {
            let want = m.params.get(entry).map(|p| EntryParams::of(p));
            assert_eq!(got, &want, "object {i} {entry}");
        }
        assert_eq!(carried, json.params(i).unwrap().unwrap());
    }
    let gfx = (0..json.object_count())
        .find(|&i| indexed.object(i).unwrap().target == "gfx1100")
        .unwrap();
    let abi = indexed.params(gfx).unwrap().unwrap()[0].clone().unwrap();
    assert!(
        abi.hidden > 0 && abi.params.iter().all(|p| !p.hidden),
        "{abi:?}"
    );
}
