use crate::entries::{EntryPattern, Exported};

use super::compile_commands::compile_settings;
use super::discover::Discovered;
use super::scan::unique_name;
use super::shell::split_command;
use super::toml_out::{display_entry, kernel_section, Out};

use super::*;

#[test]
fn cub_kernels_are_not_entries() {
    let targets: Vec<Target> = vec!["sm_89".parse().unwrap()];
    let cub = "_ZN3cub16_V_300500_SM_8906detail11EmptyKernelIvEEvv".to_string();
    let mut d = Discovered::default();
    d.exported.insert("sm_89".into(), vec![cub.clone()]);
    let mut out = Out::new();
    let r = kernel_section(&mut out, &unit("sum"), &d, &targets);
    let text = out.finish().to_string();
    assert_eq!(r.status, "host-only");
    assert!(text.contains("exports only CUB/Thrust kernels"), "{text}");
    assert!(!text.contains("[kernels.sum]"), "{text}");

    d.exported
        .insert("sm_89".into(), vec![cub, "_Z10arange_f32Pfiff".into()]);
    let mut out = Out::new();
    let r = kernel_section(&mut out, &unit("sum"), &d, &targets);
    let text = out.finish().to_string();
    assert_eq!(r.entries, ["arange_f32(float*, int, float, float)"]);
    assert!(
        text.contains("also instantiates 1 CUB/Thrust kernel(s)"),
        "{text}"
    );
}

#[test]
fn a_plain_cxx_function_is_written_with_its_parameters_and_matches_itself() {
    for (symbol, want) in [
            (
                "_Z10arange_f32Pfiff",
                "arange_f32(float*, int, float, float)",
            ),
            ("_Z5scaleIfEvPT_i", "scale<float>"),
            ("extern_c_kernel", "extern_c_kernel"),
            (
                "_Z10cpy_scalarIXadL_ZN41_INTERNAL_867974e3_6_cpy_cu_f459b794_331712cpy_1_scalarIffEEvPKcPcEEEvS3_S4_lllllllllllllll",
                "cpy_scalar<&*::cpy_1_scalar<float, float>(char const*, char*)>(char const*, char*, long, long, long, long, long, long, long, long, long, long, long, long, long, long, long)",
            ),
        ] {
            let (entry, _) = display_entry(symbol);
            assert_eq!(entry, want);
            let p = EntryPattern::parse(&entry).unwrap();
            assert!(p.matches(&Exported::new(symbol)), "{entry} vs {symbol}");
        }
}

#[test]
fn finds_definitions_not_declarations_or_comments() {
    assert!(defines_kernel("__global__ void k(float* x) { x[0] = 1; }"));
    assert!(defines_kernel(
            "template <typename T>\n__global__ void scale(T* x, int n) { }\ntemplate __global__ void scale<float>(float*, int);"
        ));
    assert!(!defines_kernel("__global__ void k(float* x);"));
    assert!(!defines_kernel(
        "// __global__ void k() {}\n/* __global__ void j() {} */"
    ));
    assert!(!defines_kernel(
        "const char* s = \"__global__ void k() {}\";"
    ));
    assert!(!defines_kernel("int my__global__x() { return 0; }"));
    assert!(defines_kernel("KC_KERNEL(64) void k(float* x) { }"));
}

#[test]
fn package_names_follow_the_rule() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("My Kernels_2");
    std::fs::create_dir(&p).unwrap();
    assert_eq!(package_name(&p), "my-kernels_2");
    let p = d.path().join("__");
    std::fs::create_dir(&p).unwrap();
    assert_eq!(package_name(&p), "kernels");
}

