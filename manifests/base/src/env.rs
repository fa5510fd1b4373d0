//! The process environment, read in one place. [`Env::from_process`] is called by the edges
//! (the `kbuild` binary, the build.rs API, the C ABI); every library takes an `&Env` or plain
//! values, so a test or an embedder can hand in any environment it likes.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// The names kbuild reads, each once, here.
pub mod names {
    pub const KBUILD_CACHE_DIR: &str = "KBUILD_CACHE_DIR";
    pub const KBUILD_DATA_DIR: &str = "KBUILD_DATA_DIR";
    pub const KBUILD_CONFIG: &str = "KBUILD_CONFIG";
    pub const KBUILD_LAUNCHER: &str = "KBUILD_LAUNCHER";
    pub const KBUILD_SIGNATURE_POLICY: &str = "KBUILD_SIGNATURE_POLICY";
    pub const KBUILD_TRUSTED_KEYS: &str = "KBUILD_TRUSTED_KEYS";
    pub const KBUILD_MAX_UNPACKED_BYTES: &str = "KBUILD_MAX_UNPACKED_BYTES";
    pub const KBUILD_REMOTE_CACHE_TIMEOUT: &str = "KBUILD_REMOTE_CACHE_TIMEOUT";
    /// `name=value` lines: headers of every remote execution call (an API key).
    pub const KBUILD_REMOTE_HEADERS: &str = "KBUILD_REMOTE_HEADERS";
    /// A PEM file of CA certificates for a remote execution service with a private CA.
    pub const KBUILD_REMOTE_CA_FILE: &str = "KBUILD_REMOTE_CA_FILE";
    pub const KBUILD_REGISTRY_USER: &str = "KBUILD_REGISTRY_USER";
    pub const KBUILD_REGISTRY_PASSWORD: &str = "KBUILD_REGISTRY_PASSWORD";
    pub const KBUILD_REGISTRY_AUTH_FILE: &str = "KBUILD_REGISTRY_AUTH_FILE";
    pub const KBUILD_REGISTRY_CA_FILE: &str = "KBUILD_REGISTRY_CA_FILE";
    pub const KBUILD_REGISTRY_HOST: &str = "KBUILD_REGISTRY_HOST";
    pub const KBUILD_REGISTRY_TIMEOUT: &str = "KBUILD_REGISTRY_TIMEOUT";
    pub const KBUILD_MAX_LAYER_BYTES: &str = "KBUILD_MAX_LAYER_BYTES";
    pub const KBUILD_DEVICE: &str = "KBUILD_DEVICE";
    pub const KBUILD_HIP_SEARCH: &str = "KBUILD_HIP_SEARCH";
    pub const KBUILD_LOG: &str = "KBUILD_LOG";
    pub const KBUILD_PCH: &str = "KBUILD_PCH";
    pub const SOURCE_DATE_EPOCH: &str = "SOURCE_DATE_EPOCH";
    pub const REGISTRY_AUTH_FILE: &str = "REGISTRY_AUTH_FILE";
    pub const DOCKER_CONFIG: &str = "DOCKER_CONFIG";
    pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
    pub const XDG_DATA_HOME: &str = "XDG_DATA_HOME";
    pub const XDG_CONFIG_HOME: &str = "XDG_CONFIG_HOME";
    pub const XDG_RUNTIME_DIR: &str = "XDG_RUNTIME_DIR";
    pub const HOME: &str = "HOME";
    pub const PATH: &str = "PATH";
    pub const CUDA_HOME: &str = "CUDA_HOME";
    pub const CUDA_PATH: &str = "CUDA_PATH";
    pub const ROCM_PATH: &str = "ROCM_PATH";
    pub const HIP_PATH: &str = "HIP_PATH";
    pub const LD_LIBRARY_PATH: &str = "LD_LIBRARY_PATH";
    pub const CI: &str = "CI";
    pub const NO_COLOR: &str = "NO_COLOR";
    pub const TERM: &str = "TERM";
    pub const OUT_DIR: &str = "OUT_DIR";

