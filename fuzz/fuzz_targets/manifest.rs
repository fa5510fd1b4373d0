#![no_main]
//! The manifest parser (`kbuild.manifest/v1` JSON).
use kbuild_manifest::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::from_json(data);
});
