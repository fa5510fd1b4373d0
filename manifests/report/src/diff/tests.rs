//! Unit tests of the diff model and gates on hand-made records. (Rendering is snapshot-tested
//! end to end in `tests/tests/diff.rs`, on objects built by the real compilers.)

use std::collections::BTreeMap;

use super::gate::{evaluate, parse_rules, AllowEntry, Date};
use super::*;
use kbuild_manifest::occupancy::Occupancy;
use kbuild_manifest::params::{Param, ParamKind};
use kbuild_manifest::resources::{AmdResources, CudaResources};

pub(crate) fn amd(vgprs: u32, vgpr_spills: u32, lds: u64, waves: u32) -> Resources {
    Resources::Amd(AmdResources {
        vgprs,
        sgprs: 32,
        agprs: 0,
        vgpr_spills,
        sgpr_spills: 0,
        lds_bytes: lds,
        scratch_bytes: u64::from(vgpr_spills) * 4,
        wave_size: 32,
        max_threads: 256,
        kernarg_bytes: 40,
        dynamic_stack: false,
        occupancy: Some(Occupancy {
            unit: "waves/SIMD".into(),
            value: waves,
            max: 16,
            limiter: if waves < 16 { "vgprs" } else { "waves" }.into(),
            block_size: None,
            block_size_from: None,
        }),
    })
}

pub(crate) fn cuda(registers: u32, spill: Option<u64>, warps: u32) -> Resources {
    Resources::Cuda(CudaResources {
        registers,
        lds_bytes: 0,
        reserved_shared_bytes: 0,
        scratch_bytes: spill.unwrap_or(0),
        spill_store_bytes: spill,
        spill_load_bytes: spill,
        const_bytes: 380,
        barriers: 0,
        max_threads: Some(256),
        occupancy: Some(Occupancy {
            unit: "warps/SM".into(),
            value: warps,
            max: 48,
            limiter: if warps < 48 { "registers" } else { "warps" }.into(),
            block_size: None,
            block_size_from: None,
        }),
        note: None,
    })
}

fn snap(targets: &[&str], objects: Vec<(&str, &str, Option<&str>, u64, Resources)>) -> Snapshot {
    Snapshot {
        schema: BASELINE_SCHEMA.into(),
        package: "p".into(),
        toolchains: BTreeMap::new(),
        targets: targets.iter().map(|t| t.to_string()).collect(),
        objects: objects
            .into_iter()
            .map(|(target, kernel, variant, size, r)| SnapshotObject {
                target: target.into(),
                kernel: kernel.into(),
                variant: variant.map(str::to_string),
                format: "hsaco".into(),
                size,
                resources: [(kernel.to_string(), r)].into(),
                params: BTreeMap::new(),
            })
            .collect(),
    }
}

fn sample() -> Diff {
    let (base, head) = sample_sides();
    Diff::new(&base, &head, "base", "head", &BTreeMap::new())
}

fn sample_sides() -> (Snapshot, Snapshot) {
    let base = snap(
        &["gfx1201", "sm_89"],
        vec![
            ("gfx1201", "norm", None, 1000, amd(89, 0, 6160, 16)),
            ("gfx1201", "gemv", Some("rows4"), 1000, amd(64, 0, 0, 16)),
            ("gfx1201", "spiller", None, 1000, amd(64, 0, 0, 16)),
            ("gfx1201", "flat", None, 1000, amd(10, 0, 0, 16)),
            ("gfx1201", "gone", None, 500, amd(10, 0, 0, 16)),
            ("sm_89", "norm", None, 2000, cuda(64, Some(0), 32)),
        ],
    );
    let head = snap(
        &["gfx1201", "sm_89"],
        vec![
            ("gfx1201", "norm", None, 1000, amd(83, 0, 6160, 16)),
            (
                "gfx1201",
                "gemv",
                Some("rows4"),
                1100,
                amd(128, 0, 1024, 12),
            ),
            ("gfx1201", "spiller", None, 1200, amd(48, 12, 0, 16)),
            ("gfx1201", "flat", None, 1000, amd(10, 0, 0, 16)),
            ("gfx1201", "fresh", None, 700, amd(10, 2, 0, 16)),
            ("sm_89", "norm", None, 2000, cuda(40, Some(0), 48)),
        ],
    );
    (base, head)
}

