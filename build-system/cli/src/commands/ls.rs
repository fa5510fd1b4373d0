//! `kbuild ls`: the versions a registry publishes and those the local cache holds (both read
//! through `kbuild-registry` and `kbuild-bundle`).

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_registry::report::LsReport;

use crate::cli::LsArgs;
use crate::opts::registry_cache;
use crate::progress::Bars;
use crate::render::print_json_line;

pub fn run(args: LsArgs, env: &Env) -> Result<ExitCode> {
    let registry = args.registry.open(env)?;
    let cached = registry_cache(env)?.refs(None, args.name.as_deref());
    let remote = if args.offline {
        BTreeMap::new()
    } else {
        registry.list(args.name.as_deref(), &Bars::new(args.json))?
    };
    let report = LsReport::new(registry.describe(), &remote, &cached);
    match args.json {
        true => print_json_line(&report)?,
        false => out!("{}", report.text()),
    }
    Ok(ExitCode::SUCCESS)
}
