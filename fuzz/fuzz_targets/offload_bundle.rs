#![no_main]
//! The clang offload bundle reader, plain and compressed (CCOB v1/v2/v3, zlib/zstd).
use kbuild_manifest::read::offload_bundle::{decompress_bundle, read_offload_bundle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = read_offload_bundle(data);
    if let Ok((_, plain)) = decompress_bundle(data, 16 << 20) {
        let _ = read_offload_bundle(&plain);
    }
});
