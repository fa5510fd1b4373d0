//! Triton kernels ahead of time (issue 28), on a machine with no GPU: `language = "triton"`
//! kernels built by kbuild's Triton workers (the pinned wheel, `kbuild toolchain install
//! triton`) for NVIDIA and AMD targets; every object's metadata equal to cuobjdump, ptxas -v
//! and llvm-readobj-19, its launch parameters to the cubin's `.nv.info` and the hsaco's kernarg
//! table; clean builds byte-identical; an edit rebuilds exactly the kernels it reaches; a
//! config over its target's shared memory left out (an error under --strict).

use crate::kbuild_tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kbuild_tests::{copy_dir, events, kbuild_bin, manifest, repo_root, text, Scratch};
use serde_json::Value;

use crate::abi_oracle::{cuobjdump_params, hex};
use crate::oracle::{check_cuda, readobj_kernels};

const TARGETS: &str = r#"["sm_80", "sm_90a", "gfx942", "gfx1100"]"#;

/// Three kernels of one file: `add` calls the @jit helper `scale` (two BLOCK variants),
/// `copy` calls nothing, `mm` has a small tile that fits every target and a large one over
/// the 64 KiB of LDS an AMD work-group gets.
fn kbuild_toml() -> String {
    format!(
        r#"[package]
name = "tdemo"
version = "0.1.0"

[build]
targets = {TARGETS}
out-dir = "out"

[kernels.add]
language = "triton"
source = "k/kern.py"
function = "add_kernel"
signature = {{ x_ptr = "*fp32", y_ptr = "*fp32", out_ptr = "*fp32", n = "i32", stride = "i32", gk = "None" }}
divisible-16 = ["x_ptr", "y_ptr", "out_ptr"]

[kernels.add.variants]
BLOCK = [256, 1024]

[kernels.copy]
language = "triton"
source = "k/kern.py"
function = "copy_kernel"
signature = {{ x_ptr = "*fp32", out_ptr = "*fp32", n = "i32" }}
constexprs = {{ BLOCK = 512 }}

[kernels.mm]
language = "triton"
source = "k/kern.py"
function = "mm_kernel"
signature = {{ a_ptr = "*fp16", b_ptr = "*fp16", c_ptr = "*fp32", M = "i32", N = "i32", K = "i32" }}
constexprs = {{ BN = 64, BK = 64 }}
divisible-16 = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K"]
num-stages = 3

[kernels.mm.variants]
BM = [32, 256]
"#
    )
}

fn project(dir: &Path) -> PathBuf {
    let p = dir.join("proj");
    copy_dir(&repo_root().join("tests/tests/triton"), &p.join("k"));
    std::fs::write(p.join("Kbuild.toml"), kbuild_toml()).unwrap();
    p
}

pub(crate) fn kbuild(proj: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new(kbuild_bin())
        .args(args)
        .current_dir(proj)
        .env("KBUILD_CACHE_DIR", cache)
        .env("NO_COLOR", "1")
        .output()
        .expect("running kbuild")
}

/// (kernel.variant, target) → status of every job event.
pub(crate) fn job_statuses(o: &Output) -> BTreeMap<(String, String), String> {
    events(o)
        .iter()
        .filter(|e| e["event"] == "job")
        .map(|e| {
            let name = match e["variant"].as_str() {
                Some(v) => format!("{}.{v}", e["kernel"].as_str().unwrap()),
                None => e["kernel"].as_str().unwrap().to_string(),
            };
            let target = e["target"].as_str().unwrap().to_string();
            ((name, target), e["status"].as_str().unwrap().to_string())
        })
        .collect()
}

pub(crate) fn compiled(o: &Output) -> Vec<(String, String)> {
    job_statuses(o)
        .into_iter()
        .filter(|(_, s)| s == "compiled")
        .map(|(k, _)| k)
        .collect()
}

