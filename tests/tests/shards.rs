//! Sharded builds, through the `kbuild` binary: `kbuild build --shard I/N` on N "runners"
//! (out-dirs), `kbuild package` of each shard, `kbuild package --merge` into the release
//! bundle, byte-identical to packaging one build of every target; what merge and publish
//! refuse.

use crate::kbuild_tests;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use kbuild_tests::registry::{files_under, json, write_project, Env};
use kbuild_tests::{events, manifest, text, Scratch};

const EPOCH: &str = "1700000000";

/// `kbuild ARGS` in `cwd` with the scratch's (shared) cache and a fixed SOURCE_DATE_EPOCH.
fn kb(s: &Scratch, cwd: &Path, args: &[&str]) -> Output {
    Command::new(kbuild_tests::kbuild_bin())
        .args(args)
        .current_dir(cwd)
        .env("KBUILD_CACHE_DIR", &s.cache)
        .env("KBUILD_CONFIG", s.path().join("kbuild-config.toml"))
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("NO_COLOR", "1")
        .env_remove("KBUILD_LAUNCHER")
        .env_remove("KBUILD_REGISTRY")
        .env_remove("KBUILD_SIGNATURE_POLICY")
        .output()
        .expect("running kbuild")
}

fn ok(s: &Scratch, cwd: &Path, args: &[&str]) -> Output {
    let o = kb(s, cwd, args);
    assert!(o.status.success(), "kbuild {args:?}\n{}", text(&o));
    o
}

