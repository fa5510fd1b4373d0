//! Oracle tests: every object of a default-target build of `kernels/` and of the resource
//! probes (`tests/fixtures/probes`: spills, big static shared/LDS, named barriers, AGPRs on the
//! wave64 CDNA targets) carries in its manifest exactly what the vendors' tools say:
//! AMD — every field equals `llvm-readobj-19 --notes` and the occupancy equals clang's
//! kernel-resource-usage remark; CUDA — registers/stack/shared/const equal
//! `cuobjdump --dump-resource-usage` (whose SHARED includes the sm_90+ reservation, which the
//! manifest keeps apart) and spills/smem equal `ptxas -v`; PTX — `.version` and `.target`.
//! The parsers here are deliberately independent of kbuild's readers.

use crate::kbuild_tests;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use kbuild_tests::{cuobjdump, manifest, text, tool_output, Scratch};
use serde_json::Value;

/// `llvm-readobj-19 --notes`: per kernel name, its scalar `.key: value` pairs.
pub(crate) fn readobj_kernels(path: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let out = tool_output(Command::new("llvm-readobj-19").arg("--notes").arg(path));
    let mut kernels = BTreeMap::new();
    let mut in_kernels = false;
    let mut item_indent: Option<usize> = None;
    let mut cur: BTreeMap<String, String> = BTreeMap::new();
    let mut flush = |cur: &mut BTreeMap<String, String>| {
        if let Some(name) = cur.get(".name").cloned() {
            kernels.insert(name, std::mem::take(cur));
        }
        cur.clear();
    };
    for line in out.lines() {
        if line.trim_start().starts_with("amdhsa.kernels:") {
            in_kernels = true;
            continue;
        }
        if !in_kernels {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if indent == 0 && !t.is_empty() {
            // amdhsa.target / amdhsa.version / "..." end the kernel list.
            flush(&mut cur);
            in_kernels = false;
            continue;
        }
        let (t, indent) = match t.strip_prefix("- ") {
            Some(rest) if item_indent.is_none() || item_indent == Some(indent) => {
                if item_indent == Some(indent) {
                    flush(&mut cur);
                }
                item_indent = Some(indent);
                (rest, indent + 2)
            }
            _ => (t, indent),
        };
        if Some(indent) != item_indent.map(|i| i + 2) {
            continue;
        }
        if let Some((k, v)) = t.split_once(':') {
            let v = v.trim();
            if !v.is_empty() {
                cur.insert(k.trim().to_string(), v.trim_matches('\'').to_string());
            }
        }
    }
    flush(&mut cur);
    kernels
}

/// `cuobjdump --dump-resource-usage`: per function, REG/STACK/SHARED/LOCAL/CONSTANT[0].
fn cuobjdump_kernels(path: &Path) -> BTreeMap<String, BTreeMap<String, u64>> {
    let out = tool_output(
        Command::new(cuobjdump())
            .arg("--dump-resource-usage")
            .arg(path),
    );
    let mut map = BTreeMap::new();
    let mut name: Option<String> = None;
    for line in out.lines() {
        let t = line.trim();
        if let Some(n) = t.strip_prefix("Function ") {
            name = Some(n.trim_end_matches(':').to_string());
        } else if let Some(n) = &name {
            let fields: BTreeMap<String, u64> = t
                .split_whitespace()
                .filter_map(|kv| kv.split_once(':'))
                .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
                .collect();
            if fields.contains_key("REG") {
                map.insert(n.clone(), fields);
                name = None;
            }
        }
    }
    map
}

/// `ptxas -v`: per entry (stack frame, spill stores, spill loads, registers, smem).
fn ptxas_entries(log: &str) -> BTreeMap<String, [u64; 5]> {
    let mut map = BTreeMap::new();
    let mut cur: Option<String> = None;
    let mut vals = [0u64; 5];
    let num_before = |s: &str, what: &str| -> Option<u64> {
        let i = s.find(what)?;
        s[..i].split_whitespace().last()?.parse().ok()
    };
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            cur = rest.split('\'').next().map(str::to_string);
            vals = [0; 5];
        } else if line.contains("bytes stack frame") {
            vals[0] = num_before(line, "bytes stack frame").unwrap_or(0);
            vals[1] = num_before(line, "bytes spill stores").unwrap_or(0);
            vals[2] = num_before(line, "bytes spill loads").unwrap_or(0);
        } else if line.contains("Used ") && line.contains("registers") {
            vals[3] = num_before(line, "registers").unwrap_or(0);
            vals[4] = num_before(line, "bytes smem").unwrap_or(0);
            if let Some(n) = cur.take() {
                map.insert(n, vals);
            }
        }
    }
    map
}

