//! `kbuild build`: plan, compile through the cache in parallel, audit, write objects and the
//! manifest. [`build`] runs the phases: `prepare` (targets, toolchains, jobs), the job
//! runner (`jobs`: cache, remote cache, `compile`, audit per job, in parallel), then the
//! outputs (`outputs`: the cross-target audit, containers, manifest and load index).

mod compile;
mod jobs;
mod outputs;
mod prepare;
mod remote;
mod remote_compile;
#[cfg(test)]
mod tests;

use jobs::{order_longest_first, run_jobs, save_timings, JobsRun};
use outputs::{
    cross_target_audit, provenance, unbuilt_objects, write_compat_header, write_manifest,
};
use prepare::{prepare, resolve, Prepared};
use remote::open_remote;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kbuild_manifest::manifest::{self, Manifest, PackageInfo};
use kbuild_manifest::target::Target;

use crate::cache::Cache;
use crate::config::Project;
use crate::driver::{self, CompileCommand};
use crate::events::{Event, Observer};
use crate::plan::Job;
use crate::remote_cache::{DepRoots, RemoteCache, RemoteCacheError, RemoteMode, RemoteStats};
use crate::shard::{self, ShardSpec};
use crate::toolchain::{ToolchainError, Toolchains};
use kbuild_base::env::Env;

