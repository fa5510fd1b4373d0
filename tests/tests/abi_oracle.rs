//! Oracle tests of the launch ABI in the manifest (`objects[].params`): on every object of a
//! default-target build of `kernels/`, each entry's parameters equal what the vendors' tools
//! say — cubins: the `EIATTR_KPARAM_INFO` and `EIATTR_CBANK_PARAM_SIZE` records of
//! `cuobjdump -elf`; AMDGPU objects: the `.args` of `llvm-readobj-19 --notes`; PTX: the
//! `.entry` parameter lists, parsed here from the text. The parsers here are deliberately
//! independent of kbuild's readers. Then `kbuild diff` end to end: a kernel whose signature
//! changes is an ABI change, and `--fail-on abi` trips on it.

use crate::kbuild_tests;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use kbuild_tests::{cuobjdump, manifest, text, tool_output, Scratch};
use serde_json::Value;

/// `0x1f` → 31.
pub(crate) fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16)
        .unwrap_or_else(|_| panic!("not hex: {s:?}"))
}

/// The `Name : value` pairs of a cuobjdump KPARAM_INFO value (two lines joined).
fn kparam_fields(line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for part in line.split('\t') {
        if let Some((k, v)) = part.split_once(" : ") {
            out.insert(k.trim().to_string(), v.trim().to_string());
        } else if let Some((k, v)) = part.split_once(':') {
            if !k.trim().is_empty() && !v.trim().is_empty() {
                out.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
    }
    out
}

/// Per kernel of a cubin, as `cuobjdump -elf` prints its `.nv.info.<kernel>` section: the
/// KPARAM_INFO records (fields by cuobjdump's names) and CBANK_PARAM_SIZE.
#[derive(Default, Debug)]
pub(crate) struct CubinKernel {
    pub(crate) kparams: Vec<BTreeMap<String, String>>,
    cbank_param_size: Option<u64>,
}

pub(crate) fn cuobjdump_params(path: &Path) -> BTreeMap<String, CubinKernel> {
    let out = tool_output(Command::new(cuobjdump()).arg("-elf").arg(path));
    let lines: Vec<&str> = out.lines().collect();
    let mut kernels: BTreeMap<String, CubinKernel> = BTreeMap::new();
    let mut cur: Option<String> = None;
    let mut attr = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with('.') {
            // A section dump starts with its name alone on a line.
            cur = line
                .trim()
                .strip_prefix(".nv.info.")
                .filter(|n| !n.contains(char::is_whitespace))
                .map(str::to_string);
            if let Some(k) = &cur {
                kernels.entry(k.clone()).or_default();
            }
        } else if let Some(k) = &cur {
            let t = line.trim();
            if let Some(a) = t.strip_prefix("Attribute:") {
                attr = a.trim().to_string();
            } else if let Some(v) = t.strip_prefix("Value:") {
                let k = kernels.get_mut(k).unwrap();
                match attr.as_str() {
                    "EIATTR_KPARAM_INFO" => {
                        let both = format!("{v}\t{}", lines.get(i + 1).unwrap_or(&""));
                        i += 1;
                        k.kparams.push(kparam_fields(&both));
                    }
                    "EIATTR_CBANK_PARAM_SIZE" => k.cbank_param_size = Some(hex(v)),
                    _ => {}
                }
            }
        }
        i += 1;
    }
    kernels
}

/// Pointer for a C++ type ending in `*` (cv and restrict qualifiers after it aside).
fn pointer_type(t: &str) -> bool {
    let t = t.trim();
    let t = t
        .trim_end_matches("__restrict")
        .trim_end_matches("restrict")
        .trim_end_matches("const")
        .trim_end_matches("volatile")
        .trim_end();
    t.ends_with('*')
}

fn params_of<'a>(obj: &'a Value, entry: &str, at: &str) -> &'a Vec<Value> {
    obj["params"][entry]
        .as_array()
        .unwrap_or_else(|| panic!("{at}: no params in the manifest"))
}