pub(crate) fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// A cubin against cuobjdump and the ptxas -v log (resources, as every cubin of a build is
/// checked) and against its `.nv.info` (the launch parameters).
fn check_cubin(path: &Path, obj: &Value) {
    let triton = &obj["triton"];
    let entry = triton["function"].as_str().unwrap();
    let at = format!("{} {entry}", path.display());
    check_cuda(path, &obj["resources"], &mut 0);
    let mut want = cuobjdump_params(path)
        .remove(entry)
        .unwrap_or_else(|| panic!("{at}: no .nv.info"))
        .kparams;
    want.sort_by_key(|f| hex(&f["Ordinal"]));
    let params = obj["params"][entry].as_array().unwrap();
    let launch = triton["params"].as_array().unwrap();
    assert_eq!(
        params.len(),
        want.len(),
        "{at}: parameter count vs .nv.info"
    );
    assert_eq!(
        launch.len(),
        want.len(),
        "{at}: launch parameters vs .nv.info"
    );
    for ((p, w), l) in params.iter().zip(&want).zip(launch) {
        assert_eq!(p["offset"].as_u64(), Some(hex(&w["Offset"])), "{at} offset");
        assert_eq!(p["size"].as_u64(), Some(hex(&w["Size"])), "{at} size");
        let ty = l["type"].as_str().unwrap();
        let size = if ty.starts_with('*') || ty == "scratch" {
            8
        } else {
            4
        };
        assert_eq!(hex(&w["Size"]), size, "{at} {} ({ty}) size", l["name"]);
    }
}

/// An hsaco against llvm-readobj-19 --notes (resources, the kernarg table's size).
fn check_hsaco(path: &Path, obj: &Value) {
    let triton = &obj["triton"];
    let entry = triton["function"].as_str().unwrap();
    let at = format!("{} {entry}", path.display());
    let r = &obj["resources"][entry];
    let o = &readobj_kernels(path)[entry];
    let field = |k: &str| -> u64 { o.get(k).and_then(|v| v.parse().ok()).unwrap_or(0) };
    for (ours, theirs) in [
        ("vgprs", ".vgpr_count"),
        ("sgprs", ".sgpr_count"),
        ("agprs", ".agpr_count"),
        ("vgpr_spills", ".vgpr_spill_count"),
        ("sgpr_spills", ".sgpr_spill_count"),
        ("lds_bytes", ".group_segment_fixed_size"),
        ("scratch_bytes", ".private_segment_fixed_size"),
        ("wave_size", ".wavefront_size"),
        ("kernarg_bytes", ".kernarg_segment_size"),
    ] {
        assert_eq!(num(r, ours), field(theirs), "{at} {ours}");
    }
    assert_eq!(
        num(triton, "warp_size"),
        field(".wavefront_size"),
        "{at} warp size"
    );
    // The launch parameters laid out at their natural alignment end where the kernarg
    // segment does (no hidden arguments), each where the object's own table puts it.
    let launch = triton["params"].as_array().unwrap();
    let table = obj["params"][entry].as_array().unwrap();
    assert_eq!(table.len(), launch.len(), "{at} params");
    let mut end: u64 = 0;
    for (l, p) in launch.iter().zip(table) {
        let size = match l["type"].as_str().unwrap() {
            t if t.starts_with('*') || t == "scratch" => 8,
            _ => 4,
        };
        let offset = end.next_multiple_of(size);
        assert_eq!(
            p["offset"].as_u64(),
            Some(offset),
            "{at} {} offset",
            l["name"]
        );
        assert_eq!(p["size"].as_u64(), Some(size), "{at} {} size", l["name"]);
        end = offset + size;
    }
    assert_eq!(end, field(".kernarg_segment_size"), "{at} kernarg bytes");
}

