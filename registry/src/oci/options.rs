//! How a client talks to a registry: transfer, retry, timeout, size, TLS and credential
//! settings, with their defaults and environment variables.

use std::path::PathBuf;
use std::time::Duration;

use super::DEFAULT_TIMEOUT;
use crate::auth::AuthConfig;
use kbuild_base::env::{names, Env};
use kbuild_bundle::archive::ArchiveLimits;

/// How an [`OciClient`](super::OciClient) talks to a registry.
#[derive(Debug, Clone)]
pub struct OciOptions {
    /// `http://` instead of `https://` (ORAS's `--plain-http`).
    pub plain_http: bool,
    /// Upload chunk size in bytes.
    pub chunk_size: usize,
    /// Retries after the first attempt, for 5xx/429/transport errors.
    pub retries: u32,
    /// First backoff delay; doubles each retry.
    pub backoff: Duration,
    /// Connect and per-read/write timeout, and the deadline of a whole document exchange
    /// (manifest, tag page, token, upload handshake). Default: `KBUILD_REGISTRY_TIMEOUT`
    /// (seconds), else [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// The largest blob (layer) kbuild fetches, by its declared size. Default:
    /// `KBUILD_MAX_LAYER_BYTES`, else the unpacked-size cap of [`OciOptions::limits`].
    pub max_layer_bytes: u64,
    /// A PEM file of CA certificates to trust besides the public roots (a registry with a
    /// private or self-signed certificate). Default: `KBUILD_REGISTRY_CA_FILE`. TLS
    /// verification itself is never turned off; `plain_http` is a different thing.
    pub ca_file: Option<PathBuf>,
    /// Where credentials come from.
    pub auth: AuthConfig,
    /// What a fetched layer may unpack to.
    pub limits: ArchiveLimits,
    /// `SOURCE_DATE_EPOCH` of the publisher: the `created` annotation and every archive
    /// header's mtime (0: no annotation, mtime 0).
    pub source_date_epoch: u64,
}

impl OciOptions {
    /// The defaults with the user's environment: `KBUILD_REGISTRY_CA_FILE`, credentials
    /// (`KBUILD_REGISTRY_USER`/`PASSWORD`/`HOST`, docker config files),
    /// `KBUILD_REGISTRY_TIMEOUT`, `KBUILD_MAX_LAYER_BYTES`, `KBUILD_MAX_UNPACKED_BYTES`,
    /// `SOURCE_DATE_EPOCH`.
    pub fn from_env(env: &Env) -> OciOptions {
        let limits = ArchiveLimits::from_env(env);
        OciOptions {
            ca_file: env.path(names::KBUILD_REGISTRY_CA_FILE),
            auth: AuthConfig::from_env(env),
            timeout: env
                .str(names::KBUILD_REGISTRY_TIMEOUT)
                .and_then(|s| s.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .unwrap_or(DEFAULT_TIMEOUT),
            max_layer_bytes: env
                .u64(names::KBUILD_MAX_LAYER_BYTES)
                .unwrap_or(limits.max_unpacked),
            limits,
            source_date_epoch: env.source_date_epoch(),
            ..OciOptions::default()
        }
    }
}

impl Default for OciOptions {
    fn default() -> Self {
        OciOptions {
            plain_http: false,
            chunk_size: 8 << 20,
            retries: 4,
            backoff: Duration::from_millis(250),
            timeout: DEFAULT_TIMEOUT,
            max_layer_bytes: ArchiveLimits::default().max_unpacked,
            ca_file: None,
            auth: AuthConfig::default(),
            limits: ArchiveLimits::default(),
            source_date_epoch: 0,
        }
    }
}
