//! `kbuild clean`: remove the build output, and with `--cache` the compile cache
//! (`kbuild_build::clean`).

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;

use crate::cli::CleanArgs;

pub fn run(args: CleanArgs, env: &Env) -> Result<ExitCode> {
    let out = match args.out {
        Some(o) => o,
        None => args.project.open()?.out_dir,
    };
    kbuild_build::clean::clean(&out, args.cache, env, &mut |dir| {
        println!("removed {}", dir.display())
    })?;
    Ok(ExitCode::SUCCESS)
}