/// What the user asked for beyond the project file.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Overrides the project's default targets.
    pub targets: Option<Vec<Target>>,
    /// `targets` came from a list naming `all`: targets that no found toolchain can build are
    /// dropped with a warning (the build fails only when none is left).
    pub targets_all: bool,
    pub out_dir: Option<PathBuf>,
    pub jobs: Option<usize>,
    pub keep_going: bool,
    pub fat: bool,
    /// Per-compile timeout in seconds (overrides Kbuild.toml `job-timeout`).
    pub job_timeout: Option<u64>,
    pub cache_dir: Option<PathBuf>,
    /// `oci://HOST[:PORT]/REPO` of a remote build cache (overrides Kbuild.toml `remote-cache`).
    pub remote_cache: Option<String>,
    /// Overrides Kbuild.toml `remote-cache-mode` (default read).
    pub remote_cache_mode: Option<RemoteMode>,
    /// Talk to the remote cache over http://.
    pub plain_http: bool,
    /// `--strict`: a requested target that ends with no object (every kernel failed there or
    /// Kbuild.toml keeps them off it) is an error ([`BuildError::EmptyTargets`], after the
    /// manifest is written); without it, a warning.
    pub strict: bool,
    /// `--shard I/N`: build only shard I of the resolved target list split N ways
    /// ([`crate::shard`]); the manifest records it.
    pub shard: Option<ShardSpec>,
    /// The environment the build sees: toolchain variables (CUDA_HOME, ROCM_PATH, PATH),
    /// kbuild's directories, `KBUILD_LAUNCHER`, registry credentials for the remote cache.
    pub env: Env,
    /// Where cache misses compile: a remote executor (`--remote-execution`), else here.
    pub remote_exec: Option<std::sync::Arc<dyn crate::remote_exec::RemoteExecutor>>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("no targets: pass --targets or set [build] targets in {0}")]
    NoTargets(String),
    #[error(transparent)]
    Triton(crate::triton::WorkerError),
    /// An `autotune = true` kernel's config list could not be read or made variants.
    #[error(transparent)]
    Autotune(#[from] crate::triton::autotune::AutotuneError),
    /// The out-dir is a symbolic link, or cannot be made.
    #[error(transparent)]
    OutDir(#[from] crate::clean::MarkError),
    /// Every (kernel, target) pair was excluded: the build would produce an empty manifest.
    #[error("nothing to build for {targets}: {why}")]
    NothingToBuild { targets: String, why: String },
    /// Targets `all` (flag or Kbuild.toml) and no found toolchain builds any of them.
    #[error("targets `all`: the found toolchains build none of them:\n{0}")]
    NoBuildableTargets(String),
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Toolchain(Vec<ToolchainError>),
    #[error("writing {path}: {err}")]
    Write { path: String, err: std::io::Error },
    #[error(transparent)]
    RemoteCache(#[from] RemoteCacheError),
    /// SIGINT/SIGTERM: the compilers were killed, their scratch dirs removed, no manifest
    /// written.
    #[error("interrupted: compilers stopped, scratch directories removed, no manifest written")]
    Interrupted,
    /// `--strict` and a requested target holds no object; the manifest was written.
    #[error("--strict: {} without objects: {}; the manifest {manifest} lists it", if .targets.len() == 1 { "a requested target is" } else { "requested targets are" }, .targets.iter().map(|c| c.line()).collect::<Vec<_>>().join("; "))]
    EmptyTargets {
        targets: Vec<kbuild_manifest::manifest::TargetCoverage>,
        manifest: String,
    },
    /// No cache directory: HOME and the XDG variables are unset.
    #[error(transparent)]
    Dirs(#[from] kbuild_base::dirs::DirsError),
    /// Kbuild.toml `[build] remote-cache-mode` is not a mode.
    #[error("{file}: [build] {source}")]
    RemoteCacheMode {
        file: String,
        #[source]
        source: RemoteCacheError,
    },
}

/// A job that failed, with everything needed to reproduce it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub label: String,
    pub cause: String,
    pub command: Option<String>,
    pub log: String,
}

#[derive(Debug)]
pub struct BuildReport {
    pub compiled: usize,
    pub cached: usize,
    pub failures: Vec<Failure>,
    pub manifest_path: PathBuf,
    pub out_dir: PathBuf,
    pub seconds: f64,
    /// What the remote cache did, when there was one.
    pub remote: Option<RemoteStats>,
}

/// What every job of one build shares (the job runner's and a compile's context).
struct Ctx<'a> {
    project: &'a Project,
    tcs: &'a Toolchains,
    cache: &'a Cache,
    out_dir: &'a Path,
    timeout: Option<Duration>,
    reporter: &'a dyn Observer,
    remote: Option<&'a RemoteCache>,
    /// Where a remote cache entry's dependency paths may point.
    dep_roots: DepRoots,
    env: &'a Env,
    /// The written compat header's include dir (absolute); `None`: the project opted out.
    compat_dir: Option<PathBuf>,
    /// The compat header precompiled for the AMD compiles (`None`: `KBUILD_PCH=0`).
    pch: Option<crate::pch::PchSet>,
    /// The Triton workers, when a Triton kernel is planned.
    triton: Option<crate::triton::Pool>,
    /// `--strict`: a Triton object over its target's shared memory fails its job.
    strict: bool,
    /// Where cache misses compile when not here.
    remote_exec: Option<&'a dyn crate::remote_exec::RemoteExecutor>,
    /// With remote execution: how many compiles it gives back run here at once (the cores).
    local_slots: Option<compile::LocalSlots>,
}

/// The whole resolved target list and its split into `count` shards (`--print-shards N`);
/// `observer` gets the notes (targets `all` skips).
pub fn shards(
    project: &Project,
    opts: &BuildOptions,
    count: u32,
    observer: &dyn Observer,
) -> Result<(Vec<Target>, Vec<shard::Shard>), BuildError> {
    let r = resolve(project, opts, observer)?;
    let split = shard::split(project, &r.targets, count);
    Ok((r.targets, split))
}

/// The compile command of every job (what `build` would run on a cold cache), for
/// `--print-commands` and for benchmarks against other build tools.
/// `observer` gets the notes (targets `all` skips).
pub fn commands(
    project: &Project,
    opts: &BuildOptions,
    observer: &dyn Observer,
) -> Result<Vec<(Job, CompileCommand)>, BuildError> {
    let Prepared { jobs, tcs, .. } = prepare(project, opts, observer)?;
    // Written here too: the printed commands are meant to be run.
    let out_dir = out_dir_of(project, opts);
    crate::clean::mark_out_dir(&out_dir, &project.root)?;
    let compat_dir = write_compat_header(project, &out_dir)?;
    Ok(jobs
        .into_iter()
        .filter_map(|j| {
            driver::command(project, &j, &tcs, &opts.env, compat_dir.as_deref()).map(|c| (j, c))
        })
        .collect())
}

/// Run a build. Job failures are in the report (the caller exits 1); setup problems (no
/// targets, missing toolchains) are errors before anything runs.
pub fn build(
    project: &Project,
    opts: &BuildOptions,
    reporter: &dyn Observer,
) -> Result<BuildReport, BuildError> {
    let start = Instant::now();
    let _scope = crate::interrupt::BuildScope::enter();
    let Prepared {
        targets,
        mut jobs,
        cache_dir,
        tcs,
        shard: shard_of,
    } = prepare(project, opts, reporter)?;
    if let Some((spec, all)) = &shard_of {
        reporter.event(&shard_event(project, *spec, all, &targets));
    }
    let cache = Cache::open(&cache_dir);
    let timeout = opts
        .job_timeout
        .or(project.job_timeout)
        .map(Duration::from_secs);
    let triton = match &tcs.triton {
        Some(tc) => {
            Some(crate::triton::Pool::new(tc, &cache.scratch()).map_err(BuildError::Triton)?)
        }
        None => None,
    };
    // `autotune = true` kernels get their variants from their functions, then the jobs are
    // planned again with them.
    let expanded = match &triton {
        Some(pool) => crate::triton::autotune::expand(project, pool, timeout, &jobs)?,
        None => None,
    };
    let project = match &expanded {
        Some(e) => {
            for w in &e.warnings {
                reporter.note(w);
            }
            jobs = crate::plan::plan(&e.project, &targets);
            &e.project
        }
        None => project,
    };
    let remote = open_remote(project, opts, reporter)?;
    let out_dir = out_dir_of(project, opts);
    crate::clean::mark_out_dir(&out_dir, &project.root)?;
    // Every directory the build writes into, made before any job runs and never through a
    // symbolic link (a cloned tree may plant `target/kbuild/sm_89 -> /elsewhere`).
    let mut subdirs: std::collections::BTreeSet<&Path> =
        jobs.iter().filter_map(|j| j.out_rel.parent()).collect();
    if opts.fat {
        subdirs.insert(Path::new("fat"));
    }
    for rel in subdirs {
        crate::clean::real_dir(&out_dir, rel)?;
    }
    let compat_dir = write_compat_header(project, &out_dir)?;
    order_longest_first(&mut jobs, &cache_dir);

    reporter.planned(jobs.len());
    let ctx = Ctx {
        project,
        tcs: &tcs,
        cache: &cache,
        out_dir: &out_dir,
        timeout,
        reporter,
        remote: remote.as_ref(),
        dep_roots: DepRoots::for_build(&project.root, &tcs),
        env: &opts.env,
        compat_dir,
        pch: crate::pch::PchSet::new(&cache.scratch(), &cache.root().join("pch"), &opts.env),
        triton,
        strict: opts.strict,
        remote_exec: opts.remote_exec.as_deref(),
        local_slots: opts.remote_exec.as_ref().map(|_| {
            compile::LocalSlots::new(
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1),
            )
        }),
    };
    let workers = opts.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let ran = run_jobs(&ctx, &jobs, workers, opts.keep_going);
    if crate::interrupt::interrupted() {
        return Err(BuildError::Interrupted);
    }
    let JobsRun {
        mut records,
        mut failures,
        failed_jobs,
        ran,
        compiled,
        cached,
        timings,
    } = ran;
    let (mut failed, missing) = unbuilt_objects(&jobs, &failed_jobs, &ran, &failures, &out_dir);
    if !timings.is_empty() {
        save_timings(&cache_dir, timings);
    }

    records.sort_by(|a, b| {
        (&a.target, &a.kernel, &a.variant).cmp(&(&b.target, &b.kernel, &b.variant))
    });
    for f in cross_target_audit(project, &mut records, &out_dir, &mut failed) {
        reporter.note(&failure_text(&f));
        failures.push(f);
    }
    let containers = if opts.fat && failures.is_empty() {
        crate::fat::write_containers(&tcs, &cache, &out_dir, &records)
            .map_err(|(path, err)| BuildError::Write { path, err })?
    } else {
        Vec::new()
    };
    // What Kbuild.toml keeps off each target: recorded, so that a target it leaves empty is
    // seen as incomplete by `package` and `publish`, as failed jobs are.
    let restricted = targets
        .iter()
        .filter_map(|t| {
            let off: Vec<String> = project
                .kernels
                .iter()
                .filter(|k| !k.builds_for(t))
                .map(|k| k.name.clone())
                .collect();
            (!off.is_empty()).then(|| (t.to_string(), off))
        })
        .collect();
    let manifest = Manifest {
        schema: manifest::SCHEMA.to_string(),
        package: PackageInfo {
            name: project.name.clone(),
            version: project.version.clone(),
        },
        provenance: provenance(project, &tcs),
        targets: targets.iter().map(|t| t.to_string()).collect(),
        kernels: project.kernels.iter().map(|k| k.name.clone()).collect(),
        objects: records,
        containers,
        failed,
        missing,
        restricted,
        partial: false,
        shard: shard_of.map(|(spec, all)| manifest::Shard {
            index: spec.index,
            count: spec.count,
            targets: all.iter().map(Target::to_string).collect(),
            sources: shard::sources_digest(project),
            kbuild: env!("CARGO_PKG_VERSION").to_string(),
            costs: shard::estimate(project, &all),
        }),
    };
    let manifest_path = write_manifest(&manifest, &out_dir)?;
    let seconds = start.elapsed().as_secs_f64();
    let remote = remote.map(|r| r.stats());
    let coverage = manifest.coverage();
    let empty: Vec<_> = coverage.iter().filter(|c| c.built == 0).cloned().collect();
    if !opts.strict {
        for c in &empty {
            let why = targets
                .iter()
                .find(|t| t.to_string() == c.target)
                .map_or_else(String::new, |t| not_for_triton(project, t));
            reporter.note(&format!(
                "warning: target {} built no object: {}{why} (package refuses such a build without --allow-partial; --strict makes it an error)",
                c.target,
                c.line()
            ));
        }
    }
    reporter.event(&Event::Summary {
        compiled,
        cached,
        failed: failures.len(),
        seconds: round3(seconds),
        manifest: Some(manifest_path.display().to_string()),
        remote_cache: remote.clone(),
        remote_execution: opts.remote_exec.as_ref().map(|r| r.stats()),
        targets: coverage,
    });
    if opts.strict && !empty.is_empty() {
        return Err(BuildError::EmptyTargets {
            targets: empty,
            manifest: manifest_path.display().to_string(),
        });
    }
    Ok(BuildReport {
        compiled,
        cached,
        failures,
        manifest_path,
        out_dir,
        seconds,
        remote,
    })
}