#[test]
fn rows_are_classified_and_ordered_by_significance() {
    let d = sample();
    let t = &d.targets[0];
    assert_eq!(t.target, "gfx1201");
    let order: Vec<&str> = t.rows.iter().map(|r| r.entry.kernel.as_str()).collect();
    // new spills, then the occupancy drop, then a plain improvement.
    assert_eq!(order, ["spiller", "gemv [rows4]", "norm"]);
    assert_eq!(t.rows[0].class, Class::Regression);
    assert_eq!(t.rows[2].class, Class::Improvement);
    assert_eq!(t.unchanged, 1);
    assert_eq!(t.added[0].kernel, "fresh");
    assert_eq!(t.removed[0].kernel, "gone");
    assert_eq!(
        t.summary_line(),
        "gfx1201: 2 regressions, 1 improvement, 1 unchanged, 1 added, 1 removed; objects +500 B (+11.1%)"
    );
    assert_eq!(
        d.targets[1].summary_line(),
        "sm_89: 0 regressions, 1 improvement, 0 unchanged"
    );
    let c = d.counts();
    assert_eq!(
        (c.regressions, c.improvements, c.added, c.removed),
        (2, 2, 1, 1)
    );
    assert!(d.differs());
}

#[test]
fn added_and_removed_targets_and_demangled_names() {
    let base = snap(
        &["sm_75"],
        vec![("sm_75", "k", None, 10, cuda(8, Some(0), 48))],
    );
    let mut head = snap(
        &["gfx1100"],
        vec![("gfx1100", "k", None, 20, amd(8, 0, 0, 16))],
    );
    let r = head.objects[0].resources.remove("k").unwrap();
    head.objects[0]
        .resources
        .insert("_Z8scale_byILi4EEvPf".into(), r);
    let names: BTreeMap<String, String> = [(
        "_Z8scale_byILi4EEvPf".to_string(),
        "void scale_by<4>(float*)".to_string(),
    )]
    .into();
    let d = Diff::new(&base, &head, "a", "b", &names);
    assert_eq!(d.targets[0].status, TargetStatus::Added);
    assert_eq!(d.targets[0].added[0].kernel, "scale_by<4>(float*)");
    assert_eq!(d.targets[1].status, TargetStatus::Removed);
    assert_eq!(
        d.targets[0].summary_line(),
        "gfx1100: new target, 1 kernel (+20 B)"
    );
    assert_eq!(
        d.targets[1].summary_line(),
        "sm_75: target removed, 1 kernel (-10 B)"
    );
}

#[test]
fn identical_sides_do_not_differ() {
    let s = snap(
        &["sm_89"],
        vec![("sm_89", "k", None, 10, cuda(8, Some(0), 48))],
    );
    let d = Diff::new(&s, &s, "a", "b", &BTreeMap::new());
    assert!(!d.differs());
    assert_eq!(d.targets[0].unchanged, 1);
}

fn today() -> Date {
    Date::parse("2026-06-01").unwrap()
}

fn tripped(d: &Diff, rules: &str) -> Vec<(String, String)> {
    evaluate(d, &parse_rules(rules).unwrap(), &[], today())
        .results
        .into_iter()
        .filter(|r| r.tripped)
        .map(|r| (r.rule, r.kernel.unwrap_or_default()))
        .collect()
}

#[test]
fn each_rule_trips_on_its_case_only() {
    let d = sample();
    let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        tripped(&d, "spills"),
        s(&[("spills", "spiller"), ("spills", "fresh")])
    );
    assert_eq!(
        tripped(&d, "occupancy"),
        s(&[("occupancy", "gemv [rows4]")])
    );
    assert_eq!(
        tripped(&d, "registers:+64"),
        s(&[("registers:+64", "gemv [rows4]")])
    );
    assert_eq!(tripped(&d, "registers:+65"), s(&[]));
    assert_eq!(
        tripped(&d, "registers:+100%"),
        s(&[("registers:+100%", "gemv [rows4]")])
    );
    assert_eq!(tripped(&d, "registers:+101%"), s(&[]));
    assert_eq!(
        tripped(&d, "lds:+1024"),
        s(&[("lds:+1024", "gemv [rows4]")])
    );
    assert_eq!(tripped(&d, "lds:+1025"), s(&[]));
    assert_eq!(
        tripped(&d, "scratch"),
        s(&[("scratch", "spiller"), ("scratch", "fresh")])
    );
    let passed = evaluate(&d, &parse_rules("lds:+1025").unwrap(), &[], today());
    assert!(!passed.tripped());
    assert_eq!(passed.results[0].message, "no kernel trips it");
}

fn allow(kernel: &str, target: &str, rule: &str, expires: &str) -> AllowEntry {
    AllowEntry {
        kernel: kernel.into(),
        target: target.into(),
        rule: rule.into(),
        justification: "known".into(),
        expires: Date::parse(expires).unwrap(),
        origin: "kbuild-allow.toml:1".into(),
    }
}

