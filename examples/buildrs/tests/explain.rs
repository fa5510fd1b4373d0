//! Runs on CPU: selection over the embedded bundle for simulated devices.

use kbuild_buildrs_example::{explain, kernels, package};

#[test]
fn the_generated_module_names_the_kernels_and_embeds_the_bundle() {
    assert_eq!(kernels::PACKAGE, "buildrs-example-kernels");
    assert_eq!(kernels::TARGETS, ["sm_89", "gfx1100"]);
    assert_eq!(kernels::KERNELS, ["axpy", "scale"]);
    assert_eq!(kernels::axpy::NAME, "axpy");
    assert_eq!(kernels::axpy::AXPY_F32, "axpy_f32");
    assert_eq!(kernels::scale::ENTRIES, ["scale_f32", "scale_inplace_f32"]);
    assert_eq!(kernels::scale::SCALE_INPLACE_F32, "scale_inplace_f32");
    let p = package().expect("the embedded bundle opens");
    assert_eq!(p.kernels(), kernels::KERNELS);
}

#[test]
fn every_kernel_has_an_object_for_the_built_targets() {
    for device in ["sm_89", "gfx1100"] {
        let (selection, text) = explain(device).expect("explain");
        assert!(selection.complete(), "{device}\n{text}");
        assert!(text.contains(device), "{text}");
    }
}

#[test]
fn a_device_nothing_was_built_for_is_explained_not_selected() {
    // sm_89 SASS does not run on sm_90 (another major), and there is no PTX in this build.
    let (selection, text) = explain("sm_90").expect("explain");
    assert!(!selection.complete(), "{text}");
    assert!(
        text.contains("sm_89"),
        "the rejected candidate is listed\n{text}"
    );
}
