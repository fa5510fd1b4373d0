#![no_main]
//! The host ELF reader (embedded .nv_fatbin / .hip_fatbin sections).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kbuild_manifest::read::host_elf::read_host_elf(data);
});
