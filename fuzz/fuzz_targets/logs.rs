#![no_main]
//! The ptxas log and clang remark parsers.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = kbuild_manifest::read::parse_ptxas_log(&text);
    let _ = kbuild_manifest::read::parse_clang_resource_remarks(&text);
});
