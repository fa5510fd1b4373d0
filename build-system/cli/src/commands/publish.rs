//! `kbuild publish`: a bundle (and the signatures beside it) into a registry. Which file and
//! which signatures go is `kbuild_bundle::output::read_for_publish`'s rule.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::output::{default_bundle_path, read_for_publish};
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
    let explicit = args.bundle.is_some();
    let found = read_for_publish(
        &path,
        explicit,
        args.allow_partial,
        ArchiveLimits::from_env(env),
    )?;
    let (bundle, sigs) = (&found.bundle, found.signatures.as_ref());
    let registry = args.registry.open(env)?;
    let outcome = registry.publish(bundle, &found.bytes, sigs, &Bars::new(args.json))?;
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
        } => outln!("published {name} {version} to {reg} ({digest}; {uploaded} blob(s) uploaded, {bytes} bytes, {skipped} already there)"),
        PublishOutcome::AlreadyPublished { digest } => outln!("{name} {version} is already in {reg} with exactly these bytes ({digest}); nothing to do"),
    }
    Ok(ExitCode::SUCCESS)
}
