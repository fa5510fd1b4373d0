use super::*;

fn project(dir: &Path, toml: &str) -> Result<Project, ConfigError> {
    std::fs::create_dir_all(dir.join("include")).unwrap();
    std::fs::write(dir.join("k.cu"), "").unwrap();
    parse(&dir.join(FILE_NAME), toml)
}

const GOOD: &str = r#"
[package]
name = "demo"
version = "1.2.3"

[build]
targets = ["sm_89", "gfx1100"]
include-dirs = ["include"]

[kernels.gemv]
source = "k.cu"
entries = ["gemv"]
block-size = 256
defines = { EPS = 1e-6, FAST = true }
variants = { ROWS = [1, 2], VEC = [4, 8] }
"#;

/// Issue 27, item 11: `block-size` per entry pattern beside the plain integer; an exact
/// name beats patterns, two patterns disagreeing on one entry is an error naming both.
#[test]
fn block_size_per_entry_pattern() {
    let d = tempfile::tempdir().unwrap();
    let table = GOOD.replace(
        "block-size = 256",
        "block-size = { \"rmsnorm_*\" = 256, \"*_bf16\" = 128, \"softmax<*>\" = 64 }",
    );
    let p = project(d.path(), &table).unwrap();
    let b = &p.kernels[0].block_size;
    assert_eq!(b.for_entry("rmsnorm_f32"), Ok(Some(256)));
    assert_eq!(b.for_entry("gelu_bf16"), Ok(Some(128)));
    assert_eq!(b.for_entry("_Z7softmaxIfEvPfi"), Ok(Some(64)));
    assert_eq!(b.for_entry("other"), Ok(None));
    let e = b.for_entry("rmsnorm_bf16").unwrap_err().to_string();
    assert_eq!(
        e,
        "block-size: entry `rmsnorm_bf16` matches `*_bf16` (128) and `rmsnorm_*` (256); give it by name"
    );
    let exact = GOOD.replace(
        "block-size = 256",
        "block-size = { \"rmsnorm_*\" = 256, \"*_bf16\" = 128, rmsnorm_bf16 = 32 }",
    );
    let p = project(d.path(), &exact).unwrap();
    assert_eq!(
        p.kernels[0].block_size.for_entry("rmsnorm_bf16"),
        Ok(Some(32))
    );
    // The plain integer is every entry's.
    let p = project(d.path(), GOOD).unwrap();
    assert_eq!(p.kernels[0].block_size, KernelBlockSize::All(256));
    assert_eq!(p.kernels[0].block_size.for_entry("anything"), Ok(Some(256)));
    for (bad, want) in [
        (
            "block-size = { \"a_*\" = 0 }",
            "block-size must be 1..=1024",
        ),
        (
            "block-size = { \"a_*\" = 2048 }",
            "block-size must be 1..=1024",
        ),
        ("block-size = { \"a[\" = 64 }", "without a closing `]`"),
        (
            "block-size = \"64\"",
            "block-size: expected an integer, found a string",
        ),
    ] {
        let e = project(d.path(), &GOOD.replace("block-size = 256", bad))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{bad}: {e}");
    }
}

/// Issue 27, item 7: `entries` per vendor or target beside the plain list.
#[test]
fn entries_per_vendor_or_target() {
    let d = tempfile::tempdir().unwrap();
    let scoped = GOOD.replace(
        "entries = [\"gemv\"]",
        "entries = { all = [\"gemv\"], nvidia = [\"*_bf16\"], gfx1100 = [\"amd_only\"] }",
    );
    let p = project(d.path(), &scoped).unwrap();
    let k = &p.kernels[0];
    let names = |t: &str| -> Vec<String> {
        k.entries
            .for_target(&t.parse().unwrap())
            .iter()
            .map(|e| e.text().to_string())
            .collect()
    };
    assert_eq!(names("sm_89"), ["gemv", "*_bf16"]);
    assert_eq!(names("gfx1100"), ["gemv", "amd_only"]);
    assert_eq!(names("gfx1201"), ["gemv"]);
    assert!(k.has_patterns());
    // The plain list still means every target.
    let p = project(d.path(), GOOD).unwrap();
    assert_eq!(
        p.kernels[0]
            .entries
            .for_target(&"gfx1100".parse().unwrap())
            .len(),
        1
    );
    let bad = GOOD.replace("entries = [\"gemv\"]", "entries = { intel = [\"gemv\"] }");
    let e = project(d.path(), &bad).unwrap_err().to_string();
    assert!(
        e.contains("kernel `gemv`: entries: `intel` is not `all`, `nvidia`, `amd` or a target"),
        "{e}"
    );
    let empty = GOOD.replace("entries = [\"gemv\"]", "entries = { nvidia = [] }");
    let e = project(d.path(), &empty).unwrap_err().to_string();
    assert!(e.contains("`entries` must list"), "{e}");
}