/// clang's `-Rpass-analysis=kernel-resource-usage`: per function, "Occupancy [waves/SIMD]".
fn clang_occupancy(log: &str) -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    let mut cur: Option<String> = None;
    for line in log.lines() {
        if let Some(rest) = line.split("remark: Function Name: ").nth(1) {
            cur = Some(rest.split(" [").next().unwrap_or(rest).trim().to_string());
        } else if let Some(rest) = line.split("Occupancy [waves/SIMD]: ").nth(1) {
            if let (Some(n), Some(v)) = (
                cur.clone(),
                rest.split_whitespace().next().and_then(|v| v.parse().ok()),
            ) {
                map.insert(n, v);
            }
        }
    }
    map
}

fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn check_amd(path: &Path, resources: &Value, checked: &mut usize) {
    let oracle = readobj_kernels(path);
    let log = std::fs::read_to_string(path.with_extension("hsaco.log")).unwrap_or_default();
    let occupancy = clang_occupancy(&log);
    let res = resources.as_object().unwrap();
    assert_eq!(res.len(), oracle.len(), "{}: kernel count", path.display());
    for (name, r) in res {
        let o = oracle
            .get(name)
            .unwrap_or_else(|| panic!("{}: llvm-readobj has no {name}", path.display()));
        let field = |k: &str| -> u64 { o.get(k).and_then(|v| v.parse().ok()).unwrap_or(0) };
        let at = format!("{} {name}", path.display());
        assert_eq!(num(r, "vgprs"), field(".vgpr_count"), "{at} vgprs");
        assert_eq!(num(r, "sgprs"), field(".sgpr_count"), "{at} sgprs");
        assert_eq!(num(r, "agprs"), field(".agpr_count"), "{at} agprs");
        assert_eq!(
            num(r, "vgpr_spills"),
            field(".vgpr_spill_count"),
            "{at} vgpr spills"
        );
        assert_eq!(
            num(r, "sgpr_spills"),
            field(".sgpr_spill_count"),
            "{at} sgpr spills"
        );
        assert_eq!(
            num(r, "lds_bytes"),
            field(".group_segment_fixed_size"),
            "{at} lds"
        );
        assert_eq!(
            num(r, "scratch_bytes"),
            field(".private_segment_fixed_size"),
            "{at} scratch"
        );
        assert_eq!(num(r, "wave_size"), field(".wavefront_size"), "{at} wave");
        assert_eq!(
            num(r, "max_threads"),
            field(".max_flat_workgroup_size"),
            "{at} max threads"
        );
        assert_eq!(
            num(r, "kernarg_bytes"),
            field(".kernarg_segment_size"),
            "{at} kernarg"
        );
        let dyn_stack = o
            .get(".uses_dynamic_stack")
            .map(|v| v == "true")
            .unwrap_or(false);
        assert_eq!(
            r["dynamic_stack"].as_bool(),
            Some(dyn_stack),
            "{at} dynamic stack"
        );
        let remark = occupancy
            .get(name)
            .unwrap_or_else(|| panic!("{at}: no clang occupancy remark"));
        assert_eq!(
            num(&r["occupancy"], "value"),
            *remark,
            "{at} occupancy vs clang remark"
        );
        *checked += 1;
    }
}

