//! Every row of reference/compat.md, one case per line, plus properties over the catalogue.

use super::*;
use proptest::prelude::*;

fn t(name: &str) -> Target {
    name.parse().unwrap()
}

fn dev(spec: &str) -> Device {
    Device::parse(spec, None, None).unwrap()
}

fn cuda_dev(spec: &str, driver: Version) -> Device {
    Device::parse(spec, Some(driver), None).unwrap()
}

/// (object, ptx isa, device, driver, expected rule)
fn case(object: &str, isa: Option<&str>, device: &str, driver: Version, rule: Rule) {
    let d = Device::parse(device, Some(driver), None).unwrap();
    let v = judge(&t(object), isa.and_then(parse_version), &d);
    assert_eq!(v.rule, rule, "{object} on {device}: {}", v.reason);
    assert_eq!(v.accepted, rule.accepts());
    assert_eq!(v.preference, rule.preference());
}

const D13: Version = Version(13, 0);
const D135: Version = Version(13, 5);

// ---- NVIDIA: `sm_XYa` cubin, device exactly X.Y (pref 1) ----
#[test]
fn arch_specific_on_its_cc() {
    case("sm_90a", None, "sm_90", D13, Rule::ArchSpecific);
    case("sm_100a", None, "10.0", D135, Rule::ArchSpecific);
    case("sm_120a", None, "sm_120", D135, Rule::ArchSpecific);
}
#[test]
fn arch_specific_refused_elsewhere() {
    case("sm_90a", None, "sm_100", D135, Rule::ArchSpecificOther);
    case("sm_100a", None, "sm_103", D135, Rule::ArchSpecificOther);
    case("sm_120a", None, "sm_121", D135, Rule::ArchSpecificOther);
}
#[test]
fn arch_specific_ptx_only_on_its_cc() {
    case("compute_90a", Some("9.0"), "sm_90", D13, Rule::PtxJit);
    case(
        "compute_90a",
        Some("9.0"),
        "sm_100",
        D135,
        Rule::ArchSpecificOther,
    );
    case(
        "compute_100a",
        Some("9.0"),
        "sm_90",
        D13,
        Rule::ArchSpecificOther,
    );
}

// ---- `sm_XY` cubin, exactly X.Y (pref 2) ----
#[test]
fn exact_cubin() {
    case("sm_90", None, "sm_90", D13, Rule::Exact);
    case("sm_89", None, "8.9", D13, Rule::Exact);
    case("sm_75", None, "sm_75", D13, Rule::Exact);
    case("sm_121", None, "12.1", D135, Rule::Exact);
}

// ---- `sm_XZf`, same family (pref 3) ----
#[test]
fn family_cubin_members() {
    case("sm_100f", None, "sm_100", D135, Rule::Family);
    case("sm_100f", None, "sm_103", D135, Rule::Family);
    case("sm_120f", None, "sm_120", D135, Rule::Family);
    case("sm_120f", None, "sm_121", D135, Rule::Family);
}
#[test]
fn family_cubin_non_members() {
    case("sm_100f", None, "sm_120", D135, Rule::FamilyOther);
    case("sm_120f", None, "sm_100", D135, Rule::FamilyOther);
    case("sm_100f", None, "sm_90", D13, Rule::FamilyOther);
    let v = judge(&t("sm_100f"), None, &dev("sm_120"));
    assert_eq!(
        v.reason,
        "sm_100f cubin: family 10.0f covers only 10.0, 10.3; device is 12.0"
    );
}
#[test]
fn family_ptx() {
    case("compute_120f", Some("8.8"), "sm_121", D135, Rule::PtxJit);
    case(
        "compute_120f",
        Some("8.8"),
        "sm_100",
        D135,
        Rule::FamilyOther,
    );
}

// ---- `sm_XZ` cubin Z < Y, same major (pref 4) ----
#[test]
fn same_major_older() {
    case("sm_80", None, "sm_86", D13, Rule::SameMajorOlder);
    case("sm_80", None, "sm_89", D13, Rule::SameMajorOlder);
    case("sm_86", None, "sm_89", D13, Rule::SameMajorOlder);
    case("sm_100", None, "sm_103", D135, Rule::SameMajorOlder);
    case("sm_120", None, "sm_121", D135, Rule::SameMajorOlder);
}
#[test]
fn newer_minor_refused() {
    case("sm_89", None, "sm_86", D13, Rule::NewerMinor);
    case("sm_103", None, "sm_100", D135, Rule::NewerMinor);
    case("sm_121", None, "sm_120", D135, Rule::NewerMinor);
}