fn check_cubin(path: &Path, obj: &Value, checked: &mut usize) {
    let oracle = cuobjdump_params(path);
    let bytes = std::fs::read(path).unwrap();
    let cubin = kbuild_manifest::read::cubin::read_cubin(&bytes).unwrap();
    for entry in obj["resources"].as_object().unwrap().keys() {
        let at = format!("{} {entry}", path.display());
        let o = oracle
            .get(entry)
            .unwrap_or_else(|| panic!("{at}: cuobjdump has no .nv.info.{entry}"));
        let params = params_of(obj, entry, &at);
        let mut want = o.kparams.clone();
        want.sort_by_key(|f| hex(&f["Ordinal"]));
        assert_eq!(params.len(), want.len(), "{at}: parameter count");
        let reader = cubin.kernel(entry).unwrap();
        for ((p, w), r) in params.iter().zip(&want).zip(&reader.kparams) {
            let at = format!("{at} param {}", p["index"]);
            assert_eq!(
                p["index"].as_u64(),
                Some(hex(&w["Ordinal"])),
                "{at} ordinal"
            );
            assert_eq!(p["offset"].as_u64(), Some(hex(&w["Offset"])), "{at} offset");
            assert_eq!(p["size"].as_u64(), Some(hex(&w["Size"])), "{at} size");
            // Every field of the record as the reader decodes it.
            assert_eq!(u64::from(r.index), hex(&w["Index"]), "{at} Index");
            assert_eq!(
                u64::from(r.pointee_log_align),
                hex(&w["Pointee's logAlignment"]),
                "{at} logAlignment"
            );
            assert_eq!(u64::from(r.space), hex(&w["Space"]), "{at} Space");
            assert_eq!(u64::from(r.cbank), hex(&w["cbank"]), "{at} cbank");
            assert_eq!(
                r.in_cbank,
                w["Parameter Space"] == "CBANK",
                "{at} Parameter Space"
            );
            let space = hex(&w["Space"]);
            let size = hex(&w["Size"]);
            let kind = match p["type"].as_str() {
                Some(t) if pointer_type(t) => "pointer",
                Some(_) => "value",
                None if space != 0 && size == 8 => "pointer",
                None if size != 8 => "value",
                None => "unknown",
            };
            assert_eq!(p["kind"], kind, "{at} kind (Space {space}, Size {size})");
            assert!(
                p.get("align").is_none(),
                "{at}: a cubin records no alignment"
            );
            *checked += 1;
        }
        let end = params
            .iter()
            .map(|p| p["offset"].as_u64().unwrap() + p["size"].as_u64().unwrap())
            .max()
            .unwrap_or(0);
        assert_eq!(
            Some(end),
            o.cbank_param_size,
            "{at}: the last parameter ends at CBANK_PARAM_SIZE"
        );
    }
}

/// `llvm-readobj-19 --notes`: per kernel `.name`, its `.args` as key → value maps.
fn readobj_args(path: &Path) -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let out = tool_output(Command::new("llvm-readobj-19").arg("--notes").arg(path));
    let mut kernels = BTreeMap::new();
    let mut in_kernels = false;
    let mut name: Option<String> = None;
    let mut args: Vec<BTreeMap<String, String>> = Vec::new();
    let mut in_args = false;
    let mut flush = |name: &mut Option<String>, args: &mut Vec<BTreeMap<String, String>>| {
        if let Some(n) = name.take() {
            kernels.insert(n, std::mem::take(args));
        }
        args.clear();
    };
    for line in out.lines() {
        if line.starts_with("amdhsa.kernels:") {
            in_kernels = true;
            continue;
        }
        if !in_kernels {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let mut t = line.trim_start();
        let mut indent_of_key = indent;
        if indent == 0 && !t.is_empty() {
            flush(&mut name, &mut args);
            in_kernels = false;
            continue;
        }
        if indent == 2 && t.starts_with("- ") {
            flush(&mut name, &mut args);
            in_args = false;
            t = &t[2..];
            indent_of_key = 4;
        } else if indent == 6 && in_args && t.starts_with("- ") {
            args.push(BTreeMap::new());
            t = &t[2..];
            indent_of_key = 8;
        }
        let Some((k, v)) = t.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim().trim_matches('\''));
        match indent_of_key {
            4 => {
                in_args = k == ".args";
                if k == ".name" {
                    name = Some(v.to_string());
                }
            }
            8 if in_args => {
                if let Some(a) = args.last_mut() {
                    a.insert(k.to_string(), v.to_string());
                }
            }
            _ => {}
        }
    }
    flush(&mut name, &mut args);
    kernels
}

