//! `kbuild toolchain install|list`: install the pinned toolchains, show what was found.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_build::config;
use kbuild_build::report::ToolchainsReport;
use kbuild_build::toolchain::{self, Toolchains};

use crate::cli::ToolchainListArgs;
use crate::render::print_json_line;

/// Install a toolchain (both when none is named). Idempotent.
pub fn install(which: Option<&str>, env: &Env) -> Result<ExitCode> {
    if which != Some("hip") {
        println!("{}", toolchain::install_cuda(env)?);
    }
    if which != Some("cuda") {
        for line in toolchain::install_hip(env)? {
            println!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each toolchain's path, version and the catalogue targets it can build.
pub fn list(args: ToolchainListArgs, env: &Env) -> Result<ExitCode> {
    let tc_config = match &args.project.manifest_path {
        Some(p) => config::load(p)?.toolchain,
        // Outside a project the defaults apply.
        None => config::open(None).map(|p| p.toolchain).unwrap_or_default(),
    };
    let tcs = Toolchains::discover(&tc_config, &Dirs::from_env(env)?.cache, env);
    let report = ToolchainsReport::new(&tcs);
    if args.json {
        print_json_line(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", report.text());
    Ok(ExitCode::SUCCESS)
}