// ---- other major refused ----
#[test]
fn other_major_refused() {
    case("sm_80", None, "sm_90", D13, Rule::OtherMajor);
    case("sm_89", None, "sm_90", D13, Rule::OtherMajor);
    case("sm_90", None, "sm_100", D135, Rule::OtherMajor);
    case("sm_90", None, "sm_89", D13, Rule::OtherMajor);
    case("sm_75", None, "sm_80", D13, Rule::OtherMajor);
    case("sm_120", None, "sm_100", D135, Rule::OtherMajor);
}
#[test]
fn other_major_reason_reads_well() {
    let v = judge(&t("sm_89"), None, &cuda_dev("sm_90", D13));
    assert_eq!(
        v.reason,
        "sm_89 cubin: SASS runs only within major 8; device is 9.0"
    );
    assert!(!v.accepted);
    assert_eq!(v.preference, u32::MAX);
}

// ---- `compute_AB` PTX (pref 5) ----
#[test]
fn ptx_jit_forward() {
    case("compute_90", Some("9.0"), "sm_90", D13, Rule::PtxJit);
    case("compute_80", Some("8.0"), "sm_90", D13, Rule::PtxJit);
    case("compute_75", Some("7.5"), "sm_120", D135, Rule::PtxJit);
    case("compute_90", Some("9.5"), "sm_100", D135, Rule::PtxJit);
}
#[test]
fn ptx_for_newer_cc_refused() {
    case("compute_100", Some("9.0"), "sm_90", D135, Rule::PtxTooNewCc);
    case("compute_89", Some("8.0"), "sm_86", D135, Rule::PtxTooNewCc);
}
#[test]
fn ptx_isa_too_new_refused() {
    // The H200 observation: CUDA 13.5 PTX (ISA 9.5) on driver 13.0 (error 222).
    case("compute_90", Some("9.5"), "sm_90", D13, Rule::PtxIsaTooNew);
    case(
        "compute_80",
        Some("8.8"),
        "sm_90",
        Version(12, 8),
        Rule::PtxIsaTooNew,
    );
    let v = judge(
        &t("compute_90"),
        parse_version("9.5"),
        &cuda_dev("sm_90", D13),
    );
    assert!(v.reason.contains("ISA 9.5 > 9.0"), "{}", v.reason);
    assert!(v.reason.contains("driver 13.0"), "{}", v.reason);
}
#[test]
fn ptx_isa_at_the_limit_accepted() {
    case(
        "compute_90",
        Some("8.8"),
        "sm_90",
        Version(12, 9),
        Rule::PtxJit,
    );
    case(
        "compute_90",
        Some("8.7"),
        "sm_90",
        Version(12, 8),
        Rule::PtxJit,
    );
    case("compute_90", None, "sm_90", D13, Rule::PtxJit);
}

// ---- vendors ----
#[test]
fn other_vendor_refused() {
    case("gfx1100", None, "sm_90", D13, Rule::OtherVendor);
    case("sm_90", None, "gfx1100", D13, Rule::OtherVendor);
    case("compute_90", Some("9.0"), "gfx90a", D13, Rule::OtherVendor);
    case("gfx11-generic", None, "sm_90", D13, Rule::OtherVendor);
}

