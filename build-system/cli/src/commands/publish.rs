//! `kbuild publish`: a bundle (and the signatures beside it) into a registry. Which file and
//! which signatures go is `kbuild_bundle::output::read_for_publish`'s rule.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::output::{default_bundle_path, read_for_publish};
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
    let found = read_for_publish(
        &path,
        args.bundle.is_some(),
        args.allow_partial,
        ArchiveLimits::from_env(env),
    )?;
    let (bundle, sigs) = (&found.bundle, found.signatures.as_ref());
    let registry = args.registry.open(env)?;
    let outcome = registry.publish(bundle, &found.bytes, sigs, &Bars::new(args.json))?;
    let reg = registry.describe();
    let (name, version) = (bundle.name(), bundle.version());
    let report = PublishReport::new(name, version, reg, &outcome, sigs.is_some());
    match args.json {
        true => print_json_line(&report)?,
        false => out!("{}", report.text()),
    }
    Ok(ExitCode::SUCCESS)
}
