//! One module per command: parse what clap left, call the library, render its report.

pub mod baseline;
pub mod build;
pub mod clean;
pub mod diff;
pub mod explain;
pub mod inspect;
pub mod registry;
#[cfg(feature = "engine")]
pub mod run;
pub mod toolchain;
