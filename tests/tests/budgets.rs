//! One budget per operation (issue 26, class 4): small hostile inputs that made kbuild do
//! large work, each run through the binary under a measured peak (`/usr/bin/time`): every one
//! refused or bounded with an error naming the file and the limit, under 256 MiB. The figures
//! go to stderr (`--nocapture`) and docs/RELIABILITY.md.

use crate::kbuild_tests;
use crate::trust::{fixture_bundle, measured, tar_header};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use kbuild_bundle::bundle::Bundle;
use kbuild_manifest::fixtures;
use kbuild_tests::registry::Env;
use kbuild_tests::text;

const MIB: u64 = 1 << 10; // in the KiB that /usr/bin/time reports
const PEAK_KIB: u64 = 256 * MIB;

/// A tar+zstd bundle of `manifest_json` alone.
fn manifest_only_bundle(manifest_json: &[u8]) -> Vec<u8> {
    let mut tar = tar_header("manifest.json", manifest_json.len() as u64);
    tar.extend_from_slice(manifest_json);
    tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
    zstd::encode_all(&tar[..], 3).unwrap()
}

/// The manifest of the fixture bundle as JSON, with `edit` applied.
fn fixture_manifest(env: &Env, edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let real = fixture_bundle(&env.path().join("real"), "0.1.0", "a");
    let b = Bundle::open(&real, Default::default()).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(b.manifest_json()).unwrap();
    edit(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// `kbuild ARGS`: (exit code, output text, peak KiB, wall), the row printed.
fn run(env: &Env, what: &str, args: &[&str]) -> (Option<i32>, String, u64, Duration) {
    let (o, kib, wall) = measured(env, args, &[]);
    let t = text(&o);
    eprintln!(
        "{what}: exit {:?}, {kib} KiB peak, {wall:.2?}",
        o.status.code()
    );
    (o.status.code(), t, kib, wall)
}

/// A 6 KB bundle whose manifest holds 22 million empty strings cost 2.1 GB in `explain`
/// (590 MB under `require`: it was parsed before the signature was checked); the same
/// manifest.json alone 0.9 GB. Now its cost is estimated before it is parsed and it is
/// refused; under `require` the unsigned manifest is refused before even that. The costliest
/// document of tiny values that is still admitted stays under the same peak.
#[test]
fn tiny_values_in_a_manifest_are_refused_before_they_are_parsed() {
    let env = Env::new();
    let mut empties = fixture_manifest(&env, |_| {});
    // `"kernels": ["k", "", "", ...]`: 66 MB of text, under the 64 MiB byte cap.
    let at = empties
        .windows(11)
        .position(|w| w == b"\"kernels\":[")
        .expect("kernels list")
        + 11;
    let tail = empties.split_off(at);
    empties.extend(std::iter::repeat_n(&b"\"\","[..], 22_000_000).flatten());
    empties.extend_from_slice(&tail);
    let bundle = env.path().join("evil-0.1.0.kbundle");
    std::fs::write(&bundle, manifest_only_bundle(&empties)).unwrap();
    let json = env.path().join("manifest.json");
    std::fs::write(&json, &empties).unwrap();
    assert!(std::fs::metadata(&bundle).unwrap().len() < 200_000);

    for (what, path, policy) in [
        ("bundle, default policy", &bundle, "warn"),
        ("bundle, require", &bundle, "require"),
        ("manifest.json", &json, "warn"),
    ] {
        let p = path.display().to_string();
        let (code, t, kib, _) = run(
            &env,
            what,
            &[
                "explain",
                &p,
                "--device",
                "sm_89",
                "--signature-policy",
                policy,
            ],
        );
        assert_eq!(code, Some(2), "{what}: {t}");
        let expect = if policy == "require" {
            "not signed"
        } else {
            "over kbuild's limit"
        };
        assert!(t.contains(&p) && t.contains(expect), "{what}: {t}");
        assert!(kib < PEAK_KIB, "{what}: {kib} KiB\n{t}");
    }

    // The most a document of tiny values may hold and still be read: a map of one object
    // filled to just under the parse budget. Read, within the peak.
    let admitted = fixture_manifest(&env, |v| {
        let names: serde_json::Map<String, serde_json::Value> = (0..1_600_000u32)
            .map(|i| (format!("{i:x}"), serde_json::Value::String(String::new())))
            .collect();
        v["objects"][0]["demangled"] = serde_json::Value::Object(names);
    });
    let cost = kbuild_base::json_cost::estimate(&admitted);
    assert!(
        cost <= kbuild_manifest::manifest::MAX_PARSE_COST
            && cost > kbuild_manifest::manifest::MAX_PARSE_COST / 2,
        "{cost}"
    );
    std::fs::write(&json, &admitted).unwrap();
    let p = json.display().to_string();
    let (code, t, kib, _) = run(
        &env,
        "admitted map of 1.6 M entries",
        &["explain", &p, "--device", "sm_89"],
    );
    assert_eq!(code, Some(0), "{t}");
    assert!(kib < PEAK_KIB, "{kib} KiB\n{t}");
}

/// Files read whole without a cap: a 1 GiB manifest.json, `.sig` and split-release index
/// (sparse here), a part that is a symlink to /dev/zero (hashed forever before its size was
/// compared). Each is refused from its metadata, naming the file and the limit.
#[test]
fn outside_files_are_read_through_a_cap_and_special_files_are_refused() {
    let env = Env::new();
    let sparse = |p: &Path, len: u64| {
        std::fs::File::create(p).unwrap().set_len(len).unwrap();
    };
    let json = env.path().join("big").join("manifest.json");
    std::fs::create_dir_all(json.parent().unwrap()).unwrap();
    sparse(&json, 1 << 30);
    let p = json.display().to_string();
    let (code, t, kib, _) = run(
        &env,
        "1 GiB manifest.json",
        &["explain", &p, "--device", "sm_89"],
    );
    assert_eq!(code, Some(2), "{t}");
    assert!(t.contains(&p) && t.contains("limit"), "{t}");
    assert!(kib < PEAK_KIB, "{kib} KiB");

    let bundle = fixture_bundle(&env.path().join("signed"), "0.1.0", "b");
    let sig = kbuild_bundle::signature_path(&bundle);
    sparse(&sig, 1 << 30);
    let b = bundle.display().to_string();
    let (code, t, kib, _) = run(&env, "1 GiB .sig", &["explain", &b, "--device", "sm_89"]);
    assert_eq!(code, Some(2), "{t}");
    assert!(
        t.contains(&sig.display().to_string()) && t.contains("limit"),
        "{t}"
    );
    assert!(kib < PEAK_KIB, "{kib} KiB");

    let index = env.path().join("rel").join("kb-trust-0.1.0.kbindex");
    std::fs::create_dir_all(index.parent().unwrap()).unwrap();
    sparse(&index, 1 << 30);
    let i = index.display().to_string();
    let (code, t, kib, _) = run(&env, "1 GiB .kbindex", &["pull", &i, "--device", "sm_89"]);
    assert_ne!(code, Some(0), "{t}");
    assert!(t.contains(&i) && t.contains("limit"), "{t}");
    assert!(kib < PEAK_KIB, "{kib} KiB");
}

/// A split release whose parts hold 40 MiB of zeros per target in a few KB: each part was capped
/// alone, so the parts of one pull together reached 2 GB of memory and 1.5 GB of cache. Now
/// one budget covers every part of the pull: refused once they pass it, naming the limit,
/// nothing cached, under the peak. A part that is a symlink to /dev/zero is refused from its
/// metadata.
#[test]
fn a_split_release_is_unpacked_within_one_budget_per_pull() {
    let env = Env::new();
    // Zeros of eight lengths: eight contents, one per target, none shared between parts.
    let zeros = |i: usize| vec![0u8; (40 << 20) + i];
    // All run on sm_90: its cubin, and PTX of older virtual architectures.
    let targets = [
        "sm_90",
        "compute_90",
        "compute_89",
        "compute_86",
        "compute_80",
        "compute_75",
        "sm_90",
        "compute_90",
    ];
    let records: Vec<_> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let format = if t.starts_with("compute") {
                "ptx"
            } else {
                "cubin"
            };
            let mut o = fixtures::object(&format!("k{i}"), t, format, &zeros(i));
            if format == "ptx" {
                o.resources.clear();
            }
            o
        })
        .collect();
    let m = fixtures::manifest("kb-budget", "0.1.0", records);
    let objects: BTreeMap<_, _> = m
        .objects
        .iter()
        .enumerate()
        .map(|(i, o)| (o.sha256.clone(), zeros(i)))
        .collect();
    let b = Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap();
    let full = b.to_bytes(0).unwrap();
    let kbuild_bundle::assets::Packed::Split {
        parts, index_bytes, ..
    } = kbuild_bundle::assets::pack(&b, full.len() as u64, full.len() as u64 - 1, 0).unwrap()
    else {
        panic!("not split");
    };
    let rel = env.path().join("rel");
    std::fs::create_dir_all(&rel).unwrap();
    let mut small = 0;
    for p in &parts {
        std::fs::write(rel.join(&p.part.file), &p.bytes).unwrap();
        small += p.bytes.len();
    }
    let index = rel.join("kb-budget-0.1.0.kbindex");
    std::fs::write(&index, &index_bytes).unwrap();
    eprintln!("{} parts, {small} bytes in all", parts.len());
    assert!(parts.len() >= 2 && small < 2_000_000, "{}", parts.len());
    let i = index.display().to_string();
    let (code, t, kib, _) = run(
        &env,
        "split release, 320 MiB of zeros",
        &["pull", &i, "--device", "sm_90"],
    );
    assert_ne!(code, Some(0), "{t}");
    assert!(
        t.contains("same operation") && t.contains(&(192u64 << 20).to_string()),
        "{t}"
    );
    assert!(kib < PEAK_KIB, "{kib} KiB\n{t}");
    assert!(
        kbuild_tests::registry::files_under(&env.cache())
            .iter()
            .all(|f| std::fs::metadata(f)
                .map(|m| m.len() < 1 << 20)
                .unwrap_or(true)),
        "nothing large cached"
    );

    // A part replaced by a link to /dev/zero: refused before it is hashed.
    let first = rel.join(&parts[0].part.file);
    std::fs::remove_file(&first).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &first).unwrap();
    let (code, t, kib, wall) = run(
        &env,
        "part linked to /dev/zero",
        &["pull", &i, "--device", "sm_90"],
    );
    assert_ne!(code, Some(0), "{t}");
    assert!(t.contains("not a regular file"), "{t}");
    assert!(
        kib < PEAK_KIB && wall < Duration::from_secs(60),
        "{kib} KiB {wall:?}"
    );
}

