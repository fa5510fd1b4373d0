//! kbuild's end-to-end tests, one binary made of modules (one per user flow). Each runs the
//! `kbuild` binary cargo built for this run (`CARGO_BIN_EXE_kbuild`) with the real compilers and,
//! where a flow needs one, a real registry server. Shared helpers: `tests/src` (`kbuild_tests`).

#[allow(dead_code, unused_imports)]
#[path = "../src/lib.rs"]
mod kbuild_tests;

mod abi_oracle;
mod asset_split;
mod budgets;
mod build;
mod buildrs;
mod bundle;
mod cli_polish;
mod compat_header;
mod diff;
mod errors;
mod faults;
mod gdn;
mod inspect_containers;
mod loader;
mod loader_gpu;
mod mutation_parsers;
mod occupancy_ptxas;
mod onboarding;
mod oracle;
mod published_diff;
mod registry;
mod registry_faults;
mod release_safety;
mod remote_cache;
mod remote_exec;
mod report_cli;
mod shards;
mod triton;
mod triton_autotune;
mod trust;
mod trust_local;
mod trust_net;
mod trust_tree;
mod vendor_targets;
