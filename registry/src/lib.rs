//! kbuild registries: where bundles are published and pulled from. A local directory store
//! ([`dir`]) and OCI distribution ([`oci`]: auth, TLS, retries, one layer per target), behind
//! one [`store::Registry`]; [`pull`] verifies what it fetches and installs it into the bundle
//! cache ([`release`]: the same from a split release's index and part files); [`lock`] is
//! `Kbuild.lock`. The only crate with HTTP and TLS. A library: it prints nothing (progress
//! goes through [`progress::Progress`]) and knows nothing about compilers.

pub mod auth;
pub mod dir;
pub mod list;
pub mod lock;
pub mod oci;
pub mod progress;
pub mod pull;
pub mod release;
pub mod report;
pub mod signing;
pub mod store;

pub use semver;
