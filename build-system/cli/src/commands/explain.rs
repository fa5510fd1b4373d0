//! `kbuild explain`: a thin command over `kbuild-loader` (detection, selection and its
//! rendering live there, shared with the C ABI).

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_loader::explain_source;

use crate::cli::ExplainArgs;

/// `kbuild explain`: exit 0 when every kernel has a selection, 1 when any has none (no
/// match), 2 when there is nothing to explain: an unreadable or malformed build, manifest or
/// bundle, an unknown kernel, no device (clap gives 2 for a bad flag too).
pub fn run_explain(args: ExplainArgs, env: &Env) -> ExitCode {
    match explain(args, env) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", crate::commands::error_text(&e));
            ExitCode::from(2)
        }
    }
}

fn explain(args: ExplainArgs, env: &Env) -> Result<ExitCode> {
    let path = match &args.path {
        Some(p) => p.clone(),
        None => args.project.default_out_dir()?,
    };
    let opened = explain_source::open(&path, &args.trust.trust(env)?)?;
    if let Some(note) = &opened.trust_note {
        eprintln!("{}: {note}", path.display());
    }
    if let Some(note) = &opened.partial {
        eprintln!("warning: {}: {note}", path.display());
    }
    let device = crate::opts::device_options(args.device.as_deref(), &args.simulated, env);
    let e = opened.select(&device, args.kernel.as_deref())?;
    match args.json {
        true => outln!("{}", e.json()?),
        false => out!("{}", e.text()),
    }
    if e.selection.complete() {
        return Ok(ExitCode::SUCCESS);
    }
    // The report on stdout marks the kernel NO MATCH; the error itself is on stderr, once
    // (with --json it is the kernel's `error` field).
    if !args.json {
        for m in e.selection.missing() {
            eprintln!("error: {m}");
        }
    }
    Ok(ExitCode::from(1))
}