#[test]
fn parses_a_project_with_a_variant_matrix() {
    let d = tempfile::tempdir().unwrap();
    let p = project(d.path(), GOOD).unwrap();
    assert_eq!(p.name, "demo");
    assert_eq!(p.default_targets.len(), 2);
    let k = &p.kernels[0];
    let names: Vec<_> = k.variants.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["rows1-vec4", "rows1-vec8", "rows2-vec4", "rows2-vec8"]
    );
    assert_eq!(k.defines["FAST"], "1");
    assert_eq!(k.variants[3].defines["VEC"], "8");
}

#[test]
fn errors_name_file_line_and_column() {
    let d = tempfile::tempdir().unwrap();
    let bad_key = GOOD.replace("block-size = 256", "block-size = 256\nblok = 1");
    let e = project(d.path(), &bad_key).unwrap_err().to_string();
    assert!(
        e.contains("Kbuild.toml:14:1: unknown key `blok` (did you mean `block-size`?)"),
        "{e}"
    );
    let typo = GOOD.replace("block-size = 256", "block-size = 256\nentry = []");
    let e = project(d.path(), &typo).unwrap_err().to_string();
    assert!(
        e.contains("unknown key `entry` (did you mean `entries`?)"),
        "{e}"
    );

    let wrong_type = GOOD.replace("block-size = 256", "block-size = \"big\"");
    let e = project(d.path(), &wrong_type).unwrap_err().to_string();
    assert!(
        e.contains("Kbuild.toml:13:14: block-size: expected an integer, found a string"),
        "{e}"
    );
    for (from, to, want) in [
        (
            "block-size = 256",
            "block-size = -1",
            "block-size: expected a non-negative integer, found -1",
        ),
        (
            "FAST = true",
            "FAST = [1]",
            "FAST: expected a string, an integer, a float or a boolean, found an array",
        ),
        (
            "block-size = 256",
            "block-size = 256\nlanguage = \"rust\"",
            "language: unknown value `rust`, expected one of `cuda`, `hip`, `triton`",
        ),
    ] {
        let e = project(d.path(), &GOOD.replace(from, to))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
        assert!(
            !e.contains("u32") && !e.contains("untagged") && !e.contains("variant"),
            "{e}"
        );
    }

    let missing = GOOD.replace("\"k.cu\"", "\"nope.cu\"");
    let e = project(d.path(), &missing).unwrap_err().to_string();
    assert!(
        e.contains("Kbuild.toml:11:10: kernel `gemv`: source file `nope.cu` does not exist"),
        "{e}"
    );

    let target = GOOD.replace("\"sm_89\"", "\"sm89\"");
    let e = project(d.path(), &target).unwrap_err().to_string();
    assert!(
        e.contains("Kbuild.toml:7:12: unknown target `sm89` (did you mean sm_89?)"),
        "{e}"
    );

    let syntax = GOOD.replace("[kernels.gemv]", "[kernels.gemv");
    let e = project(d.path(), &syntax).unwrap_err().to_string();
    assert!(e.contains("Kbuild.toml:10:"), "{e}");
}

#[test]
fn values_that_reach_a_compiler_refuse_shell_characters() {
    let d = tempfile::tempdir().unwrap();
    for (from, to, want) in [
        (
            "FAST = true",
            "FAST = true, VERSION = \"$(sh tools/x.sh)\"",
            "Kbuild.toml:14:48: kernels.gemv.defines.VERSION `$(sh tools/x.sh)` holds `$`",
        ),
        (
            "include-dirs = [\"include\"]",
            "include-dirs = [\"include\"]\ndefines = { V = \"a;b\" }",
            "build.defines.V `a;b` holds `;`",
        ),
        (
            "include-dirs = [\"include\"]",
            "include-dirs = [\"include\"]\nflags.cuda = [\"-DX=`id`\"]",
            "build.flags.cuda `-DX=`id`` holds a backtick",
        ),
        (
            "block-size = 256",
            "block-size = 256\nflags.hip = [\"-O3\", \"-DV=a|b\"]",
            "kernels.gemv.flags.hip `-DV=a|b` holds `|`",
        ),
        (
            "VEC = [4, 8]",
            "VEC = [4, \"8)\"]",
            "kernels.gemv.variants.VEC `8)` holds `)`",
        ),
        (
            "include-dirs = [\"include\"]",
            "include-dirs = [\"include\\nlauncher = 1\"]",
            "build.include-dirs `include\\nlauncher = 1` holds the control character U+000A",
        ),
        (
            "include-dirs = [\"include\"]",
            "include-dirs = [\"include\"]\nout-dir = \"out$(x)\"",
            "build.out-dir `out$(x)` holds `$`",
        ),
    ] {
        let e = project(d.path(), &GOOD.replace(from, to))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}\nwanted: {want}");
    }
    // A source file named to run a command.
    let name = "k$(sh tools$(printf \\057)x.sh).cu";
    std::fs::write(d.path().join(name), "").unwrap();
    let toml = GOOD.replace("\"k.cu\"", &format!("'{name}'"));
    let e = project(d.path(), &toml).unwrap_err().to_string();
    assert!(
        e.contains("Kbuild.toml:11:10: kernels.gemv.source `k$(sh tools$(printf \\\\057)x.sh).cu` holds `$`"),
        "{e}"
    );
    // What real projects pass stays allowed.
    let fine = GOOD.replace(
        "block-size = 256",
        "block-size = 256\nflags = { cuda = [\"--fmad=false\", \"-Xptxas=-O3,-v\", \"-maxrregcount=32\"], hip = [\"-ffp-contract=off\"] }",
    );
    project(d.path(), &fine).unwrap();
}

