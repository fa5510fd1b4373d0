//! End-to-end tests of the bundle format: reproducible packaging across directories and
//! mtimes, split bundles, SOURCE_DATE_EPOCH, and every bad input of the bundles issue refused
//! at publish, at pull and at load, leaving no file behind.

use crate::kbuild_tests;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kbuild_bundle::sign::{Policy, Trust};
use kbuild_tests::registry::{files_under, json, write_project, Env, SMALL_A, SMALL_B};

/// Two builds + packages of the same sources in different directories, with different
/// mtimes and separate caches, give byte-identical bundles; `--verify-reproducible` agrees.
#[test]
fn two_builds_in_different_directories_and_mtimes_package_to_identical_bytes() {
    let a = Env::new();
    let b = Env::new();
    let ka = write_project(
        &a.path().join("first/place"),
        "kb-repro",
        &["sm_89", "gfx1100"],
        &[("scale", SMALL_A), ("shift", SMALL_B)],
    );
    let kb = write_project(
        &b.path().join("elsewhere"),
        "kb-repro",
        &["sm_89", "gfx1100"],
        &[("scale", SMALL_A), ("shift", SMALL_B)],
    );
    // Old mtimes on one copy.
    let st = std::process::Command::new("find")
        .arg(&kb)
        .args(["-exec", "touch", "-d", "2001-02-03 04:05:06", "{}", "+"])
        .status()
        .unwrap();
    assert!(st.success());
    let pa = json(&a.ok(&ka, &["package", "--out", "dist", "--json"]));
    let pb = json(&b.ok(
        &kb,
        &[
            "package",
            "--out",
            "dist",
            "--json",
            "--verify-reproducible",
        ],
    ));
    assert_eq!(pb["reproducible"], true, "{pb}");
    let fa = std::fs::read(ka.join("dist/kb-repro-0.1.0.kbundle")).unwrap();
    let fb = std::fs::read(kb.join("dist/kb-repro-0.1.0.kbundle")).unwrap();
    assert_eq!(fa, fb, "bundles differ: {pa} vs {pb}");
    eprintln!("bundle: {} bytes, {}", fa.len(), pa["bundles"][0]["sha256"]);

    // Layout: manifest.json first, then objects/sha256/<hex>; mtime 0, uid/gid 0, mode 0644.
    let mut names = Vec::new();
    let raw = zstd::decode_all(fa.as_slice()).unwrap();
    for e in tar::Archive::new(raw.as_slice()).entries().unwrap() {
        let e = e.unwrap();
        let h = e.header();
        assert_eq!(
            (
                h.mtime().unwrap(),
                h.uid().unwrap(),
                h.gid().unwrap(),
                h.mode().unwrap()
            ),
            (0, 0, 0, 0o644)
        );
        assert!(h.entry_type().is_file());
        names.push(String::from_utf8_lossy(&e.path_bytes()).into_owned());
    }
    assert_eq!(names[0], "manifest.json");
    assert_eq!(
        names.len(),
        1 + 4,
        "2 kernels × 2 targets, each object once"
    );
    assert!(names[1..]
        .iter()
        .all(|n| n.starts_with("objects/sha256/") && n.len() == 15 + 64));

    // SOURCE_DATE_EPOCH is the only timestamp that gets in.
    let o = a.kb_env(
        &ka,
        &["package", "out", "--out", "dated"],
        &[("SOURCE_DATE_EPOCH", "1700000000")],
    );
    assert!(o.status.success(), "{}", kbuild_tests::text(&o));
    let dated = std::fs::read(ka.join("dated/kb-repro-0.1.0.kbundle")).unwrap();
    assert_ne!(dated, fa);
    let raw = zstd::decode_all(dated.as_slice()).unwrap();
    for e in tar::Archive::new(raw.as_slice()).entries().unwrap() {
        assert_eq!(e.unwrap().header().mtime().unwrap(), 1_700_000_000);
    }

    // --split: one bundle per target besides the full one, each a verified subset.
    let s = json(&a.ok(
        &ka,
        &["package", "out", "--out", "split", "--split", "--json"],
    ));
    assert_eq!(s["bundles"].as_array().unwrap().len(), 3, "{s}");
    for t in ["sm_89", "gfx1100"] {
        let p = ka.join(format!("split/kb-repro-0.1.0.{t}.kbundle"));
        let sub = kbuild_bundle::Bundle::open(&p, kbuild_bundle::archive::ArchiveLimits::default())
            .unwrap();
        assert_eq!(sub.targets(), [t]);
        assert_eq!(sub.objects().len(), 2);
    }
}