fn check_amd(path: &Path, obj: &Value, checked: &mut usize) {
    let oracle = readobj_args(path);
    for entry in obj["resources"].as_object().unwrap().keys() {
        let at = format!("{} {entry}", path.display());
        let args = oracle
            .get(entry)
            .unwrap_or_else(|| panic!("{at}: llvm-readobj has no kernel {entry}"));
        let params = params_of(obj, entry, &at);
        assert_eq!(params.len(), args.len(), "{at}: argument count");
        for (i, (p, a)) in params.iter().zip(args).enumerate() {
            let at = format!("{at} arg {i}");
            let num = |k: &str| a[k].parse::<u64>().unwrap();
            assert_eq!(p["index"].as_u64(), Some(i as u64), "{at} index");
            assert_eq!(p["offset"].as_u64(), Some(num(".offset")), "{at} offset");
            assert_eq!(p["size"].as_u64(), Some(num(".size")), "{at} size");
            let vk = a[".value_kind"].as_str();
            let hidden = vk.starts_with("hidden_");
            assert_eq!(p["hidden"].as_bool().unwrap_or(false), hidden, "{at} {vk}");
            let kind = match vk {
                "global_buffer" | "dynamic_shared_pointer" => "pointer",
                "by_value" => "value",
                "hidden_printf_buffer"
                | "hidden_hostcall_buffer"
                | "hidden_default_queue"
                | "hidden_completion_action"
                | "hidden_multigrid_sync_arg"
                | "hidden_heap_v1"
                | "hidden_queue_ptr" => "pointer",
                v if v.starts_with("hidden_") && v != "hidden_none" => "value",
                _ => "unknown",
            };
            assert_eq!(p["kind"], kind, "{at} kind of {vk}");
            if a.get(".address_space").map(String::as_str) == Some("global") {
                assert_eq!(p["kind"], "pointer", "{at}: a global address is a pointer");
            }
            assert_eq!(
                p["name"].as_str(),
                a.get(".name").map(String::as_str),
                "{at} name"
            );
            if let Some(t) = a.get(".type_name") {
                assert_eq!(p["type"].as_str(), Some(t.as_str()), "{at} type");
            }
            *checked += 1;
        }
    }
}

/// One `.param` line: its type (`.u64`), array length (1 for a scalar), and whether `.ptr`.
type PtxParamLine = (String, u64, bool);

/// The `.param` lines of each `.entry NAME(` … `)` of a PTX file.
fn ptx_entries(text: &str) -> BTreeMap<String, Vec<PtxParamLine>> {
    let mut out = BTreeMap::new();
    let mut cur: Option<(String, Vec<PtxParamLine>)> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.split(".entry ").nth(1).filter(|_| !t.starts_with("//")) {
            let name = rest.trim_end_matches('(').trim().to_string();
            cur = Some((name, Vec::new()));
            if t.ends_with("()") {
                let (n, _) = cur.take().unwrap();
                out.insert(n.trim_end_matches("()").to_string(), Vec::new());
            }
            continue;
        }
        let Some((_, params)) = cur.as_mut() else {
            continue;
        };
        if t.starts_with(')') {
            let (n, p) = cur.take().unwrap();
            out.insert(n, p);
            continue;
        }
        let words: Vec<&str> = t.trim_end_matches(',').split_whitespace().collect();
        assert_eq!(words.first(), Some(&".param"), "{t}");
        let ptr = words.iter().any(|w| w.starts_with(".ptr"));
        let ty = words
            .iter()
            .find(|w| {
                [".u", ".s", ".b", ".f"].iter().any(|p| w.starts_with(p))
                    && w[2..].chars().all(|c| c.is_ascii_digit())
            })
            .unwrap_or_else(|| panic!("no type in {t}"))
            .to_string();
        let count = words
            .last()
            .and_then(|n| n.split_once('['))
            .map(|(_, k)| k.trim_end_matches(']').parse().unwrap())
            .unwrap_or(1);
        params.push((ty, count, ptr));
    }
    out
}