pub(crate) fn check_cuda(path: &Path, resources: &Value, checked: &mut usize) {
    let oracle = cuobjdump_kernels(path);
    let log = std::fs::read_to_string(path.with_extension("cubin.log"))
        .expect("ptxas log beside the cubin");
    let ptxas = ptxas_entries(&log);
    let res = resources.as_object().unwrap();
    assert_eq!(res.len(), oracle.len(), "{}: kernel count", path.display());
    for (name, r) in res {
        let at = format!("{} {name}", path.display());
        let o = oracle
            .get(name)
            .unwrap_or_else(|| panic!("{at}: cuobjdump has no such function"));
        assert_eq!(num(r, "registers"), o["REG"], "{at} registers");
        assert_eq!(num(r, "scratch_bytes"), o["STACK"], "{at} stack");
        assert_eq!(
            num(r, "lds_bytes") + num(r, "reserved_shared_bytes"),
            o["SHARED"],
            "{at} shared (+ reservation)"
        );
        assert_eq!(num(r, "const_bytes"), o["CONSTANT[0]"], "{at} const bank 0");
        let p = ptxas
            .get(name)
            .unwrap_or_else(|| panic!("{at}: ptxas -v has no entry"));
        assert_eq!(num(r, "scratch_bytes"), p[0], "{at} stack vs ptxas");
        assert_eq!(
            num(r, "spill_store_bytes"),
            p[1],
            "{at} spill stores vs ptxas"
        );
        assert_eq!(
            num(r, "spill_load_bytes"),
            p[2],
            "{at} spill loads vs ptxas"
        );
        assert_eq!(num(r, "registers"), p[3], "{at} registers vs ptxas");
        assert_eq!(num(r, "lds_bytes"), p[4], "{at} smem vs ptxas");
        *checked += 1;
    }
}

fn check_ptx(path: &Path, resources: &Value, checked: &mut usize) {
    let text = std::fs::read_to_string(path).unwrap();
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(".version "))
        .unwrap()
        .trim();
    let target = text
        .lines()
        .find_map(|l| l.trim().strip_prefix(".target "))
        .unwrap()
        .trim();
    for (name, r) in resources.as_object().unwrap() {
        assert!(text.contains(&format!(".entry {name}(")), "{name}");
        assert_eq!(r["ptx_isa"], version);
        assert_eq!(r["target"], target);
        *checked += 1;
    }
}

