//! kbuild-manifest's integration tests, one binary made of modules: the readers against the
//! vendors' tools on real objects (`oracle_*`, `occupancy_*`, `identify`) and the readers'
//! mutation harness (`mutation`). Shared helpers: `common`.

mod common;

mod identify;
mod mutation;
mod occupancy_amd;
mod occupancy_cuda_device;
mod oracle_amd;
mod oracle_bundles;
mod oracle_cuda;
