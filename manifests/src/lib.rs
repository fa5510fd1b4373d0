//! kbuild's shared vocabulary: the target catalogue, the one compat rule table, the manifest
//! schema, and pure readers of GPU code objects (`&[u8]` in, typed records out, never I/O).

pub mod compat;
pub mod demangle;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod load_index;
pub mod manifest;
mod manifest_json;
pub mod occupancy;
pub mod params;
pub mod read;
pub mod resources;
pub mod shard;
pub mod target;
pub mod triton;