#[test]
fn splits_commands_and_names_kernels_uniquely() {
    assert_eq!(
        split_command(r#"nvcc -I"inc dir" -DX='a b' -std=c++17 a\ b.cu"#),
        ["nvcc", "-Iinc dir", "-DX=a b", "-std=c++17", "a b.cu"]
    );
    let mut taken = BTreeSet::new();
    assert_eq!(unique_name(Path::new("a/kern.cu"), &mut taken), "kern");
    assert_eq!(unique_name(Path::new("b/kern.cu"), &mut taken), "b_kern");
    assert_eq!(unique_name(Path::new("b/kern.hip"), &mut taken), "b_kern_2");
    assert_eq!(unique_name(Path::new("1x.cu"), &mut taken), "k1x");
}

fn unit(kernel: &str) -> Unit {
    Unit {
        rel: PathBuf::from(format!("ops/{kernel}.cu")),
        language: Language::Cuda,
        kernel: kernel.into(),
        defines_kernel: true,
    }
}

#[test]
fn many_entries_become_star_and_vendor_differences_a_comment() {
    let targets: Vec<Target> = ["sm_89", "gfx1100"]
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let many: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let mut d = Discovered::default();
    d.exported.insert("sm_89".into(), many.clone());
    d.exported.insert("gfx1100".into(), many);
    let mut out = Out::new();
    let r = kernel_section(&mut out, &unit("wide"), &d, &targets);
    let text = out.finish().to_string();
    assert_eq!(r.entries, ["*"]);
    assert!(
        text.contains("# 10 entries found (k0, k1, k2, k3, ...)"),
        "{text}"
    );

    let mut d = Discovered::default();
    d.exported.insert(
        "sm_89".into(),
        vec!["_Z5scaleIfEvPT_i".into(), "both".into(), "cuda_only".into()],
    );
    d.exported.insert(
        "gfx1100".into(),
        vec!["_Z5scaleIfEvPT_i".into(), "both".into()],
    );
    let mut out = Out::new();
    let r = kernel_section(&mut out, &unit("guarded"), &d, &targets);
    let text = out.finish().to_string();
    assert_eq!(r.entries, ["scale<float>", "both"]);
    assert!(
        text.contains("# exported only for sm_89, so not listed"),
        "{text}"
    );
    assert!(
        text.contains("\"scale<float>\", # _Z5scaleIfEvPT_i"),
        "{text}"
    );

    let mut d = Discovered::default();
    d.exported.insert("sm_89".into(), vec!["k".into()]);
    d.errors
        .insert("gfx1100".into(), "k.cu:1:1: error: nope".into());
    let mut out = Out::new();
    let r = kernel_section(&mut out, &unit("cuda"), &d, &targets);
    let text = out.finish().to_string();
    assert_eq!(r.status, "partial");
    // Restricted to the vendor's group, not to the one discovery target.
    assert!(
        text.contains("targets = [\"nvidia\"]") && text.contains("error: nope"),
        "{text}"
    );
    assert_eq!(r.targets, Some(vec!["nvidia".to_string()]));
    let mut d = Discovered::default();
    d.exported.insert("gfx1100".into(), vec!["k".into()]);
    d.errors
        .insert("sm_89".into(), "k.cu:1:1: error: nope".into());
    let mut out = Out::new();
    kernel_section(&mut out, &unit("amd_only"), &d, &targets);
    let text = out.finish().to_string();
    assert!(text.contains("targets = [\"amd\"]"), "{text}");
    let d = Discovered {
        errors: [("sm_89".to_string(), "bad".to_string())]
            .into_iter()
            .collect(),
        ..Discovered::default()
    };
    let mut out = Out::new();
    let r = kernel_section(&mut out, &unit("broken"), &d, &targets);
    let text = out.finish().to_string();
    assert_eq!(r.status, "failed");
    assert!(
        text.contains("# [kernels.broken]") && !text.contains("\n[kernels."),
        "{text}"
    );
}

#[test]
fn reads_compile_commands() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("inc")).unwrap();
    std::fs::create_dir_all(d.path().join("build")).unwrap();
    let dir = d.path().display().to_string();
    let cc = serde_json::json!([
        {"directory": format!("{dir}/build"), "file": "../a.cu",
         "command": "nvcc -I../inc -DFOO=1 -DBAR -std=c++17 -c ../a.cu"},
        {"directory": dir, "file": "b.cu",
         "arguments": ["clang++", "-isystem", "inc", "-I", "missing", "-D", "F(x)=x", "-std=c++20", "b.cu"]}
    ]);
    std::fs::write(d.path().join("compile_commands.json"), cc.to_string()).unwrap();
    let s = compile_settings(d.path()).unwrap();
    assert_eq!(s.include_dirs, ["inc"]);
    assert_eq!(s.defines["FOO"], "1");
    assert_eq!(s.defines["BAR"], "1");
    assert_eq!(s.std.as_deref(), Some("-std=c++17"));
    assert_eq!(s.skipped.len(), 2, "{:?}", s.skipped);
    std::fs::write(d.path().join("compile_commands.json"), "{}").unwrap();
    let e = compile_settings(d.path()).unwrap_err().to_string();
    assert!(
        e.contains("compile_commands.json: expected an array"),
        "{e}"
    );
}

