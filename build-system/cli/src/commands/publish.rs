//! `kbuild publish`: a bundle (and the signatures beside it) into a registry.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kbuild_base::env::Env;
use kbuild_bundle::archive::Limits;
use kbuild_bundle::output::{check_publish_path, default_bundle_path};
use kbuild_bundle::sign::read_signatures;
use kbuild_bundle::Bundle;
use kbuild_registry::oci::PublishOutcome;
use kbuild_registry::report::PublishReport;

use crate::cli::PublishArgs;
use crate::progress::Bars;
use crate::render::print_json_line;

pub fn run(args: PublishArgs, env: &Env) -> Result<ExitCode> {
    let path = match &args.bundle {
        Some(p) => p.clone(),
        None => {
            let project = args.project.open()?;
            default_bundle_path(&project.name, &project.version)
        }
    };
    check_publish_path(&path, args.bundle.is_some())?;
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let bundle = Bundle::from_bytes(&bytes, Limits::from_env(env))
        .with_context(|| path.display().to_string())?;
    bundle.check_publishable(&path.display().to_string(), args.allow_partial)?;
    let sigs = read_signatures(&path)?;
    // Before anything is uploaded: a signature beside the bundle must be for this bundle.
    if let Some(s) = &sigs {
        if let Err(problem) =
            s.check_belongs(bundle.name(), bundle.version(), bundle.manifest_digest())
        {
            bail!(
                "{} does not match {}: {problem}; nothing was published (sign the bundle again with `kbuild sign {}`, or remove the .sig to publish it unsigned)",
                kbuild_bundle::signature_path(&path).display(),
                path.display(),
                path.display()
            );
        }
    }
    let registry = args.registry.open(env)?;
    let outcome = registry.publish(&bundle, &bytes, sigs.as_ref(), &Bars::new(args.json))?;
    let reg = registry.describe();
    let (name, version) = (bundle.name(), bundle.version());
    if args.json {
        let report = PublishReport::new(name, version, reg, &outcome, sigs.is_some());
        print_json_line(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    match &outcome {
        PublishOutcome::Published {
            digest,
            uploaded,
            skipped,
            bytes,
        } => println!("published {name} {version} to {reg} ({digest}; {uploaded} blob(s) uploaded, {bytes} bytes, {skipped} already there)"),
        PublishOutcome::AlreadyPublished { digest } => println!("{name} {version} is already in {reg} with exactly these bytes ({digest}); nothing to do"),
    }
    Ok(ExitCode::SUCCESS)
}
