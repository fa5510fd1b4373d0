//! End-to-end tests of `kbuild run gdn` that need no GPU: the GDN kernels of the project build
//! (real nvcc) into a bundle the engine checks before it needs a device, and a bundle lacking a
//! kernel is refused with an error naming it; `--dump-inputs` writes the side-by-side data.

use crate::kbuild_tests;

use std::path::Path;

use kbuild_tests::{text, Scratch};

/// A scratch project with the repository's kernels, the Kbuild.toml cut down to the GDN
/// tables (minus those `drop` names), built for sm_90.
fn gdn_build(s: &Scratch, drop: &[&str]) -> std::path::PathBuf {
    let root = s.path().join("p");
    let kernels = root.join("kernels");
    let toml = std::fs::read_to_string(kernels.join("Kbuild.toml")).unwrap();
    // Keep [package], [build] and the gdn tables; drop the other kernels and `drop`.
    let mut out = String::new();
    let mut keep = true;
    for line in toml.lines() {
        if let Some(name) = line
            .strip_prefix("[kernels.")
            .and_then(|l| l.strip_suffix(']'))
        {
            keep = name.starts_with("gdn_") && !drop.contains(&name);
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    std::fs::write(kernels.join("Kbuild.toml"), out).unwrap();
    let o = s.kbuild(&kernels, &["--targets", "sm_90", "--out", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    kernels.join("out")
}

fn run_gdn(s: &Scratch, cwd: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(kbuild_tests::kbuild_bin())
        .args(["run", "gdn"])
        .args(args)
        .current_dir(cwd)
        .env("KBUILD_CACHE_DIR", &s.cache)
        .env("KBUILD_DEVICE", "sm_90")
        .env("NO_COLOR", "1")
        .output()
        .expect("running kbuild")
}

/// The engine plans over a real build: every GDN object is there for sm_90, so it gets as far
/// as needing a real GPU; without gdn_fused it names every missing object and the fix.
#[test]
fn missing_kernel_in_the_bundle_is_a_clear_error() {
    let s = Scratch::with_repo_kernels_shared_cache("p");
    let out = gdn_build(&s, &[]);
    let m = kbuild_tests::manifest(&out);
    let objects = m["objects"].as_array().unwrap();
    // conv, gates, norm + step and fused × TOKENS 1..8.
    assert_eq!(objects.len(), 19, "{m:#}");
    for t in 1..=8 {
        assert!(out
            .join(format!("sm_90/gdn_step.tokens{t}.cubin"))
            .is_file());
        assert!(out
            .join(format!("sm_90/gdn_fused.tokens{t}.cubin"))
            .is_file());
    }
    let full = run_gdn(
        &s,
        s.path(),
        &["--bundle", out.to_str().unwrap(), "--layers", "2"],
    );
    assert_eq!(full.status.code(), Some(1), "{}", text(&full));
    let err = String::from_utf8_lossy(&full.stderr);
    assert!(
        err.contains("is simulated: the engine needs a real GPU"),
        "{}",
        text(&full)
    );

    let s2 = Scratch::with_repo_kernels_shared_cache("p");
    let partial = gdn_build(&s2, &["gdn_fused"]);
    let o = run_gdn(&s2, s2.path(), &["--bundle", partial.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the GDN engine needs 8 kernel object(s) the bundle cannot give for sm_90"),
        "{}",
        text(&o)
    );
    for t in 1..=8 {
        assert!(
            err.contains(&format!("gdn_fused.tokens{t}: kernel not in the bundle")),
            "{err}"
        );
    }
    assert!(
        err.contains("hint: build the GDN kernels") && err.contains("kbuild --targets sm_90"),
        "{err}"
    );
}

#[test]
fn request_errors_name_the_limit() {
    let s = Scratch::new();
    let o = run_gdn(&s, s.path(), &["--tokens", "1,9", "--bundle", "nowhere"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--tokens: forward of 9 token(s): the verify window is 8"),
        "{err}"
    );
    let o = run_gdn(&s, s.path(), &["--commits", "0", "--bundle", "nowhere"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("commit(0)"),
        "{}",
        text(&o)
    );
    let o = run_gdn(&s, s.path(), &["--bundle", "nowhere"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nowhere"),
        "{}",
        text(&o)
    );
}

#[test]
fn dump_inputs_writes_inputs_and_reference() {
    let s = Scratch::new();
    let file = s.path().join("gdn.safetensors");
    let o = run_gdn(
        &s,
        s.path(),
        &["--layers", "1", "--dump-inputs", file.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(&file).unwrap();
    // Header: u64 length, then JSON naming every tensor with its shape.
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    for (name, shape) in [
        ("x", vec![1, 8, 10240]),
        ("state", vec![1, 48, 128, 128]),
        ("ref_q", vec![1, 8, 16, 128]),
        ("ref_v", vec![1, 8, 48, 128]),
        ("ref_g", vec![1, 8, 48]),
        ("ref_o", vec![1, 8, 48, 128]),
        ("ref_state8", vec![1, 48, 128, 128]),
        ("ref_state1", vec![1, 48, 128, 128]),
    ] {
        assert_eq!(header[name]["dtype"], "F32", "{name}");
        assert_eq!(header[name]["shape"], serde_json::json!(shape), "{name}");
    }
}
