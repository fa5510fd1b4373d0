//! Trust, end to end: what a hostile registry, bundle or build directory tried, each against
//! the release binary's code paths (the real docker-registry where a registry is needed,
//! crafted files otherwise). One test per attack; docs/RELIABILITY.md maps them.
//!
//! - a package version with `/../` pulled by digest, and packaged from a build dir;
//! - a zstd bomb bundle (3 GiB of zeros in about 100 KB), under a memory and time bound;
//! - `require` applied when a bundle is loaded (explain, the Rust API), not only at pull;
//! - a cache hit that would serve another manifest than the one resolved;
//! - a load index whose records were swapped.

use crate::kbuild_tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kbuild_bundle::bundle::Bundle;
use kbuild_bundle::sign::{Payload, Policy, SecretKey, SignatureFile, Trust};
use kbuild_manifest::fixtures;
use kbuild_tests::fault_proxy::{http, put_blob};
use kbuild_tests::registry::{files_under, json, Env, Registry};
use kbuild_tests::text;

/// A one-kernel sm_89 bundle `kb-trust-VERSION.kbundle` in `dir` whose object is `fill`
/// repeated; no compiler needed.
pub(crate) fn fixture_bundle(dir: &Path, version: &str, fill: &str) -> PathBuf {
    let data = fill.repeat(100).into_bytes();
    let o = fixtures::object("k", "sm_89", "cubin", &data);
    let mut objects = BTreeMap::new();
    objects.insert(o.sha256.clone(), data);
    let m = fixtures::manifest("kb-trust", version, vec![o]);
    let b = Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(b.file_name());
    std::fs::write(&p, b.to_bytes(0).unwrap()).unwrap();
    p
}

fn publish(env: &Env, bundle: &Path, url: &str) -> serde_json::Value {
    json(&env.ok(
        env.path(),
        &[
            "publish",
            &bundle.display().to_string(),
            "--registry",
            url,
            "--plain-http",
            "--json",
        ],
    ))
}

/// A copy of `repo`'s manifest for `tag` whose kbuild manifest (the config blob) is changed by
/// `edit`, pushed by digest only (as a hostile registry serves it); returns that digest.
fn push_edited(
    reg: &Registry,
    repo: &str,
    tag: &str,
    edit: impl Fn(&mut serde_json::Value),
) -> String {
    let accept = [("Accept", "application/vnd.oci.image.manifest.v1+json")];
    let (code, body) = http(
        reg.port,
        "GET",
        &format!("/v2/{repo}/manifests/{tag}"),
        &accept,
        &[],
    )
    .unwrap();
    assert_eq!(code, 200);
    let mut manifest: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let config_digest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let config = std::fs::read(reg.blob_file(&config_digest)).unwrap();
    let mut config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    edit(&mut config);
    let config = serde_json::to_vec_pretty(&config).unwrap();
    manifest["config"]["digest"] = put_blob(reg.port, repo, &config).into();
    manifest["config"]["size"] = config.len().into();
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let digest = kbuild_base::digest::oci_digest(&bytes);
    let (code, body) = http(
        reg.port,
        "PUT",
        &format!("/v2/{repo}/manifests/{digest}"),
        &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
        &bytes,
    )
    .unwrap();
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    digest
}

