#![no_main]
//! The PTX reader.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kbuild_manifest::read::ptx::is_ptx(data);
    let _ = kbuild_manifest::read::ptx::read_ptx(data);
});