    /// Every name above: what [`super::Env::from_process`] snapshots.
    pub const ALL: &[&str] = &[
        KBUILD_CACHE_DIR,
        KBUILD_DATA_DIR,
        KBUILD_CONFIG,
        KBUILD_LAUNCHER,
        KBUILD_SIGNATURE_POLICY,
        KBUILD_TRUSTED_KEYS,
        KBUILD_MAX_UNPACKED_BYTES,
        KBUILD_REMOTE_CACHE_TIMEOUT,
        KBUILD_REMOTE_HEADERS,
        KBUILD_REMOTE_CA_FILE,
        KBUILD_REGISTRY_USER,
        KBUILD_REGISTRY_PASSWORD,
        KBUILD_REGISTRY_AUTH_FILE,
        KBUILD_REGISTRY_CA_FILE,
        KBUILD_REGISTRY_HOST,
        KBUILD_REGISTRY_TIMEOUT,
        KBUILD_MAX_LAYER_BYTES,
        KBUILD_DEVICE,
        KBUILD_HIP_SEARCH,
        KBUILD_LOG,
        KBUILD_PCH,
        SOURCE_DATE_EPOCH,
        REGISTRY_AUTH_FILE,
        DOCKER_CONFIG,
        XDG_CACHE_HOME,
        XDG_DATA_HOME,
        XDG_CONFIG_HOME,
        XDG_RUNTIME_DIR,
        HOME,
        PATH,
        CUDA_HOME,
        CUDA_PATH,
        ROCM_PATH,
        HIP_PATH,
        LD_LIBRARY_PATH,
        CI,
        NO_COLOR,
        TERM,
        OUT_DIR,
    ];
}

/// A snapshot of the variables kbuild reads. Empty values count as unset.
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: BTreeMap<String, OsString>,
}

impl Env {
    /// The one read of the process environment.
    pub fn from_process() -> Env {
        let mut env = Env::default();
        for name in names::ALL {
            if let Some(v) = std::env::var_os(name) {
                env = env.with(name, v);
            }
        }
        env
    }

    /// No variables at all (tests, embedders that configure everything explicitly).
    pub fn empty() -> Env {
        Env::default()
    }

    /// This environment with `name` set (an empty value unsets it).
    pub fn with(mut self, name: &str, value: impl Into<OsString>) -> Env {
        let value = value.into();
        if value.is_empty() {
            self.vars.remove(name);
        } else {
            self.vars.insert(name.to_string(), value);
        }
        self
    }

    /// The value of `name`, if set and not empty.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(name).map(OsString::as_os_str)
    }

    /// The value of `name` as UTF-8 (None when unset, empty or not UTF-8).
    pub fn str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(OsStr::to_str)
    }

    /// The value of `name` as a path.
    pub fn path(&self, name: &str) -> Option<PathBuf> {
        self.get(name).map(PathBuf::from)
    }

    /// The value of `name` parsed as an unsigned integer (surrounding blanks allowed).
    pub fn u64(&self, name: &str) -> Option<u64> {
        self.str(name).and_then(|v| v.trim().parse().ok())
    }

    /// `SOURCE_DATE_EPOCH`: the timestamp reproducible outputs carry (0 when unset).
    pub fn source_date_epoch(&self) -> u64 {
        self.u64(names::SOURCE_DATE_EPOCH).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_values_are_unset_and_numbers_parse() {
        let env = Env::empty()
            .with(names::HOME, "")
            .with(names::SOURCE_DATE_EPOCH, " 42 ");
        assert_eq!(env.get(names::HOME), None);
        assert_eq!(env.source_date_epoch(), 42);
        assert_eq!(Env::empty().source_date_epoch(), 0);
    }

    #[test]
    fn every_name_is_listed_once() {
        let mut all = names::ALL.to_vec();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), names::ALL.len());
    }
}