/// Attack 1: `package.version` = `9.9.9/../../…/x` served by digest (no tag check applies)
/// wrote `x.json` and `x.kbundle` outside the cache and `--out`. Now every manifest parse
/// refuses the version, so nothing is written anywhere.
#[test]
fn attack_1_a_traversing_version_is_refused_at_pull_and_at_package() {
    let reg = Registry::start(false);
    let env = Env::new();
    let url = reg.url("kb-trust");
    publish(
        &env,
        &fixture_bundle(&env.path().join("dist"), "0.1.0", "a"),
        &url,
    );
    let hostile = "9.9.9/../../../../escaped";
    let digest = push_edited(&reg, "kb-trust", "0.1.0", |c| {
        c["package"]["version"] = hostile.into();
    });
    let out = env.path().join("pulled");
    let before = files_under(env.path());
    let o = env.kb(
        env.path(),
        &[
            "pull",
            &format!("kb-trust@{digest}"),
            "--registry",
            &url,
            "--plain-http",
            "--device",
            "sm_89",
            "--out",
            &out.display().to_string(),
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("package.version") && t.contains("9.9.9/../../"),
        "{t}"
    );
    assert_eq!(files_under(env.path()), before, "pull wrote files: {t}");
    assert!(files_under(&env.cache()).is_empty(), "{t}");

    // The same manifest in a build directory: `package` refuses it, nothing under --out or
    // beside it.
    let build = env.path().join("build");
    let data = b"object".repeat(10);
    let o = fixtures::object("k", "sm_89", "cubin", &data);
    std::fs::create_dir_all(build.join("sm_89")).unwrap();
    std::fs::write(build.join(&o.path), &data).unwrap();
    let mut m = fixtures::manifest("kb-trust", "0.1.0", vec![o]);
    m.package.version = hostile.into();
    std::fs::write(build.join("manifest.json"), m.to_json()).unwrap();
    let dist = env.path().join("deep/a/b/dist");
    let before = files_under(env.path());
    let o = env.kb(
        env.path(),
        &[
            "package",
            &build.display().to_string(),
            "--out",
            &dist.display().to_string(),
        ],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("package.version"), "{t}");
    assert_eq!(files_under(env.path()), before, "package wrote files: {t}");

    // A Kbuild.toml with such a name or version is refused where it is written.
    for (name, version, field) in [
        ("my pkg/../../x", "0.1.0", "package.name"),
        ("kb", "1.0.0-/../../x", "package.version"),
    ] {
        let dir = env.path().join(format!("proj-{field}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k.cu"), "__global__ void k() {}\n").unwrap();
        std::fs::write(
            dir.join("Kbuild.toml"),
            format!(
                "[package]\nname = \"{name}\"\nversion = \"{version}\"\n\n[build]\ntargets = [\"sm_89\"]\n\n[kernels.k]\nsource = \"k.cu\"\nentries = [\"k\"]\n"
            ),
        )
        .unwrap();
        let o = env.kb(&dir, &["build"]);
        let t = text(&o);
        assert_ne!(o.status.code(), Some(0), "{t}");
        assert!(t.contains(field) && t.contains("Kbuild.toml"), "{t}");
    }
}

/// One zstd frame of `head` (stored raw) followed by `zeros` zero bytes in RLE blocks: the
/// shape of a decompression bomb, 4 bytes per 128 KiB. No content size in the header.
fn zstd_bomb(head: &[u8], zeros: u64) -> Vec<u8> {
    let mut out = vec![0x28, 0xB5, 0x2F, 0xFD];
    // Frame header: no content size, no single segment, no checksum; window 1 MiB.
    out.push(0x00);
    out.push(10 << 3);
    const MAX: usize = 128 << 10;
    let block = |out: &mut Vec<u8>, kind: u32, size: usize, last: bool| {
        let h = ((size as u32) << 3) | (kind << 1) | u32::from(last);
        out.extend_from_slice(&h.to_le_bytes()[..3]);
    };
    for (i, chunk) in head.chunks(MAX).enumerate() {
        let last = zeros == 0 && (i + 1) * MAX >= head.len();
        block(&mut out, 0, chunk.len(), last);
        out.extend_from_slice(chunk);
    }
    let mut left = zeros;
    while left > 0 {
        let n = left.min(MAX as u64);
        left -= n;
        block(&mut out, 1, n as usize, left == 0);
        out.push(0);
    }
    out
}

/// A ustar header for a regular file `name` of `size` bytes.
pub(crate) fn tar_header(name: &str, size: u64) -> Vec<u8> {
    let mut h = tar::Header::new_ustar();
    h.set_path(name).unwrap();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    h.as_bytes().to_vec()
}

/// `kbuild ARGS` under /usr/bin/time: (output, peak RSS in KiB, wall time).
pub(crate) fn measured(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> (Output, u64, Duration) {
    let rss = env.path().join("rss.txt");
    let mut c = Command::new("/usr/bin/time");
    c.arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(&rss)
        .arg(kbuild_tests::kbuild_bin())
        .args(args)
        .current_dir(env.path())
        .env("KBUILD_CACHE_DIR", env.cache())
        .env("KBUILD_CONFIG", env.path().join("kbuild-config.toml"))
        .env("NO_COLOR", "1")
        .env_remove("KBUILD_SIGNATURE_POLICY")
        .env_remove("KBUILD_MAX_UNPACKED_BYTES");
    for (k, v) in vars {
        c.env(k, v);
    }
    let t = Instant::now();
    let o = c.output().expect("/usr/bin/time (Debian package time)");
    let wall = t.elapsed();
    let kib = std::fs::read_to_string(&rss)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .next_back()
        .unwrap_or(u64::MAX);
    (o, kib, wall)
}

/// Attack 3 (bundles): a ~100 KB file that inflates to 3 GiB of zeros made `kbuild explain`
/// reach 4.2 GB: the archive was inflated before manifest.json was checked to be first.
/// Every shape of it now stays under 256 MiB and 10 s with a clear error: a first entry that
/// is no manifest, an object the manifest does not declare, a declared size over the cap, an
/// oversize manifest, and zeros after the end of the archive.
#[test]
fn attack_3_bundle_bombs_stay_under_256_mib_and_10_s() {
    const GIB3: u64 = 3 << 30;
    let env = Env::new();
    let real = fixture_bundle(&env.path().join("real"), "0.1.0", "a");
    let (manifest_json, object) = {
        let b = Bundle::open(&real, kbuild_bundle::archive::ArchiveLimits::default()).unwrap();
        let (hex, data) = b
            .objects()
            .iter()
            .next()
            .map(|(h, d)| (h.clone(), d.clone()))
            .unwrap();
        (b.manifest_json().to_vec(), (hex, data))
    };
    let padded = |data: &[u8]| {
        let mut v = data.to_vec();
        v.resize(data.len().div_ceil(512) * 512, 0);
        v
    };
    let manifest_entry = [
        tar_header("manifest.json", manifest_json.len() as u64),
        padded(&manifest_json),
    ]
    .concat();
    let undeclared = format!("objects/sha256/{}", "0".repeat(64));
    // A manifest that declares a 3 GiB object (its sha256 is what 3 GiB of zeros would need).
    let mut big: serde_json::Value = serde_json::from_slice(&manifest_json).unwrap();
    big["objects"][0]["size"] = GIB3.into();
    let big = serde_json::to_vec(&big).unwrap();
    let declared = format!("objects/sha256/{}", object.0);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "object first",
            zstd_bomb(&tar_header(&undeclared, GIB3), GIB3),
            "starts with manifest.json",
        ),
        (
            "undeclared object",
            zstd_bomb(
                &[manifest_entry.clone(), tar_header(&undeclared, GIB3)].concat(),
                GIB3,
            ),
            "no object of the manifest has this sha256",
        ),
        (
            "declared 3 GiB object",
            zstd_bomb(
                &[
                    tar_header("manifest.json", big.len() as u64),
                    padded(&big),
                    tar_header(&declared, GIB3),
                ]
                .concat(),
                GIB3,
            ),
            "decompression bomb",
        ),
        (
            "oversize manifest",
            zstd_bomb(&tar_header("manifest.json", 200 << 20), 200 << 20),
            "limit",
        ),
        (
            "zeros after the archive",
            zstd_bomb(
                &[
                    manifest_entry.clone(),
                    tar_header(&declared, object.1.len() as u64),
                    padded(&object.1),
                ]
                .concat(),
                GIB3,
            ),
            "decompression bomb",
        ),
        (
            // Not a bomb but a big file (300 MB, stored uncompressed): it is streamed, so only
            // the 60 MiB first entry is ever in memory.
            "300 MB file",
            zstd_bomb(
                &[
                    tar_header("manifest.json", 60 << 20),
                    vec![b' '; 300_000_000],
                ]
                .concat(),
                0,
            ),
            "bomb.kbundle",
        ),
    ];
    let mut rows = Vec::new();
    for (what, bytes, expect) in &cases {
        let path = env.path().join("bomb.kbundle");
        std::fs::write(&path, bytes).unwrap();
        let (o, kib, wall) = measured(
            &env,
            &["explain", &path.display().to_string(), "--device", "sm_89"],
            &[],
        );
        let t = text(&o);
        rows.push(format!(
            "{what}: {} KB file, {kib} KiB peak RSS, {wall:.2?}",
            bytes.len() / 1000
        ));
        assert_eq!(o.status.code(), Some(2), "{what}: {t}");
        assert!(
            t.contains("bomb.kbundle") && t.contains(expect),
            "{what}: {t}"
        );
        assert!(kib < 256 << 10, "{what}: peak RSS {kib} KiB\n{t}");
        assert!(wall < Duration::from_secs(10), "{what}: {wall:?}");
    }
    eprintln!("{}", rows.join("\n"));
    // An undeclared object that fits: refused from its header, before it is inflated.
    let small = zstd_bomb(
        &[manifest_entry, tar_header(&undeclared, 1 << 20)].concat(),
        1 << 20,
    );
    let e =
        Bundle::from_bytes(&small, kbuild_bundle::archive::ArchiveLimits::default()).unwrap_err();
    assert!(
        e.to_string()
            .contains("no object of the manifest has this sha256"),
        "{e}"
    );
}