/// Selection was quadratic in the kernels: 40,000 one-object kernels cost 49 s. The manifest
/// of them is now selected from in linear time (bounded here only against a hang).
#[test]
fn selection_is_linear_in_the_kernels() {
    let env = Env::new();
    let objects: Vec<_> = (0..40_000u32)
        .map(|i| fixtures::object(&format!("k{i}"), "sm_89", "cubin", &i.to_le_bytes()))
        .collect();
    let mut m = fixtures::manifest("kb-many", "0.1.0", Vec::new());
    m.kernels = objects.iter().map(|o| o.kernel.clone()).collect();
    m.targets = vec!["sm_89".into()];
    m.objects = objects;
    let json = env.path().join("manifest.json");
    std::fs::write(&json, m.to_json()).unwrap();
    let p = json.display().to_string();
    let (code, t, kib, wall) = run(
        &env,
        "40,000 kernels",
        &["explain", &p, "--device", "sm_89", "--json"],
    );
    assert_eq!(code, Some(0), "{}", &t[..t.len().min(2000)]);
    assert!(kib < PEAK_KIB, "{kib} KiB");
    assert!(wall < Duration::from_secs(30), "{wall:?}");
}

/// `kbuild init` read whole files: a 256 MiB `.cu` cost 1.5 GB, a 96 MiB
/// compile_commands.json 1.6 GB. A source over its cap (or a FIFO) is skipped and named; a
/// compile_commands.json over its cap, or of tiny values that would cost more to parse than
/// the limit, is refused naming the file.
#[test]
fn init_reads_sources_and_compile_commands_through_a_cap() {
    let env = Env::new();
    let tree = env.path().join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::File::create(tree.join("huge.cu"))
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let t = tree.display().to_string();
    let (_, out, kib, _) = run(&env, "init, 256 MiB .cu", &["init", &t]);
    assert!(out.contains("huge.cu") && out.contains("limit"), "{out}");
    assert!(kib < PEAK_KIB, "{kib} KiB");

    let tree2 = env.path().join("tree2");
    std::fs::create_dir_all(&tree2).unwrap();
    std::fs::write(tree2.join("k.cu"), "__global__ void k() {}\n").unwrap();
    let mut cc = b"[".to_vec();
    cc.extend(std::iter::repeat_n(&b"\"\","[..], 7_000_000).flatten());
    cc.extend_from_slice(b"\"\"]");
    std::fs::write(tree2.join("compile_commands.json"), &cc).unwrap();
    let t2 = tree2.display().to_string();
    let (code, out, kib, _) = run(&env, "init, 21 MB of empty strings", &["init", &t2]);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        out.contains("compile_commands.json") && out.contains("over kbuild's limit"),
        "{out}"
    );
    assert!(kib < PEAK_KIB, "{kib} KiB");
}
