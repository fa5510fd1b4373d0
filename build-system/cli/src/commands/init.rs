//! `kbuild init [DIR]`: write a first Kbuild.toml (the library's `init`), then say what it
//! found.

use std::process::ExitCode;

use anyhow::{Context, Result};
use kbuild_base::env::Env;
use kbuild_build::init::{init, parse_defines, InitOptions};
use kbuild_build::report::init_summary;

use crate::cli::InitArgs;
use crate::progress::BuildProgress;

pub fn run(args: InitArgs, env: &Env) -> Result<ExitCode> {
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let targets = (!args.targets.targets.is_empty()).then(|| args.targets.targets.join(","));
    let opts = InitOptions {
        dir: dir.clone(),
        targets,
        force: args.force,
        include_dirs: args.include_dirs,
        defines: parse_defines(&args.defines)?,
        cuda_flags: args.cuda_flags,
        hip_flags: args.hip_flags,
        cache_dir: None,
        env: env.clone(),
    };
    if !args.json && crate::progress::verbosity() > crate::progress::Verbosity::Quiet {
        eprintln!(
            "kbuild init: scanning {} and building each translation unit once per vendor to find its entries",
            dir.display()
        );
    }
    // A bar on a terminal; one line per translation unit otherwise (CI logs show progress).
    let progress = if args.json {
        BuildProgress::plain()
    } else {
        BuildProgress::new(false, env)
    };
    let report = init(&opts, &progress)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", init_summary(&report, &dir));
    }
    Ok(if report.kernels == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
