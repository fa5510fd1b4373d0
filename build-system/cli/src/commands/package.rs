//! `kbuild package`: a build (made first through the cache unless a build dir is named) into
//! a deterministic bundle, split per target or per release-asset limit, optionally checked
//! reproducible; `--merge` joins the bundles of a sharded build. Building, packing, writing
//! and the reproducibility check live in `kbuild_build::package`.

use std::process::ExitCode;

use anyhow::{Context, Result};
use kbuild_base::env::Env;
use kbuild_build::package::{package, PackageRequest, Reproduced};
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::output::{self, PackageReport};
use kbuild_bundle::Bundle;

use crate::cli::PackageArgs;
use crate::opts::build_options;
use crate::progress::BuildProgress;
use crate::render::print_json_line;

/// `kbuild package`.
pub fn run(args: PackageArgs, env: &Env) -> Result<ExitCode> {
    if !args.merge.is_empty() {
        return run_merge(&args, env);
    }
    let scratch = std::env::temp_dir();
    let req = PackageRequest {
        manifest_path: args.project.manifest_path.as_deref(),
        build_dir: args.build_dir.as_deref(),
        build: build_options(&args.targets, None, env)?,
        out: &args.out,
        per_target: args.split,
        max_asset_size: args.max_asset_size,
        verify_reproducible: args.verify_reproducible,
        allow_partial: args.allow_partial,
        mtime: env.source_date_epoch(),
        scratch: &scratch,
    };
    let done = package(req, &BuildProgress::new(false, env))?;
    done.notes().iter().for_each(|n| eprintln!("{n}"));
    if let Some(Reproduced::Differs {
        first,
        second,
        objects,
    }) = &done.reproduced
    {
        eprintln!(
            "error: not reproducible: a clean rebuild packages to different bytes ({first} vs {second})"
        );
        objects.iter().for_each(|d| eprintln!("  {d}"));
        return Ok(ExitCode::from(1));
    }
    let reproducible = done.reproduced.as_ref().map(|r| *r == Reproduced::Same);
    if args.json {
        let report = PackageReport::package(
            &done.bundle,
            done.written(),
            reproducible,
            done.split.as_ref(),
        );
        print_json_line(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    match &done.split {
        Some(s) => out!("{}", s.text()),
        None => done
            .written()
            .iter()
            .for_each(|w| outln!("packaged {}", w.line())),
    }
    let notes = output::package_notes(&done.bundle, reproducible == Some(true));
    out!("{notes}");
    Ok(ExitCode::SUCCESS)
}

/// `kbuild package --merge A.kbundle B.kbundle ...`.
fn run_merge(args: &PackageArgs, env: &Env) -> Result<ExitCode> {
    let mut inputs = Vec::new();
    for p in &args.merge {
        let b = Bundle::open(p, ArchiveLimits::from_env(env))
            .with_context(|| p.display().to_string())?;
        inputs.push((p.display().to_string(), b));
    }
    let (bundle, report) = kbuild_bundle::merge::merge(&inputs, args.allow_partial)?;
    let mtime = env.source_date_epoch();
    let bytes = bundle.to_bytes(mtime)?;
    if let Some(limit) = args.max_asset_size {
        // The merged release, split for release assets.
        let split = output::write_release(&args.out, &bundle, &bytes, limit, mtime)?;
        split.notes().iter().for_each(|n| eprintln!("{n}"));
        if args.json {
            let doc =
                PackageReport::merge(&bundle, split.written(), &args.merge, &report, Some(&split));
            print_json_line(&doc)?;
        } else {
            outln!("merged {} bundle(s)", inputs.len());
            out!("{}", split.text());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let w = output::write_bundle(&args.out, &bundle, &bytes)?;
    w.note().iter().for_each(|n| eprintln!("{n}"));
    if args.json {
        let doc = PackageReport::merge(&bundle, vec![&w], &args.merge, &report, None);
        print_json_line(&doc)?;
    } else {
        outln!("merged {} bundle(s) into {}", inputs.len(), w.line());
        if let Some(note) = bundle.manifest().partial_note() {
            outln!("  {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