// ---- AMD ----
#[test]
fn amd_exact() {
    case("gfx1100", None, "gfx1100", D13, Rule::AmdExact);
    case("gfx1151", None, "gfx1151", D13, Rule::AmdExact);
    case(
        "gfx90a:sramecc+:xnack-",
        None,
        "gfx90a:sramecc+:xnack-",
        D13,
        Rule::AmdExact,
    );
    case("gfx942:xnack+", None, "gfx942:xnack+", D13, Rule::AmdExact);
}
#[test]
fn amd_feature_any() {
    case(
        "gfx90a",
        None,
        "gfx90a:sramecc+:xnack-",
        D13,
        Rule::AmdFeatureAny,
    );
    case(
        "gfx90a:xnack-",
        None,
        "gfx90a:sramecc+:xnack-",
        D13,
        Rule::AmdFeatureAny,
    );
    case(
        "gfx90a:sramecc-",
        None,
        "gfx90a:sramecc-:xnack+",
        D13,
        Rule::AmdFeatureAny,
    );
    case(
        "gfx942",
        None,
        "gfx942:sramecc+:xnack+",
        D13,
        Rule::AmdFeatureAny,
    );
}
#[test]
fn amd_feature_on_off_mismatch() {
    case(
        "gfx90a:xnack+",
        None,
        "gfx90a:sramecc+:xnack-",
        D13,
        Rule::AmdFeatureMismatch,
    );
    case(
        "gfx90a:sramecc-",
        None,
        "gfx90a:sramecc+:xnack-",
        D13,
        Rule::AmdFeatureMismatch,
    );
    case(
        "gfx90a:sramecc+:xnack+",
        None,
        "gfx90a:sramecc+:xnack-",
        D13,
        Rule::AmdFeatureMismatch,
    );
    // A device that does not report xnack cannot satisfy an object that requires one.
    case(
        "gfx90a:xnack-",
        None,
        "gfx90a",
        D13,
        Rule::AmdFeatureMismatch,
    );
    let v = judge(&t("gfx90a:xnack+"), None, &dev("gfx90a:sramecc+:xnack-"));
    assert_eq!(
        v.reason,
        "gfx90a:xnack+ code object: built for xnack+; device is gfx90a:sramecc+:xnack-"
    );
}
#[test]
fn amd_other_processor_never_aliased() {
    case("gfx1100", None, "gfx1101", D13, Rule::AmdOtherProcessor);
    case("gfx1100", None, "gfx1151", D13, Rule::AmdOtherProcessor);
    case("gfx90a", None, "gfx942", D13, Rule::AmdOtherProcessor);
    let v = judge(&t("gfx1100"), None, &dev("gfx1151"));
    assert!(v.reason.contains("never aliased"), "{}", v.reason);
}
#[test]
fn amd_generic_member() {
    case("gfx11-generic", None, "gfx1151", D13, Rule::AmdGeneric);
    case("gfx11-generic", None, "gfx1100", D13, Rule::AmdGeneric);
    case("gfx12-generic", None, "gfx1201", D13, Rule::AmdGeneric);
    case("gfx10-3-generic", None, "gfx1030", D13, Rule::AmdGeneric);
    case(
        "gfx9-4-generic",
        None,
        "gfx942:sramecc+:xnack-",
        D13,
        Rule::AmdGeneric,
    );
}
#[test]
fn amd_generic_non_member() {
    case(
        "gfx11-generic",
        None,
        "gfx1200",
        D13,
        Rule::GenericNotMember,
    );
    case(
        "gfx12-generic",
        None,
        "gfx1100",
        D13,
        Rule::GenericNotMember,
    );
    case(
        "gfx9-4-generic",
        None,
        "gfx90a",
        D13,
        Rule::GenericNotMember,
    );
}
#[test]
fn amd_generic_unsupported_by_runtime() {
    let d = Device::parse("gfx1151", None, Some(NO_GENERIC_RUNTIME)).unwrap();
    let v = judge(&t("gfx11-generic"), None, &d);
    assert_eq!(v.rule, Rule::GenericUnsupported);
    assert!(!v.accepted);
    assert!(v.reason.contains("does not load generic"), "{}", v.reason);
    // The exact object is unaffected by the flag.
    assert_eq!(judge(&t("gfx1151"), None, &d).rule, Rule::AmdExact);
}
#[test]
fn generic_member_outside_the_catalogue_is_a_device() {
    let d = dev("gfx1031");
    assert_eq!(d.name(), "gfx1031");
    assert_eq!(
        judge(&t("gfx10-3-generic"), None, &d).rule,
        Rule::AmdGeneric
    );
    assert_eq!(judge(&t("gfx1030"), None, &d).rule, Rule::AmdOtherProcessor);
    let d = dev("gfx940:sramecc+:xnack-");
    assert_eq!(d.name(), "gfx940:sramecc+:xnack-");
}

