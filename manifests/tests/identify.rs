//! `identify` on real objects built from our own tiny kernels (see fixtures/README.md).

use kbuild_manifest::read::{identify, Format, ReadError};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

const KERN: &[&str] = &[
    "_Z11spill_heavyILi32EEvPKfPfi",
    "fixed_block",
    "reduce_smem",
    "reqd64",
    "vadd",
];

#[test]
fn hsaco_targets_and_entries() {
    let cases: &[(&str, u32, &str, &[&str])] = &[
        ("kern_gfx1100.hsaco", 0x41, "gfx1100", KERN),
        ("kern_gfx90a_v4.hsaco", 0x3f, "gfx90a:sramecc+:xnack-", KERN),
        ("kern_gfx11generic.hsaco", 0x54, "gfx11-generic", KERN),
        ("mfma_gfx90a.hsaco", 0x3f, "gfx90a", &["mfma_kernel"]),
        ("mfma_gfx942.hsaco", 0x4c, "gfx942", &["mfma_kernel"]),
        (
            "spill_gfx1100.hsaco",
            0x41,
            "gfx1100",
            &["amd_spill", "big_lds"],
        ),
        (
            "spill_gfx90a.hsaco",
            0x3f,
            "gfx90a",
            &["amd_spill", "big_lds"],
        ),
    ];
    for (file, arch, target, entries) in cases {
        let id = identify(&fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(id.format, Format::Hsaco, "{file}");
        assert_eq!(id.machine, 224, "{file}");
        assert_eq!(id.arch, *arch, "{file}");
        assert_eq!(id.target, *target, "{file}");
        assert_eq!(id.entries, *entries, "{file}");
    }
}

#[test]
fn cubin_targets_and_entries() {
    let cases: &[(&str, u32, &str, &[&str])] = &[
        ("kern_sm89.cubin", 89, "sm_89", KERN),
        ("kern_sm90a.cubin", 90, "sm_90a", KERN),
        ("kern_sm89_v1.cubin", 89, "sm_89", KERN),
        ("kern_sm90a_v1.cubin", 90, "sm_90a", KERN),
        (
            "spill_sm90.cubin",
            90,
            "sm_90",
            &["big_smem", "cuda_spill", "uses_const"],
        ),
    ];
    for (file, arch, target, entries) in cases {
        let id = identify(&fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(id.format, Format::Cubin, "{file}");
        assert_eq!(id.machine, 190, "{file}");
        assert_eq!(id.arch, *arch, "{file}");
        assert_eq!(id.target, *target, "{file}");
        assert_eq!(id.entries, *entries, "{file}");
    }
}

#[test]
fn ptx_target_and_entries() {
    let id = identify(&fixture("kern_compute90.ptx")).unwrap();
    assert_eq!(id.format, Format::Ptx);
    assert_eq!((id.machine, id.arch), (0, 90));
    assert_eq!(id.target, "sm_90");
    assert_eq!(id.entries, KERN);
}

#[test]
fn containers_are_named_not_identified() {
    for (file, format) in [
        ("kern_multi.fatbin", Format::Fatbin),
        ("small_bundle.hipfb", Format::OffloadBundle),
        ("small_bundle_compressed.hipfb", Format::OffloadBundle),
        ("libhost_nv.so", Format::HostElf),
        ("libsmall_hip.so", Format::HostElf),
    ] {
        let err = identify(&fixture(file)).unwrap_err();
        assert!(
            matches!(err, ReadError::Container(f) if f == format),
            "{file}: {err}"
        );
        assert!(err.to_string().contains("container"), "{err}");
    }
    let err = identify(b"hello").unwrap_err();
    assert!(matches!(err, ReadError::Unrecognised(_)), "{err}");
    assert!(identify(&[]).is_err());
}
