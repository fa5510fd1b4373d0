//! The `kbuild` command line. It reads the environment once, parses the arguments
//! ([`cli`]), hands each command to its module under [`commands`], and renders what the
//! libraries return. No build, registry or loader logic lives here.

// First: its `out!`/`outln!` macros are what every command prints with.
#[macro_use]
mod render;
mod cli;
mod commands;
mod opts;
mod progress;

use std::process::ExitCode;

use clap::Parser;
use kbuild_base::env::{names, Env};

use crate::cli::{BaselineCommand, Cli, Command, ToolchainCommand};

fn main() -> ExitCode {
    let env = Env::from_process();
    init_tracing(&env);
    let cli = Cli::parse_from(cli::verbosity_after_command(std::env::args_os()));
    progress::init(cli.quiet, cli.verbose, &env);
    if let Err(e) = kbuild_build::interrupt::install() {
        tracing::warn!("could not install the SIGINT/SIGTERM handler: {e}");
    }
    let result = run(cli, &env);
    if kbuild_build::interrupt::interrupted() {
        eprintln!("kbuild: interrupted; compilers stopped, nothing half-written left");
        return ExitCode::from(kbuild_build::interrupt::EXIT_CODE);
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", crate::commands::error_text(&e));
            ExitCode::from(1)
        }
    }
}

/// Logs to stderr at `KBUILD_LOG`'s levels (`warn` by default; `debug`, `TARGET=debug,warn`):
/// target directives only, as span and field filters need a regex engine.
fn init_tracing(env: &Env) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = env
        .str(names::KBUILD_LOG)
        .and_then(|f| f.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::WARN));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(progress::stderr_is_fancy(env));
    let _ = tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .try_init();
}

fn run(cli: Cli, env: &Env) -> anyhow::Result<ExitCode> {
    use commands::*;
    match cli.command {
        None => build::run(cli.build, env),
        Some(Command::Build(args)) => build::run(args, env),
        Some(Command::Init(args)) => init::run(args, env),
        Some(Command::Inspect {
            files,
            json,
            block_size,
        }) => Ok(inspect::run(&files, json, block_size, env)),
        Some(Command::Devices { json }) => Ok(devices::run(json, env)),
        Some(Command::Explain(args)) => Ok(explain::run_explain(args, env)),
        Some(Command::Package(args)) => package::run(args, env),
        Some(Command::Publish(args)) => publish::run(args, env),
        Some(Command::Pull(args)) => pull::run(args, env),
        Some(Command::Ls(args)) => ls::run(args, env),
        Some(Command::Keygen(args)) => keygen::run(args, env),
        Some(Command::Sign(args)) => sign::run(args, env),
        #[cfg(feature = "engine")]
        Some(Command::Run(cmd)) => run::run(cmd, env),
        Some(Command::Diff(args)) => Ok(diff::run(args, env)),
        Some(Command::ReleaseNotes(args)) => Ok(diff::run_release_notes(args, env)),
        Some(Command::Baseline(BaselineCommand::Update(args))) => baseline::update(args, env),
        Some(Command::Toolchain(ToolchainCommand::Install { which })) => {
            toolchain::install(which.as_deref(), env)
        }
        Some(Command::Toolchain(ToolchainCommand::List(args))) => toolchain::list(args, env),
        Some(Command::Clean(args)) => clean::run(args, env),
    }
}