#[test]
fn triton_kernels_build_for_both_vendors_as_the_vendor_tools_read_them() {
    let s = Scratch::new();
    let proj = project(s.path());
    let cache = s.path().join("cache");
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&proj.join("out"));
    let objects = m["objects"].as_array().unwrap();
    // 3 kernels, 5 (kernel, variant) pairs × 4 targets, less mm.bm256 on the two AMD targets.
    assert_eq!(objects.len(), 18, "{m:#}");
    let err = String::from_utf8_lossy(&o.stderr);
    for t in ["gfx942", "gfx1100"] {
        assert!(
            err.contains(&format!("warning: mm.bm256 for {t}: needs "))
                && err.contains(&format!("{t} allows 65536")),
            "{err}"
        );
        assert!(!proj.join(format!("out/{t}/mm.bm256.hsaco")).exists());
    }
    for obj in objects {
        let path = proj.join("out").join(obj["path"].as_str().unwrap());
        let triton = &obj["triton"];
        assert_eq!(triton["triton_version"], "3.6.0", "{obj}");
        assert_eq!(num(triton, "num_warps"), 4);
        let entries: Vec<&str> = obj["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(entries, [triton["function"].as_str().unwrap()]);
        // Occupancy is taken at the launch's block and with its dynamic shared memory.
        let r = &obj["resources"][triton["function"].as_str().unwrap()];
        assert_eq!(r["occupancy"]["block_size_from"], "triton", "{obj}");
        assert_eq!(
            num(&r["occupancy"], "block_size"),
            num(triton, "num_warps") * num(triton, "warp_size")
        );
        match obj["format"].as_str().unwrap() {
            "cubin" => check_cubin(&path, obj),
            "hsaco" => check_hsaco(&path, obj),
            f => panic!("format {f}"),
        }
    }
    // The None argument left the parameters; the divisibility is recorded for the launch.
    let add = objects
        .iter()
        .find(|o| o["kernel"] == "add" && o["target"] == "sm_90a")
        .unwrap();
    let names: Vec<&str> = add["triton"]["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "x_ptr",
            "y_ptr",
            "out_ptr",
            "n",
            "stride",
            "global_scratch",
            "profile_scratch"
        ]
    );
    assert_eq!(add["triton"]["removed"][0]["name"], "gk");
    assert_eq!(add["triton"]["params"][0]["divisible_16"], true);
    // The object's parameter table carries the launch record's names and C types, so the
    // loader's launch check (no GPU needed) names what it refuses and packs fp32 as 4 bytes.
    let table: Vec<kbuild_manifest::params::Param> =
        serde_json::from_value(add["params"]["add_kernel"].clone()).unwrap();
    let named: Vec<(&str, &str)> = table
        .iter()
        .map(|p| (p.name.as_deref().unwrap(), p.type_name.as_deref().unwrap()))
        .collect();
    assert_eq!(
        named,
        [
            ("x_ptr", "float*"),
            ("y_ptr", "float*"),
            ("out_ptr", "float*"),
            ("n", "int32_t"),
            ("stride", "int32_t"),
            ("global_scratch", "void*"),
            ("profile_scratch", "void*")
        ]
    );
    use kbuild_loader::launch::{pack_arg, LooseArg};
    let err = pack_arg("add_kernel", 3, LooseArg::Float(1.5), &table[3])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("argument 3") && err.contains("int32_t n"),
        "{err}"
    );
    assert_eq!(
        pack_arg("add_kernel", 3, LooseArg::Int(4096), &table[3]).unwrap(),
        4096
    );
    let pkg = kbuild_loader::Package::open(&proj.join("out")).unwrap();
    let sm90 = kbuild_manifest::compat::Device::parse("sm_90", None, None).unwrap();
    let choice = pkg.select(&sm90);
    let picked = choice.kernel("add", Some("block1024")).unwrap();
    let selected = picked.selected().unwrap();
    assert_eq!(selected.target, "sm_90a");
    // The launch record, from the package (what the Python package's launch_triton reads).
    let launch = pkg.triton_launch(selected.object).unwrap().unwrap();
    assert_eq!((launch.block_threads(), launch.shared), (128, 0));
    assert_eq!(launch.constexprs["BLOCK"], 1024);
    // The C ABI applies the record's checks with no GPU: count with the parameters' names,
    // the divisible-by-16 assumption, sizes (the scratch pointers are kbuild's to pass).
    let (exe, libdir) = kbuild_tests::c_program(
        s.path(),
        "tests/tests/triton/check_launch.c",
        "check_launch",
    );
    let o = Command::new(&exe)
        .arg(proj.join("out"))
        .env("LD_LIBRARY_PATH", &libdir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for line in [
        "fits: 0 \n",
        "misaligned: -1 add_kernel: argument `x_ptr` (*fp32): its address 0x7f0000001004 is not a multiple of 16, which this build of the kernel assumes\n",
        "count: -1 add_kernel: 4 arguments given, the kernel takes 5 (x_ptr, y_ptr, out_ptr, n, stride; compiled in, not passed: gk as None)\n",
        "size: -1 add_kernel: argument 4 is 8 bytes, the kernel takes 4 (int32_t stride)\n",
    ] {
        assert!(out.contains(line), "{line}in\n{out}");
    }
    assert!(
        out.contains("function: NULL") && out.contains("simulated"),
        "{out}"
    );
    // sm_90 and newer: Triton's cubins are arch-specific.
    let inspect = Command::new(kbuild_bin())
        .args(["inspect", "--json"])
        .arg(proj.join("out").join(add["path"].as_str().unwrap()))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&inspect.stdout).contains("sm_90a"),
        "{}",
        text(&inspect)
    );

    // Again: everything from the cache, the oversized configs reported again.
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(
        o.status.success() && compiled(&o).is_empty(),
        "{}",
        text(&o)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("mm.bm256 for gfx1100: needs"));

    // Editing the @jit helper `scale` rebuilds add (which calls it), not copy or mm.
    let kern = proj.join("k/kern.py");
    let src = std::fs::read_to_string(&kern).unwrap();
    std::fs::write(&kern, src.replace("return x * 2", "return x * 3")).unwrap();
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let rebuilt = compiled(&o);
    assert_eq!(rebuilt.len(), 8, "{rebuilt:?}");
    assert!(
        rebuilt.iter().all(|(k, _)| k.starts_with("add.")),
        "{rebuilt:?}"
    );
    // A function no kernel uses changes nothing; copy's own body rebuilds copy alone.
    let src = std::fs::read_to_string(&kern).unwrap();
    std::fs::write(&kern, format!("{src}\n\ndef unused():\n    return 1\n")).unwrap();
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(compiled(&o).is_empty(), "{}", text(&o));
    let src = std::fs::read_to_string(&kern).unwrap();
    std::fs::write(
        &kern,
        src.replace(
            "tl.load(x_ptr + offs, mask=mask), mask=mask)",
            "tl.load(x_ptr + offs, mask=mask) + 0.0, mask=mask)",
        ),
    )
    .unwrap();
    let o = kbuild(&proj, &cache, &["--json"]);
    let rebuilt = compiled(&o);
    assert_eq!(rebuilt.len(), 4, "{rebuilt:?}");
    assert!(rebuilt.iter().all(|(k, _)| k == "copy"), "{rebuilt:?}");

    // --strict: a config that could never launch fails the build, naming it.
    let o = kbuild(&proj, &cache, &["--strict"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("error: mm.bm256 for gfx1100: needs"),
        "{}",
        text(&o)
    );
}

