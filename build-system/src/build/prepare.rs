//! Before anything runs: the target list (`--targets` or Kbuild.toml, `all` filtered by the
//! found toolchains, a `--shard`'s part), the jobs, and every planned target's toolchain
//! checked (all problems at once).

use std::path::PathBuf;

use kbuild_base::dirs::Dirs;
use kbuild_manifest::target::{Target, Vendor};

use crate::config::Project;
use crate::events::Observer;
use crate::plan::{plan, Job};
use crate::shard;
use crate::shard::ShardSpec;
use crate::toolchain::{ToolchainError, Toolchains};

use super::{BuildError, BuildOptions};

/// What a build runs: its targets, jobs, cache directory and toolchains.
pub(super) struct Prepared {
    pub(super) targets: Vec<Target>,
    pub(super) jobs: Vec<Job>,
    pub(super) cache_dir: PathBuf,
    pub(super) tcs: Toolchains,
    /// With `--shard`: the spec and the whole resolved list the shards split.
    pub(super) shard: Option<(ShardSpec, Vec<Target>)>,
}

/// The resolved target list (Kbuild.toml or `--targets`, `all` filtered by the found
/// toolchains), the cache directory and the toolchains.
pub(super) struct Resolved {
    pub(super) targets: Vec<Target>,
    pub(super) cache_dir: PathBuf,
    pub(super) tcs: Toolchains,
}

/// The targets, jobs, cache directory and toolchains of a build; every planned target's
/// toolchain checked before anything runs (all problems at once). With `targets_all`, the
/// targets no found toolchain builds are dropped, each named in a warning.
pub(super) fn resolve(
    project: &Project,
    opts: &BuildOptions,
    observer: &dyn Observer,
) -> Result<Resolved, BuildError> {
    let (mut targets, targets_all) = match &opts.targets {
        Some(t) => (t.clone(), opts.targets_all),
        None => (project.default_targets.clone(), project.default_targets_all),
    };
    if targets.is_empty() {
        return Err(BuildError::NoTargets(project.file.display().to_string()));
    }
    let cache_dir = match &opts.cache_dir {
        Some(d) => d.clone(),
        None => Dirs::from_env(&opts.env)?.cache,
    };
    let tcs = Toolchains::discover(&project.toolchain, &cache_dir, &opts.env);
    if targets_all {
        let (ok, dropped): (Vec<Target>, Vec<Target>) =
            targets.iter().partition(|t| tcs.check(t).is_ok());
        if ok.is_empty() {
            let why: Vec<String> = dropped
                .iter()
                .filter_map(|t| tcs.check(t).err())
                .map(|e| e.to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            return Err(BuildError::NoBuildableTargets(why.join("\n")));
        }
        if !dropped.is_empty() {
            let names: Vec<String> = dropped.iter().map(Target::to_string).collect();
            let mut why: Vec<String> = Vec::new();
            for e in dropped.iter().filter_map(|t| tcs.check(t).err()) {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default().to_string();
                if !why.contains(&first) {
                    why.push(first);
                }
            }
            observer.note(&format!(
                "warning: targets `all`: skipping {} target(s) the found toolchains cannot build: {} (exclude them with `-TARGET` to silence this)\n  {}",
                names.len(),
                names.join(", "),
                why.join("\n  ")
            ));
        }
        targets = ok;
    }
    Ok(Resolved {
        targets,
        cache_dir,
        tcs,
    })
}

/// [`resolve`], then the shard's part of the list (`--shard`) and the jobs; every planned
/// target's toolchain checked before anything runs (all problems at once).
pub(super) fn prepare(
    project: &Project,
    opts: &BuildOptions,
    observer: &dyn Observer,
) -> Result<Prepared, BuildError> {
    let Resolved {
        mut targets,
        cache_dir,
        tcs,
    } = resolve(project, opts, observer)?;
    let mut shard_of = None;
    if let Some(spec) = opts.shard {
        let all = targets.clone();
        let split = shard::split(project, &all, spec.count);
        let mine = split
            .into_iter()
            .find(|s| s.index == spec.index)
            .map(|s| s.targets)
            .unwrap_or_default();
        targets = mine;
        shard_of = Some((spec, all));
    }
    let jobs = plan(project, &targets);
    // A shard may be empty (more shards than targets): it builds nothing, and its manifest
    // says so, rather than failing one runner of a CI matrix.
    if jobs.is_empty() && shard_of.is_none() {
        return Err(nothing_to_build(project, &targets));
    }
    let mut problems: Vec<ToolchainError> = Vec::new();
    let triton_jobs = jobs
        .iter()
        .any(|j| project.kernels[j.kernel].triton.is_some());
    let mut tcs = tcs;
    if triton_jobs {
        tcs.find_triton(&opts.env);
        if tcs.triton.is_none() {
            problems.push(ToolchainError::TritonMissing {
                version: crate::toolchain::TRITON_VERSION.into(),
            });
        }
    }
    for t in &targets {
        if jobs
            .iter()
            .any(|j| j.target == *t && project.kernels[j.kernel].triton.is_none())
        {
            if let Err(e) = tcs.check(t) {
                problems.push(e);
            }
        }
    }
    if !problems.is_empty() {
        return Err(BuildError::Toolchain(problems));
    }
    Ok(Prepared {
        targets,
        jobs,
        cache_dir,
        tcs,
        shard: shard_of,
    })
}

/// Why no kernel builds for any of `targets`, kernel by kernel.
pub(super) fn nothing_to_build(project: &Project, targets: &[Target]) -> BuildError {
    let names: Vec<String> = targets.iter().map(Target::to_string).collect();
    let why: Vec<String> = if project.kernels.is_empty() {
        vec![format!("{} declares no kernels", project.file.display())]
    } else {
        project
            .kernels
            .iter()
            .map(|k| {
                if k.language == crate::config::Language::Hip
                    && targets.iter().all(|t| t.vendor() != Vendor::Amd)
                {
                    format!(
                        "kernel `{}` has language = \"hip\", which builds only for AMD (gfx*) targets",
                        k.name
                    )
                } else {
                    let own: Vec<String> = k
                        .targets
                        .iter()
                        .flatten()
                        .map(Target::to_string)
                        .collect();
                    format!(
                        "kernel `{}` builds only for its own `targets` ({})",
                        k.name,
                        own.join(", ")
                    )
                }
            })
            .collect()
    };
    BuildError::NothingToBuild {
        targets: names.join(", "),
        why: why.join("; "),
    }
}