// ---- preference order across the table ----
#[test]
fn preference_order_cuda() {
    let d = cuda_dev("sm_89", D13);
    let pref = |o: &str| judge(&t(o), parse_version("8.0"), &d).preference;
    let d90 = cuda_dev("sm_90", D13);
    let pref90 = |o: &str| judge(&t(o), parse_version("9.0"), &d90).preference;
    // arch-specific > exact > same-major older > PTX
    assert!(pref90("sm_90a") < pref90("sm_90"));
    assert!(pref90("sm_90") < pref90("compute_90"));
    assert!(pref("sm_89") < pref("sm_80"));
    assert!(pref("sm_80") < pref("compute_89"));
    // sm_80 is another major on 9.0: rejected entirely.
    assert_eq!(pref90("sm_80"), u32::MAX);
}
#[test]
fn family_beats_older_sass_and_loses_to_exact() {
    let d = dev("sm_103");
    let exact = judge(&t("sm_103"), None, &d);
    let fam = judge(&t("sm_100f"), None, &d);
    let older = judge(&t("sm_100"), None, &d);
    assert!(exact.preference < fam.preference && fam.preference < older.preference);
}
#[test]
fn ties_go_to_the_newest() {
    let d = cuda_dev("sm_89", D13);
    let mut objs: Vec<Target> = ["sm_80", "sm_86", "compute_75", "compute_86", "compute_80"]
        .iter()
        .map(|o| t(o))
        .collect();
    objs.sort_by_key(|o| sort_key(o, &judge(o, parse_version("8.0"), &d)));
    let names: Vec<String> = objs.iter().map(|o| o.to_string()).collect();
    assert_eq!(
        names,
        ["sm_86", "sm_80", "compute_86", "compute_80", "compute_75"]
    );
}
#[test]
fn preference_order_amd() {
    let d = dev("gfx90a:sramecc+:xnack-");
    let exact = judge(&t("gfx90a:sramecc+:xnack-"), None, &d).preference;
    let any = judge(&t("gfx90a"), None, &d).preference;
    let d = dev("gfx1100");
    let generic = judge(&t("gfx11-generic"), None, &d).preference;
    assert!(exact < any && any < generic);
    assert!(Rule::AmdGeneric.preference() < Rule::PtxJit.preference());
}

// ---- PTX ISA table ----
#[test]
fn max_ptx_isa_table() {
    let cases = [
        ((10, 0), (6, 3)),
        ((11, 0), (7, 0)),
        ((11, 8), (7, 8)),
        ((12, 0), (8, 0)),
        ((12, 4), (8, 4)),
        ((12, 5), (8, 5)),
        ((12, 6), (8, 5)),
        ((12, 7), (8, 6)),
        ((12, 8), (8, 7)),
        ((12, 9), (8, 8)),
        ((13, 0), (9, 0)),
        ((13, 1), (9, 1)),
        ((13, 5), (9, 5)),
    ];
    for ((a, b), (c, d)) in cases {
        assert_eq!(max_ptx_isa(Version(a, b)), Version(c, d), "CUDA {a}.{b}");
    }
}

// ---- device specs ----
#[test]
fn device_specs_parse() {
    assert_eq!(dev("9.0").name(), "sm_90");
    assert_eq!(dev("sm_90").name(), "sm_90");
    assert_eq!(
        dev("sm_90a").name(),
        "sm_90",
        "a device is a CC, not a suffix"
    );
    assert_eq!(
        dev("gfx90a:xnack-:sramecc+").name(),
        "gfx90a:sramecc+:xnack-"
    );
    assert_eq!(dev("gfx1151").name(), "gfx1151");
    assert_eq!(dev("8.6").compute_capability(), Some((8, 6)));
    match Device::parse("sm_90", None, None).unwrap() {
        Device::Cuda { driver, .. } => assert_eq!(driver, NEWEST_DRIVER),
        d => panic!("{d:?}"),
    }
    match Device::parse("gfx1100", None, None).unwrap() {
        Device::Amd { runtime, .. } => assert_eq!(runtime, None),
        d => panic!("{d:?}"),
    }
    match Device::parse("gfx1100", None, Some(Version(5, 2))).unwrap() {
        Device::Amd { runtime, .. } => assert_eq!(runtime, Some(Version(5, 2))),
        d => panic!("{d:?}"),
    }
}
#[test]
fn bad_device_specs_are_errors_with_hints() {
    let e = Device::parse("sm89", None, None).unwrap_err().to_string();
    assert!(e.contains("did you mean sm_89"), "{e}");
    let e = Device::parse("gfx11-generic", None, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("such as gfx1100"), "{e}");
    let e = Device::parse("compute_90", None, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("sm_90"), "{e}");
    assert!(Device::parse("7.0", None, None).is_err());
    assert!(Device::parse("x.y", None, None).is_err());
    assert!(Device::parse("gfx1100:xnack+", None, None).is_err());
    assert!(Device::parse("", None, None).is_err());
}
#[test]
fn rules_serialise_snake_case() {
    assert_eq!(
        serde_json::to_string(&Rule::PtxIsaTooNew).unwrap(),
        "\"ptx_isa_too_new\""
    );
    for r in ALL_RULES {
        assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
    }
}