/// The small project built once per test process.
fn small() -> &'static (PathBuf, Vec<u8>) {
    static B: OnceLock<(PathBuf, Vec<u8>)> = OnceLock::new();
    B.get_or_init(|| {
        let env = Env::new();
        let k = write_project(
            env.path(),
            "kb-small",
            &["sm_89", "gfx1100"],
            &[("scale", SMALL_A), ("shift", SMALL_B)],
        );
        env.ok(&k, &["package", "--out", "dist"]);
        let bytes = std::fs::read(k.join("dist/kb-small-0.1.0.kbundle")).unwrap();
        let keep = env.dir.keep();
        (keep, bytes)
    })
}

/// The entries of the good bundle.
fn good_entries() -> Vec<(String, Vec<u8>)> {
    let raw = zstd::decode_all(small().1.as_slice()).unwrap();
    let mut v = Vec::new();
    for e in tar::Archive::new(raw.as_slice()).entries().unwrap() {
        let mut e = e.unwrap();
        let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
        let mut d = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut d).unwrap();
        v.push((name, d));
    }
    v
}

enum Kind {
    File,
    Symlink(&'static str),
    Hardlink(&'static str),
    /// A device node or FIFO (major 1, minor 3: /dev/null's numbers).
    Special(tar::EntryType),
}

/// A tar+zstd written member by member, names as raw header bytes (as an attacker would).
fn raw_bundle(members: &[(String, Vec<u8>, Kind)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data, kind) in members {
        let mut h = tar::Header::new_gnu();
        let nb = name.as_bytes();
        h.as_old_mut().name[..nb.len()].copy_from_slice(nb);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        match kind {
            Kind::File => h.set_entry_type(tar::EntryType::Regular),
            Kind::Symlink(t) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_link_name(t).unwrap();
            }
            Kind::Hardlink(t) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_link_name(t).unwrap();
            }
            Kind::Special(t) => {
                h.set_entry_type(*t);
                h.set_device_major(1).unwrap();
                h.set_device_minor(3).unwrap();
            }
        }
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    zstd::encode_all(b.into_inner().unwrap().as_slice(), 3).unwrap()
}

fn files(entries: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>, Kind)> {
    entries
        .into_iter()
        .map(|(n, d)| (n, d, Kind::File))
        .collect()
}

/// (label, bytes, text the refusal must contain, extra environment).
type BadCase = (
    &'static str,
    Vec<u8>,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

fn bad_bundles() -> Vec<BadCase> {
    let good = small().1.clone();
    let entries = good_entries();
    let mut v = Vec::new();
    v.push((
        "truncated",
        good[..good.len() / 2].to_vec(),
        "corrupt or truncated",
        vec![],
    ));
    let mut flipped = good.clone();
    let i = flipped.len() * 2 / 3;
    flipped[i] ^= 0x40;
    v.push(("corrupt byte", flipped, "corrupt", vec![]));
    let mut e = entries.clone();
    let last = e.len() - 1;
    e[last].1[100] ^= 1;
    v.push((
        "object digest mismatch",
        raw_bundle(&files(e)),
        "does not match its sha256",
        vec![],
    ));
    let mut e = files(entries.clone());
    e.push(("objects/../../evil".into(), b"x".to_vec(), Kind::File));
    v.push((
        "dot-dot entry",
        raw_bundle(&e),
        "path kbuild never writes",
        vec![],
    ));
    let mut e = files(entries.clone());
    e.push(("/tmp/kbuild-evil-abs".into(), b"x".to_vec(), Kind::File));
    v.push((
        "absolute path",
        raw_bundle(&e),
        "path kbuild never writes",
        vec![],
    ));
    let mut e = files(entries.clone());
    e.insert(
        1,
        (
            format!("objects/sha256/{}", "a".repeat(64)),
            vec![],
            Kind::Symlink("/etc/passwd"),
        ),
    );
    v.push(("symlink", raw_bundle(&e), "is a symbolic link", vec![]));
    let mut e = files(entries.clone());
    e.insert(
        1,
        (
            format!("objects/sha256/{}", "b".repeat(64)),
            vec![],
            Kind::Hardlink("manifest.json"),
        ),
    );
    v.push(("hard link", raw_bundle(&e), "is a hard link", vec![]));
    for (label, kind, says) in [
        (
            "character device",
            tar::EntryType::Char,
            "is a character device",
        ),
        ("block device", tar::EntryType::Block, "is a block device"),
        ("FIFO", tar::EntryType::Fifo, "is a FIFO"),
    ] {
        let mut e = files(entries.clone());
        e.insert(
            1,
            (
                format!("objects/sha256/{}", "c".repeat(64)),
                vec![],
                Kind::Special(kind),
            ),
        );
        v.push((label, raw_bundle(&e), says, vec![]));
    }
    let mut e = files(entries.clone());
    let dup = (e[1].0.clone(), e[1].1.clone(), Kind::File);
    e.push(dup);
    v.push(("duplicate entry", raw_bundle(&e), "appears twice", vec![]));
    // A bomb: a 64 MiB manifest of zeros (a few KiB compressed) over a 1 MB cap, caught by
    // the frame header; and without a declared content size, by the stream.
    let zeros = vec![(
        String::from("manifest.json"),
        vec![0u8; 64 << 20],
        Kind::File,
    )];
    v.push((
        "zstd bomb (stream)",
        raw_bundle(&zeros),
        "decompression bomb",
        vec![("KBUILD_MAX_UNPACKED_BYTES", "1000000")],
    ));
    let mut h = tar::Header::new_ustar();
    h.set_path("manifest.json").unwrap();
    h.set_size(1 << 40);
    h.set_cksum();
    let mut raw = h.as_bytes().to_vec();
    raw.extend_from_slice(&[0u8; 8192]);
    // Refused from its tar header, before a byte is inflated: no manifest is that large.
    v.push((
        "declared size bomb",
        zstd::encode_all(raw.as_slice(), 3).unwrap(),
        "over kbuild's limit",
        vec![],
    ));
    let mut e = entries.clone();
    e.pop();
    v.push((
        "missing object",
        raw_bundle(&files(e)),
        "which the bundle does not contain",
        vec![],
    ));
    v.push((
        "not a kbuild bundle",
        raw_bundle(&[("README.md".into(), b"hello".to_vec(), Kind::File)]),
        "not a kbuild bundle",
        vec![],
    ));
    let mut gz = flate_like_gzip();
    gz.truncate(gz.len());
    v.push((
        "a gzip tarball",
        gz,
        "not a zstd-compressed archive",
        vec![],
    ));
    v
}

fn flate_like_gzip() -> Vec<u8> {
    // gzip magic + junk: what a .tar.gz looks like to the reader.
    let mut v = vec![0x1f, 0x8b, 0x08, 0x00];
    v.extend_from_slice(&[0u8; 64]);
    v
}

/// Every bad input is refused with a clear error at publish (nothing lands in the registry),
/// at pull from a directory registry holding it (nothing in the cache, no lockfile, no
/// output), and at load (`Bundle::open`).
#[test]
fn every_bad_bundle_is_refused_at_publish_pull_and_load_leaving_nothing() {
    for (label, bytes, want, env_vars) in bad_bundles() {
        let env = Env::new();
        let bad = env.path().join("bad.kbundle");
        std::fs::write(&bad, &bytes).unwrap();
        let reg = env.path().join("reg");
        let o = env.kb_env(
            env.path(),
            &[
                "publish",
                &bad.display().to_string(),
                "--registry",
                &reg.display().to_string(),
            ],
            &env_vars,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{label}: publish\n{err}");
        assert!(err.contains(want), "{label}: publish said\n{err}");
        assert!(
            files_under(&reg).is_empty(),
            "{label}: publish left {:?}",
            files_under(&reg)
        );

        // Planted in a directory registry (as a corrupted mirror would hold it).
        let planted = env.path().join("mirror/kb-small/0.1.0");
        std::fs::create_dir_all(&planted).unwrap();
        std::fs::write(planted.join("kb-small-0.1.0.kbundle"), &bytes).unwrap();
        let work = env.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let mirror = env.path().join("mirror").display().to_string();
        let o = env.kb_env(
            &work,
            &[
                "pull",
                "kb-small@0.1.0",
                "--registry",
                &mirror,
                "--out",
                "out",
            ],
            &env_vars,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{label}: pull\n{err}");
        assert!(err.contains(want), "{label}: pull said\n{err}");
        assert!(
            files_under(&env.cache()).is_empty(),
            "{label}: pull cached {:?}",
            files_under(&env.cache())
        );
        assert!(
            files_under(&work).is_empty(),
            "{label}: pull wrote {:?}",
            files_under(&work)
        );

        // At load.
        let limits = match env_vars.first() {
            Some(_) => kbuild_bundle::archive::ArchiveLimits {
                max_unpacked: 1_000_000,
                max_entries: 1000,
            },
            None => kbuild_bundle::archive::ArchiveLimits::default(),
        };
        let e = kbuild_bundle::Bundle::from_bytes(&bytes, limits).unwrap_err();
        assert!(e.to_string().contains(want), "{label}: load said {e}");
    }
    assert!(!Path::new("/tmp/kbuild-evil-abs").exists());
}

/// A manifest changed after signing (objects still match it) is refused at load and at pull
/// under `require`; the original verifies.
#[test]
fn tampered_manifest_fails_the_signature_at_load_and_pull() {
    let env = Env::new();
    let keys = env.path().join("keys").display().to_string();
    env.ok(env.path(), &["keygen", "--out", &keys]);
    let good = env.path().join("good/kb-small-0.1.0.kbundle");
    std::fs::create_dir_all(good.parent().unwrap()).unwrap();
    std::fs::write(&good, &small().1).unwrap();
    env.ok(
        env.path(),
        &[
            "sign",
            &good.display().to_string(),
            "--key",
            &format!("{keys}/kbuild.key"),
        ],
    );
    let mut trust = Trust {
        policy: Policy::Require,
        keys: vec![],
    };
    trust
        .add_key(&format!("{keys}/kbuild.pub"), Path::new("."))
        .unwrap();
    kbuild_bundle::verify_bundle_file(
        &good,
        &trust,
        kbuild_bundle::archive::ArchiveLimits::default(),
    )
    .unwrap();

    let mut e = good_entries();
    let m = String::from_utf8(e[0].1.clone()).unwrap();
    assert!(m.contains("linux-x86_64"));
    e[0].1 = m.replacen("linux-x86_64", "linux-x86_65", 1).into_bytes();
    let bad = env.path().join("bad/kb-small-0.1.0.kbundle");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, raw_bundle(&files(e))).unwrap();
    std::fs::copy(
        kbuild_bundle::signature_path(&good),
        kbuild_bundle::signature_path(&bad),
    )
    .unwrap();
    kbuild_bundle::Bundle::open(&bad, kbuild_bundle::archive::ArchiveLimits::default())
        .expect("objects still match the edited manifest");
    let err = kbuild_bundle::verify_bundle_file(
        &bad,
        &trust,
        kbuild_bundle::archive::ArchiveLimits::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("not this manifest"), "{err}");

    let reg_dir = env.path().join("reg");
    let reg = reg_dir.display().to_string();
    // Publish checks the .sig against the bundle before uploading anything.
    let err = env.fails(
        env.path(),
        &["publish", &bad.display().to_string(), "--registry", &reg],
    );
    assert!(
        err.contains("kb-small-0.1.0.kbundle.sig does not match")
            && err.contains("not this manifest"),
        "{err}"
    );
    assert!(files_under(&reg_dir).is_empty());
    // A registry that holds it anyway (a mirror that took the files as they were): pull
    // refuses it.
    let sig = kbuild_bundle::signature_path(&bad);
    let stale = std::fs::read(&sig).unwrap();
    std::fs::remove_file(&sig).unwrap();
    env.ok(
        env.path(),
        &["publish", &bad.display().to_string(), "--registry", &reg],
    );
    std::fs::write(
        reg_dir.join("kb-small/0.1.0/kb-small-0.1.0.kbundle.sig"),
        stale,
    )
    .unwrap();
    let err = env.fails(
        env.path(),
        &[
            "pull",
            "kb-small@0.1.0",
            "--registry",
            &reg,
            "--signature-policy",
            "require",
            "--trusted-key",
            &format!("{keys}/kbuild.pub"),
        ],
    );
    assert!(
        err.contains("signature check failed") && err.contains("not this manifest"),
        "{err}"
    );
    assert!(files_under(&env.cache()).is_empty());
    let _ = std::io::stderr().flush();
}

/// Identical objects (a variant axis the code does not read) are stored once, and `package`
/// says so, in text and JSON.
#[test]
fn identical_objects_are_stored_once_and_reported() {
    let env = Env::new();
    let k = write_project(env.path(), "kb-dedup", &["sm_89"], &[("scale", SMALL_A)]);
    let toml = std::fs::read_to_string(k.join("Kbuild.toml")).unwrap();
    std::fs::write(
        k.join("Kbuild.toml"),
        toml.replace(
            "entries = [\"scale\"]",
            "entries = [\"scale\"]\nvariants = { UNUSED = [1, 2, 3] }",
        ),
    )
    .unwrap();
    let out = env.ok(&k, &["package", "--out", "dist"]);
    assert!(
        out.contains(
            "3 objects, 1 stored: 2 identical to another (across variants or targets) stored once"
        ),
        "{out}"
    );
    let p = json(&env.ok(&k, &["package", "--out", "dist", "--json"]));
    assert_eq!(p["objects"], 1, "{p}");
    assert_eq!(p["object_records"], 3, "{p}");
    assert!(p["bytes_saved"].as_u64().unwrap_or(0) > 0, "{p}");
    // The bundle holds one copy, and every record loads from it.
    let bundle = k.join("dist/kb-dedup-0.1.0.kbundle");
    let b = kbuild_bundle::bundle::Bundle::open(
        &bundle,
        kbuild_bundle::archive::ArchiveLimits::default(),
    )
    .unwrap();
    assert_eq!(b.objects().len(), 1);
    assert_eq!(b.manifest().objects.len(), 3);
    assert!(b
        .manifest()
        .objects
        .iter()
        .all(|o| b.object(&o.sha256).is_some()));
}