fn check_ptx(path: &Path, obj: &Value, checked: &mut usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let entries = ptx_entries(&text);
    for entry in obj["resources"].as_object().unwrap().keys() {
        let at = format!("{} {entry}", path.display());
        let want = &entries[entry];
        let params = params_of(obj, entry, &at);
        assert_eq!(params.len(), want.len(), "{at}: parameter count");
        let mut offset = 0u64;
        for (p, (ty, count, ptr)) in params.iter().zip(want) {
            let at = format!("{at} param {}", p["index"]);
            let elem: u64 = ty[2..].parse::<u64>().unwrap() / 8;
            let align = elem;
            offset = offset.div_ceil(align) * align;
            assert_eq!(p["offset"].as_u64(), Some(offset), "{at} offset");
            assert_eq!(p["size"].as_u64(), Some(elem * count), "{at} size ({ty})");
            assert_eq!(p["align"].as_u64(), Some(align), "{at} align");
            let kind = match p["type"].as_str() {
                Some(t) if pointer_type(t) => "pointer",
                Some(_) => "value",
                None if *ptr => "pointer",
                None if *count == 1 && elem == 8 && !ty.starts_with(".f") => "unknown",
                None => "value",
            };
            assert_eq!(p["kind"], kind, "{at} kind ({ty})");
            offset += elem * count;
            *checked += 1;
        }
    }
}

