#![no_main]
//! The recursive container walk, then `identify` on every member.
use kbuild_manifest::read::{identify, walk_with, Limits};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_decompressed: 16 << 20,
    max_total_decompressed: 64 << 20,
    max_depth: 8,
    max_members: 4096,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(members) = walk_with(data, &LIMITS) {
        for m in members {
            let _ = identify(&m.data);
        }
    }
});
