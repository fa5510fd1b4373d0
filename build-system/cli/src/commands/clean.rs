//! `kbuild clean`: remove the build output, and with `--cache` the compile cache.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_build::config;

pub fn run(
    manifest_path: Option<&Path>,
    out: Option<PathBuf>,
    cache: bool,
    env: &Env,
) -> Result<ExitCode> {
    let out = match out {
        Some(o) => o,
        None => config::open(manifest_path)?.out_dir,
    };
    let mut remove = vec![out];
    if cache {
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
