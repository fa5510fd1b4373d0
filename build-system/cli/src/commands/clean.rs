//! `kbuild clean`: remove the build output, and with `--cache` the compile cache.

use std::process::ExitCode;

use anyhow::{Context, Result};
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;

use crate::cli::CleanArgs;

pub fn run(args: CleanArgs, env: &Env) -> Result<ExitCode> {
    let out = match args.out {
        Some(o) => o,
        None => args.project.open()?.out_dir,
    };
    let mut remove = vec![out];
    if args.cache {
        remove.push(Dirs::from_env(env)?.cache);
    }
    for dir in remove {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            println!("removed {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
