//! AMDGPU readers against `llvm-readobj-19 --notes` and clang's resource-usage remarks.

use crate::common;

use common::*;
use kbuild_manifest::read::amdgpu::read_hsaco;
use kbuild_manifest::read::parse_clang_resource_remarks;

const HSACO: &[&str] = &[
    "kern_gfx1100.hsaco",
    "kern_gfx90a_v4.hsaco",
    "kern_gfx11generic.hsaco",
    "mfma_gfx90a.hsaco",
    "mfma_gfx942.hsaco",
    "spill_gfx1100.hsaco",
    "spill_gfx90a.hsaco",
];

/// Every key llvm-readobj prints, per kernel and per argument, equals our record; and we have
/// no key it does not print.
#[test]
fn metadata_equals_llvm_readobj() {
    for file in HSACO {
        let obj = read_hsaco(&fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let oracle = readobj_metadata(&readobj_notes(file));
        let meta = obj.metadata.as_ref().expect("metadata note");

        let target = oracle.get("amdhsa.target").expect("amdhsa.target");
        assert_eq!(
            Some(target),
            json_to_yaml(&serde_json::json!(meta.target)).as_ref(),
            "{file}"
        );
        assert_eq!(
            *target,
            Yaml::Scalar(format!("amdgcn-amd-amdhsa--{}", obj.target_id)),
            "{file}: e_flags target"
        );
        let version = oracle.get("amdhsa.version").expect("amdhsa.version");
        assert_eq!(
            Some(version),
            json_to_yaml(&serde_json::json!(meta.version)).as_ref(),
            "{file}"
        );

        let Some(Yaml::List(kernels)) = oracle.get("amdhsa.kernels") else {
            panic!("{file}: no amdhsa.kernels")
        };
        assert_eq!(kernels.len(), obj.kernels.len(), "{file}: kernel count");
        for k in kernels {
            let Some(Yaml::Scalar(name)) = k.get(".name") else {
                panic!("{file}: kernel without .name")
            };
            assert!(
                matches!(k, Yaml::Map(m) if m.len() >= 12),
                "{file}: oracle parse looks short: {k:?}"
            );
            let ours = obj
                .kernels
                .iter()
                .find(|x| &x.name == name)
                .unwrap_or_else(|| panic!("{file}: no kernel {name}"));
            let ours =
                json_to_yaml(&serde_json::to_value(ours.metadata.as_ref().unwrap()).unwrap())
                    .unwrap();
            assert_eq!(
                sorted(&ours),
                sorted(k),
                "{file}: kernel {name} differs from llvm-readobj"
            );
        }
        assert!(
            obj.contradictions.is_empty(),
            "{file}: {:?}",
            obj.contradictions
        );
        for k in &obj.kernels {
            assert!(
                k.contradictions.is_empty(),
                "{file} {}: {:?}",
                k.name,
                k.contradictions
            );
            assert!(k.descriptor.is_some(), "{file} {}: no descriptor", k.name);
        }
        obj.check().unwrap();
    }
}

/// The remarks restate the metadata: SGPRs, VGPRs (+ AGPRs, unified on gfx90a-class), scratch,
/// LDS, spills, dynamic stack.
#[test]
fn metadata_equals_clang_remarks() {
    for (hsaco, remarks) in [
        ("mfma_gfx90a.hsaco", "mfma_gfx90a.remarks.txt"),
        ("mfma_gfx942.hsaco", "mfma_gfx942.remarks.txt"),
        ("spill_gfx1100.hsaco", "spill_gfx1100.remarks.txt"),
        ("spill_gfx90a.hsaco", "spill_gfx90a.remarks.txt"),
    ] {
        let obj = read_hsaco(&fixture(hsaco)).unwrap();
        let rem = parse_clang_resource_remarks(&fixture_text(remarks));
        assert_eq!(rem.len(), obj.kernels.len(), "{hsaco}");
        for r in rem {
            let k = obj
                .kernels
                .iter()
                .find(|k| k.name == r.function)
                .unwrap_or_else(|| panic!("{hsaco}: {}", r.function));
            let m = k.metadata.as_ref().unwrap();
            assert_eq!(r.sgprs, Some(m.sgpr_count), "{hsaco} {} SGPRs", k.name);
            let (v, a) = (r.vgprs.unwrap(), r.agprs.unwrap_or(0));
            let unified = if obj.target.has_gfx90a_insts() && a > 0 {
                v.div_ceil(4) * 4 + a
            } else {
                v.max(a)
            };
            assert_eq!(unified, m.vgpr_count, "{hsaco} {} VGPRs", k.name);
            assert_eq!(r.agprs, m.agpr_count, "{hsaco} {} AGPRs", k.name);
            assert_eq!(
                r.scratch_bytes,
                Some(m.private_segment_fixed_size),
                "{hsaco} {} scratch",
                k.name
            );
            assert_eq!(
                r.lds_bytes,
                Some(m.group_segment_fixed_size),
                "{hsaco} {} LDS",
                k.name
            );
            assert_eq!(
                r.sgpr_spill, m.sgpr_spill_count,
                "{hsaco} {} SGPR spill",
                k.name
            );
            assert_eq!(
                r.vgpr_spill, m.vgpr_spill_count,
                "{hsaco} {} VGPR spill",
                k.name
            );
            assert_eq!(
                r.dynamic_stack, m.uses_dynamic_stack,
                "{hsaco} {} dynamic stack",
                k.name
            );
        }
    }
}

/// The figures the fixtures were built to show.
#[test]
fn fixture_features_are_visible() {
    let spill = read_hsaco(&fixture("spill_gfx1100.hsaco")).unwrap();
    let k = &spill.kernels[0];
    let m = k.metadata.as_ref().unwrap();
    assert_eq!(k.name, "amd_spill");
    assert!(m.vgpr_spill_count.unwrap() > 0, "amd_spill spills VGPRs");
    assert!(m.private_segment_fixed_size > 0);
    assert_eq!(m.wavefront_size, 32);
    let lds = spill.kernels.iter().find(|k| k.name == "big_lds").unwrap();
    assert_eq!(
        lds.metadata.as_ref().unwrap().group_segment_fixed_size,
        32768
    );
    assert_eq!(
        lds.descriptor.as_ref().unwrap().group_segment_fixed_size,
        32768
    );

    for file in ["mfma_gfx90a.hsaco", "mfma_gfx942.hsaco"] {
        let o = read_hsaco(&fixture(file)).unwrap();
        let m = o.kernels[0].metadata.as_ref().unwrap();
        assert_eq!(m.wavefront_size, 64, "{file}");
        assert!(m.agpr_count.unwrap() > 0, "{file} uses AGPRs");
        let d = o.kernels[0].descriptor.as_ref().unwrap();
        assert!(!d.wave32());
        assert_eq!(
            d.accum_offset() + m.agpr_count.unwrap(),
            m.vgpr_count,
            "{file}: ACCUM_OFFSET + AGPRs"
        );
    }

    let v4 = read_hsaco(&fixture("kern_gfx90a_v4.hsaco")).unwrap();
    assert_eq!(v4.code_object_version, 4);
    assert_eq!(v4.metadata.as_ref().unwrap().version, vec![1, 1]);
    let reqd = v4.kernels.iter().find(|k| k.name == "reqd64").unwrap();
    assert_eq!(reqd.metadata.as_ref().unwrap().max_flat_workgroup_size, 64);
    let generic = read_hsaco(&fixture("kern_gfx11generic.hsaco")).unwrap();
    assert_eq!(
        (generic.code_object_version, generic.target.generic_version),
        (6, Some(1))
    );
}
