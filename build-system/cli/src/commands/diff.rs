//! `kbuild diff OLD NEW | --base GIT_REV`: read both sides (a manifest, a build output
//! directory, a bundle or a resource baseline), or build the base revision in a temporary git
//! worktree and the working tree, then render the resource diff and apply the gates.
//!
//! Exit codes: 0 passed, 1 a gate tripped, 2 no diff could be made: bad input or usage (a
//! file that does not exist or cannot be read, bad JSON, not a manifest, a broken allowlist,
//! an unknown revision, a side that does not build, a bad flag). 1 means a gate and nothing
//! else, so CI can tell a regression from a broken job.

use std::io::IsTerminal;
use std::process::ExitCode;

use kbuild_base::env::Env;
use kbuild_base::time::Date;
use kbuild_build::sides::load_side;
use kbuild_build::worktree::build_base_and_head;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_report::demangle::demangle_snapshots;
use kbuild_report::diff::gate::{self, GateReport};
use kbuild_report::diff::{self, load_allowlist, Diff};

use crate::cli::{DiffArgs, Format, RegistryArgs, ReleaseNotesArgs};
use crate::progress::BuildProgress;
use kbuild_registry::pull;
use kbuild_report::diff::Snapshot;

/// Why no diff was made (exit 2).
struct Failed(anyhow::Error);

impl<E: Into<anyhow::Error>> From<E> for Failed {
    fn from(e: E) -> Failed {
        Failed(e.into())
    }
}

fn usage(message: &str) -> Failed {
    Failed(anyhow::Error::msg(message.to_string()))
}

/// Exit code of a diff that could not be made (bad input or usage); clap's own is 2 too.
const BAD_INPUT: u8 = 2;

/// Run `kbuild diff`; prints the report on stdout, errors on stderr.
pub fn run(args: DiffArgs, env: &Env) -> ExitCode {
    match diff_and_gate(args, env) {
        Ok(code) => code,
        Err(Failed(e)) => {
            eprintln!("error: {}", crate::commands::error_text(&e));
            ExitCode::from(BAD_INPUT)
        }
    }
}

fn diff_and_gate(args: DiffArgs, env: &Env) -> Result<ExitCode, Failed> {
    // The allowlist first: a broken one should not cost two builds.
    let allow = match &args.allow {
        Some(p) => load_allowlist(p)?,
        None => Vec::new(),
    };
    let limits = ArchiveLimits::from_env(env);
    let side = |path: &std::path::Path, which: &str| -> Result<(Snapshot, String), Failed> {
        Ok(any_side(path, which, &args.registry, limits, env)?)
    };
    let (base, head, base_label, head_label) = match (&args.base, &args.old, &args.new) {
        (Some(rev), None, None) => {
            let opts = crate::opts::build_options(&args.targets, args.jobs, env).map_err(Failed)?;
            let progress = BuildProgress::new(false, env);
            let both =
                build_base_and_head(args.project.manifest_path.as_deref(), rev, &opts, &progress)?;
            (
                both.base,
                both.head,
                both.base_label,
                "working tree".to_string(),
            )
        }
        (None, Some(old), Some(new)) => {
            let ((base, base_label), (head, head_label)) = (side(old, "OLD")?, side(new, "NEW")?);
            (base, head, base_label, head_label)
        }
        // clap has already refused both forms together, or neither.
        _ => {
            return Err(usage(
                "pass two sides (kbuild diff OLD NEW) or --base GIT_REV",
            ))
        }
    };
    let names = demangle_snapshots(&[&base, &head]);
    let d = Diff::new(&base, &head, &base_label, &head_label, &names);
    let rules = args.fail_on.map(|f| f.0).unwrap_or_default();
    let gates = (!rules.is_empty() || !allow.is_empty())
        .then(|| gate::evaluate(&d, &rules, &allow, Date::today()));
    if let Some(path) = &args.full_report {
        kbuild_base::fs::write_atomic(path, diff::markdown_full(&d, gates.as_ref()).as_bytes())
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    print_report(&d, gates.as_ref(), args.format, env);
    Ok(gate_exit(gates.as_ref()))
}

/// Run `kbuild release-notes`: the notes on stdout or in `--out`; exit 2 when a side cannot be
/// read.
pub fn run_release_notes(args: ReleaseNotesArgs, env: &Env) -> ExitCode {
    let made = || -> anyhow::Result<()> {
        let limits = ArchiveLimits::from_env(env);
        let side = |path, which| any_side(path, which, &args.registry, limits, env);
        let ((prev, prev_label), (next, next_label)) =
            (side(&args.prev, "PREV")?, side(&args.next, "NEXT")?);
        let names = demangle_snapshots(&[&prev, &next]);
        let d = Diff::new(&prev, &next, &prev_label, &next_label, &names);
        let notes = kbuild_report::diff::notes::release_notes(&d, &prev, &next);
        match &args.out {
            Some(p) => kbuild_base::fs::write_atomic(p, notes.as_bytes())
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", p.display()))?,
            None => out!("{notes}"),
        }
        Ok(())
    };
    match made() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", crate::commands::error_text(&e));
            ExitCode::from(BAD_INPUT)
        }
    }
}

/// One side of a diff: a published `NAME@...` (its manifest alone), else a file or directory;
/// with its label for the report (a published side names the version it resolved to).
fn any_side(
    path: &std::path::Path,
    which: &str,
    registry: &RegistryArgs,
    limits: ArchiveLimits,
    env: &Env,
) -> anyhow::Result<(Snapshot, String)> {
    use anyhow::Context as _;
    let Some(spec) = pull::published_spec(path) else {
        return Ok((load_side(path, which, limits)?, path.display().to_string()));
    };
    let reg = registry.open(env)?;
    let (manifest, label) = pull::published_manifest(&reg, spec)
        .with_context(|| format!("{which}: {spec} in {}", reg.describe()))?;
    Ok((Snapshot::from_manifest(&manifest), label))
}

/// Print the report on stdout in `format` (text coloured on a terminal unless NO_COLOR).
fn print_report(d: &Diff, gates: Option<&GateReport>, format: Format, env: &Env) {
    let out = match format {
        Format::Markdown => diff::markdown(d, gates),
        Format::Json => diff::to_json(d, gates),
        Format::Text => diff::text(
            d,
            gates,
            crate::render::color(std::io::stdout().is_terminal(), env),
        ),
    };
    crate::render::write_stdout(&out);
}

fn gate_exit(gates: Option<&GateReport>) -> ExitCode {
    match gates {
        Some(g) if g.tripped() => {
            eprintln!("error: gate tripped: {}", g.tripped_rules().join(", "));
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}