#[test]
fn finds_the_project_file_from_root_and_inside() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("kernels");
    std::fs::create_dir_all(k.join("sub")).unwrap();
    std::fs::write(k.join(FILE_NAME), GOOD).unwrap();
    assert_eq!(find(d.path()).unwrap(), k.join(FILE_NAME));
    assert_eq!(find(&k.join("sub")).unwrap(), k.join(FILE_NAME));
}

#[test]
fn every_error_of_the_file_is_reported_at_once() {
    let d = tempfile::tempdir().unwrap();
    let mut toml = String::from("[package]\nname = \"demo\"\nversion = \"1.0.0\"\n");
    for i in 0..13 {
        toml.push_str(&format!(
            "\n[kernels.k{i}]\nsource = \"missing{i}.cu\"\nentries = [\"k{i}\"]\n"
        ));
    }
    toml.push_str("\n[kernels.ok]\nsource = \"k.cu\"\nentries = [\"ok\"]\nblock-size = 0\ntargets = [\"sm_8\"]\n");
    let e = project(d.path(), &toml).unwrap_err();
    let ConfigError::Many { errors, .. } = &e else {
        panic!("expected every error at once, got {e}");
    };
    assert_eq!(errors.len(), 15, "{e}");
    let text = e.to_string();
    assert!(text.starts_with("15 problems in "), "{text}");
    for i in 0..13 {
        assert!(
            text.contains(&format!("source file `missing{i}.cu` does not exist")),
            "{text}"
        );
    }
    assert!(text.contains("block-size must be 1..=1024"), "{text}");
    assert!(text.contains("unknown target `sm_8`"), "{text}");
    // One line each, naming its line, in file order.
    let lines: Vec<usize> = text
        .lines()
        .skip(1)
        .map(|l| l.split(':').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(lines.len(), 15);
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
    // One error alone stays itself.
    let one = GOOD.replace("source = \"k.cu\"", "source = \"gone.cu\"");
    assert!(matches!(
        project(d.path(), &one),
        Err(ConfigError::At { .. })
    ));
}

#[test]
fn a_vendor_group_restricts_a_kernel_to_every_target_of_that_vendor() {
    let d = tempfile::tempdir().unwrap();
    for (group, yes, no) in [
        (
            "nvidia",
            &["sm_89", "sm_90", "compute_90", "sm_90a", "sm_100f"][..],
            &["gfx1100", "gfx90a:xnack+"][..],
        ),
        (
            "cuda",
            &["sm_80", "sm_120", "compute_89"][..],
            &["gfx942", "gfx1201"][..],
        ),
        (
            "amd",
            &["gfx1100", "gfx90a:xnack+", "gfx1201", "gfx11-generic"][..],
            &["sm_89", "compute_90", "sm_90a"][..],
        ),
        (
            "rocm",
            &["gfx942", "gfx1100", "gfx1101"][..],
            &["sm_90", "sm_80"][..],
        ),
    ] {
        let toml = GOOD.replace(
            "block-size = 256",
            &format!("block-size = 256\ntargets = [\"{group}\"]"),
        );
        let p = project(d.path(), &toml).unwrap();
        let k = &p.kernels[0];
        for t in yes {
            assert!(k.builds_for(&t.parse().unwrap()), "{group} admits {t}");
        }
        for t in no {
            assert!(!k.builds_for(&t.parse().unwrap()), "{group} keeps {t} off");
        }
    }
    // A specific target admits only itself.
    let toml = GOOD.replace(
        "block-size = 256",
        "block-size = 256\ntargets = [\"compute_89\"]",
    );
    let k = &project(d.path(), &toml).unwrap().kernels[0];
    assert!(k.builds_for(&"compute_89".parse().unwrap()));
    assert!(!k.builds_for(&"sm_89".parse().unwrap()));
}