#[test]
fn allowlist_suppresses_until_expiry_and_expired_entries_fail() {
    let d = sample();
    let rules = parse_rules("occupancy").unwrap();
    let ok = evaluate(
        &d,
        &rules,
        &[allow("gemv*", "gfx12*", "occupancy", "2026-06-01")],
        today(),
    );
    assert!(!ok.tripped(), "{ok:?}");
    assert_eq!(
        ok.results[0].allowed_by.as_ref().unwrap().origin,
        "kbuild-allow.toml:1"
    );
    let other = evaluate(
        &d,
        &rules,
        &[allow("norm", "*", "occupancy", "2027-01-01")],
        today(),
    );
    assert!(other.tripped());
    assert!(other.warnings[0].contains("matches nothing"), "{other:?}");
    let wrong_rule = evaluate(
        &d,
        &rules,
        &[allow("gemv*", "*", "spills", "2027-01-01")],
        today(),
    );
    assert!(wrong_rule.tripped());
    let expired = evaluate(
        &d,
        &rules,
        &[allow("gemv*", "*", "occupancy", "2026-05-31")],
        today(),
    );
    assert_eq!(expired.tripped_rules(), ["occupancy", "allowlist"]);
    let e = expired
        .results
        .iter()
        .find(|r| r.rule == "allowlist")
        .unwrap();
    assert!(e.message.contains("expired on 2026-05-31"), "{}", e.message);
    // An expired entry fails even when nothing would trip.
    let none = evaluate(&d, &[], &[allow("x", "*", "lds", "2000-01-01")], today());
    assert_eq!(none.tripped_rules(), ["allowlist"]);
}

#[test]
fn extreme_values_neither_panic_nor_overflow() {
    let huge = |v: u32, lds: u64| {
        let mut r = amd(v, u32::MAX, lds, 0);
        if let Resources::Amd(a) = &mut r {
            a.scratch_bytes = u64::MAX;
            a.sgpr_spills = u32::MAX;
        }
        r
    };
    let base = snap(
        &["gfx1100"],
        vec![
            ("gfx1100", "a", None, u64::MAX, huge(0, 0)),
            ("gfx1100", "b", None, u64::MAX, huge(u32::MAX, u64::MAX)),
        ],
    );
    let head = snap(
        &["gfx1100"],
        vec![
            ("gfx1100", "a", None, 0, huge(u32::MAX, u64::MAX)),
            ("gfx1100", "b", None, u64::MAX, huge(0, 0)),
        ],
    );
    let d = Diff::new(&base, &head, "a", "b", &BTreeMap::new());
    let rules = parse_rules("spills,occupancy,registers:+0,registers:+1%,lds:+0,scratch").unwrap();
    let g = evaluate(&d, &rules, &[], today());
    assert!(g.tripped());
    let c = d.targets[0].rows[0]
        .change("lds_bytes")
        .or_else(|| d.targets[0].rows[1].change("lds_bytes"))
        .unwrap();
    assert!(
        c.delta == Some(i64::MAX) || c.delta == Some(i64::MIN),
        "{c:?}"
    );
    for out in [
        markdown(&d, Some(&g)),
        text(&d, Some(&g), true),
        to_json(&d, Some(&g)),
    ] {
        assert!(!out.is_empty());
    }
}

#[test]
fn size_gates_objects_targets_and_the_package() {
    // gfx1201: gemv.rows4 1000 → 1100 (+10%), spiller 1000 → 1200 (+20%), gone −500, fresh
    // +700: the target 4500 → 5000 (+11.1%); sm_89 unchanged; the package 6500 → 7000 (+7.7%).
    let d = sample();
    let s = |v: &[&str]| -> Vec<(String, String)> {
        v.iter().map(|k| (String::new(), k.to_string())).collect()
    };
    let kernels = |rules: &str| -> Vec<(String, String)> {
        tripped(&d, rules)
            .into_iter()
            .map(|(_, k)| (String::new(), k))
            .collect()
    };
    assert_eq!(kernels("size:+15%"), s(&["spiller"]));
    // Object, then the target (no kernel): the package grew 7.7% only.
    assert_eq!(kernels("size:+10%"), s(&["gemv.rows4", "spiller", ""]));
    assert_eq!(kernels("size:+5%"), s(&["gemv.rows4", "spiller", "", ""]));
    assert_eq!(kernels("size:+150"), s(&["spiller", "", ""]));
    assert!(kernels("size:+25%").is_empty());
    let r = evaluate(&d, &parse_rules("size:+5%").unwrap(), &[], today());
    let messages: Vec<&str> = r.results.iter().map(|r| r.message.as_str()).collect();
    assert!(
        messages.contains(&"gfx1201 spiller: object 1000 → 1200 bytes (+200, +20.0%)")
            && messages.contains(&"gfx1201: all objects 4500 → 5000 bytes (+500, +11.1%)")
            && messages.contains(&"the package: 6500 → 7000 bytes (+500, +7.7%)"),
        "{messages:#?}"
    );
    // An object growth can be allowed, by kernel name and target.
    let a = allow("spiller", "gfx1201", "size", "2026-12-31");
    let r = evaluate(&d, &parse_rules("size:+15%").unwrap(), &[a], today());
    assert!(!r.tripped(), "{:?}", r.results);
    assert_eq!(parse_rules("size:+2%").unwrap()[0].to_string(), "size:+2%");
    assert!(parse_rules("size").is_err());
}

