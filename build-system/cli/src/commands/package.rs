//! `kbuild package`: a build (made first through the cache unless a build dir is named) into
//! a deterministic bundle, split per target or per release-asset limit, optionally checked
//! reproducible; `--merge` joins the bundles of a sharded build. Building, packing, writing
//! and the reproducibility check live in `kbuild-build` and `kbuild-bundle`.

use std::process::ExitCode;

use anyhow::{Context, Result};
use kbuild_base::env::Env;
use kbuild_build::package::{build_for_package, manifest_targets, packaged_targets};
use kbuild_build::package::{check_build_dir_package, verify_reproducible};
use kbuild_build::package::{Reproduce, Reproduced};
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_bundle::output::{self, PackageReport, SplitReport, Written};
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
    let opts = build_options(&args.targets, None, env)?;
    let filter = packaged_targets(&opts);
    let mtime = env.source_date_epoch();
    let build_dir = match &args.build_dir {
        Some(d) => d.clone(),
        None => {
            let project = args.project.open()?;
            let progress = BuildProgress::new(false, env);
            build_for_package(&project, &opts, args.allow_partial, &progress)?
        }
    };
    let bundle = Bundle::from_build_dir(&build_dir, filter.as_deref(), args.allow_partial)?;
    // A named build dir that is the project's own out-dir must match the current [package].
    if args.build_dir.is_some() {
        if let Ok(project) = args.project.open() {
            check_build_dir_package(&project, &build_dir, bundle.manifest())?;
        }
    }
    let bytes = bundle.to_bytes(mtime)?;
    let split = match args.max_asset_size {
        Some(limit) => Some(output::write_release(
            &args.out, &bundle, &bytes, limit, mtime,
        )?),
        None => None,
    };
    if let Some(s) = &split {
        note_split(s);
    }
    let whole;
    let mut written: Vec<&Written> = match &split {
        Some(s) => s.written(),
        None => {
            whole = output::write_bundle(&args.out, &bundle, &bytes)?;
            note_pruned(&whole);
            vec![&whole]
        }
    };
    let parts = if args.split {
        output::write_per_target(&args.out, &bundle, mtime)?
    } else {
        Vec::new()
    };
    parts.iter().for_each(note_pruned);
    written.extend(parts.iter());
    let mut reproducible = None;
    if args.verify_reproducible {
        let project = args.project.open()?;
        let req = Reproduce {
            targets: manifest_targets(bundle.manifest())?,
            filter: filter.as_deref(),
            allow_partial: args.allow_partial,
            mtime,
            build: opts.clone(),
        };
        let (scratch, progress) = (std::env::temp_dir(), BuildProgress::new(false, env));
        match verify_reproducible(&project, &bundle, &bytes, req, &scratch, &progress)? {
            Reproduced::Same => reproducible = Some(true),
            Reproduced::Differs {
                first,
                second,
                objects,
            } => {
                eprintln!(
                    "error: not reproducible: a clean rebuild packages to different bytes ({first} vs {second})"
                );
                for d in objects {
                    eprintln!("  {d}");
                }
                return Ok(ExitCode::from(1));
            }
        }
    }
    if args.json {
        let report = PackageReport::package(&bundle, written, reproducible, split.as_ref());
        print_json_line(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    match &split {
        Some(s) => out!("{}", s.text()),
        None => {
            for w in &written {
                outln!("packaged {}", w.line());
            }
        }
    }
    out!(
        "{}",
        output::package_notes(&bundle, reproducible == Some(true))
    );
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
        note_split(&split);
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
    note_pruned(&w);
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

fn note_pruned(w: &Written) {
    if let Some(note) = w.note() {
        eprintln!("{note}");
    }
}

fn note_split(s: &SplitReport) {
    for note in s.notes() {
        eprintln!("{note}");
    }
}
