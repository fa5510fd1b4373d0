//! `kbuild toolchain install|list`: install the pinned toolchains, show what was found.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_build::config;
use kbuild_build::report::ToolchainsReport;
use kbuild_build::toolchain::{self, Installed, ToolOutput, ToolchainError, Toolchains};

use crate::cli::ToolchainListArgs;
use crate::render::print_json_line;

/// Install a toolchain (both when none is named). Idempotent. One line per toolchain; pip's
/// and apt's own output only with `-v`, or on stderr when the install fails.
pub fn install(which: Option<&str>, env: &Env) -> Result<ExitCode> {
    let output = match crate::progress::verbosity() {
        crate::progress::Verbosity::Verbose => ToolOutput::Shown,
        _ => ToolOutput::Captured,
    };
    for name in which.map_or(vec!["cuda", "hip"], |w| vec![w]) {
        outln!("{}", shown(toolchain::install(name, env, output))?);
    }
    Ok(ExitCode::SUCCESS)
}

/// A failed install's captured tool output goes to stderr before its error.
fn shown(r: Result<Installed, ToolchainError>) -> Result<Installed, ToolchainError> {
    if let Some(out) = r.as_ref().err().and_then(ToolchainError::tool_output) {
        eprint!("{out}");
        if !out.ends_with('\n') {
            eprintln!();
        }
    }
    r
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
    out!("{}", report.text());
    Ok(ExitCode::SUCCESS)
}