// ------------------------------------------------------------------------------------ ABI

use kbuild_manifest::fixtures::param;

/// `sample()`'s sides with parameters: `norm` (x*, int n) on both; in head, `flat` gets an
/// extra int, `gemv`'s int becomes 8 bytes (the next one moves), `spiller` swaps a pointer
/// for a same-sized value; hidden arguments and unknown kinds never count.
fn abi_sample() -> Diff {
    use ParamKind::{Pointer, Unknown, Value};
    let mut base = sample_sides().0;
    let mut head = sample_sides().1;
    let set = |s: &mut Snapshot, kernel: &str, p: Vec<Param>| {
        for o in s.objects.iter_mut().filter(|o| o.kernel == kernel) {
            o.params.insert(kernel.to_string(), p.clone());
        }
    };
    let two = vec![param(0, 0, 8, Pointer), param(1, 8, 4, Value)];
    let mut hidden = two.clone();
    hidden.push(Param {
        hidden: true,
        ..param(2, 16, 8, Value)
    });
    set(&mut base, "norm", two.clone());
    set(&mut head, "norm", hidden);
    set(&mut base, "flat", two.clone());
    let mut three = two.clone();
    three.push(param(2, 12, 4, Value));
    set(&mut head, "flat", three);
    set(
        &mut base,
        "gemv",
        vec![
            param(0, 0, 8, Pointer),
            param(1, 8, 4, Value),
            param(2, 12, 4, Value),
        ],
    );
    set(
        &mut head,
        "gemv",
        vec![
            param(0, 0, 8, Pointer),
            param(1, 8, 8, Value),
            param(2, 16, 4, Value),
        ],
    );
    set(
        &mut base,
        "spiller",
        vec![param(0, 0, 8, Pointer), param(1, 8, 8, Unknown)],
    );
    set(
        &mut head,
        "spiller",
        vec![param(0, 0, 8, Value), param(1, 8, 8, Pointer)],
    );
    // sm_89 norm: parameters only in head (an older manifest as base): nothing to compare.
    base.objects
        .iter_mut()
        .filter(|o| o.target == "sm_89")
        .for_each(|o| o.params.clear());
    head.objects
        .iter_mut()
        .filter(|o| o.target == "sm_89")
        .for_each(|o| {
            o.params.insert("norm".into(), vec![param(0, 0, 4, Value)]);
        });
    Diff::new(&base, &head, "base", "head", &BTreeMap::new())
}

#[test]
fn parameter_changes_are_abi_rows_listed_first() {
    let d = abi_sample();
    let t = &d.targets[0];
    let order: Vec<(&str, Class)> = t
        .rows
        .iter()
        .map(|r| (r.entry.kernel.as_str(), r.class))
        .collect();
    assert_eq!(
        order,
        [
            ("spiller", Class::Abi),
            ("gemv [rows4]", Class::Abi),
            ("flat", Class::Abi),
            ("norm", Class::Improvement),
        ],
        "ABI rows first, in significance order among themselves"
    );
    let flat = &t.rows[2];
    assert!(flat.changes.is_empty(), "flat's resources are unchanged");
    assert_eq!(flat.abi.len(), 1);
    assert_eq!(flat.abi[0].describe(), "param 2 added (val@12:4)");
    let gemv: Vec<String> = t.rows[1].abi.iter().map(|a| a.describe()).collect();
    assert_eq!(gemv, ["param 1 resized 4 → 8 B", "param 2 moved 12 → 16"]);
    assert_eq!(t.rows[1].resource_class, Class::Regression);
    let spiller: Vec<String> = t.rows[0].abi.iter().map(|a| a.describe()).collect();
    assert_eq!(
        spiller,
        ["param 0 pointer → value"],
        "unknown → pointer is no change"
    );
    assert_eq!(
        t.summary_line(),
        "gfx1201: 3 ABI changes, 0 regressions, 1 improvement, 0 unchanged, 1 added, 1 removed; objects +500 B (+11.1%)"
    );
    assert_eq!(d.counts().abi, 3);
    assert_eq!(d.targets[1].counts().abi, 0, "base without parameters");
    let removed = param_changes(&[param(0, 0, 8, ParamKind::Pointer)], &[]);
    assert_eq!(removed[0].describe(), "param 0 removed (ptr@0:8)");
}

