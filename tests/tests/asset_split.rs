//! End-to-end tests of split releases (`package --max-asset-size`, issue 17): a real build of
//! a small project for three target families (sm_8x with SASS and PTX, sm_9x, gfx11) packaged
//! under a limit that forces a split, then pulled from the index with only one family's part
//! downloaded, and every refusal (missing part, tampered part, a limit no target fits,
//! publishing an index) naming the file or target.

use crate::kbuild_tests;

use std::path::{Path, PathBuf};

use kbuild_base::digest::sha256_hex;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::assets::AssetIndex;
use kbuild_bundle::Bundle;
use kbuild_tests::registry::{json, write_project, Env, SMALL_A, SMALL_B};

const INDEX: &str = "kb-assets-0.1.0.kbindex";

/// A built project and the size of each one-target bundle (`package --split`).
fn built(env: &Env) -> (PathBuf, Vec<(String, u64)>, serde_json::Value) {
    let k = write_project(
        env.path(),
        "kb-assets",
        &["sm_89", "compute_89", "sm_90", "gfx1100"],
        &[("scale", SMALL_A), ("shift", SMALL_B)],
    );
    let whole = json(&env.ok(&k, &["package", "--out", "whole", "--split", "--json"]));
    let singles = whole["bundles"].as_array().unwrap()[1..]
        .iter()
        .map(|b| {
            let p = b["path"].as_str().unwrap();
            let t = p.rsplit('/').next().unwrap();
            let t = t.trim_start_matches("kb-assets-0.1.0.");
            let t = t.trim_end_matches(".kbundle").to_string();
            (t, b["size"].as_u64().unwrap())
        })
        .collect();
    (k, singles, whole)
}

