#![no_main]
//! The cubin reader (both ELF ABIs, .nv.info records, .nv.compat).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kbuild_manifest::read::cubin::read_cubin(data);
    let _ = kbuild_manifest::read::nvinfo::records(".nv.info", data);
});