#[test]
fn gate_abi_trips_on_every_abi_row_and_the_allowlist_applies() {
    let d = abi_sample();
    let s = |v: &[&str]| -> Vec<(String, String)> {
        v.iter()
            .map(|k| ("abi".to_string(), k.to_string()))
            .collect()
    };
    // `gone` was removed: its callers break too (issue 27, item 6).
    assert_eq!(
        tripped(&d, "abi"),
        s(&["spiller", "gemv [rows4]", "flat", "gone"])
    );
    let g = evaluate(&d, &parse_rules("abi").unwrap(), &[], today());
    assert_eq!(
        g.results[1].message,
        "gfx1201 gemv [rows4]: param 1 resized 4 → 8 B, param 2 moved 12 → 16"
    );
    let allowed = evaluate(
        &d,
        &parse_rules("abi").unwrap(),
        &[allow("*", "gfx1201", "abi", "2026-12-31")],
        today(),
    );
    assert!(!allowed.tripped(), "{allowed:?}");
    // The other rules do not see ABI changes, and ABI rows still trip them.
    assert!(tripped(&d, "spills").contains(&("spills".into(), "spiller".into())));
    assert_eq!(tripped(&sample(), "abi"), s(&["gone"]));
}

#[test]
fn abi_changes_come_first_in_text_markdown_and_json() {
    let d = abi_sample();
    let g = evaluate(&d, &parse_rules("abi").unwrap(), &[], today());
    let t = text(&d, Some(&g), false);
    let abi = t.find("  ABI: spiller: param 0 pointer → value").expect(&t);
    assert!(t.contains("  ABI: flat: param 2 added (val@12:4)\n"), "{t}");
    let table = t.find("  kernel ").expect(&t);
    assert!(abi < table, "{t}");
    assert!(
        t.contains("FAIL    abi: gfx1201 flat: param 2 added (val@12:4)"),
        "{t}"
    );
    let md = markdown(&d, Some(&g));
    let abi = md.find("**ABI changes**").expect(&md);
    assert!(abi < md.find("| kernel |").expect(&md), "{md}");
    assert!(
        md.contains("- :x: `spiller`: param 0 pointer → value"),
        "{md}"
    );
    assert!(
        md.contains("**gfx1201**: 3 ABI changes, 0 regressions"),
        "{md}"
    );
    let j: serde_json::Value = serde_json::from_str(&to_json(&d, Some(&g))).unwrap();
    assert_eq!(j["summary"]["abi"], 3);
    let changes = j["changes"].as_array().unwrap();
    assert_eq!(changes[0]["class"], "abi");
    assert_eq!(changes[0]["field"], "params");
    assert_eq!(changes[0]["change"], "rekinded");
    let added = changes
        .iter()
        .find(|c| c["kernel"] == "flat")
        .expect("flat's change");
    assert_eq!(
        (&added["change"], &added["param"]),
        (&"added".into(), &2.into())
    );
    assert!(added["base"].is_null());
    assert_eq!(added["head"]["offset"], 12);
    assert_eq!(added["delta"], 4);
    let first_other = changes.iter().position(|c| c["class"] != "abi").unwrap();
    assert!(changes[first_other..].iter().all(|c| c["class"] != "abi"));
    // gemv's resource changes keep their own class.
    assert!(changes.iter().any(|c| c["kernel"] == "gemv [rows4]"
        && c["field"] == "vgprs"
        && c["class"] == "regression"));
    assert!(changes
        .iter()
        .all(|c| c["class"] == "abi" || c.get("param").is_none()));
}

