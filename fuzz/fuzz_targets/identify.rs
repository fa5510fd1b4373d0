#![no_main]
//! `identify` on any bytes: Ok or Err, never a panic.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kbuild_manifest::read::detect(data);
    let _ = kbuild_manifest::read::identify(data);
});