const ALL_RULES: [Rule; 19] = [
    Rule::ArchSpecific,
    Rule::Exact,
    Rule::Family,
    Rule::SameMajorOlder,
    Rule::PtxJit,
    Rule::AmdExact,
    Rule::AmdFeatureAny,
    Rule::AmdGeneric,
    Rule::OtherVendor,
    Rule::OtherMajor,
    Rule::NewerMinor,
    Rule::ArchSpecificOther,
    Rule::FamilyOther,
    Rule::PtxTooNewCc,
    Rule::PtxIsaTooNew,
    Rule::AmdOtherProcessor,
    Rule::AmdFeatureMismatch,
    Rule::GenericNotMember,
    Rule::GenericUnsupported,
];

// ---- properties over the whole catalogue ----

fn all_targets() -> Vec<Target> {
    crate::fixtures::every_target()
}

fn all_devices() -> Vec<Device> {
    let mut out = Vec::new();
    for p in PROCESSORS {
        match p.kind {
            ProcessorKind::Cuda {
                suffix: CudaSuffix::Plain,
                ..
            } => {
                for driver in [Version(12, 0), Version(12, 9), D13, D135] {
                    out.push(Device::Cuda {
                        processor: p,
                        driver,
                    });
                }
            }
            ProcessorKind::Amd { xnack, sramecc, .. } => {
                let fs = |on: bool| {
                    if on {
                        vec![Feature::On, Feature::Off]
                    } else {
                        vec![Feature::Any]
                    }
                };
                for x in fs(xnack) {
                    for s in fs(sramecc) {
                        for runtime in RUNTIMES {
                            out.push(Device::Amd {
                                processor: p,
                                xnack: x,
                                sramecc: s,
                                runtime,
                            });
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// HIP runtimes around the generic-object boundary, and unknown.
const RUNTIMES: [Option<Version>; 5] = [
    None,
    Some(Version(5, 2)),
    Some(NO_GENERIC_RUNTIME),
    Some(GENERIC_MIN_RUNTIME),
    Some(Version(7, 0)),
];

fn isa() -> impl Strategy<Value = Option<Version>> {
    prop_oneof![
        Just(None),
        (6u32..11, 0u32..10).prop_map(|(a, b)| Some(Version(a, b)))
    ]
}

proptest! {
    /// Accepted ⇔ an accepting rule; preference follows the rule; the reason names the object.
    #[test]
    fn verdicts_are_consistent(ti in 0usize..200, di in 0usize..200, isa in isa()) {
        let targets = all_targets();
        let devices = all_devices();
        let o = &targets[ti % targets.len()];
        let d = &devices[di % devices.len()];
        let v = judge(o, isa, d);
        prop_assert_eq!(v.accepted, v.rule.accepts());
        prop_assert_eq!(v.preference, v.rule.preference());
        prop_assert!(v.reason.starts_with(&o.to_string()), "{}", v.reason);
        if o.vendor() != d.vendor() {
            prop_assert_eq!(v.rule, Rule::OtherVendor);
        }
    }

    /// A cubin never runs on another major; an accepted cubin is never for a newer CC.
    #[test]
    fn sass_stays_within_its_major(ti in 0usize..200, di in 0usize..200) {
        let targets = all_targets();
        let devices = all_devices();
        let o = &targets[ti % targets.len()];
        let d = &devices[di % devices.len()];
        if let (Some(obj), Some(dcc)) = (cc(o.processor), d.compute_capability()) {
            let v = judge(o, Some(Version(7, 0)), d);
            if v.accepted && !o.ptx {
                prop_assert_eq!(obj.0, dcc.0);
                prop_assert!(obj.1 <= dcc.1);
            }
            if v.accepted && o.ptx {
                prop_assert!(obj <= dcc);
            }
        }
    }

    /// On AMD an accepted object is the device's processor or a generic family holding it.
    #[test]
    fn amd_never_aliases(ti in 0usize..200, di in 0usize..200) {
        let targets = all_targets();
        let devices = all_devices();
        let o = &targets[ti % targets.len()];
        let d = &devices[di % devices.len()];
        if let Device::Amd { processor, runtime, .. } = d {
            let v = judge(o, None, d);
            if v.accepted {
                match o.processor.kind {
                    ProcessorKind::AmdGeneric { members, .. } => {
                        prop_assert!(members.contains(&processor.name));
                        prop_assert!(runtime_loads_generic(*runtime));
                    }
                    _ => prop_assert_eq!(o.processor.name, processor.name),
                }
            }
        }
    }

    /// A newer driver never refuses PTX an older one accepts.
    #[test]
    fn max_isa_is_monotone(a in 10u32..16, b in 0u32..10, c in 10u32..16, d in 0u32..10) {
        let (lo, hi) = if Version(a, b) <= Version(c, d) {
            (Version(a, b), Version(c, d))
        } else {
            (Version(c, d), Version(a, b))
        };
        prop_assert!(max_ptx_isa(lo) <= max_ptx_isa(hi));
    }

    /// Device specs never panic, and a parsed device round-trips through its name.
    #[test]
    fn device_parse_round_trips(s in "[a-z0-9_.:+-]{0,24}") {
        if let Ok(d) = Device::parse(&s, None, None) {
            let again = Device::parse(&d.name(), None, None);
            prop_assert_eq!(again.ok(), Some(d));
        }
    }
}

#[test]
fn every_catalogue_device_runs_its_own_exact_object() {
    for d in all_devices() {
        let name = d.name();
        let v = judge(&t(&name), None, &d);
        assert!(v.accepted, "{name}: {}", v.reason);
        assert!(
            matches!(v.rule, Rule::Exact | Rule::AmdExact),
            "{name}: {:?}",
            v.rule
        );
    }
}

#[test]
fn driver_version_from_cu_driver_get_version() {
    assert_eq!(driver_version(13000), Version(13, 0));
    assert_eq!(driver_version(12080), Version(12, 8));
    assert_eq!(driver_version(13050), Version(13, 5));
    assert_eq!(driver_version(-1), Version(0, 0));
    assert_eq!(parse_version("9.5"), Some(Version(9, 5)));
    assert_eq!(parse_version("9"), None);
}

#[test]
fn rejected_objects_sort_last() {
    let d = cuda_dev("sm_90", D13);
    let mut objs: Vec<Target> = ["sm_80", "compute_90", "sm_89", "sm_90", "sm_90a"]
        .iter()
        .map(|o| t(o))
        .collect();
    objs.sort_by_key(|o| sort_key(o, &judge(o, parse_version("9.0"), &d)));
    let names: Vec<String> = objs.iter().map(|o| o.to_string()).collect();
    assert_eq!(names, ["sm_90a", "sm_90", "compute_90", "sm_89", "sm_80"]);
}

/// What was seen on the H200 (sm_90, driver 580 = CUDA 13.0) with a CUDA 13.5 build.
#[test]
fn h200_observation() {
    let d = Device::parse("9.0", Some(driver_version(13000)), None).unwrap();
    let isa = parse_version("9.5");
    let r = |o: &str| judge(&t(o), isa, &d);
    assert_eq!(r("sm_80").rule, Rule::OtherMajor);
    assert_eq!(r("sm_89").rule, Rule::OtherMajor);
    assert_eq!(r("sm_90").rule, Rule::Exact);
    assert_eq!(r("sm_90a").rule, Rule::ArchSpecific);
    assert_eq!(r("compute_90").rule, Rule::PtxIsaTooNew);
    assert_eq!(
        r("compute_90").reason,
        "compute_90 PTX: ISA 9.5 > 9.0, the newest driver 13.0 JIT-compiles"
    );
}

#[test]
fn featureless_amd_processors_are_exact() {
    for name in ["gfx1030", "gfx1100", "gfx1151", "gfx1200", "gfx1201"] {
        case(name, None, name, D13, Rule::AmdExact);
    }
    let v = judge(&t("gfx90a"), None, &dev("gfx90a:sramecc+:xnack-"));
    assert_eq!(
        v.reason,
        "gfx90a code object: sramecc and xnack any, runs on gfx90a:sramecc+:xnack-"
    );
}

// ---- AMD runtime: generic objects need ROCm ≥ 6.4 ----
#[test]
fn generic_objects_need_rocm_6_4() {
    assert!(
        runtime_loads_generic(None),
        "unknown: the simulated default"
    );
    assert!(!runtime_loads_generic(Some(Version(5, 2))));
    assert!(!runtime_loads_generic(Some(NO_GENERIC_RUNTIME)));
    assert!(!runtime_loads_generic(Some(Version(6, 3))));
    assert!(runtime_loads_generic(Some(GENERIC_MIN_RUNTIME)));
    assert!(runtime_loads_generic(Some(Version(6, 4))));
    assert!(runtime_loads_generic(Some(Version(7, 0))));
    let on = |rt| {
        judge(
            &t("gfx11-generic"),
            None,
            &Device::parse("gfx1100", None, rt).unwrap(),
        )
    };
    assert_eq!(on(Some(Version(6, 4))).rule, Rule::AmdGeneric);
    assert_eq!(on(None).rule, Rule::AmdGeneric);
    let v = on(Some(Version(5, 2)));
    assert_eq!(v.rule, Rule::GenericUnsupported);
    assert_eq!(
        v.reason,
        "gfx11-generic code object: gfx1100 is a member, but the runtime does not load generic \
         code objects (code object v6 needs ROCm ≥ 6.4)"
    );
}

/// A detected runtime travels with the device through its name and back.
#[test]
fn runtime_is_kept_by_parse() {
    for rt in RUNTIMES {
        match Device::parse("gfx942:sramecc+:xnack-", None, rt).unwrap() {
            Device::Amd { runtime, .. } => assert_eq!(runtime, rt),
            d => panic!("{d:?}"),
        }
        // The runtime is an AMD fact: a CUDA device spec ignores it.
        assert_eq!(
            Device::parse("sm_90", None, rt).unwrap(),
            Device::parse("sm_90", None, None).unwrap()
        );
    }
}

fn runtime() -> impl Strategy<Value = Option<Version>> {
    prop_oneof![
        Just(None),
        (4u32..9, 0u32..10).prop_map(|(a, b)| Some(Version(a, b)))
    ]
}

proptest! {
    /// The runtime decides generic objects only: a generic member runs iff the runtime loads
    /// generic objects, and no other verdict depends on the runtime.
    #[test]
    fn runtime_decides_generic_objects_only(
        ti in 0usize..200,
        di in 0usize..200,
        rt in runtime(),
    ) {
        let targets = all_targets();
        let devices = all_devices();
        let o = &targets[ti % targets.len()];
        let Device::Amd { processor, xnack, sramecc, .. } = devices[di % devices.len()] else {
            return Ok(());
        };
        let d = Device::Amd { processor, xnack, sramecc, runtime: rt };
        let v = judge(o, None, &d);
        match o.processor.kind {
            ProcessorKind::AmdGeneric { members, .. } if members.contains(&processor.name) => {
                let expected = if runtime_loads_generic(rt) {
                    Rule::AmdGeneric
                } else {
                    Rule::GenericUnsupported
                };
                prop_assert_eq!(v.rule, expected, "{}", v.reason);
            }
            _ => {
                let unknown = Device::Amd { processor, xnack, sramecc, runtime: None };
                prop_assert_eq!(v, judge(o, None, &unknown));
            }
        }
    }

    /// A newer runtime never refuses an object an older one accepts.
    #[test]
    fn newer_runtime_accepts_more(
        ti in 0usize..200,
        di in 0usize..200,
        a in (4u32..9, 0u32..10),
        b in (4u32..9, 0u32..10),
    ) {
        let targets = all_targets();
        let devices = all_devices();
        let o = &targets[ti % targets.len()];
        let Device::Amd { processor, xnack, sramecc, .. } = devices[di % devices.len()] else {
            return Ok(());
        };
        let (lo, hi) = (Version(a.0, a.1).min(Version(b.0, b.1)), Version(a.0, a.1).max(Version(b.0, b.1)));
        let at = |v| judge(o, None, &Device::Amd { processor, xnack, sramecc, runtime: Some(v) });
        prop_assert!(!at(lo).accepted || at(hi).accepted);
    }
}

// ---- the audit's identity rule and selection agree ----

/// What an object that passes the audit for `target` reads as.
fn audited_object(target: &Target) -> ObjectIdent {
    let id = object_identity(target).unwrap_or_else(|| panic!("{target}: no identity"));
    ObjectIdent {
        format: match target.object_kind() {
            ObjectKind::Ptx => crate::read::Format::Ptx,
            ObjectKind::Cubin => crate::read::Format::Cubin,
            ObjectKind::Hsaco => crate::read::Format::Hsaco,
        },
        machine: id.machine,
        arch: id.arch,
        target: id.target,
        entries: vec![],
    }
}

/// The devices a build for `target` is for: its compute capability (or family members), its
/// AMD processor with each feature value the object leaves open, every member of a generic
/// family on each runtime that loads generic objects.
fn devices_of(target: &Target) -> Vec<Device> {
    let both = |f: Feature, supported: bool| match (f, supported) {
        (_, false) => vec![Feature::Any],
        (Feature::Any, true) => vec![Feature::On, Feature::Off],
        (f, true) => vec![f],
    };
    match target.processor.kind {
        ProcessorKind::Cuda { major, minor, .. } => family_members((major, minor))
            .into_iter()
            .filter(|&m| match target.processor.kind {
                ProcessorKind::Cuda {
                    suffix: CudaSuffix::FamilySpecific,
                    ..
                } => true,
                _ => m == (major, minor),
            })
            .filter_map(|(a, b)| cuda_processor(a, b))
            .map(|processor| Device::Cuda {
                processor,
                driver: NEWEST_DRIVER,
            })
            .collect(),
        ProcessorKind::Amd {
            xnack: has_x,
            sramecc: has_s,
            ..
        } => {
            let mut out = vec![];
            for xnack in both(target.xnack, has_x) {
                for sramecc in both(target.sramecc, has_s) {
                    for runtime in RUNTIMES {
                        out.push(Device::Amd {
                            processor: target.processor,
                            xnack,
                            sramecc,
                            runtime,
                        });
                    }
                }
            }
            out
        }
        ProcessorKind::AmdGeneric { members, .. } => members
            .iter()
            .flat_map(|m| {
                RUNTIMES
                    .into_iter()
                    .filter(|rt| runtime_loads_generic(*rt))
                    .map(move |rt| Device::parse(m, None, rt).unwrap())
            })
            .collect(),
    }
}

/// For every catalogue target T: an object the audit accepts for T is selected (judged by the
/// name the manifest records, T's) on every device of T.
#[test]
fn audited_objects_are_selected_on_their_devices() {
    for target in all_targets() {
        let object = audited_object(&target);
        let id = object_identity(&target).unwrap();
        assert!(id.matches(&object), "{target}");
        let recorded: Target = target.to_string().parse().unwrap();
        assert_eq!(recorded, target, "the manifest name round-trips");
        let devices = devices_of(&target);
        assert!(!devices.is_empty(), "{target}: no device");
        for d in devices {
            let isa = target.ptx.then(|| max_ptx_isa(NEWEST_DRIVER));
            let v = judge(&recorded, isa, &d);
            assert!(v.accepted, "{target} on {d}: {}", v.reason);
        }
    }
}

/// The audit for T never admits an object built for another target T' that would then be
/// selected on a device where T' does not run.
#[test]
fn audit_admits_no_object_selection_would_misplace() {
    let targets = all_targets();
    let devices = all_devices();
    let mut cross = 0;
    for claimed in &targets {
        let id = object_identity(claimed).unwrap();
        for real in &targets {
            if !id.matches(&audited_object(real)) {
                continue;
            }
            if real != claimed {
                cross += 1;
            }
            for d in &devices {
                let isa = Some(Version(8, 0));
                let as_claimed = judge(claimed, isa, d);
                let as_real = judge(real, isa, d);
                assert!(
                    !as_claimed.accepted || as_real.accepted,
                    "audit for {claimed} admits a {real} object, selected on {d} where it does not run: {}",
                    as_real.reason
                );
            }
        }
    }
    // sm_100f/sm_100, sm_120f/sm_120 cubins read alike; the test must see such pairs.
    assert!(cross > 0);
}

#[test]
fn identity_of_each_object_kind() {
    let id = |s: &str| object_identity(&t(s)).unwrap();
    assert_eq!(
        id("sm_90a"),
        ObjectIdentity {
            machine: crate::read::cubin::EM_CUDA,
            arch: 90,
            target: "sm_90a".into()
        }
    );
    assert_eq!(id("sm_100f").target, "sm_100");
    assert_eq!(
        id("compute_90a"),
        ObjectIdentity {
            machine: 0,
            arch: 90,
            target: "sm_90a".into()
        }
    );
    assert_eq!(
        id("gfx90a:xnack-"),
        ObjectIdentity {
            machine: crate::read::amdgpu::EM_AMDGPU,
            arch: 0x3f,
            target: "gfx90a:xnack-".into()
        }
    );
    assert_eq!(id("gfx11-generic").arch, 0x54);
    // Arch-specific PTX is not plain PTX: compute_90 would be JIT-ed on newer devices.
    let plain = id("compute_90");
    assert!(!plain.matches(&audited_object(&t("compute_90a"))));
    assert!(plain.matches(&audited_object(&t("compute_90"))));
}
