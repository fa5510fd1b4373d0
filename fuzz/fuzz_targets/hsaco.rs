#![no_main]
//! The AMDGPU code object reader (metadata note, kernel descriptors, cross-check).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(obj) = kbuild_manifest::read::amdgpu::read_hsaco(data) {
        let _ = obj.check();
        let _ = obj.entries();
    }
});
