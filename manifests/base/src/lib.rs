//! The leaf of kbuild's crate graph: helpers every other crate needs exactly once.
//! Atomic writes ([`fs`]), digests ([`digest`]), UTC dates ([`time`]), kbuild's directories
//! ([`dirs`]), the rules for outside names and paths ([`ident`]), capped reads of outside files
//! ([`read`]), short lists of names in messages ([`list`]), the cost of parsing a JSON document ([`json_cost`]) and [`env::Env`], the only
//! code that reads the process environment.

pub mod digest;
pub mod dirs;
pub mod env;
pub mod fs;
pub mod ident;
pub mod json_cost;
pub mod list;
pub mod read;
pub mod time;

/// zstd frame magic: every kbuild bundle (`NAME-VERSION.kbundle`, tar+zstd) starts with it.
pub const BUNDLE_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// Whether `bytes` start like a bundle (a zstd frame).
pub fn looks_like_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(&BUNDLE_MAGIC)
}
