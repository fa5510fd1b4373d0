//! `kbuild baseline update`: rewrite the committed resource baseline
//! (`kbuild_build::baseline`) and say what it wrote.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_build::baseline::{self, UpdateRequest};

use crate::cli::BaselineUpdateArgs;
use crate::opts::build_options;
use crate::progress::BuildProgress;

pub fn update(args: BaselineUpdateArgs, env: &Env) -> Result<ExitCode> {
    let project = args.project.open()?;
    let req = UpdateRequest {
        build: build_options(&args.targets, args.jobs, env)?,
        path: args.baseline,
        from: args.from,
    };
    let done = baseline::update(&project, &req, &BuildProgress::new(false, env))?;
    let mut msg = format!(
        "{} {}: {} objects, {} targets",
        if done.wrote { "wrote" } else { "unchanged" },
        done.label,
        done.objects,
        done.targets
    );
    if done.kept_targets > 0 {
        msg.push_str(&format!(
            " ({} targets kept from the previous baseline)",
            done.kept_targets
        ));
    }
    eprintln!("{msg}");
    Ok(ExitCode::SUCCESS)
}