fn sha256_of(p: &Path) -> String {
    use sha2::Digest;
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    format!("{:x}", sha2::Sha256::digest(&b))
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// (a) Three shards of the repository's default target list, each built in its own out-dir
/// and packaged, merge to the bundle `kbuild package` makes of one build of every target,
/// byte for byte; the shards are disjoint and cover the list; an empty shard (more shards than
/// targets) builds nothing, packages as a shard and merges as nothing. The same list split by
/// vendor (two `--targets` builds) merges to the same bytes.
#[test]
fn three_shards_of_the_default_targets_merge_to_the_single_machine_bundle() {
    let s = Scratch::with_repo_kernels_shared_cache("repo");
    let k = s.path().join("repo/kernels");

    // The single machine.
    ok(&s, &k, &["build", "--out", "full", "-q"]);
    let full = manifest(&k.join("full"));
    assert!(
        full.get("shard").is_none(),
        "an ordinary manifest has no shard field"
    );
    let declared = strings(&full["targets"]);
    assert_eq!(declared.len(), 18, "the default target list");
    ok(&s, &k, &["package", "full", "--out", "single"]);
    let single = k.join("single/kbuild-kernels-0.1.0.kbundle");

    // The assignment, as --print-shards shows it.
    let plan = json(&String::from_utf8_lossy(
        &ok(&s, &k, &["build", "--print-shards", "3", "--json"]).stdout,
    ));
    assert_eq!(plan["schema"], "kbuild.shards/v1");
    assert_eq!(strings(&plan["targets"]), declared);

    let mut seen: Vec<String> = Vec::new();
    let mut bundles = Vec::new();
    for i in 1..=3 {
        let out = format!("shard{i}");
        let o = ok(
            &s,
            &k,
            &[
                "build",
                "--shard",
                &format!("{i}/3"),
                "--out",
                &out,
                "--json",
            ],
        );
        let ev = events(&o);
        let shard = ev
            .iter()
            .find(|e| e["event"] == "shard")
            .unwrap_or_else(|| panic!("no shard event\n{}", text(&o)));
        assert_eq!(
            (shard["index"].as_u64(), shard["count"].as_u64()),
            (Some(i), Some(3))
        );
        let mine = strings(&shard["targets"]);
        assert_eq!(strings(&shard["all_targets"]), declared);
        assert_eq!(
            mine,
            strings(&plan["shards"][(i - 1) as usize]["targets"]),
            "--print-shards and the build agree"
        );
        assert!(!mine.is_empty());
        let m = manifest(&k.join(&out));
        assert_eq!(strings(&m["targets"]), mine);
        assert_eq!(m["shard"]["index"], i);
        assert_eq!(m["shard"]["count"], 3);
        assert_eq!(strings(&m["shard"]["targets"]), declared);
        // Only its targets were built.
        for obj in m["objects"].as_array().unwrap() {
            assert!(mine.contains(&obj["target"].as_str().unwrap().to_string()));
        }
        seen.extend(mine);

        let dist = format!("dist{i}");
        let p = json(&String::from_utf8_lossy(
            &ok(&s, &k, &["package", &out, "--out", &dist, "--json"]).stdout,
        ));
        assert_eq!(p["shard"]["index"], i, "{p}");
        let file = k
            .join(&dist)
            .join(format!("kbuild-kernels-0.1.0.shard-{i}-of-3.kbundle"));
        assert!(file.is_file(), "{p}");
        bundles.push(file);
    }
    // Disjoint and covering, in declared order once sorted back.
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "shards overlap: {seen:?}");
    assert_eq!(
        unique,
        declared.iter().collect::<BTreeSet<_>>(),
        "shards cover the list"
    );

    // An empty shard: 18 targets over 19 shards leaves shard 19 without one.
    let o = ok(&s, &k, &["build", "--shard", "19/19", "--out", "empty"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("shard 19/19 has no targets"),
        "{}",
        text(&o)
    );
    let m = manifest(&k.join("empty"));
    assert_eq!(m["targets"], serde_json::json!([]));
    assert_eq!(m["objects"], serde_json::json!([]));
    ok(&s, &k, &["package", "empty", "--out", "dist-empty"]);
    let empty = k.join("dist-empty/kbuild-kernels-0.1.0.shard-19-of-19.kbundle");
    assert!(empty.is_file());

    // A stale signature where the merged bundle goes is removed, as package does.
    std::fs::create_dir_all(k.join("merged")).unwrap();
    let sig = k.join("merged/kbuild-kernels-0.1.0.kbundle.sig");
    std::fs::write(&sig, b"{\"not\": \"a signature of this bundle\"}").unwrap();

    let mut args: Vec<String> = vec!["package".into(), "--merge".into()];
    args.extend(bundles.iter().map(|b| b.display().to_string()));
    args.push(empty.display().to_string());
    args.extend(["--out".into(), "merged".into(), "--json".into()]);
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let merged = json(&String::from_utf8_lossy(&ok(&s, &k, &argv).stdout));
    let out = k.join("merged/kbuild-kernels-0.1.0.kbundle");
    assert_eq!(
        sha256_of(&out),
        sha256_of(&single),
        "merged bundle differs from the single-machine one: {merged}"
    );
    assert_eq!(
        merged["bundles"][0]["sha256"],
        format!("sha256:{}", sha256_of(&single))
    );
    assert!(
        !sig.exists(),
        "the stale .sig was left beside the merged bundle"
    );

    // A release split by vendor, as a CI matrix runs it (a runner with ROCm, one with CUDA):
    // two builds of disjoint --targets lists, each packaged, merge to the same bundle. The
    // merge lists targets in the order of its inputs: given in the project's order (its NVIDIA
    // targets come first), that is the single machine's manifest.
    let (amd, nvidia): (Vec<&String>, Vec<&String>) =
        declared.iter().partition(|t| t.starts_with("gfx"));
    assert!(!amd.is_empty() && !nvidia.is_empty());
    assert_eq!(
        nvidia.iter().chain(&amd).copied().collect::<Vec<_>>(),
        declared.iter().collect::<Vec<_>>(),
        "the project lists its NVIDIA targets first"
    );
    let mut halves = Vec::new();
    for (name, list) in [("nvidia", nvidia), ("amd", amd)] {
        let targets: Vec<&str> = list.iter().map(|t| t.as_str()).collect();
        ok(
            &s,
            &k,
            &[
                "build",
                "--targets",
                &targets.join(","),
                "--out",
                name,
                "-q",
            ],
        );
        let dist = k.join(format!("dist-{name}"));
        ok(
            &s,
            &k,
            &["package", name, "--out", &dist.display().to_string()],
        );
        let bundle = std::fs::read_dir(&dist)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "kbundle"))
            .unwrap_or_else(|| panic!("no bundle in {}", dist.display()));
        halves.push(bundle.display().to_string());
    }
    let mut args: Vec<&str> = vec!["package", "--merge"];
    args.extend(halves.iter().map(String::as_str));
    args.extend(["--out", "merged-vendors"]);
    ok(&s, &k, &args);
    assert_eq!(
        sha256_of(&k.join("merged-vendors/kbuild-kernels-0.1.0.kbundle")),
        sha256_of(&single),
        "the vendor halves merge to another bundle than the single machine's"
    );
}

/// A kernel whose result depends on a define (`FACTOR`, 2 unless given).
const FACTOR_KERNEL: &str =
    "#ifndef FACTOR\n#define FACTOR 2.0f\n#endif\nKC_KERNEL(64) void scale(float* x) { x[threadIdx.x] *= FACTOR; }";
