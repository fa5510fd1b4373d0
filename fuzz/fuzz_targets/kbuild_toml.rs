#![no_main]
//! The Kbuild.toml parser.
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = kbuild_build::config::parse(Path::new("Kbuild.toml"), text);
    }
});
