//! Reports for people and CI over kbuild's manifests: resource-usage diffs with gates and
//! allowlists ([`diff`]) and the `kbuild inspect` table ([`inspect`]). The loader never
//! depends on this crate.

pub mod demangle;
pub mod diff;
pub mod inspect;