#[test]
fn every_parameter_of_a_default_build_matches_the_vendor_tools() {
    let s = Scratch::with_repo_kernels_shared_cache("repo");
    let dir = s.path().join("repo/kernels");
    let o = s.kbuild(&dir, &["--out", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = dir.join("out");
    let m = manifest(&out);
    let mut checked: BTreeMap<String, usize> = BTreeMap::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for obj in m["objects"].as_array().unwrap() {
        let path = out.join(obj["path"].as_str().unwrap());
        let format = obj["format"].as_str().unwrap();
        let n = checked.entry(format.to_string()).or_insert(0);
        match format {
            "cubin" => check_cubin(&path, obj, n),
            "hsaco" => check_amd(&path, obj, n),
            "ptx" => check_ptx(&path, obj, n),
            f => panic!("unexpected format {f}"),
        }
        for p in obj["params"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|v| v.as_array().unwrap())
        {
            *kinds
                .entry(format!("{format} {}", p["kind"].as_str().unwrap()))
                .or_insert(0) += 1;
        }
    }
    eprintln!("checked parameters: {checked:?}; kinds: {kinds:?}");
    assert!(
        checked["cubin"] >= 500 && checked["hsaco"] >= 1000 && checked["ptx"] >= 50,
        "{checked:?}"
    );
    // sm_100/sm_120 mark used global pointers: some cubin parameters are known pointers.
    assert!(
        kinds.get("cubin pointer").copied().unwrap_or(0) > 0,
        "{kinds:?}"
    );
    assert!(
        kinds.get("hsaco pointer").copied().unwrap_or(0) > 0,
        "{kinds:?}"
    );
}

// ------------------------------------------------------------------------------ kbuild diff

/// The diff fixture's head version, for sm_89 + gfx1100 + compute_89 (a cubin, an AMDGPU
/// object and PTX), built in `dir` with the shared cache.
fn build_fixture(s: &Scratch, dir: &Path) -> std::process::Output {
    s.kbuild(
        dir,
        &["--targets", "sm_89,gfx1100,compute_89", "--out", "out"],
    )
}

#[test]
fn a_changed_signature_is_an_abi_change_and_fail_on_abi_trips() {
    let mut s = Scratch::new();
    s.cache = kbuild_tests::shared_cache();
    let fixture = kbuild_tests::repo_root().join("tests/fixtures/diff/head");
    let (base, head) = (s.path().join("base"), s.path().join("head"));
    kbuild_tests::copy_dir(&fixture, &base);
    kbuild_tests::copy_dir(&fixture, &head);
    // lean_scale: `int n` becomes `long long n` (resized 4 → 8) and gains `float alpha`.
    let lean = head.join("lean.cu");
    let src = std::fs::read_to_string(&lean).unwrap();
    let changed = src.replace(
        "float* KC_RESTRICT y, int n)",
        "float* KC_RESTRICT y, long long n, float alpha)",
    );
    assert_ne!(src, changed, "the fixture's lean_scale signature moved");
    std::fs::write(&lean, changed).unwrap();
    for dir in [&base, &head] {
        let o = build_fixture(&s, dir);
        assert!(o.status.success(), "{}", text(&o));
    }

    // The C++ kernel's parameters carry the demangled types.
    let m = manifest(&head.join("out"));
    let stable = m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kernel"] == "stable" && o["target"] == "sm_89")
        .unwrap();
    let p = &stable["params"]["_Z8scale_byILi4EEvPf"][0];
    assert_eq!(
        (&p["type"], &p["kind"]),
        (&"float*".into(), &"pointer".into()),
        "{p}"
    );

    let diff = |args: &[&str]| {
        let mut all = vec!["diff", "base/out", "head/out"];
        all.extend_from_slice(args);
        s.kbuild(s.path(), &all)
    };
    let o = diff(&["--fail-on", "abi"]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    for want in [
        "sm_89: 1 ABI change, 0 regressions",
        "FAIL    abi: sm_89 lean_scale: param 2 resized 4 → 8 B, param 3 added (val@24:4)",
        "FAIL    abi: gfx1100 lean_scale: param 2 resized 4 → 8 B, param 3 added (val@24:4)",
        "FAIL    abi: compute_89 lean_scale: param 2 resized 4 → 8 B, param 3 added (val@24:4)",
        "  ABI: lean_scale: param 2 resized 4 → 8 B, param 3 added (val@24:4)",
    ] {
        assert!(out.contains(want), "missing {want:?}\n{out}");
    }
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("error: gate tripped: abi"),
        "{}",
        text(&o)
    );
    // Only lean_scale changed.
    assert_eq!(out.matches("FAIL    abi:").count(), 3, "{out}");

    let o = diff(&["--format", "json", "--fail-on", "abi"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let j: Value = serde_json::from_slice(&o.stdout).expect("JSON report");
    assert_eq!(j["summary"]["abi"], 3);
    let changes = j["changes"].as_array().unwrap();
    let abi: Vec<&Value> = changes.iter().filter(|c| c["class"] == "abi").collect();
    assert_eq!(abi.len(), 6, "two per target");
    assert!(
        changes.iter().take(abi.len()).all(|c| c["class"] == "abi"),
        "ABI changes first"
    );
    let added = abi
        .iter()
        .find(|c| c["target"] == "sm_89" && c["change"] == "added")
        .unwrap();
    assert_eq!(added["param"], 3);
    assert_eq!(added["head"]["offset"], 24);
    assert!(added["base"].is_null());

    let md = diff(&["--format", "md"]);
    assert_eq!(md.status.code(), Some(0), "no gate: exit 0\n{}", text(&md));
    let md = String::from_utf8_lossy(&md.stdout).into_owned();
    assert!(
        md.contains("- :x: `lean_scale`: param 2 resized 4 → 8 B, param 3 added (val@24:4)"),
        "{md}"
    );

    // The same build on both sides: nothing to report, the gate passes.
    let o = s.kbuild(
        s.path(),
        &["diff", "head/out", "head/out", "--fail-on", "abi"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("ok      abi: no kernel trips it"),
        "{}",
        text(&o)
    );
}
