//! `kbuild clean`: remove the build output, and with `--cache` the compile cache
//! (`kbuild_build::clean`).

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;

use crate::cli::CleanArgs;

pub fn run(args: CleanArgs, env: &Env) -> Result<ExitCode> {
    // The project (when there is one) is never removed, nor anything above it.
    let (out, root) = match (args.out, args.project.open()) {
        (Some(o), project) => (o, project.ok().map(|p| p.root)),
        (None, project) => {
            let p = project?;
            (p.out_dir, Some(p.root))
        }
    };
    kbuild_build::clean::clean(&out, root.as_deref(), args.cache, env, &mut |dir| {
        outln!("removed {}", dir.display())
    })?;
    Ok(ExitCode::SUCCESS)
}
