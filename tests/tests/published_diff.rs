//! `kbuild diff NAME@VERSION ...` (issue 17 item 2): a side published in a registry is read from
//! its manifest alone. Against a real CNCF distribution server (Debian's docker-registry) and a
//! directory registry, with real compiles.

use crate::kbuild_tests;

use kbuild_tests::registry::{json, write_project, Env, Registry, SMALL_A, SMALL_B};
use kbuild_tests::text;

/// The blob GETs the registry served for `repo` in `log` (HEADs and manifests apart).
fn blob_gets<'a>(log: &'a str, repo: &str) -> Vec<&'a str> {
    let needle = format!("\"GET /v2/{repo}/blobs/sha256:");
    log.lines().filter(|l| l.contains(&needle)).collect()
}

#[test]
fn diff_against_a_published_version_fetches_only_its_manifest() {
    assert!(
        kbuild_tests::registry::available(),
        "this test needs Debian's docker-registry (scripts/test installs it)"
    );
    let reg = Registry::start(false);
    let env = Env::new();
    let k = write_project(
        env.path(),
        "kb-small",
        &["sm_89", "gfx1100"],
        &[("scale", SMALL_A), ("shift", SMALL_B)],
    );
    env.ok(&k, &["build"]);
    let dist = env.path().join("dist");
    let d = dist.display().to_string();
    env.ok(&k, &["package", "out", "--out", &d]);
    let bundle = dist.join("kb-small-0.1.0.kbundle").display().to_string();
    let url = reg.url("kb-small");
    let published = json(&env.ok(
        env.path(),
        &[
            "publish",
            &bundle,
            "--registry",
            &url,
            "--plain-http",
            "--json",
        ],
    ));
    assert_eq!(published["published"], true, "{published}");

    // A changed build: `scale` now needs more registers.
    std::fs::write(
        k.join("scale.cu"),
        "#include \"kcompat.h\"\nKC_KERNEL(64) void scale(float* x, float s) { float a = x[threadIdx.x], b = x[threadIdx.x + 64], c = x[threadIdx.x + 128]; x[threadIdx.x] = a * s + b * c / (a + s) + __expf(c) * __logf(b + 1.0f); }\n",
    )
    .unwrap();
    env.ok(&k, &["build"]);

    let before = reg.log_text().len();
    let out = env.kb(
        env.path(),
        &[
            "diff",
            "kb-small@0.1.0",
            &k.join("out").display().to_string(),
            "--registry",
            &url,
            "--plain-http",
            "--format",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let report = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        report["base"], "kb-small@0.1.0",
        "the base side is named: {report:#}"
    );
    let changes = report["changes"].as_array().cloned().unwrap_or_default();
    assert!(
        changes.iter().any(|c| c["kernel"] == "scale")
            && changes.iter().all(|c| c["kernel"] != "shift"),
        "the changed kernel, and only it: {report:#}"
    );
    let log = reg.log_text();
    let gets = blob_gets(&log[before..], "kb-small");
    // The OCI manifest comes from /manifests/; of the blobs (the kbuild manifest and one layer
    // per target) only the kbuild manifest is fetched.
    assert_eq!(
        gets.len(),
        1,
        "only the manifest's blob:\n{}",
        gets.join("\n")
    );

    // The grown objects trip a size gate (exit 1, the gate named).
    let gated = env.kb(
        env.path(),
        &[
            "diff",
            "kb-small@0.1.0",
            &k.join("out").display().to_string(),
            "--registry",
            &url,
            "--plain-http",
            "--fail-on",
            "size:+1%",
        ],
    );
    assert_eq!(gated.status.code(), Some(1), "{}", text(&gated));
    assert!(
        String::from_utf8_lossy(&gated.stdout).contains("scale: object"),
        "{}",
        text(&gated)
    );

    // Release notes against the published version, into a file.
    let notes_file = env.path().join("NOTES.md");
    let notes = env.kb(
        env.path(),
        &[
            "release-notes",
            "kb-small@0.1.0",
            &k.join("out").display().to_string(),
            "--registry",
            &url,
            "--plain-http",
            "--out",
            &notes_file.display().to_string(),
        ],
    );
    assert!(notes.status.success(), "{}", text(&notes));
    let md = std::fs::read_to_string(&notes_file).unwrap();
    assert!(md.starts_with("# kb-small — release notes"), "{md}");
    assert!(
        md.contains("- Kernels added: none") && md.contains("- Targets removed: none"),
        "{md}"
    );
    assert!(
        md.contains("## Resource regressions") && md.contains("## Sizes"),
        "{md}"
    );
    assert!(
        md.contains("| `sm_89` |") && md.contains("| `gfx1100` |"),
        "{md}"
    );
    assert!(md.contains("| all (the bundle's objects) | 4 |"), "{md}");
    // A requirement resolves to a version, and the notes say which.
    let by_req = env.kb(
        env.path(),
        &[
            "release-notes",
            "kb-small@<0.2.0",
            &k.join("out").display().to_string(),
            "--registry",
            &url,
            "--plain-http",
        ],
    );
    assert!(by_req.status.success(), "{}", text(&by_req));
    assert!(
        String::from_utf8_lossy(&by_req.stdout)
            .contains("against kb-small@0.1.0 (kb-small@<0.2.0)."),
        "{}",
        text(&by_req)
    );
    let bad = env.kb(
        env.path(),
        &[
            "release-notes",
            "kb-small@7.0.0",
            "nowhere",
            "--registry",
            &url,
            "--plain-http",
        ],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));

    // NAME@REQ picks the newest match; a version that is not there is bad input (exit 2).
    let req = env.kb(
        env.path(),
        &[
            "diff",
            "kb-small@^0.1",
            "kb-small@0.1.0",
            "--registry",
            &url,
            "--plain-http",
        ],
    );
    assert!(req.status.success(), "{}", text(&req));
    let missing = env.kb(
        env.path(),
        &[
            "diff",
            "kb-small@9.9.9",
            "kb-small@0.1.0",
            "--registry",
            &url,
            "--plain-http",
        ],
    );
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("OLD: kb-small@9.9.9"),
        "{}",
        text(&missing)
    );

    // A directory registry works the same way.
    let dir_reg = env.path().join("reg").display().to_string();
    env.ok(env.path(), &["publish", &bundle, "--registry", &dir_reg]);
    let local = env.kb(
        env.path(),
        &[
            "diff",
            "kb-small@0.1.0",
            &k.join("out").display().to_string(),
            "--registry",
            &dir_reg,
        ],
    );
    assert!(local.status.success(), "{}", text(&local));
    assert!(
        String::from_utf8_lossy(&local.stdout).contains("scale"),
        "{}",
        text(&local)
    );
}
