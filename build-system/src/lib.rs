//! kbuild: plans kernel × variant × target compiles from a `Kbuild.toml`, runs them through the
//! vendors' device-only compilers with a content-addressed cache, audits the objects and writes
//! the build manifest. The `kbuild` binary (`main.rs`) is a thin CLI over this library.

pub mod audit;
pub mod baseline;
pub mod build;
pub mod buildrs;
pub mod cache;
pub mod config;
pub mod depfile;
pub mod diff_cmd;
pub mod driver;
pub mod events;
pub mod exec;
pub mod explain_cmd;
pub mod fat;
pub mod fsutil;
pub mod git;
pub mod inspect;
pub mod plan;
pub mod registry_cmd;
pub mod remote_cache;
pub mod run_cmd;
pub mod toolchain;

pub use buildrs::Build;
