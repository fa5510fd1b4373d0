#![no_main]
//! The bundle reader: a `.kbundle`'s bytes (tar+zstd) → entries → a checked `Bundle`.
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::Bundle;
use libfuzzer_sys::fuzz_target;

const LIMITS: ArchiveLimits = ArchiveLimits {
    max_unpacked: 16 << 20,
    max_entries: 4096,
};

fuzz_target!(|data: &[u8]| {
    let _ = kbuild_bundle::archive::read(data, LIMITS);
    if let Ok(b) = Bundle::from_bytes(data, LIMITS) {
        let _ = b.targets();
        let _ = b.to_bytes(0);
    }
});