/// Issue 26, class 8: kernel names come from the PR. A name carrying HTML, a link, a table
/// cell, code fences and line breaks renders literally: no raw tag, no link, every table row
/// keeps its columns.
#[test]
fn hostile_kernel_names_cannot_inject_markdown_or_html() {
    let img = "x|<img src=x onerror=alert(1)>";
    let link = "](http://evil)";
    let evil =
        "[click](http://evil) `code` **b** _i_ ![i](http://evil/i.png)\n| a | b |\r\u{1b}[31m";
    let base = snap(
        &["gfx1201"],
        vec![
            ("gfx1201", img, None, 1000, amd(10, 0, 0, 16)),
            ("gfx1201", link, None, 1000, amd(10, 0, 0, 16)),
            ("gfx1201", "gone\n- injected", None, 1000, amd(10, 0, 0, 16)),
        ],
    );
    let head = snap(
        &["gfx1201"],
        vec![
            ("gfx1201", img, None, 1000, amd(80, 4, 0, 8)),
            ("gfx1201", link, None, 1200, amd(90, 0, 0, 16)),
            ("gfx1201", evil, None, 700, amd(10, 0, 0, 16)),
        ],
    );
    let d = Diff::new(&base, &head, "base<b>", "head|x", &BTreeMap::new());
    let g = evaluate(
        &d,
        &parse_rules("spills,registers:+0").unwrap(),
        &[],
        today(),
    );
    let md = markdown(&d, Some(&g));
    for raw in [
        "<img", "<b>", "[click](", "![", "\u{1b}", "\r", "**b**", "`code`",
    ] {
        assert!(!md.contains(raw), "raw {raw:?} in\n{md}");
    }
    // `](` only inside the code span of the name that is one.
    assert_eq!(
        md.matches("](http").count(),
        md.matches("`](http://evil)`").count(),
        "{md}"
    );
    // The ordinary-looking link name stays a literal code span.
    assert!(md.contains("`](http://evil)`"), "{md}");
    assert!(
        md.contains("<code>x\\|&lt;img src=x onerror=alert\\(1\\)&gt;</code>"),
        "{md}"
    );
    // Line breaks are spelled out: no line starts with what a name carried.
    assert!(md
        .lines()
        .all(|l| !l.starts_with("- injected") && !l.starts_with("| a |")));
    assert!(md.contains("gone\\\\n- injected"), "{md}");
    // Every table row has as many cells as its header (unescaped `|` separators).
    let cells = |l: &str| {
        let b = l.as_bytes();
        (0..b.len())
            .filter(|&i| b[i] == b'|' && (i == 0 || b[i - 1] != b'\\'))
            .count()
    };
    let mut width = None;
    for l in md.lines() {
        if !l.starts_with('|') {
            width = None;
            continue;
        }
        match width {
            None => width = Some(cells(l)),
            Some(w) => assert_eq!(cells(l), w, "{l}\n{md}"),
        }
    }
}

// ------------------------------------------------------- compiler-made hashes (issue 27, 5)

/// One CUDA object `k` on sm_89 holding `entries` (symbol, registers).
fn hashed_side(entries: &[(&str, u32)]) -> Snapshot {
    let mut s = snap(
        &["sm_89"],
        vec![("sm_89", "k", None, 100, cuda(8, Some(0), 48))],
    );
    s.objects[0].resources = entries
        .iter()
        .map(|(e, regs)| (e.to_string(), cuda(*regs, Some(0), 48)))
        .collect();
    s
}

const ANON_A: &str = "_ZN41_GLOBAL__N__e9d1dda2_8_kernel_cu_5b2fa6d16reduceEPfi";
const ANON_B: &str = "_ZN41_GLOBAL__N__0c3a77f1_8_kernel_cu_91d2e0aa6reduceEPfi";
const INTERNAL_A: &str = "_ZL41_INTERNAL_1e9e5db5_11_kernels_cu_b4e0f94f7scale_kPf";
const INTERNAL_B: &str = "_ZL41_INTERNAL_77aa00ff_11_kernels_cu_00ff00ff7scale_kPf";

/// A comment-only edit changes the hashes: the kernels are the same ones, changed (and
/// gated), not two removed and two added.
#[test]
fn kernels_differing_only_in_a_compiler_hash_are_matched_and_gated() {
    let base = hashed_side(&[(ANON_A, 32), (INTERNAL_A, 16)]);
    let head = hashed_side(&[(ANON_B, 48), (INTERNAL_B, 16)]);
    let names = crate::demangle::demangle_snapshots(&[&base, &head]);
    assert_eq!(names[ANON_A], names[ANON_B], "same demangled names");
    let d = Diff::new(&base, &head, "a", "b", &names);
    let t = &d.targets[0];
    assert_eq!((t.added.len(), t.removed.len()), (0, 0), "{t:?}");
    assert_eq!(t.unchanged, 1);
    assert_eq!(t.rows.len(), 1);
    assert_eq!(t.rows[0].class, Class::Regression);
    assert_eq!(t.rows[0].entry.entry, ANON_B);
    assert!(t.ambiguous.is_empty());
    assert_eq!(
        t.summary_line(),
        "sm_89: 1 regression, 0 improvements, 1 unchanged"
    );
    assert_eq!(tripped(&d, "registers:+8").len(), 1);
    assert!(tripped(&d, "removed").is_empty());
}

