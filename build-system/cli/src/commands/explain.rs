//! `kbuild explain`: a thin command over `kbuild-loader` (detection, selection and its
//! rendering live there, shared with the C ABI).

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_loader::detect;
use kbuild_loader::explain::{explain_json, explain_json_with_parts, explain_trace};
use kbuild_loader::Package;

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
    // A split release's index: its manifest, and which of its parts the device needs.
    let index = if kbuild_bundle::assets::is_index_path(&path) {
        Some(kbuild_bundle::assets::AssetIndex::open(&path)?)
    } else {
        None
    };
    // A bundle gets the signature policy pull applies; a build dir is local and unsigned.
    let package = match &index {
        Some(i) => Package::from_manifest(i.manifest().clone())?,
        None => Package::open_trusted(&path, &args.trust.trust(env)?)?,
    };
    if let Some(note) = package.trust_note() {
        eprintln!("{}: {note}", path.display());
    }
    let partial = package.manifest().ok().and_then(|m| m.partial_note());
    if let Some(note) = &partial {
        eprintln!("warning: {}: {note}", path.display());
    }
    let opts = crate::opts::device_options(args.device.as_deref(), &args.simulated, env);
    let device = detect::resolve(&opts)?;
    let mut selection = package.select(&device.device);
    if let Some(k) = &args.kernel {
        selection = selection.only_kernel(k)?;
    }
    let source = match &index {
        Some(_) => path.display().to_string(),
        None => package.origin().display().to_string(),
    };
    let parts = index.as_ref().map(|i| {
        i.parts_for(&selection.selected_targets())
            .into_iter()
            .cloned()
            .collect::<Vec<_>>()
    });
    if args.json {
        match &parts {
            Some(p) => outln!(
                "{}",
                explain_json_with_parts(&selection, &device, &source, partial.as_deref(), p)?
            ),
            None => outln!(
                "{}",
                explain_json(&selection, &device, &source, partial.as_deref())
            ),
        }
    } else {
        out!("{}", explain_trace(&selection, &device, &source));
        if let Some(p) = &parts {
            outln!("\nparts of this split release the device needs:");
            for part in p {
                outln!(
                    "  {} ({} bytes, sha256 {}): {}",
                    part.file,
                    part.size,
                    part.sha256,
                    part.targets.join(", ")
                );
            }
        }
    }
    if selection.complete() {
        Ok(ExitCode::SUCCESS)
    } else {
        // The report on stdout marks the kernel NO MATCH; the error itself is on stderr,
        // once (with --json it is the kernel's `error` field).
        if !args.json {
            for m in selection.missing() {
                eprintln!("error: {m}");
            }
        }
        Ok(ExitCode::from(1))
    }
}
