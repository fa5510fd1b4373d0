//! Validated options, each built once from the parsed flags (the low-level arguments of
//! `cli.rs` become the libraries' option types here): build options, the registry, the trust
//! policy, the device, the project's out-dir.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_build::build::BuildOptions;
use kbuild_build::config;
use kbuild_bundle::cache::BundleCache;
use kbuild_bundle::sign::Trust;
use kbuild_loader::detect::DeviceOptions;
use kbuild_registry::oci::OciOptions;
use kbuild_registry::store::Registry;

use crate::cli::{BuildArgs, ManifestPath, RegistryArgs, SimulatedDevice, Targets, TrustArgs};

/// The build options every building command shares: `--targets`, `-j`, the environment.
pub fn build_options(targets: &Targets, jobs: Option<u32>, env: &Env) -> Result<BuildOptions> {
    let spec = kbuild_manifest::target::parse_target_lists(&targets.targets)?;
    Ok(BuildOptions {
        targets_all: spec.as_ref().is_some_and(|s| s.all),
        targets: spec.map(|s| s.targets),
        jobs: jobs.map(|j| j as usize),
        env: env.clone(),
        ..BuildOptions::default()
    })
}

impl BuildArgs {
    /// `kbuild build`'s options: [`build_options`] and the flags of a full build.
    pub fn options(&self, env: &Env) -> Result<BuildOptions> {
        Ok(BuildOptions {
            out_dir: self.out.clone(),
            keep_going: self.keep_going,
            strict: self.strict,
            fat: self.fat,
            job_timeout: self.job_timeout,
            remote_cache: self.remote_cache.clone(),
            remote_cache_mode: self.remote_cache_mode,
            plain_http: self.plain_http,
            shard: self.shard,
            ..build_options(&self.targets, self.jobs, env)?
        })
    }
}

impl ManifestPath {
    /// The project (`--manifest-path`, else found from the current directory).
    pub fn open(&self) -> Result<config::Project> {
        Ok(config::open(self.manifest_path.as_deref())?)
    }

    /// The project's out-dir, when no build was named.
    pub fn default_out_dir(&self) -> Result<PathBuf> {
        Ok(config::open(self.manifest_path.as_deref())
            .context("no BUNDLE|DIR|MANIFEST given and no Kbuild.toml here to find the out-dir")?
            .out_dir)
    }
}

/// The device `--device` names (`auto`: detect), simulated as `--driver`/`--no-generic` say.
pub fn device_options(device: Option<&str>, sim: &SimulatedDevice, env: &Env) -> DeviceOptions {
    DeviceOptions {
        device: device.map(str::to_string),
        driver: sim.driver,
        no_generic: sim.no_generic,
        index: None,
        hip: kbuild_loader::hip::HipSearch::from_env(env),
    }
}

impl RegistryArgs {
    /// `--registry` (default: kbuild's local registry) with the transfer flags.
    pub(crate) fn open(&self, env: &Env) -> Result<Registry> {
        let spec = match &self.registry {
            Some(r) => r.clone(),
            None => kbuild_registry::list::default_registry(&Dirs::from_env(env)?)
                .display()
                .to_string(),
        };
        let opts = OciOptions {
            plain_http: self.plain_http,
            chunk_size: self.chunk_size.max(1),
            retries: self.retries,
            ..OciOptions::from_env(env)
        };
        Ok(Registry::parse(&spec, opts)?)
    }
}

impl TrustArgs {
    /// The user's trust settings (kbuild config, environment), then these flags.
    pub(crate) fn trust(&self, env: &Env) -> Result<Trust> {
        let mut t = Trust::load(env)?;
        if let Some(p) = self.signature_policy {
            t.policy = p;
        }
        for k in &self.trusted_keys {
            t.add_key(&k.display().to_string(), Path::new("."))?;
        }
        Ok(t)
    }
}

/// The local cache of pulled bundles.
pub fn registry_cache(env: &Env) -> Result<BundleCache> {
    Ok(BundleCache::new(&Dirs::from_env(env)?.registry_cache()))
}
