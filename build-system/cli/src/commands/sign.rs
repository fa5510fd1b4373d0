//! `kbuild sign`: a bundle file, a split release's index, or a published version. The `.sig`
//! files are read and written by `kbuild_bundle::sign`, the registry's signatures by
//! `kbuild-registry`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Result};
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::sign::{default_secret_key, sign_artifact, SecretKey};

use crate::cli::SignArgs;
use crate::progress::Bars;

pub fn run(args: SignArgs, env: &Env) -> Result<ExitCode> {
    let key_path = match &args.key {
        Some(k) => k.clone(),
        None => default_secret_key(&Dirs::from_env(env)?),
    };
    let key = SecretKey::load(&key_path).map_err(|e| {
        anyhow::Error::new(e).context("hint: make a key with `kbuild keygen`, or pass --key")
    })?;
    let file = Path::new(&args.target);
    if file.is_file() {
        let a = sign_artifact(file, &key, ArchiveLimits::from_env(env))?;
        let (name, version, digest) = (&a.name, &a.version, &a.manifest_digest);
        if !a.signed.dropped.is_empty() {
            let why: Vec<String> = a.signed.dropped.iter().map(ToString::to_string).collect();
            let why = match a.index {
                true => String::new(),
                false => format!(" ({})", why.join("; ")),
            };
            eprintln!(
                "note: {}: dropped {} signature(s) that do not match {}{why}",
                a.signed.path.display(),
                a.signed.dropped.len(),
                file.display(),
            );
        }
        // An index's signature covers the manifest it and every part carry, which `pull` of
        // the index checks.
        let which = if a.index {
            ", the one every part carries"
        } else {
            ""
        };
        outln!(
            "signed {name} {version} (manifest {digest}{which}) with key {}: {}",
            key.public().id(),
            a.signed.path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some((name, version)) = args.target.split_once('@') else {
        bail!(
            "`{}` is neither a bundle file nor NAME@VERSION",
            args.target
        );
    };
    if kbuild_registry::semver::Version::parse(version).is_err() {
        bail!("sign a published bundle by its exact version: NAME@1.2.3");
    }
    let registry = args.registry.open(env)?;
    let resolved = registry.sign_published(name, version, &key, &Bars::new(false))?;
    outln!(
        "signed {name} {version} in {} (manifest {}) with key {}",
        registry.describe(),
        resolved.manifest_digest,
        key.public().id()
    );
    Ok(ExitCode::SUCCESS)
}