/// Two kernels whose names still collide once the hashes are blanked: nothing is paired
/// arbitrarily, and every format says so, naming both.
#[test]
fn kernels_colliding_after_unhashing_are_reported_not_paired() {
    let other_a = "_ZN41_GLOBAL__N__aaaaaaaa_8_kernel_cu_bbbbbbbb6reduceEPfi";
    let base = hashed_side(&[(ANON_A, 32), (other_a, 16)]);
    let head = hashed_side(&[(ANON_B, 32)]);
    let d = Diff::new(&base, &head, "a", "b", &BTreeMap::new());
    let t = &d.targets[0];
    assert!(t.rows.is_empty() && t.unchanged == 0, "{t:?}");
    assert_eq!((t.added.len(), t.removed.len()), (1, 2));
    assert_eq!(t.ambiguous.len(), 1);
    let a = &t.ambiguous[0];
    assert_eq!(a.base, [other_a, ANON_A]);
    assert_eq!(a.head, [ANON_B]);
    let md = markdown(&d, None);
    assert!(md.contains("**Not matched**"), "{md}");
    for e in [ANON_A, other_a, ANON_B] {
        assert!(md.contains(&format!("`{e}`")), "{e} in\n{md}");
    }
    let txt = text(&d, None, false);
    assert!(
        txt.contains("not matched") && txt.contains(other_a),
        "{txt}"
    );
    let j: serde_json::Value = serde_json::from_str(&to_json(&d, None)).unwrap();
    assert_eq!(j["ambiguous"][0]["base"][0], other_a);
    assert_eq!(j["ambiguous"][0]["head"][0], ANON_B);
}

// ------------------------------------------------------------ removed gate (issue 27, 6)

#[test]
fn removed_and_renamed_kernels_trip_removed_and_abi() {
    let base = hashed_side(&[("_Z4olddPf", 8), ("_Z4keepPf", 8)]);
    let head = hashed_side(&[("_Z4neewPf", 8), ("_Z4keepPf", 8)]);
    let names = crate::demangle::demangle_snapshots(&[&base, &head]);
    let d = Diff::new(&base, &head, "a", "b", &names);
    for rules in ["removed", "abi"] {
        let g = evaluate(&d, &parse_rules(rules).unwrap(), &[], today());
        let hits: Vec<&str> = g
            .results
            .iter()
            .filter(|r| r.tripped)
            .map(|r| r.message.as_str())
            .collect();
        assert_eq!(
            hits,
            ["sm_89 oldd(float*): removed (renamed to neew(float*)?)"],
            "{rules}"
        );
    }
    // Only added: nothing trips.
    let grown = hashed_side(&[("_Z4olddPf", 8), ("_Z4keepPf", 8), ("_Z4neewPf", 8)]);
    let d2 = Diff::new(&base, &grown, "a", "b", &BTreeMap::new());
    assert!(tripped(&d2, "removed,abi").is_empty());
    // A removed target is one case; an allowlist entry for it names kernel `*`.
    let mut two = base.clone();
    let mut gfx = hashed_side(&[("_Z4olddPf", 8)]);
    gfx.objects[0].target = "gfx1100".into();
    two.targets.push("gfx1100".into());
    two.objects.extend(gfx.objects);
    let d3 = Diff::new(&two, &base, "a", "b", &BTreeMap::new());
    let g = evaluate(&d3, &parse_rules("removed").unwrap(), &[], today());
    assert!(g.tripped());
    assert_eq!(
        g.results[0].message,
        "gfx1100: target removed (1 kernel entries)"
    );
    let ok = evaluate(
        &d3,
        &parse_rules("removed").unwrap(),
        &[allow("*", "gfx11*", "removed", "2026-12-31")],
        today(),
    );
    assert!(!ok.tripped(), "{ok:?}");
}

// ------------------------------------------------- a PR comment of any size (issue 27, 4)

/// A mangled template kernel whose demangled signature is long:
/// `ggml::mul_mat_q_kernel_17<128, 64, 8, true>(float const*, __half const*, float*, ...)`.
fn template_kernel(i: usize) -> String {
    let name = format!("mul_mat_q_kernel_{i}");
    format!(
        "_ZN4ggml{}{name}ILi128ELi64ELi{}ELb1EEEvPKfPK6__halfPfiiif",
        name.len(),
        8 + i % 7
    )
}