/// Attack 5: under `KBUILD_SIGNATURE_POLICY=require`, `kbuild explain` and the loader opened
/// an unsigned bundle; only pull applied the policy. Now a bundle is checked when it is
/// opened, with the `.sig` file beside it.
#[test]
fn attack_5_require_refuses_an_unsigned_bundle_at_load() {
    let env = Env::new();
    let bundle = fixture_bundle(&env.path().join("dist"), "0.1.0", "a");
    let b = bundle.display().to_string();
    let args = ["explain", b.as_str(), "--device", "sm_89"];
    let o = env.kb_env(env.path(), &args, &[("KBUILD_SIGNATURE_POLICY", "require")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("kb-trust 0.1.0") && t.contains("not signed"),
        "{t}"
    );
    // The default policy (warn) loads it and says why it is unverified.
    let o = env.kb(env.path(), &args);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not signed"),
        "{t}"
    );
    // The Rust API, with and without a trusted signature.
    let require = |keys| Trust {
        policy: Policy::Require,
        keys,
    };
    let e = kbuild_loader::Package::open_trusted(&bundle, &require(vec![])).unwrap_err();
    assert!(
        matches!(e, kbuild_loader::LoaderError::Untrusted { .. }),
        "{e}"
    );
    let key = SecretKey::generate().unwrap();
    let opened = Bundle::open(&bundle, kbuild_bundle::archive::ArchiveLimits::default()).unwrap();
    let mut sigs = SignatureFile::new();
    sigs.add(key.sign(Payload::new("kb-trust", "0.1.0", opened.manifest_digest())));
    std::fs::write(kbuild_bundle::signature_path(&bundle), sigs.to_json()).unwrap();
    let p = kbuild_loader::Package::open_trusted(&bundle, &require(vec![key.public()])).unwrap();
    assert!(p.trust_note().unwrap().contains("signed by trusted key"));
    // The key given through the environment, as the C ABI takes it.
    let pubkey = env.path().join("k.pub");
    std::fs::write(&pubkey, key.public().to_text()).unwrap();
    let o = env.kb_env(
        env.path(),
        &args,
        &[
            ("KBUILD_SIGNATURE_POLICY", "require"),
            ("KBUILD_TRUSTED_KEYS", &pubkey.display().to_string()),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    // Another key's signature is still refused.
    let other = SecretKey::generate().unwrap().public();
    assert!(kbuild_loader::Package::open_trusted(&bundle, &require(vec![other])).is_err());
    // A build directory is local and unsigned: no policy applies.
    let dir = env.path().join("build");
    let data = b"object".repeat(10);
    let o = fixtures::object("k", "sm_89", "cubin", &data);
    std::fs::create_dir_all(dir.join("sm_89")).unwrap();
    std::fs::write(dir.join(&o.path), &data).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        fixtures::manifest("kb-trust", "0.1.0", vec![o]).to_json(),
    )
    .unwrap();
    assert!(kbuild_loader::Package::open_trusted(&dir, &require(vec![])).is_ok());
}

/// Attack 6: the pull cache hit compared the artifact and the layers, then opened the
/// manifest the ref file names: a ref pointing at another cached manifest was served as the
/// version resolved. Now a hit must hold the very manifest digest resolved.
#[test]
fn attack_6_a_cache_hit_serves_the_manifest_it_resolved() {
    let reg = Registry::start(false);
    let env = Env::new();
    let url = reg.url("kb-trust");
    for (v, fill) in [("0.1.0", "a"), ("0.2.0", "b")] {
        publish(
            &env,
            &fixture_bundle(&env.path().join("dist"), v, fill),
            &url,
        );
    }
    let pull = |spec: &str| {
        json(&env.ok(
            env.path(),
            &[
                "pull",
                spec,
                "--registry",
                &url,
                "--plain-http",
                "--device",
                "sm_89",
                "--json",
            ],
        ))
    };
    let first = pull("kb-trust@0.1.0");
    let second = pull("kb-trust@0.2.0");
    assert_ne!(first["manifest"], second["manifest"]);
    // Point 0.1.0's ref at 0.2.0's cached manifest, as a damaged or planted ref would.
    let refs: Vec<PathBuf> = files_under(&env.cache())
        .into_iter()
        .filter(|p| p.ends_with("kb-trust/0.1.0.json"))
        .collect();
    assert_eq!(refs.len(), 1, "{refs:?}");
    let mut r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&refs[0]).unwrap()).unwrap();
    r["manifest"] = second["manifest"].clone();
    std::fs::write(&refs[0], serde_json::to_vec_pretty(&r).unwrap()).unwrap();
    let again = pull("kb-trust@0.1.0");
    assert_eq!(again["manifest"], first["manifest"], "{again}");
    assert_eq!(again["version"], "0.1.0");
}