#[test]
fn compile_commands_values_a_shell_acts_on_are_left_out_and_named() {
    let d = tempfile::tempdir().unwrap();
    let evil = "inc\nlauncher = \"./tools/cc-wrap.sh\"\n#";
    std::fs::create_dir_all(d.path().join(evil)).unwrap();
    std::fs::create_dir_all(d.path().join("inc")).unwrap();
    let cc = serde_json::json!([
        {"directory": d.path().display().to_string(), "file": "a.cu",
         "arguments": ["nvcc", format!("-I{evil}"), "-Iinc", "-DVERSION=$(sh tools/x.sh)",
                       "-DOK=1", "-std=c++17;id", "a.cu"]}
    ]);
    std::fs::write(d.path().join("compile_commands.json"), cc.to_string()).unwrap();
    let s = compile_settings(d.path()).unwrap();
    assert_eq!(s.include_dirs, ["inc"]);
    assert_eq!(s.defines.keys().collect::<Vec<_>>(), ["OK"]);
    assert_eq!(s.std, None);
    let notes = s.skipped.join("\n");
    assert!(
        notes.contains("compile_commands.json entry 0: -I `inc\\nlauncher = \\\"./tools/cc-wrap.sh\\\"\\n#` holds the control character U+000A"),
        "{notes}"
    );
    assert!(
        notes.contains("compile_commands.json entry 0: -D `VERSION=$(sh tools/x.sh)` holds `$`"),
        "{notes}"
    );
    assert!(notes.contains("-std= `c++17;id` holds `;`"), "{notes}");
    // Each note is one line.
    assert_eq!(notes.lines().count(), 3, "{notes}");
}

#[test]
fn scanned_text_in_a_comment_stays_a_comment() {
    let mut out = Out::new();
    out.comment("not carried over: inc\nlauncher = \"./tools/cc-wrap.sh\"\r\n[toolchain]");
    let mut t = toml_edit::Table::new();
    t.insert("targets", toml_edit::value("sm_89"));
    out.table("build", t);
    let text = out.finish().to_string();
    let read: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(read.keys().collect::<Vec<_>>(), ["build"], "{text}");
    assert_eq!(read["build"].as_table().unwrap().len(), 1, "{text}");
    assert!(
        text.contains("# not carried over: inc\\nlauncher"),
        "{text}"
    );
}

#[test]
fn a_written_file_that_reads_back_otherwise_is_refused() {
    let file = Path::new("/p/Kbuild.toml");
    let mut doc = toml_edit::DocumentMut::new();
    let mut build = toml_edit::Table::new();
    build.insert("targets", toml_edit::value("sm_89"));
    doc.insert("build", toml_edit::Item::Table(build));
    let text = doc.to_string();
    check_written(file, &doc, &text).unwrap();
    // Raw decor (what a `format!` of scanned text was) that holds a live key.
    if let Some(mut k) = doc["build"].as_table_mut().unwrap().key_mut("targets") {
        k.leaf_decor_mut()
            .set_prefix("# x\nlauncher = \"./tools/cc-wrap.sh\"\n");
    }
    let text = doc.to_string();
    let e = check_written(file, &doc, &text).unwrap_err().to_string();
    assert!(
        e.contains("/p/Kbuild.toml is not what kbuild init meant to write"),
        "{e}"
    );
    // A key init never writes, even when meant.
    let mut doc = toml_edit::DocumentMut::new();
    let mut build = toml_edit::Table::new();
    build.insert("launcher", toml_edit::value("./x"));
    doc.insert("build", toml_edit::Item::Table(build));
    let e = check_written(file, &doc, &doc.to_string())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`build.launcher`, which init never writes"),
        "{e}"
    );
}
