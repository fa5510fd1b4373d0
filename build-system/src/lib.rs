//! kbuild's build library: reads a `Kbuild.toml`, plans kernel × variant × target compiles,
//! runs them through the vendors' device-only compilers with a content-addressed cache, audits
//! the objects and writes the build manifest. The `kbuild` binary and the build.rs API
//! ([`Build`]) are its two front ends; it knows nothing of terminals or flags.

pub mod audit;
pub mod baseline;
pub mod build;
pub mod buildrs;
pub mod cache;
pub mod clean;
pub mod compat_header;
pub mod config;
pub mod depfile;
pub mod driver;
pub mod entries;
pub mod events;
pub mod exec;
pub mod fat;
pub mod git;
pub mod init;
pub mod interrupt;
pub mod package;
pub mod pch;
pub mod plan;
pub mod remote_cache;
pub mod remote_exec;
pub mod report;
pub mod shard;
pub mod sides;
pub mod toolchain;
pub mod triton;
pub mod worktree;

pub use buildrs::Build;