fn copy(from: &Path, to: &Path, files: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for f in files {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

#[test]
fn a_split_release_pulls_only_its_familys_bundle() {
    let env = Env::new();
    let (k, singles, whole) = built(&env);
    let full = whole["bundles"][0]["size"].as_u64().unwrap();
    // Just the largest one-target bundle: every family of two targets must be cut by target.
    let limit = singles.iter().map(|(_, s)| *s).max().unwrap();
    assert!(limit < full, "{singles:?} vs {full}");

    // Fits: one bundle, as without the flag, byte for byte.
    let fit = json(&env.ok(
        &k,
        &[
            "package",
            "out",
            "--out",
            "fit",
            "--max-asset-size",
            "2GiB",
            "--json",
        ],
    ));
    assert!(fit["split"].is_null(), "{fit}");
    assert_eq!(fit["bundles"][0]["sha256"], whole["bundles"][0]["sha256"]);
    let text = env.ok(
        &k,
        &[
            "package",
            "out",
            "--out",
            "fit",
            "--max-asset-size",
            "1.5GB",
        ],
    );
    assert!(text.contains("fits in one asset"), "{text}");

    // Split: sm_8x by target (SASS, PTX), sm_9x and gfx11 whole.
    let lim = limit.to_string();
    let s = json(&env.ok(
        &k,
        &[
            "package",
            "out",
            "--out",
            "rel",
            "--max-asset-size",
            &lim,
            "--json",
        ],
    ));
    let split = &s["split"];
    assert_eq!(split["max_asset_size"], limit, "{s}");
    let parts = split["parts"].as_array().unwrap();
    let got: Vec<(String, String, Vec<String>)> = parts
        .iter()
        .map(|p| {
            (
                p["file"].as_str().unwrap().to_string(),
                p["family"].as_str().unwrap().to_string(),
                p["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    let want = [
        ("kb-assets-0.1.0.sm_8x-1.kbundle", "sm_8x", vec!["sm_89"]),
        (
            "kb-assets-0.1.0.sm_8x-2.kbundle",
            "sm_8x",
            vec!["compute_89"],
        ),
        ("kb-assets-0.1.0.sm_9x.kbundle", "sm_9x", vec!["sm_90"]),
        ("kb-assets-0.1.0.gfx11.kbundle", "gfx11", vec!["gfx1100"]),
    ];
    assert_eq!(got.len(), want.len(), "{s}");
    for ((f, fam, ts), (wf, wfam, wts)) in got.iter().zip(&want) {
        assert_eq!((f.as_str(), fam.as_str()), (*wf, *wfam));
        assert_eq!(ts, wts);
    }
    let rel = k.join("rel");
    // No whole bundle among the assets; every file within the limit.
    assert!(!rel.join("kb-assets-0.1.0.kbundle").exists());
    let index_bytes = std::fs::read(rel.join(INDEX)).unwrap();
    assert!(index_bytes.len() as u64 <= limit);
    assert_eq!(split["index"]["size"], index_bytes.len());
    let index = AssetIndex::open(&rel.join(INDEX)).unwrap();
    assert_eq!(index.parts().len(), 4);
    for p in index.parts() {
        let bytes = std::fs::read(rel.join(&p.file)).unwrap();
        assert!(
            bytes.len() as u64 <= limit,
            "{} is {} bytes",
            p.file,
            bytes.len()
        );
        assert_eq!(p.sha256, sha256_hex(&bytes), "{}", p.file);
        assert_eq!(p.size, bytes.len() as u64);
        // Each part is a normal bundle: the whole manifest, targets.json, its objects.
        let b = Bundle::from_bytes(&bytes, ArchiveLimits::default()).unwrap();
        assert_eq!(b.targets(), p.targets);
        assert_eq!(b.manifest().targets.len(), 4);
        assert_eq!(b.manifest_digest(), index.manifest_digest());
        assert_eq!(b.objects().len(), 2, "{}", p.file);
    }
    // A family part of one target is exactly the `--split` bundle of that target.
    assert_eq!(
        std::fs::read(rel.join("kb-assets-0.1.0.sm_9x.kbundle")).unwrap(),
        std::fs::read(k.join("whole/kb-assets-0.1.0.sm_90.kbundle")).unwrap()
    );
    // Reproducible: the same release again, elsewhere, is the same bytes.
    env.ok(
        &k,
        &[
            "package",
            "out",
            "--out",
            "rel-again",
            "--max-asset-size",
            &lim,
        ],
    );
    for f in std::fs::read_dir(&rel).unwrap() {
        let name = f.unwrap().file_name();
        assert_eq!(
            std::fs::read(rel.join(&name)).unwrap(),
            std::fs::read(k.join("rel-again").join(&name)).unwrap(),
            "{name:?}"
        );
    }
    // Without the limit per target (a larger limit), sm_8x is one part.
    let two = json(&env.ok(
        &k,
        &[
            "package",
            "out",
            "--out",
            "rel2",
            "--max-asset-size",
            &(full - 1).to_string(),
            "--json",
        ],
    ));
    let files: Vec<&str> = two["split"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["file"].as_str().unwrap())
        .collect();
    assert_eq!(
        files,
        [
            "kb-assets-0.1.0.sm_8x.kbundle",
            "kb-assets-0.1.0.sm_9x.kbundle",
            "kb-assets-0.1.0.gfx11.kbundle"
        ]
    );

    // Which file a device needs: explain reads the index's manifest (no part needed).
    let e = json(&env.ok(
        &k,
        &[
            "explain",
            &rel.join(INDEX).display().to_string(),
            "--device",
            "sm_90",
            "--json",
        ],
    ));
    assert_eq!(
        e["parts"][0]["file"], "kb-assets-0.1.0.sm_9x.kbundle",
        "{e}"
    );
    assert_eq!(e["parts"].as_array().unwrap().len(), 1);
    // An index is not a bundle, and says so where a bundle is expected.
    let o = env.kb(&k, &["inspect", &rel.join(INDEX).display().to_string()]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the index of a split release"),
        "{}",
        kbuild_tests::text(&o)
    );

    // A Hopper machine downloads the index and its family's part only.
    let dl = env.path().join("download");
    copy(&rel, &dl, &[INDEX, "kb-assets-0.1.0.sm_9x.kbundle"]);
    let idx = dl.join(INDEX).display().to_string();
    let out = env.path().join("pulled");
    let p = json(&env.ok(
        env.path(),
        &[
            "pull",
            &idx,
            "--device",
            "sm_90",
            "--out",
            &out.display().to_string(),
            "--json",
        ],
    ));
    assert_eq!(p["targets"], serde_json::json!(["sm_90"]), "{p}");
    assert_eq!(p["from_cache"], false);
    assert_eq!(
        p["parts_read"],
        serde_json::json!([dl.join("kb-assets-0.1.0.sm_9x.kbundle")])
    );
    assert_eq!(p["parts_skipped"].as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p["manifest"], index.manifest_digest());
    // What it wrote loads and explains as the sm_90 objects.
    let pulled = out.join("kb-assets-0.1.0.sm_90.kbundle");
    let e = json(&env.ok(
        env.path(),
        &[
            "explain",
            &pulled.display().to_string(),
            "--device",
            "sm_90",
            "--json",
        ],
    ));
    let es = e.to_string();
    assert!(
        es.contains("sm_90/scale.cubin") && es.contains("sm_90/shift.cubin"),
        "{e}"
    );
    let pkg = kbuild_loader::Package::open(&pulled).unwrap();
    let sel = pkg.select(
        &kbuild_manifest::compat::Device::parse("sm_90", None, None)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    assert!(sel.complete());
    // The lockfile records the index as where it came from.
    let lock = std::fs::read_to_string(env.path().join("Kbuild.lock")).unwrap();
    assert!(
        lock.contains(INDEX) && lock.contains("sm_90 = \"sha256:"),
        "{lock}"
    );
    // Again: from the cache, still no other part needed.
    let again = json(&env.ok(env.path(), &["pull", &idx, "--device", "sm_90", "--json"]));
    assert_eq!(again["from_cache"], true, "{again}");

    // Every target wanted (no --device): the first missing part is named.
    let err = env.fails(env.path(), &["pull", &idx]);
    assert!(
        err.contains("kb-assets-0.1.0.sm_8x-1.kbundle is missing") && err.contains(INDEX),
        "{err}"
    );
    // An AMD machine whose part is not downloaded: named too.
    let err = env.fails(env.path(), &["pull", &idx, "--device", "gfx1100"]);
    assert!(
        err.contains("kb-assets-0.1.0.gfx11.kbundle is missing"),
        "{err}"
    );

    // A tampered part is refused before it is unpacked, naming the file; nothing is cached.
    let gfx = dl.join("kb-assets-0.1.0.gfx11.kbundle");
    let mut bad = std::fs::read(rel.join("kb-assets-0.1.0.gfx11.kbundle")).unwrap();
    let n = bad.len();
    bad[n - 8] ^= 0x55;
    std::fs::write(&gfx, &bad).unwrap();
    let err = env.fails(env.path(), &["pull", &idx, "--device", "gfx1100"]);
    assert!(
        err.contains("kb-assets-0.1.0.gfx11.kbundle does not match the index")
            && err.contains("tampered"),
        "{err}"
    );
    // The genuine one is accepted; with all parts there, a plain pull reads them all.
    copy(
        &rel,
        &dl,
        &[
            "kb-assets-0.1.0.gfx11.kbundle",
            "kb-assets-0.1.0.sm_8x-1.kbundle",
            "kb-assets-0.1.0.sm_8x-2.kbundle",
        ],
    );
    let all = json(&env.ok(env.path(), &["pull", &idx, "--json"]));
    assert_eq!(all["targets"].as_array().unwrap().len(), 4, "{all}");
    assert_eq!(all["parts_read"].as_array().unwrap().len(), 4, "{all}");
    assert_eq!(all["objects"], 8);

    // A part from another build (same name) is refused even with a matching index entry.
    let edited = dl.join("edited");
    copy(&rel, &edited, &[INDEX]);
    std::fs::write(
        edited.join("kb-assets-0.1.0.sm_9x.kbundle"),
        b"not a bundle",
    )
    .unwrap();
    let err = env.fails(
        env.path(),
        &[
            "pull",
            &edited.join(INDEX).display().to_string(),
            "--device",
            "sm_90",
        ],
    );
    assert!(
        err.contains("sm_9x.kbundle does not match the index"),
        "{err}"
    );

    // Signed: one signature over the manifest every part shares, checked before any part.
    let keys = env.path().join("keys");
    env.ok(
        env.path(),
        &["keygen", "--out", &keys.display().to_string()],
    );
    let key = keys.join("kbuild.key").display().to_string();
    let pubkey = keys.join("kbuild.pub").display().to_string();
    let require = [
        "--signature-policy",
        "require",
        "--trusted-key",
        pubkey.as_str(),
    ];
    let mut args = vec![
        "pull",
        idx.as_str(),
        "--device",
        "gfx1100",
        "--lockfile",
        "s.lock",
    ];
    args.extend_from_slice(&require);
    let err = env.fails(env.path(), &args);
    assert!(err.contains("not signed"), "{err}");
    let out = env.ok(env.path(), &["sign", &idx, "--key", &key]);
    assert!(out.contains(".kbindex.sig"), "{out}");
    let out = env.ok(env.path(), &args);
    assert!(out.contains("signature verified"), "{out}");

    // A registry takes the whole bundle, not an index.
    let reg = env.path().join("reg").display().to_string();
    let err = env.fails(
        &k,
        &[
            "publish",
            &rel.join(INDEX).display().to_string(),
            "--registry",
            &reg,
        ],
    );
    assert!(err.contains("is the index of a split release"), "{err}");
}

#[test]
fn a_limit_no_target_fits_names_the_target_and_bad_sizes_name_the_flag() {
    let env = Env::new();
    let (k, singles, _) = built(&env);
    let smallest = singles.iter().map(|(_, s)| *s).min().unwrap();
    let lim = (smallest - 1).to_string();
    let o = env.kb(
        &k,
        &["package", "out", "--out", "tiny", "--max-asset-size", &lim],
    );
    assert_eq!(o.status.code(), Some(1), "{}", kbuild_tests::text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    // The first target of the first family: sm_89, its own size in the message.
    let sm89 = singles.iter().find(|(t, _)| t == "sm_89").unwrap().1;
    assert!(
        err.contains("target sm_89 alone packs to") && err.contains(&format!("({sm89} bytes)")),
        "{err}"
    );
    // Nothing half-written.
    assert!(!k.join("tiny").exists() || std::fs::read_dir(k.join("tiny")).unwrap().count() == 0);
    for bad in ["2 parsecs", "0", "-1", "1.2.3G"] {
        let flag = format!("--max-asset-size={bad}");
        let o = env.kb(&k, &["package", "out", &flag]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{bad}: {}",
            kbuild_tests::text(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--max-asset-size") && err.contains(&format!("`{bad}` is not a size")),
            "{err}"
        );
    }
    // --split (every target besides the whole bundle) and a limit do not mix.
    let o = env.kb(
        &k,
        &["package", "out", "--split", "--max-asset-size", "2GiB"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", kbuild_tests::text(&o));
}

/// Sharded CI: the merge step splits the merged release, and the parts are the very files one
/// machine's `package --max-asset-size` writes. A shard alone is no release to split.
#[test]
fn a_merged_sharded_release_splits_like_one_build() {
    let env = Env::new();
    let (k, singles, _) = built(&env);
    let limit = singles.iter().map(|(_, s)| *s).max().unwrap().to_string();
    env.ok(
        &k,
        &["package", "out", "--out", "rel", "--max-asset-size", &limit],
    );
    for i in 1..=2 {
        let shard = format!("{i}/2");
        let dir = format!("s{i}");
        env.ok(&k, &["build", "--shard", &shard, "--out", &dir]);
        env.ok(&k, &["package", &dir, "--out", "shards"]);
    }
    let err = env.fails(
        &k,
        &["package", "s1", "--out", "x", "--max-asset-size", &limit],
    );
    assert!(
        err.contains("shard 1/2") && err.contains("--merge"),
        "{err}"
    );
    let mut args = vec![
        "package",
        "--out",
        "merged",
        "--max-asset-size",
        &limit,
        "--json",
    ];
    let shards: Vec<String> = std::fs::read_dir(k.join("shards"))
        .unwrap()
        .map(|e| format!("shards/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    assert_eq!(shards.len(), 2, "{shards:?}");
    args.push("--merge");
    args.extend(shards.iter().map(String::as_str));
    let m = json(&env.ok(&k, &args));
    assert_eq!(m["split"]["parts"].as_array().unwrap().len(), 4, "{m}");
    let mut names: Vec<String> = std::fs::read_dir(k.join("rel"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut merged: Vec<String> = std::fs::read_dir(k.join("merged"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    merged.sort();
    assert_eq!(names, merged);
    for n in &names {
        assert_eq!(
            std::fs::read(k.join("rel").join(n)).unwrap(),
            std::fs::read(k.join("merged").join(n)).unwrap(),
            "{n}"
        );
    }
}
