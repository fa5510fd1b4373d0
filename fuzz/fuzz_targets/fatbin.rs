#![no_main]
//! The fatbin reader, including bounded zstd / LZ4 decompression of every entry.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = kbuild_manifest::read::fatbin::read_fatbin(data) {
        for e in entries {
            let _ = e.target();
            let _ = e.data(16 << 20);
        }
    }
});