const SHIFT_KERNEL: &str =
    "KC_KERNEL(128) void shift(float* x, float s) { x[blockIdx.x * 128 + threadIdx.x] += s; }";

/// A small project (sm_89 + gfx1100) in `env` at `sub`, of `version`.
fn small(env: &Env, sub: &str, version: &str) -> std::path::PathBuf {
    let k = write_project(
        &env.path().join(sub),
        "kb-shards",
        &["sm_89", "gfx1100"],
        &[("scale", FACTOR_KERNEL), ("shift", SHIFT_KERNEL)],
    );
    let toml = k.join("Kbuild.toml");
    let t = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        t.replace("version = \"0.1.0\"", &format!("version = \"{version}\"")),
    )
    .unwrap();
    k
}

/// Build shard I/2 of `k` into `out` and package it into `dist`; the bundle's path.
fn shard_bundle(env: &Env, k: &Path, i: u32, out: &str, extra_env: &[(&str, &str)]) -> String {
    let o = env.kb_env(
        k,
        &["build", "--shard", &format!("{i}/2"), "--out", out, "-q"],
        extra_env,
    );
    assert!(o.status.success(), "{}", text(&o));
    let dist = format!("dist-{out}");
    env.ok(k, &["package", out, "--out", &dist]);
    let files = files_under(&k.join(&dist));
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].display().to_string()
}