/// Attack 10: `manifest.kbi` was trusted whole while its stamp matched: swapping two object
/// records made explain pick another kernel's object while manifest.json said otherwise.
/// Now the index is bound to its own digest (and the manifest's file identity or content).
#[test]
fn attack_10_a_load_index_with_swapped_records_is_not_used() {
    use kbuild_manifest::load_index::{encode, ManifestStamp, HEADER_LEN, LOAD_INDEX_FILE};
    let env = Env::new();
    let dir = env.path().join("build");
    let mut records = Vec::new();
    for k in ["alpha", "beta"] {
        let data = format!("object of {k}").repeat(10).into_bytes();
        let o = fixtures::object(k, "sm_89", "cubin", &data);
        std::fs::create_dir_all(dir.join("sm_89")).unwrap();
        std::fs::write(dir.join(&o.path), &data).unwrap();
        records.push(o);
    }
    let m = fixtures::manifest("kb-trust", "0.1.0", records);
    let mpath = dir.join("manifest.json");
    std::fs::write(&mpath, m.to_json()).unwrap();
    let meta = std::fs::metadata(&mpath).unwrap();
    let index = encode(&m, ManifestStamp::of(&meta, m.to_json().as_bytes())).unwrap();
    let ix = dir.join(LOAD_INDEX_FILE);
    std::fs::write(&ix, &index).unwrap();
    let explain = || {
        json(&env.ok(
            env.path(),
            &[
                "explain",
                &dir.display().to_string(),
                "--device",
                "sm_89",
                "--json",
                "--kernel",
                "alpha",
            ],
        ))
        .to_string()
    };
    assert!(kbuild_loader::Package::open(&dir).unwrap().has_load_index());
    assert!(explain().contains("sm_89/alpha.cubin"));
    // Swap the kernel-name spans of the two object records (each record starts with it), the
    // header and its stamp untouched: alpha's object now claims to be beta's and the other way
    // round, so an index trusted whole picks beta.cubin for alpha.
    let at = HEADER_LEN + m.kernels.len() * 8;
    let mut swapped = index.clone();
    let (a, b) = swapped[at..].split_at_mut(144);
    a[..8].swap_with_slice(&mut b[..8]);
    std::fs::write(&ix, &swapped).unwrap();
    let shown = explain();
    assert!(
        shown.contains("sm_89/alpha.cubin") && !shown.contains("sm_89/beta.cubin"),
        "{shown}"
    );
    assert!(!kbuild_loader::Package::open(&dir).unwrap().has_load_index());
}