#[test]
fn two_clean_triton_builds_in_different_directories_are_byte_identical() {
    let s = Scratch::new();
    let a = project(&s.path().join("a"));
    let b = project(&s.path().join("elsewhere/b"));
    for (p, cache) in [(&a, "cache-a"), (&b, "cache-b")] {
        let o = kbuild(p, &s.path().join(cache), &["--targets", "sm_90a,gfx1100"]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let (ma, mb) = (manifest(&a.join("out")), manifest(&b.join("out")));
    assert_eq!(
        ma["objects"], mb["objects"],
        "records (hashes, keys, launches)"
    );
    for obj in ma["objects"].as_array().unwrap() {
        let rel = obj["path"].as_str().unwrap();
        let (x, y) = (
            std::fs::read(a.join("out").join(rel)).unwrap(),
            std::fs::read(b.join("out").join(rel)).unwrap(),
        );
        assert!(x == y, "{rel} differs between the two builds");
        // No absolute path of either machine in the object (line info is off).
        assert!(!x.windows(5).any(|w| w == b"/tmp/"), "{rel} holds a path");
    }
}

#[test]
fn triton_mistakes_are_named() {
    let s = Scratch::new();
    let proj = project(s.path());
    let cache = s.path().join("cache");
    let toml = kbuild_toml();
    // Kbuild.toml: a bad type and a Triton key on a CUDA kernel, both in one report.
    std::fs::write(proj.join("k/x.cu"), "extern \"C\" __global__ void x() {}\n").unwrap();
    let bad = toml.replace("\"*fp16\"", "\"*half\"")
        + "\n[kernels.x]\nsource = \"k/x.cu\"\nentries = [\"x\"]\nnum-warps = 4\n";
    std::fs::write(proj.join("Kbuild.toml"), bad).unwrap();
    let o = kbuild(&proj, &cache, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("kernel `mm`: signature: `a_ptr` has type `*half`"),
        "{err}"
    );
    assert!(
        err.contains("kernel `x`: num-warps (keys of language = \"triton\" kernels only)"),
        "{err}"
    );
    // A function the file lacks: the job fails naming the file and the function.
    std::fs::write(
        proj.join("Kbuild.toml"),
        toml.replace("\"copy_kernel\"", "\"cpy_kernel\""),
    )
    .unwrap();
    let o = kbuild(&proj, &cache, &["--targets", "sm_80", "--keep-going"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("error: copy for sm_80:") && err.contains("kern.py: no function `cpy_kernel`"),
        "{err}"
    );
    // An argument the function does not have.
    std::fs::write(
        proj.join("Kbuild.toml"),
        toml.replace(
            "n = \"i32\" }\nconstexprs = { BLOCK = 512 }",
            "n = \"i32\", m = \"i32\" }\nconstexprs = { BLOCK = 512 }",
        ),
    )
    .unwrap();
    let o = kbuild(&proj, &cache, &["--targets", "gfx1100", "--keep-going"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("`copy_kernel` has no argument `m`"),
        "{}",
        text(&o)
    );
}

/// fla-core 0.6.0's wheel (pure Python), fetched at test time with its pinned sha256 (pip's
/// cache serves it again), unpacked into `dir`; the wheel's path.
pub(crate) fn fla_wheel(dir: &Path) -> PathBuf {
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let req = dir.join("fla-requirements.txt");
    std::fs::write(
        &req,
        "fla-core==0.6.0 --hash=sha256:b0708b70e0b119cd58a0a5146ea56cb175cef6ed969d8ac60267e3e077ce3ebd\n",
    )
    .unwrap();
    let o = Command::new("python3")
        .args([
            "-I",
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
        ])
        .args(["--require-hashes", "-r"])
        .arg(&req)
        .arg("-d")
        .arg(&wheels)
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .output()
        .expect("running pip");
    assert!(
        o.status.success(),
        "pip download fla-core==0.6.0: {}",
        text(&o)
    );
    wheels.join("fla_core-0.6.0-py3-none-any.whl")
}

/// The Blackwell arch-specific targets and gfx1250, which the catalogue gained with this
/// issue: Triton's cubins for sm_100a/sm_103a/sm_120a/sm_121a (ptxas 12.9 marks them
/// arch-specific in `e_flags`, not in `.nv.compat`) read as cuobjdump reads them, gfx1250's
/// hsaco as llvm-readobj-19 reads it (no occupancy model: unknown, not guessed); sm_110a,
/// which Triton 3.6.0's ptxas does not know, is left out before any compile and the empty
/// target's warning says why.
#[test]
fn triton_builds_the_newest_targets_and_says_why_not_where_its_ptxas_cannot() {
    let s = Scratch::new();
    let proj = s.path().join("proj");
    copy_dir(&repo_root().join("tests/tests/triton"), &proj.join("k"));
    std::fs::write(
        proj.join("Kbuild.toml"),
        r#"[package]
name = "tnew"
version = "0.1.0"

[build]
targets = ["sm_100a", "sm_103a", "sm_110a", "sm_120a", "sm_121a", "gfx1250"]
out-dir = "out"

[kernels.copy]
language = "triton"
source = "k/kern.py"
function = "copy_kernel"
signature = { x_ptr = "*fp32", out_ptr = "*fp32", n = "i32" }
constexprs = { BLOCK = 512 }
"#,
    )
    .unwrap();
    let cache = s.path().join("cache");
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "warning: target sm_110a built no object: sm_110a: 0 of 1 kernel (1 restricted by \
             Kbuild.toml); Triton kernel(s) copy: sm_110a needs ptxas from CUDA 13.0 or later; \
             Triton 3.6.0 compiles it with its own ptxas of CUDA 12.9"
        ),
        "{err}"
    );
    let m = manifest(&proj.join("out"));
    let objects = m["objects"].as_array().unwrap();
    let mut targets: Vec<&str> = objects
        .iter()
        .map(|o| o["target"].as_str().unwrap())
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        ["gfx1250", "sm_100a", "sm_103a", "sm_120a", "sm_121a"],
        "{m:#}"
    );
    let cuobjdump = kbuild_tests::cuobjdump();
    for obj in objects {
        let path = proj.join("out").join(obj["path"].as_str().unwrap());
        let target = obj["target"].as_str().unwrap();
        match obj["format"].as_str().unwrap() {
            "cubin" => {
                let header =
                    kbuild_tests::tool_output(Command::new(&cuobjdump).arg("-elf").arg(&path));
                let sm = target.trim_start_matches("sm_");
                assert!(
                    header.contains(&format!(" sm={sm},")),
                    "{target}: {header:.300}"
                );
                check_cubin(&path, obj);
            }
            "hsaco" => {
                check_hsaco(&path, obj);
                let r = &obj["resources"]["copy_kernel"];
                assert!(r["occupancy"].is_null(), "gfx1250 has no model: {r}");
            }
            f => panic!("format {f}"),
        }
    }
}

/// Launches that need more than a grid and a block, recorded for the loader: device-side
/// tensor descriptors (global scratch per program, with its alignment), a cluster of 2 CTAs
/// per program, a cooperative grid (Kbuild.toml `launch-cooperative-grid`); `num_ctas` > 1 on
/// an AMD target is Triton's own refusal, named. (The launches themselves run on the H200:
/// scripts/device/triton-features.py.)
#[test]
fn scratch_clusters_and_cooperative_grids_reach_the_launch_record() {
    let s = Scratch::new();
    let proj = s.path().join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    let src = repo_root().join("tests/tests/triton");
    std::fs::copy(src.join("features.py"), proj.join("features.py")).unwrap();
    let toml = std::fs::read_to_string(src.join("features.toml"))
        .unwrap()
        .replace("targets = TARGETS", r#"targets = ["sm_90a", "gfx942"]"#);
    std::fs::write(proj.join("Kbuild.toml"), toml).unwrap();
    let o = kbuild(&proj, &s.path().join("cache"), &["--keep-going", "--json"]);
    assert!(!o.status.success(), "cluster_axpy cannot build for gfx942");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cluster_axpy for gfx942: ")
            && err.contains("num_ctas > 1 not supported on gfx942"),
        "{err}"
    );
    let m = manifest(&proj.join("out"));
    let record = |kernel: &str, target: &str| -> Value {
        m["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["kernel"] == kernel && o["target"] == target)
            .unwrap_or_else(|| panic!("{kernel} for {target} in {m:#}"))["triton"]
            .clone()
    };
    let desc = record("desc_scale", "sm_90a");
    assert_eq!(
        (
            num(&desc, "global_scratch_size"),
            num(&desc, "global_scratch_align")
        ),
        (256, 128),
        "two descriptors of 128 bytes each: {desc}"
    );
    assert_eq!(num(&record("cluster_axpy", "sm_90a"), "num_ctas"), 2);
    for t in ["sm_90a", "gfx942"] {
        let coop = record("coop_square", t);
        assert_eq!(coop["cooperative"], true, "{t}: {coop}");
        assert_eq!(num(&coop, "global_scratch_size"), 0);
    }
    assert_eq!(record("desc_scale", "gfx942")["cooperative"], false);
}

/// The CUDA releases of the ptxas the pinned wheel carries are those kbuild's refusals name.
#[test]
fn the_pinned_wheel_carries_the_ptxas_kbuild_says_it_does() {
    use kbuild_build::toolchain::{TRITON_PTXAS, TRITON_PTXAS_BLACKWELL};
    let bin = triton_site().join("triton/backends/nvidia/bin");
    for (tool, want) in [
        ("ptxas", TRITON_PTXAS),
        ("ptxas-blackwell", TRITON_PTXAS_BLACKWELL),
    ] {
        let out = kbuild_tests::tool_output(Command::new(bin.join(tool)).arg("--version"));
        assert!(
            out.contains(&format!("release {want},")),
            "{tool}: kbuild says CUDA {want}; it says {out}"
        );
    }
}

/// The managed Triton install's package directory (`kbuild toolchain install triton`).
fn triton_site() -> PathBuf {
    let o = Command::new(kbuild_bin())
        .args(["toolchain", "install", "triton"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let line = String::from_utf8_lossy(&o.stdout).to_string();
    let at = line
        .split(" at ")
        .nth(1)
        .or_else(|| line.split(" into ").nth(1))
        .unwrap_or_else(|| panic!("no path in {line}"));
    PathBuf::from(at.split(" (").next().unwrap().trim())
}

/// The worker's own protocol checks (`build-system/triton/test_worker.py`): every op, bad
/// requests answered and survived, reproducible objects, Triton's source key, and FLA's two
/// kernels with their heuristics and autotune lists.
#[test]
fn the_triton_worker_passes_its_protocol_checks() {
    let s = Scratch::new();
    let wheel = fla_wheel(s.path());
    let o = Command::new("python3")
        .arg("-I")
        .arg(repo_root().join("build-system/triton/test_worker.py"))
        .arg("--site")
        .arg(triton_site())
        .arg("--fla")
        .arg(&wheel)
        .current_dir(s.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("\n0 failed"),
        "{}",
        text(&o)
    );
}

/// FLA 0.6.0's fused recurrent GDN forward for every default target Triton builds for (the
/// project's list), and its chunked state kernel with its 12 autotune configs on sm_90a and
/// gfx942, from the pinned wheel, with no torch (and again from its own autotune list with
/// `autotune = true`: the same objects); then `inspect`, `explain` and `diff` on them.
#[test]
fn fla_gated_delta_net_kernels_build_from_the_pinned_wheel() {
    let s = Scratch::new();
    let proj = s.path().join("fla");
    std::fs::create_dir_all(&proj).unwrap();
    let wheel = fla_wheel(s.path());
    let o = Command::new("python3")
        .args(["-I", "-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&proj)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    // The default targets Triton builds for: kernels/Kbuild.toml's list less plain sm_90+,
    // PTX and generic targets.
    let defaults = "[\"sm_75\", \"sm_80\", \"sm_86\", \"sm_89\", \"sm_90a\", \"gfx90a\", \"gfx942\", \"gfx1030\", \"gfx1100\", \"gfx1101\", \"gfx1151\", \"gfx1200\", \"gfx1201\"]";
    let project_targets = std::fs::read_to_string(repo_root().join("kernels/Kbuild.toml")).unwrap();
    for t in defaults.trim_matches(['[', ']']).split(", ") {
        assert!(
            project_targets.contains(t),
            "{t} is no longer a default target"
        );
    }
    let toml = std::fs::read_to_string(repo_root().join("tests/tests/triton/fla.toml")).unwrap();
    // The chunk kernel's 12 configs cost about 1 CPU-s each: all of them for sm_90a and gfx942
    // (fla.toml), and one config (BV 32, 2 warps, 2 stages) for every default target.
    let mut doc: toml::Table = toml.replace("TARGETS", defaults).parse().unwrap();
    let kernels = doc["kernels"].as_table_mut().unwrap();
    let mut one = kernels["gdn_chunk_h"].as_table().unwrap().clone();
    one.remove("targets");
    one.remove("variants");
    one.insert("num-warps".into(), 2.into());
    one.insert("num-stages".into(), 2.into());
    one["constexprs"]
        .as_table_mut()
        .unwrap()
        .insert("BV".into(), 32.into());
    kernels.insert("gdn_chunk_h_one".into(), one.into());
    std::fs::write(proj.join("Kbuild.toml"), toml::to_string(&doc).unwrap()).unwrap();
    let cache = s.path().join("cache");
    let o = kbuild(&proj, &cache, &["--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&proj.join("out"));
    let objects = m["objects"].as_array().unwrap();
    let of = |k: &str| -> Vec<&Value> { objects.iter().filter(|o| o["kernel"] == k).collect() };
    let fused = of("gdn_fused_recurrent_fwd");
    assert_eq!(fused.len(), 13, "{m:#}");
    for o in &fused {
        let t = &o["triton"];
        // 15 arguments less gk, gv and cu_seqlens (None), plus the two scratch pointers.
        assert_eq!(t["params"].as_array().unwrap().len(), 14, "{o}");
        assert_eq!(num(t, "shared"), 256, "{o}");
        assert_eq!(num(t, "num_warps"), 1);
        let warp = if o["target"].as_str().unwrap().starts_with("gfx9") {
            64
        } else {
            32
        };
        assert_eq!(num(t, "warp_size"), warp, "{o}");
        let r = &o["resources"]["fused_recurrent_gated_delta_rule_fwd_kernel"];
        let spills = r["spill_store_bytes"]
            .as_u64()
            .or(r["vgpr_spills"].as_u64());
        assert_eq!(spills, Some(0), "{o}");
    }
    // The AMD objects were built from the portable softplus, not the inline PTX one.
    for o in fused.iter().filter(|o| o["format"] == "hsaco") {
        let bytes = std::fs::read(proj.join("out").join(o["path"].as_str().unwrap())).unwrap();
        assert!(!bytes.windows(7).any(|w| w == b"ex2.app"), "{o}");
    }
    let one: BTreeMap<&str, u64> = of("gdn_chunk_h_one")
        .iter()
        .map(|o| (o["target"].as_str().unwrap(), num(&o["triton"], "shared")))
        .collect();
    assert_eq!(
        one.len(),
        13,
        "the one chunk config on every default target: {one:?}"
    );
    let chunk = of("gdn_chunk_h");
    let on = |t: &str| chunk.iter().filter(|o| o["target"] == t).count();
    assert_eq!((on("sm_90a"), on("gfx942")), (12, 4), "{m:#}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("for gfx942: needs ").count(), 8, "{err}");
    let big = chunk
        .iter()
        .map(|o| num(&o["triton"], "shared"))
        .max()
        .unwrap();
    assert!(big > 160 * 1024, "the largest sm_90a config needs {big} B");

    crate::triton_autotune::chunk_h_autotuned_equals_its_matrix(s.path(), &proj, &m);

    let out = proj.join("out");
    let o = Command::new(kbuild_bin())
        .args(["inspect", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("fused_recurrent_gated_delta_rule_fwd_kernel")
    );
    for (device, target) in [
        ("sm_90", "sm_90a"),
        ("gfx1101", "gfx1101"),
        ("sm_87", "sm_86"),
    ] {
        let o = Command::new(kbuild_bin())
            .args([
                "explain",
                "--json",
                "--device",
                device,
                "--kernel",
                "gdn_fused_recurrent_fwd",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{device}: {}", text(&o));
        let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            doc["kernels"][0]["selected"]["target"], target,
            "{device}: {doc}"
        );
    }
    let o = Command::new(kbuild_bin())
        .args(["diff", "--format", "json"])
        .arg(&out)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// `--job-timeout` bounds a Triton job as it bounds a compiler: a module whose import hangs
/// fails its job with the reason, and the build ends.
#[test]
fn a_hung_triton_worker_is_stopped_at_the_job_timeout() {
    let s = Scratch::new();
    let proj = s.path().join("slow");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(
        proj.join("slow.py"),
        "import time\nimport triton\nimport triton.language as tl\n\ntime.sleep(120)\n\n\n@triton.jit\ndef k(x_ptr):\n    pass\n",
    )
    .unwrap();
    std::fs::write(
        proj.join("Kbuild.toml"),
        "[package]\nname = \"slow\"\nversion = \"0.1.0\"\n\n[build]\ntargets = [\"sm_80\"]\nout-dir = \"out\"\n\n\
         [kernels.slow]\nlanguage = \"triton\"\nsource = \"slow.py\"\nfunction = \"k\"\nsignature = { x_ptr = \"*fp32\" }\n",
    )
    .unwrap();
    let start = std::time::Instant::now();
    let o = kbuild(&proj, &s.path().join("cache"), &["--job-timeout", "3"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "error: slow for sm_80: the Triton compile ran longer than the job timeout (3 s)"
        ),
        "{}",
        text(&o)
    );
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
}