/// (b) + (c) Merge refuses shards of other sources (a changed kernel source, another
/// version), overlapping targets with other bytes (a shard built with another define) and a
/// declared target no shard holds (unless --allow-partial), naming the files, the field and
/// the kernel/target, and writes nothing; publish refuses a shard bundle.
#[test]
fn merge_refuses_other_sources_conflicting_bytes_and_gaps_and_publish_refuses_shards() {
    let env = Env::new();
    let k = small(&env, "a", "0.1.0");
    // sm_89 (cubin jobs weigh more) goes to shard 1, gfx1100 to shard 2.
    let s1 = shard_bundle(&env, &k, 1, "s1", &[]);
    let s2 = shard_bundle(&env, &k, 2, "s2", &[]);
    assert!(s1.ends_with("kb-shards-0.1.0.shard-1-of-2.kbundle"), "{s1}");
    assert!(s2.ends_with("kb-shards-0.1.0.shard-2-of-2.kbundle"), "{s2}");
    assert_eq!(
        manifest(&k.join("s1"))["targets"],
        serde_json::json!(["sm_89"])
    );

    // The good merge equals the single-machine package of the same sources.
    env.ok(&k, &["package", "--merge", &s1, &s2, "--out", "merged"]);
    env.ok(&k, &["package", "--out", "single"]);
    assert_eq!(
        sha256_of(&k.join("merged/kb-shards-0.1.0.kbundle")),
        sha256_of(&k.join("single/kb-shards-0.1.0.kbundle"))
    );

    let refused = |args: &[&str], want: &[&str]| {
        let e = env.fails(&k, args);
        for w in want {
            assert!(e.contains(w), "{args:?}: `{w}` not in\n{e}");
        }
        assert!(
            files_under(&k.join("bad")).is_empty(),
            "a refused merge wrote {:?}",
            files_under(&k.join("bad"))
        );
    };

    // A changed kernel source (a copy of the project, shift.cu edited).
    let changed = env.path().join("b/kernels");
    kbuild_tests::copy_dir(&k, &changed);
    for d in ["s1", "s2", "dist-s1", "dist-s2", "merged", "single", "out"] {
        let _ = std::fs::remove_dir_all(changed.join(d));
    }
    let src = changed.join("shift.cu");
    let body = std::fs::read_to_string(&src).unwrap();
    std::fs::write(&src, body.replace("+= s", "-= s")).unwrap();
    let c2 = shard_bundle(&env, &changed, 2, "s2", &[]);
    refused(
        &["package", "--merge", &s1, &c2, "--out", "bad"],
        &[&s1, &c2, "shard.sources"],
    );

    // Another version.
    let v = small(&env, "c", "0.2.0");
    let v2 = shard_bundle(&env, &v, 2, "s2", &[]);
    refused(
        &["package", "--merge", &s1, &v2, "--out", "bad"],
        &[&s1, &v2, "package.version", "\"0.1.0\"", "\"0.2.0\""],
    );

    // Overlapping sm_89 with other bytes: shard 1 built again with -DFACTOR=3.0f (added by a
    // launcher, which is part of no cache key: hence its own cache).
    let launcher = env.path().join("factor3.sh");
    std::fs::write(&launcher, "#!/bin/sh\nexec \"$@\" -DFACTOR=3.0f\n").unwrap();
    kbuild_tests::make_executable(&launcher);
    let other_cache = env.path().join("cache-factor3");
    let f1 = shard_bundle(
        &env,
        &k,
        1,
        "f1",
        &[
            ("KBUILD_LAUNCHER", launcher.to_str().unwrap()),
            ("KBUILD_CACHE_DIR", other_cache.to_str().unwrap()),
        ],
    );
    let a = manifest(&k.join("s1"));
    let b = manifest(&k.join("f1"));
    let sha = |m: &serde_json::Value| -> String {
        m["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kernel"] == "scale")
            .map(|o| o["sha256"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_ne!(sha(&a), sha(&b), "the define changed the object");
    refused(
        &["package", "--merge", &s1, &s2, &f1, "--out", "bad"],
        &[&s1, &f1, "scale for sm_89", &sha(&a), &sha(&b)],
    );
    // Identical overlap is fine: shard 1 twice.
    env.ok(&k, &["package", "--merge", &s1, &s2, &s1, "--out", "twice"]);
    assert_eq!(
        sha256_of(&k.join("twice/kb-shards-0.1.0.kbundle")),
        sha256_of(&k.join("single/kb-shards-0.1.0.kbundle"))
    );

    // A declared target no shard holds.
    refused(
        &["package", "--merge", &s1, "--out", "bad"],
        &[&s1, "gfx1100", "--allow-partial"],
    );
    env.ok(
        &k,
        &[
            "package",
            "--merge",
            &s1,
            "--out",
            "partial",
            "--allow-partial",
        ],
    );
    let partial = k.join("partial/kb-shards-0.1.0.kbundle");
    let reg = env.path().join("registry");
    let (p, r) = (partial.to_str().unwrap(), reg.to_str().unwrap());
    let e = env.fails(&k, &["publish", p, "--registry", r]);
    assert!(e.contains("partial"), "{e}");

    // (c) publish refuses a shard bundle, uploading nothing; --allow-partial lets it through.
    let e = env.fails(&k, &["publish", &s1, "--registry", r]);
    assert!(
        e.contains("shard 1/2") && e.contains("merge the shards first"),
        "{e}"
    );
    assert!(files_under(&reg).is_empty(), "{:?}", files_under(&reg));
    env.ok(&k, &["publish", &s1, "--registry", r, "--allow-partial"]);
    // The merged release publishes (to another registry: versions are immutable).
    let m = k.join("merged/kb-shards-0.1.0.kbundle");
    let reg2 = env.path().join("registry2");
    env.ok(
        &k,
        &[
            "publish",
            m.to_str().unwrap(),
            "--registry",
            reg2.to_str().unwrap(),
        ],
    );
}

/// `--shard` values outside 1..=N are usage errors naming the flag.
#[test]
fn bad_shard_values_are_usage_errors() {
    let env = Env::new();
    let k = small(&env, "a", "0.1.0");
    for bad in ["0/2", "3/2", "1/0", "2", "x/2"] {
        let o = env.kb(&k, &["build", "--shard", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("--shard"), "{bad}: {e}");
    }
}

/// Shard bundles of fixture objects (no compile): sm_89 goes to shard 1/2, gfx1100 to 2/2,
/// as `assign` over their recorded costs gives them. Each as `(file, bundle)`, written to
/// `dir`.
fn fixture_shards(dir: &Path) -> Vec<(std::path::PathBuf, kbuild_bundle::Bundle)> {
    use kbuild_manifest::manifest::{Manifest, Shard};
    let targets = ["sm_89", "gfx1100"];
    let (m, objects) = kbuild_manifest::fixtures::bundle_parts(&targets);
    let whole = Manifest::from_json(&m).unwrap();
    let costs = vec![54, 48];
    let of = kbuild_manifest::shard::assign(&costs, 2);
    assert_eq!(of, [0, 1]);
    std::fs::create_dir_all(dir).unwrap();
    (0..2)
        .map(|i| {
            let mut s = whole.clone();
            s.targets = vec![targets[i].to_string()];
            s.objects.retain(|o| o.target == targets[i]);
            s.shard = Some(Shard {
                index: i as u32 + 1,
                count: 2,
                targets: whole.targets.clone(),
                sources: "s".repeat(64),
                kbuild: "0.1.0".into(),
                costs: costs.clone(),
            });
            write_shard(dir, &format!("shard-{}.kbundle", i + 1), &s, &objects)
        })
        .collect()
}

/// `m` with `objects` (those it names) as the bundle file `dir/name`.
fn write_shard(
    dir: &Path,
    name: &str,
    m: &kbuild_manifest::manifest::Manifest,
    objects: &std::collections::BTreeMap<String, Vec<u8>>,
) -> (std::path::PathBuf, kbuild_bundle::Bundle) {
    let keep: BTreeSet<&str> = m.objects.iter().map(|o| o.sha256.as_str()).collect();
    let objs = objects
        .iter()
        .filter(|(k, _)| keep.contains(k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let b = kbuild_bundle::Bundle::from_parts(m.to_json().into_bytes(), objs, None).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, b.to_bytes(0).unwrap()).unwrap();
    (path, b)
}

/// Issue 26, class 5. The runner of shard 2/2 is the attacker: its bundle also lists shard
/// 1's target sm_89 and adds a (kernel, variant) record the honest shard lacks (whose object
/// `explain` would then pick). Merge recomputes each shard's targets from the declared list
/// and I/N with the build's own assignment and compares every input's (kernel, variant) jobs
/// of a target, so both forgeries are refused naming the file, the target and the key, and
/// nothing is written.
#[test]
fn merge_refuses_a_forged_shard_naming_the_file_target_and_key() {
    let env = Env::new();
    let dir = env.path().join("shards");
    let shards = fixture_shards(&dir);
    let (s1, s2) = (
        shards[0].0.display().to_string(),
        shards[1].0.display().to_string(),
    );
    // The honest pair merges.
    env.ok(
        env.path(),
        &["package", "--merge", &s1, &s2, "--out", "good"],
    );
    assert_eq!(files_under(&env.path().join("good")).len(), 1);

    let forge = |m: &mut kbuild_manifest::manifest::Manifest, target: &str| {
        let data = b"forged object".to_vec();
        let mut o = m.objects[0].clone();
        o.target = target.into();
        o.variant = Some("evil".into());
        o.path = format!("{target}/k.evil.cubin");
        o.sha256 = kbuild_base::digest::sha256_hex(&data);
        o.size = data.len() as u64;
        m.objects.push(o.clone());
        [(o.sha256, data)]
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let refused = |forged: &str, want: &[&str]| {
        let e = env.fails(
            env.path(),
            &["package", "--merge", &s1, forged, "--out", "bad"],
        );
        for w in want {
            assert!(e.contains(w), "`{w}` not in\n{e}");
        }
        assert!(
            files_under(&env.path().join("bad")).is_empty(),
            "a refused merge wrote"
        );
    };

    // Shard 2/2 also lists sm_89, with k.evil for it.
    let mut m = shards[1].1.manifest().clone();
    m.targets.push("sm_89".into());
    let mut objs = shards[1].1.objects().clone();
    objs.extend(forge(&mut m, "sm_89"));
    let (f, _) = write_shard(&dir, "forged-target.kbundle", &m, &objs);
    let f = f.display().to_string();
    refused(
        &f,
        &[
            &format!("{f}: shard 2/2 holds target sm_89"),
            "gives to shard 1/2",
        ],
    );

    // Shard 2/2 keeps its own target but adds k.evil to it: more jobs than its cost.
    let mut m = shards[1].1.manifest().clone();
    let mut objs = shards[1].1.objects().clone();
    objs.extend(forge(&mut m, "gfx1100"));
    let (f, _) = write_shard(&dir, "forged-key.kbundle", &m, &objs);
    let f = f.display().to_string();
    refused(
        &f,
        &[
            &format!("{f}: target gfx1100 has 2 (kernel, variant) jobs"),
            "k.evil",
        ],
    );

    // A "full" bundle (no shard object, nothing to assign) adding k.evil to sm_89, which
    // the honest shard 1 also holds.
    let mut m = shards[0].1.manifest().clone();
    m.shard = None;
    m.targets = vec!["sm_89".into(), "gfx1100".into()];
    m.objects = shards
        .iter()
        .flat_map(|(_, b)| b.manifest().objects.clone())
        .collect();
    let mut objs = shards[0].1.objects().clone();
    objs.extend(shards[1].1.objects().clone());
    objs.extend(forge(&mut m, "sm_89"));
    let (f, _) = write_shard(&dir, "forged-full.kbundle", &m, &objs);
    let f = f.display().to_string();
    refused(
        &f,
        &[
            &format!("{f}: target sm_89 has k.evil"),
            &format!("{s1} (also holding sm_89)"),
        ],
    );
}
