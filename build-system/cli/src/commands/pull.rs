//! `kbuild pull`: a version from a registry, or a split release from its index
//! (`NAME-VERSION.kbindex`, only the parts the device needs); verify, cache, lock, report.
//! Resolution, verification, the cache and the lockfile's rules live in `kbuild-registry`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_loader::detect;
use kbuild_manifest::compat::Device;
use kbuild_manifest::manifest::Manifest;
use kbuild_registry::lock::{LockMode, Lockfile};
use kbuild_registry::pull::{self, Locked, PullRequest, Pulled};
use kbuild_registry::release::{self, ReleaseRequest};
use kbuild_registry::report::{pulled_line, PullReport, ReleaseParts};

use crate::cli::PullArgs;
use crate::opts::{device_options, registry_cache};
use crate::progress::Bars;
use crate::render::print_json_line;

/// How a pull's report names what it pulled from.
struct Shown<'a> {
    /// The registry, or the index file of a split release (JSON `registry`).
    source: String,
    /// What the text line names in parentheses.
    artifact: String,
    /// The device pulled for, when `--device` was given.
    device: Option<&'a str>,
    /// What `layer_bytes` counts, in the text line.
    bytes: &'static str,
}

/// The device `--device` names (detected for `auto`, else simulated) and its description.
type Picked = Option<(Device, String)>;

fn resolve_device(args: &PullArgs, env: &Env) -> Result<Picked> {
    let Some(d) = &args.device else {
        return Ok(None);
    };
    let r = detect::resolve(&device_options(Some(d), &args.simulated, env))?;
    Ok(Some((r.device, r.describe())))
}

/// The targets to fetch: every target, or those the device runs.
fn select(device: &Picked, m: &Manifest) -> Result<Vec<String>, pull::SelectError> {
    match device {
        None => Ok(m.targets.clone()),
        Some((d, label)) => kbuild_loader::pick_device_targets(m, d, label).map_err(Into::into),
    }
}

pub fn run(args: PullArgs, env: &Env) -> Result<ExitCode> {
    if kbuild_bundle::assets::is_index_path(Path::new(&args.spec)) {
        return pull_release(&args, env);
    }
    let (name, want) = pull::parse_spec(&args.spec).map_err(anyhow::Error::msg)?;
    let registry = args.registry.open(env)?;
    let cache = registry_cache(env)?;
    let trust = args.trust.trust(env)?;
    let progress = Bars::new(args.json);
    let device = resolve_device(&args, env)?;
    let lock_now = Lockfile::read(&args.lockfile)?;
    let req = PullRequest {
        registry: &registry,
        cache: &cache,
        name: &name,
        want: &want,
        offline: args.offline,
        locked: locked(&args, lock_now.as_ref(), &name),
        trust: &trust,
        progress: &progress,
    };
    let pulled = pull::pull(&req, &|m| select(&device, m))?;
    let shown = Shown {
        source: registry.describe(),
        artifact: pulled.artifact.clone(),
        device: device.as_ref().map(|d| d.1.as_str()),
        bytes: "layer bytes fetched",
    };
    let out_file = finish(&args, env, &pulled, lock_now, &shown, None)?;
    if let (false, Some(p)) = (args.json, out_file) {
        outln!("wrote {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The lockfile's hold on `name`: with `--locked` or when there is a lockfile.
fn locked<'a>(args: &'a PullArgs, lock: Option<&'a Lockfile>, name: &str) -> Option<Locked<'a>> {
    let mode = match (args.locked, args.update) {
        (true, _) => LockMode::Exact,
        (_, true) => LockMode::Update,
        _ => LockMode::Keep,
    };
    (args.locked || lock.is_some()).then(|| Locked {
        entry: lock.and_then(|l| l.find(name)),
        path: &args.lockfile,
        mode,
    })
}

/// `kbuild pull DIR/NAME-VERSION.kbindex [--device auto|TARGET]`: a split release, reading
/// only the parts that hold what the device runs (every part without --device).
fn pull_release(args: &PullArgs, env: &Env) -> Result<ExitCode> {
    let index = Path::new(&args.spec);
    release::check_source(&args.spec, args.registry.registry.as_deref())?;
    let cache = registry_cache(env)?;
    let trust = args.trust.trust(env)?;
    let device = resolve_device(args, env)?;
    let label = device.as_ref().map(|d| d.1.as_str());
    let req = ReleaseRequest {
        index,
        cache: &cache,
        trust: &trust,
        limits: ArchiveLimits::from_env(env),
    };
    let got = release::pull_release(&req, &|m| select(&device, m))?;
    let pulled = &got.pulled;
    let lock_now = Lockfile::read(&args.lockfile)?;
    if let Some(l) = locked(args, lock_now.as_ref(), pulled.bundle.name()) {
        l.check(pulled.bundle.name(), &pulled.lock, None, true)?;
    }
    let shown = Shown {
        source: release::describe(index),
        artifact: index.display().to_string(),
        device: label,
        bytes: "part bytes read",
    };
    let parts = ReleaseParts {
        index,
        parts_read: &got.parts_read,
        parts_skipped: &got.parts_skipped,
    };
    let out_file = finish(args, env, pulled, lock_now, &shown, Some(parts))?;
    if !args.json {
        out!("{}", got.parts_text(label.is_some()));
        if let Some(p) = out_file {
            outln!("wrote {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// After a pull (from a registry or a split release's index): the signature warning, the
/// lockfile, `--out` (its path returned; the caller prints it after its own lines), and the
/// report (`kbuild.pull/v1` JSON, or the text line).
fn finish(
    args: &PullArgs,
    env: &Env,
    pulled: &Pulled,
    lock_now: Option<Lockfile>,
    shown: &Shown,
    release: Option<ReleaseParts>,
) -> Result<Option<PathBuf>> {
    if let Some(w) = kbuild_loader::bundle::trust_warning(&pulled.verdict) {
        if !args.json {
            eprintln!("warning: {w}");
        }
    }
    pull::record_lock(&args.lockfile, lock_now, &pulled.lock, args.locked)?;
    let b = &pulled.bundle;
    let name = b.name();
    let out_file = match &args.out {
        Some(dir) => Some(kbuild_bundle::output::write_pulled(
            dir,
            b,
            env.source_date_epoch(),
            pulled.signatures.as_ref(),
        )?),
        None => None,
    };
    if args.json {
        let report = PullReport::new(
            pulled,
            &shown.source,
            shown.device,
            out_file.as_deref(),
            release,
        );
        print_json_line(&report)?;
    } else {
        outln!(
            "{}",
            pulled_line(pulled, &shown.artifact, shown.device, shown.bytes)
        );
    }
    if let Some(note) = b.manifest().partial_note() {
        eprintln!("warning: {name} {}: {note}", b.version());
    }
    Ok(out_file)
}