/// The event a shard's build starts with: its targets and their share of the estimated cost.
fn shard_event(project: &Project, spec: ShardSpec, all: &[Target], targets: &[Target]) -> Event {
    let costs = shard::estimate(project, all);
    let cost: u64 = all
        .iter()
        .zip(&costs)
        .filter(|(t, _)| targets.contains(t))
        .map(|(_, c)| c)
        .sum();
    Event::Shard {
        index: spec.index,
        count: spec.count,
        targets: targets.iter().map(Target::to_string).collect(),
        all_targets: all.iter().map(Target::to_string).collect(),
        cost,
        total_cost: costs.iter().sum(),
    }
}

fn out_dir_of(project: &Project, opts: &BuildOptions) -> PathBuf {
    opts.out_dir
        .clone()
        .unwrap_or_else(|| project.out_dir.clone())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn failure_text(f: &Failure) -> String {
    let mut s = format!("error: {}: {}", f.label, f.cause);
    if let Some(c) = &f.command {
        s.push_str(&format!("\n  command: {c}"));
    }
    let log = f.log.trim();
    if !log.is_empty() {
        s.push_str("\n  compiler output:\n");
        for line in log.lines() {
            s.push_str("    ");
            s.push_str(line);
            s.push('\n');
        }
    }
    s
}

/// Why Triton kernels are off `target` (`; Triton kernels a, b: why`), or nothing: those
/// count as restricted, and a target they leave empty should say what Triton lacks.
fn not_for_triton(project: &Project, target: &Target) -> String {
    let Err(why) = crate::config::triton_arch(target) else {
        return String::new();
    };
    let names: Vec<&str> = project
        .kernels
        .iter()
        .filter(|k| k.triton.is_some())
        .map(|k| k.name.as_str())
        .collect();
    if names.is_empty() {
        return String::new();
    }
    format!("; Triton kernel(s) {}: {why}", names.join(", "))
}
