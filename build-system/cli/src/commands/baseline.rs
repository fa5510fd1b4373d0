//! `kbuild build --check-baseline` and `kbuild baseline update`: render what
//! `kbuild_build::baseline` found or wrote.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_build::baseline::{self, UpdateRequest};
use kbuild_build::build::BuildOptions;
use kbuild_build::config;
use kbuild_report::diff;

use crate::cli::BaselineUpdateArgs;
use crate::progress::BuildProgress;

/// Drift prints the diff on stderr (with `json`: one `{"event": "baseline", ...}` line on
/// stdout) and exits 1.
pub fn check(manifest: &Path, path: &Path, json: bool, env: &Env) -> Result<ExitCode> {
    let c = baseline::check(manifest, path)?;
    if json {
        let report: serde_json::Value =
            serde_json::from_str(&diff::to_json(&c.diff, None)).unwrap_or_default();
        println!(
            "{}",
            serde_json::json!({"event": "baseline", "path": c.label, "drift": c.drift, "diff": report})
        );
    }
    if !c.drift {
        if !json {
            let mut msg = format!(
                "baseline {}: up to date ({} objects, {} targets)",
                c.label, c.objects, c.targets
            );
            if c.skipped_targets > 0 {
                msg.push_str(&format!(
                    "; {} more targets in it were not built",
                    c.skipped_targets
                ));
            }
            eprintln!("{msg}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !json {
        eprint!(
            "{}",
            diff::text(
                &c.diff,
                None,
                super::diff::color(std::io::stderr().is_terminal(), env)
            )
        );
    }
    let toolchain_note = match &c.toolchains {
        Some((base, head)) => format!(
            " (the baseline was made with other toolchains: {base:?}, this build: {head:?})"
        ),
        None => String::new(),
    };
    eprintln!(
        "error: kernel resources drifted from {}{toolchain_note}; if the change is \
         intended, run `kbuild baseline update` and commit {}",
        c.label, c.label
    );
    Ok(ExitCode::from(1))
}

pub fn update(args: BaselineUpdateArgs, env: &Env) -> Result<ExitCode> {
    let project = config::open(args.manifest_path.as_deref())?;
    let (targets, targets_all) = crate::cli::build_targets(&args.targets)?;
    let req = UpdateRequest {
        build: BuildOptions {
            targets,
            targets_all,
            jobs: args.jobs.map(|j| j as usize),
            env: env.clone(),
            ..BuildOptions::default()
        },
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