/// The C ABI applies the environment's policy when it opens a bundle: the C example
/// (examples/c/explain.c, gcc) over an unsigned bundle under `require` gets NULL and the
/// loader's message; with the signer's key in `KBUILD_TRUSTED_KEYS` it explains.
#[test]
fn attack_5_the_c_abi_applies_the_policy_too() {
    let env = Env::new();
    let bundle = fixture_bundle(&env.path().join("dist"), "0.1.0", "a");
    let (exe, libdir) = kbuild_tests::c_example(env.path());
    let run = |vars: &[(&str, &str)]| {
        let mut c = Command::new(&exe);
        c.arg(&bundle)
            .arg("sm_89")
            .env("LD_LIBRARY_PATH", &libdir)
            .env_remove("KBUILD_SIGNATURE_POLICY")
            .env_remove("KBUILD_TRUSTED_KEYS");
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output().expect("running the example")
    };
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(&[("KBUILD_SIGNATURE_POLICY", "require")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not signed") && err.contains("kb-trust 0.1.0"),
        "{err}"
    );
    let key = SecretKey::generate().unwrap();
    let opened = Bundle::open(&bundle, kbuild_bundle::archive::ArchiveLimits::default()).unwrap();
    let mut sigs = SignatureFile::new();
    sigs.add(key.sign(Payload::new("kb-trust", "0.1.0", opened.manifest_digest())));
    std::fs::write(kbuild_bundle::signature_path(&bundle), sigs.to_json()).unwrap();
    let pubkey = env.path().join("k.pub");
    std::fs::write(&pubkey, key.public().to_text()).unwrap();
    let o = run(&[
        ("KBUILD_SIGNATURE_POLICY", "require"),
        ("KBUILD_TRUSTED_KEYS", &pubkey.display().to_string()),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
