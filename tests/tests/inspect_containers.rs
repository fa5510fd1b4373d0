//! `kbuild inspect` on containers finds every member with the same figures as inspecting the
//! members alone: an nvcc fatbin with several -gencode (SASS + PTX, -Xfatbin=-compress-all),
//! clang offload bundles with and without --offload-compress, and host shared libraries built
//! with nvcc and with hipcc-style clang. Members are extracted with the vendors' own tools
//! (cuobjdump -xelf/-xptx, clang-offload-bundler --unbundle).

use crate::kbuild_tests;

use std::path::{Path, PathBuf};
use std::process::Command;

use kbuild_tests::{repo_root, text, Scratch};
use serde_json::Value;

fn cuda_bin(tool: &str) -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_default();
    let p = PathBuf::from(home)
        .join(".local/share/kbuild/toolchains/cuda-13.5.37/nvidia/cu13/bin")
        .join(tool);
    assert!(
        p.is_file(),
        "{} missing: run `cargo run -p kbuild -- toolchain install cuda`",
        p.display()
    );
    p
}

fn hip_device_libs() -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    format!("{home}/.local/share/kbuild/toolchains/hip-device-libs-llvm19")
}

fn run(cmd: &mut Command) {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}\n{}", text(&o));
}

/// `kbuild inspect --json FILES` → objects.
fn inspect(s: &Scratch, dir: &Path, files: &[&str]) -> Vec<Value> {
    let mut args = vec!["inspect", "--json"];
    args.extend_from_slice(files);
    let o = s.kbuild(dir, &args);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["objects"].as_array().unwrap().clone()
}

/// Kernels of an inspected object, by name, without the name field.
fn kernels(obj: &Value) -> Vec<(String, Value)> {
    let mut v: Vec<(String, Value)> = obj["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let mut k = k.clone();
            let name = k["name"].as_str().unwrap().to_string();
            k.as_object_mut().unwrap().remove("name");
            (name, k)
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Every member of `container` equals exactly one of `alone` (by target), kernel by kernel.
fn assert_same_figures(container: &[Value], alone: &[Value], expected_members: usize) {
    assert_eq!(
        container.len(),
        expected_members,
        "members found: {container:#?}"
    );
    for m in container {
        let twin = alone
            .iter()
            .find(|a| a["target"] == m["target"] && a["format"] == m["format"])
            .unwrap_or_else(|| panic!("no extracted member for {} {}", m["path"], m["target"]));
        assert_eq!(
            kernels(m),
            kernels(twin),
            "{} vs {}",
            m["path"],
            twin["path"]
        );
        assert!(
            m["path"].as_str().unwrap().contains('#'),
            "member path is outer#member: {}",
            m["path"]
        );
    }
}

#[test]
fn nvidia_fatbin_and_host_shared_library() {
    let s = Scratch::new();
    let d = s.path();
    let src = repo_root().join("kernels/softmax.cu");
    let inc = format!("-I{}", repo_root().join("build-system/include").display());
    run(Command::new(cuda_bin("nvcc"))
        .current_dir(d)
        .args([
            "-fatbin",
            "-O3",
            &inc,
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90,code=[sm_90,compute_90]",
            "-gencode",
            "arch=compute_89,code=sm_89",
            "-Xfatbin=-compress-all",
        ])
        .arg(&src)
        .args(["-o", "multi.fatbin"]));
    run(Command::new(cuda_bin("nvcc"))
        .current_dir(d)
        .args([
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-cudart",
            "none",
            "-O3",
            &inc,
            "-gencode",
            "arch=compute_89,code=sm_89",
            "-gencode",
            "arch=compute_90,code=compute_90",
        ])
        .arg(&src)
        .args(["-o", "libsoftmax_nv.so"]));
    std::fs::create_dir_all(d.join("x")).unwrap();
    for f in ["multi.fatbin", "libsoftmax_nv.so"] {
        run(Command::new(cuda_bin("cuobjdump"))
            .current_dir(d.join("x"))
            .args(["-xelf", "all", "-xptx", "all"])
            .arg(d.join(f)));
    }
    let mut extracted: Vec<String> = std::fs::read_dir(d.join("x"))
        .unwrap()
        .flatten()
        .map(|e| format!("x/{}", e.file_name().to_string_lossy()))
        .collect();
    extracted.sort();
    let alone = inspect(
        &s,
        d,
        &extracted.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(alone.len() >= 4, "cuobjdump extracted {extracted:?}");

    let fat = inspect(&s, d, &["multi.fatbin"]);
    // sm_80, sm_90, sm_89 SASS + compute_90 PTX.
    assert_same_figures(&fat, &alone, 4);
    assert!(fat.iter().any(|m| m["format"] == "ptx"));
    let so = inspect(&s, d, &["libsoftmax_nv.so"]);
    assert_same_figures(&so, &alone, 2);
}

#[test]
fn clang_offload_bundles_plain_and_compressed_and_hip_host_shared_library() {
    let s = Scratch::new();
    let d = s.path();
    let src = repo_root().join("kernels/softmax.cu");
    let inc = format!("-I{}", repo_root().join("build-system/include").display());
    let libs = format!("--rocm-device-lib-path={}", hip_device_libs());
    let hip = |extra: &[&str], out: &str| {
        let mut c = Command::new("clang++-19");
        c.current_dir(d)
            .args([
                "-x",
                "hip",
                "-O3",
                "--rocm-path=/usr",
                &libs,
                &inc,
                "--offload-arch=gfx90a",
                "--offload-arch=gfx1100",
                "--offload-arch=gfx1201",
            ])
            .args(extra)
            .arg(&src)
            .args(["-o", out]);
        run(&mut c);
    };
    hip(
        &["--offload-device-only", "--gpu-bundle-output"],
        "plain.hipfb",
    );
    hip(
        &[
            "--offload-device-only",
            "--gpu-bundle-output",
            "--offload-compress",
        ],
        "compressed.hipfb",
    );
    hip(&["-shared", "-fPIC"], "libsoftmax_hip.so");
    let plain = std::fs::read(d.join("plain.hipfb")).unwrap();
    assert!(plain.starts_with(b"__CLANG_OFFLOAD_BUNDLE__"));
    assert!(std::fs::read(d.join("compressed.hipfb"))
        .unwrap()
        .starts_with(b"CCOB"));

    // The members alone, as clang-offload-bundler unbundles them.
    let mut alone_files = Vec::new();
    for arch in ["gfx90a", "gfx1100", "gfx1201"] {
        let out = format!("{arch}.hsaco");
        run(Command::new("clang-offload-bundler-19")
            .current_dir(d)
            .args([
                "--type=o",
                &format!("--targets=hipv4-amdgcn-amd-amdhsa--{arch}"),
                "--input=plain.hipfb",
                &format!("--output={out}"),
                "--unbundle",
            ]));
        alone_files.push(out);
    }
    let alone = inspect(
        &s,
        d,
        &alone_files.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(alone.len(), 3);
    for f in ["plain.hipfb", "compressed.hipfb", "libsoftmax_hip.so"] {
        let members = inspect(&s, d, &[f]);
        assert_same_figures(&members, &alone, 3);
    }
}