#[test]
fn every_object_of_a_default_build_matches_the_vendor_tools() {
    let s = Scratch::with_repo_kernels_shared_cache("repo");
    let probes = s.path().join("probes");
    kbuild_tests::copy_dir(
        &kbuild_tests::repo_root().join("tests/fixtures/probes"),
        &probes,
    );

    let mut checked = BTreeMap::new();
    let mut spills = (0, 0);
    let mut agpr_kernels = 0;
    for (name, dir) in [
        ("kernels", s.path().join("repo/kernels")),
        ("probes", probes),
    ] {
        let o = s.kbuild(&dir, &["--out", "out"]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let out = dir.join("out");
        let m = manifest(&out);
        for obj in m["objects"].as_array().unwrap() {
            let path = out.join(obj["path"].as_str().unwrap());
            let res = &obj["resources"];
            let n = checked
                .entry(obj["format"].as_str().unwrap().to_string())
                .or_insert(0);
            match obj["format"].as_str().unwrap() {
                "hsaco" => check_amd(&path, res, n),
                "cubin" => check_cuda(&path, res, n),
                "ptx" => check_ptx(&path, res, n),
                f => panic!("unexpected format {f}"),
            }
            for r in res.as_object().unwrap().values() {
                if r["kind"] == "amd" && r["vgpr_spills"].as_u64() > Some(0) {
                    spills.0 += 1;
                }
                if r["kind"] == "cuda" && r["spill_store_bytes"].as_u64() > Some(0) {
                    spills.1 += 1;
                }
                if r["agprs"].as_u64() > Some(0) {
                    agpr_kernels += 1;
                }
            }
        }
    }
    eprintln!("checked kernel entries: {checked:?}; spilling AMD/CUDA: {spills:?}; AGPR kernels: {agpr_kernels}");
    // The probes really exercise what they are for.
    assert!(spills.0 >= 9 && spills.1 >= 8, "spills AMD/CUDA {spills:?}");
    assert!(agpr_kernels >= 2, "AGPR kernels {agpr_kernels}");
    assert!(
        checked["hsaco"] >= 9 * 8 && checked["cubin"] >= 8 * 8 && checked["ptx"] >= 8,
        "{checked:?}"
    );
}

#[test]
fn inspect_json_agrees_with_the_manifest_and_reports_foreign_cubins_without_spills() {
    let s = Scratch::new();
    let probes = s.path().join("probes");
    kbuild_tests::copy_dir(
        &kbuild_tests::repo_root().join("tests/fixtures/probes"),
        &probes,
    );
    let o = s.kbuild(&probes, &["--targets", "sm_90,gfx942", "--out", "out"]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(&probes.join("out"));
    let files: Vec<String> = m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| format!("out/{}", o["path"].as_str().unwrap()))
        .collect();
    let mut args = vec!["inspect", "--json"];
    args.extend(files.iter().map(String::as_str));
    let i = s.kbuild(&probes, &args);
    assert!(i.status.success(), "{}", text(&i));
    let report: Value = serde_json::from_slice(&i.stdout).unwrap();
    assert_eq!(report["schema"], "kbuild.inspect/v1");
    for (obj, inspected) in m["objects"]
        .as_array()
        .unwrap()
        .iter()
        .zip(report["objects"].as_array().unwrap())
    {
        assert_eq!(
            inspected["path"],
            format!("out/{}", obj["path"].as_str().unwrap())
        );
        assert_eq!(inspected["target"], obj["target"]);
        for k in inspected["kernels"].as_array().unwrap() {
            let mut k = k.clone();
            let name = k["name"].as_str().unwrap().to_string();
            k.as_object_mut().unwrap().remove("name");
            let params = k.as_object_mut().unwrap().remove("params");
            assert_eq!(k, obj["resources"][&name], "{name}");
            assert_eq!(params.as_ref(), obj["params"].get(&name), "{name} params");
        }
    }

    // Without its build log a cubin is foreign: spills are null, with a note.
    let cubin = probes.join("out/sm_90/probes.cubin");
    let foreign = s.path().join("foreign.cubin");
    std::fs::copy(&cubin, &foreign).unwrap();
    let i = s.kbuild(s.path(), &["inspect", "--json", "foreign.cubin"]);
    assert!(i.status.success(), "{}", text(&i));
    let report: Value = serde_json::from_slice(&i.stdout).unwrap();
    let k = &report["objects"][0]["kernels"][0];
    assert!(
        k["spill_store_bytes"].is_null() && k["spill_load_bytes"].is_null(),
        "{k}"
    );
    assert!(
        k["note"]
            .as_str()
            .unwrap()
            .contains("not recorded in a cubin"),
        "{k}"
    );

    // One unreadable file: exit 1 with a message naming it; the others still print.
    std::fs::write(s.path().join("junk.bin"), b"not a code object").unwrap();
    let i = s.kbuild(
        s.path(),
        &["inspect", "foreign.cubin", "junk.bin", "missing.cubin"],
    );
    assert_eq!(i.status.code(), Some(1), "{}", text(&i));
    let err = String::from_utf8_lossy(&i.stderr);
    assert!(
        err.contains("junk.bin") && err.contains("missing.cubin"),
        "{err}"
    );
    assert!(
        String::from_utf8_lossy(&i.stdout).contains("probe_spill"),
        "{}",
        text(&i)
    );
}