/// A release of `n` kernels on two targets, and the next one: the first 40 regress, the next
/// 60 improve, 50 are unchanged, the rest (and 8 more) are new.
fn large_release(n: usize) -> (Snapshot, Snapshot) {
    let side = |kernels: std::ops::Range<usize>, regs: &dyn Fn(usize) -> u32| {
        let mut s = snap(&["sm_89", "gfx1100"], Vec::new());
        for target in ["sm_89", "gfx1100"] {
            let mut o = SnapshotObject {
                target: target.into(),
                kernel: "mmq".into(),
                variant: None,
                format: "cubin".into(),
                size: 1 << 20,
                resources: BTreeMap::new(),
                params: BTreeMap::new(),
            };
            for i in kernels.clone() {
                let r = if target == "sm_89" {
                    cuda(regs(i), Some(0), 32)
                } else {
                    amd(regs(i), 0, 0, 12)
                };
                o.resources.insert(template_kernel(i), r);
            }
            s.objects.push(o);
        }
        s
    };
    let base = side(0..150, &|_| 64);
    let head = side(0..n + 8, &|i| match i {
        0..40 => 96,
        40..100 => 48,
        _ => 64,
    });
    (base, head)
}

#[test]
fn a_release_of_900_kernels_fits_one_comment_with_every_regression() {
    let (base, head) = large_release(908);
    let names = crate::demangle::demangle_snapshots(&[&base, &head]);
    let long = &names[&template_kernel(3)];
    assert!(long.len() > 90 && long.contains("__half const*"), "{long}");
    let d = Diff::new(&base, &head, "v0.11.0", "v0.11.1", &names);
    assert_eq!(d.counts().added, 2 * 766);
    let g = evaluate(
        &d,
        &parse_rules("spills,registers:+8").unwrap(),
        &[],
        today(),
    );
    let full = markdown_full(&d, Some(&g));
    assert!(full.chars().count() > 65_536, "{}", full.len());
    let md = markdown(&d, Some(&g));
    assert!(md.chars().count() <= COMMENT_MAX_CHARS, "{}", md.len());
    const { assert!(COMMENT_MAX_CHARS < 65_536) };
    // Every regression row is there, in a table, on both targets.
    for t in &d.targets {
        let heading = md.find(&format!("#### {} (", t.target)).expect(&md);
        let section = &md[heading..];
        for r in t.rows.iter().filter(|r| r.class == Class::Regression) {
            let row = format!("| `{}` | **", r.entry.kernel);
            assert!(section.contains(&row), "{row}");
        }
        assert_eq!(
            t.rows
                .iter()
                .filter(|r| r.class == Class::Regression)
                .count(),
            40
        );
    }
    // The rest as counts, their first rows collapsed.
    assert!(md.contains("<details><summary>60 improvements</summary>"));
    assert!(md.contains("<details><summary>766 added</summary>"));
    assert!(md.contains("(the full report lists them all)"));
    assert!(md.contains("50 unchanged."));
    assert_eq!(
        md.matches("<details>").count(),
        md.matches("</details>").count()
    );
    // The full report has every added kernel.
    let last = display_name(&template_kernel(907), None, &names);
    assert!(full.contains(&format!("`{last}`")) && !md.contains(&format!("`{last}`")));
}

/// When the rows that are always shown do not fit either, the comment is cut at a line, its
/// open `<details>` closed, and it says so.
#[test]
fn a_comment_too_long_even_for_its_regressions_is_cut_and_says_so() {
    let base = large_release(0).0;
    let mut head = base.clone();
    // 150 regressions per target with names long enough to overflow.
    let names: BTreeMap<String, String> = base.objects[0]
        .resources
        .keys()
        .map(|k| (k.clone(), format!("{k}<{}>", "int, ".repeat(80))))
        .collect();
    for o in &mut head.objects {
        for r in o.resources.values_mut() {
            *r = if o.target == "sm_89" {
                cuda(200, Some(0), 32)
            } else {
                amd(200, 0, 0, 12)
            };
        }
    }
    let d = Diff::new(&base, &head, "a", "b", &names);
    assert_eq!(d.counts().regressions, 300);
    let md = markdown(&d, None);
    assert!(md.chars().count() <= COMMENT_MAX_CHARS, "{}", md.len());
    assert!(
        md.contains("**Cut here**: the comment shows"),
        "{}",
        &md[md.len() - 400..]
    );
    assert_eq!(
        md.matches("<details>").count(),
        md.matches("</details>").count()
    );
    assert!(markdown_full(&d, None).chars().count() > COMMENT_MAX_CHARS);
}
