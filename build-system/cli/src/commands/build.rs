//! `kbuild [build]`: build every kernel × variant × target, or print the compile commands or
//! the shards; `--check-baseline` compares the result with the committed baseline.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_build::baseline;
use kbuild_build::build::{build, commands, shards};
use kbuild_build::report::{baseline_drifted, baseline_up_to_date, jobs_failed};
use kbuild_build::report::{BaselineEvent, CommandLine, ShardsReport};

use crate::cli::BuildArgs;
use crate::progress::BuildProgress;
use crate::render::{color, print_json_line};

pub fn run(args: BuildArgs, env: &Env) -> Result<ExitCode> {
    let mut project = args.project.open()?;
    project.launcher = args.launcher.clone().or(project.launcher);
    let opts = args.options(env)?;
    if let Some(count) = args.print_shards {
        let (all, split) = shards(&project, &opts, count, &BuildProgress::plain())?;
        let report = ShardsReport::new(count, &all, &split);
        match args.json {
            true => print_json_line(&report)?,
            false => out!("{}", report.text()),
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.print_commands {
        let out_dir = opts
            .out_dir
            .clone()
            .unwrap_or_else(|| project.out_dir.clone());
        for (job, cmd) in commands(&project, &opts, &BuildProgress::plain())? {
            print_json_line(&CommandLine::new(&project.root, &out_dir, &job, &cmd))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    #[cfg(feature = "remote-exec")]
    let opts = kbuild_remote_exec::attach(opts, &args.remote_exec, &project.remote, env)?;
    let report = build(&project, &opts, &BuildProgress::new(args.json, env))?;
    if report.failures.is_empty() {
        if let Some(file) = args.check_baseline {
            let file = file.unwrap_or_else(|| baseline::default_path(&project));
            return check_baseline(&report.manifest_path, &file, args.json, env);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        if !args.json {
            eprintln!("{}", jobs_failed(report.failures.len()));
        }
        Ok(ExitCode::from(1))
    }
}

/// `--check-baseline`: drift prints the diff on stderr (with `json`: one
/// `{"event": "baseline", ...}` line on stdout) and exits 1.
fn check_baseline(manifest: &Path, path: &Path, json: bool, env: &Env) -> Result<ExitCode> {
    let c = baseline::check(manifest, path)?;
    if json {
        print_json_line(&BaselineEvent::new(&c))?;
    }
    if !c.drift {
        if !json {
            eprintln!("{}", baseline_up_to_date(&c));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !json {
        let colored = color(std::io::stderr().is_terminal(), env);
        eprint!("{}", kbuild_report::diff::text(&c.diff, None, colored));
    }
    eprintln!("error: {}", baseline_drifted(&c));
    Ok(ExitCode::from(1))
}
