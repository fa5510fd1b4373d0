//! `kbuild build`: plan, compile through the cache in parallel, audit, write objects and the
//! manifest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kbuild_manifest::load_index;
use kbuild_manifest::manifest::{
    self, Manifest, ObjectRecord, Package, Provenance, ToolchainIdentity, UnbuiltObject,
};
use kbuild_manifest::resources::{object_resources, BlockSize};
use kbuild_manifest::target::{ObjectKind, Target, Vendor};

use crate::cache::{Cache, Dep};
use crate::config::Project;
use crate::driver::{self, CompileCommand, CompileError};
use crate::events::{Event, JobStatus, Observer};
use crate::plan::{plan, Job};
use crate::remote_cache::{
    DepRoots, Fetch, RemoteCache, RemoteCacheError, RemoteMode, RemoteStats,
};
use crate::shard::{self, ShardSpec};
use crate::toolchain::{ToolchainError, Toolchains};
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_base::fs as fsutil;

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
    /// `--shard I/N`: build only shard I of the resolved target list split N ways
    /// ([`crate::shard`]); the manifest records it.
    pub shard: Option<ShardSpec>,
    /// The environment the build sees: toolchain variables (CUDA_HOME, ROCM_PATH, PATH),
    /// kbuild's directories, `KBUILD_LAUNCHER`, registry credentials for the remote cache.
    pub env: Env,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("no targets: pass --targets or set [build] targets in {0}")]
    NoTargets(String),
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

struct Done {
    status: JobStatus,
    record: Option<ObjectRecord>,
    failure: Option<Failure>,
    seconds: f64,
}

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
}

/// What a build runs: its targets, jobs, cache directory and toolchains.
struct Prepared {
    targets: Vec<Target>,
    jobs: Vec<Job>,
    cache_dir: PathBuf,
    tcs: Toolchains,
    /// With `--shard`: the spec and the whole resolved list the shards split.
    shard: Option<(ShardSpec, Vec<Target>)>,
}

/// The resolved target list (Kbuild.toml or `--targets`, `all` filtered by the found
/// toolchains), the cache directory and the toolchains.
struct Resolved {
    targets: Vec<Target>,
    cache_dir: PathBuf,
    tcs: Toolchains,
}

/// The targets, jobs, cache directory and toolchains of a build; every planned target's
/// toolchain checked before anything runs (all problems at once). With `targets_all`, the
/// targets no found toolchain builds are dropped, each named in a warning.
fn resolve(
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

/// [`resolve`], then the shard's part of the list (`--shard`) and the jobs; every planned
/// target's toolchain checked before anything runs (all problems at once).
fn prepare(
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
    for t in &targets {
        if jobs.iter().any(|j| j.target == *t) {
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
fn nothing_to_build(project: &Project, targets: &[Target]) -> BuildError {
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
    let compat_dir = write_compat_header(project, &out_dir_of(project, opts))?;
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
        let costs = shard::estimate(project, all);
        let cost: u64 = all
            .iter()
            .zip(&costs)
            .filter(|(t, _)| targets.contains(t))
            .map(|(_, c)| c)
            .sum();
        reporter.event(&Event::Shard {
            index: spec.index,
            count: spec.count,
            targets: targets.iter().map(Target::to_string).collect(),
            all_targets: all.iter().map(Target::to_string).collect(),
            cost,
            total_cost: costs.iter().sum(),
        });
    }
    let cache = Cache::open(&cache_dir);
    let remote = open_remote(project, opts, reporter)?;
    let out_dir = out_dir_of(project, opts);
    let compat_dir = write_compat_header(project, &out_dir)?;
    order_longest_first(&mut jobs, &cache_dir);

    reporter.planned(jobs.len());
    let timeout = opts
        .job_timeout
        .or(project.job_timeout)
        .map(Duration::from_secs);
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
    };
    let workers = opts.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let jobserver = crate::exec::inherited_jobserver();

    let mut records: Vec<ObjectRecord> = Vec::new();
    let mut failures: Vec<Failure> = Vec::new();
    let mut failed_jobs: Vec<usize> = Vec::new();
    let mut ran = vec![false; jobs.len()];
    let (mut compiled, mut cached) = (0, 0);
    let mut timings: BTreeMap<String, f64> = BTreeMap::new();
    let keep_going = opts.keep_going;
    let stops = |d: &Done| d.failure.is_some() && !keep_going;
    crate::exec::run(
        &jobs,
        workers,
        jobserver.as_ref(),
        |job| run_job(&ctx, job),
        stops,
        |i, done| {
            if crate::interrupt::interrupted() {
                // A killed compiler is no failure of the job: nothing to report or record.
                return;
            }
            let job = &jobs[i];
            if let Some(r) = ran.get_mut(i) {
                *r = true;
            }
            reporter.event(&Event::Job {
                kernel: job.kernel_name.clone(),
                variant: job.variant_name().map(str::to_string),
                target: job.target.to_string(),
                status: done.status,
                seconds: round3(done.seconds),
                path: done.record.as_ref().map(|r| r.path.clone()),
                error: done.failure.as_ref().map(|f| f.cause.clone()),
            });
            match done.status {
                JobStatus::Compiled => {
                    compiled += 1;
                    timings.insert(job.label(), done.seconds);
                }
                JobStatus::Cached => cached += 1,
                JobStatus::Failed => {}
            }
            if let Some(r) = done.record {
                records.push(r);
            }
            if let Some(f) = done.failure {
                reporter.note(&failure_text(&f));
                failures.push(f);
                failed_jobs.push(i);
            }
        },
    );
    if crate::interrupt::interrupted() {
        return Err(BuildError::Interrupted);
    }
    let unbuilt = |j: &Job, error: Option<String>| UnbuiltObject {
        kernel: j.kernel_name.clone(),
        variant: j.variant_name().map(str::to_string),
        target: j.target.to_string(),
        error,
    };
    let mut failed: Vec<UnbuiltObject> = Vec::new();
    // Whatever a failed job's earlier build left is not this build's output.
    for (n, &i) in failed_jobs.iter().enumerate() {
        let _ = std::fs::remove_file(out_dir.join(&jobs[i].out_rel));
        failed.push(unbuilt(&jobs[i], failures.get(n).map(|f| f.cause.clone())));
    }
    let mut missing: Vec<UnbuiltObject> = Vec::new();
    for (job, _) in jobs.iter().zip(&ran).filter(|(_, r)| !**r) {
        let _ = std::fs::remove_file(out_dir.join(&job.out_rel));
        missing.push(unbuilt(job, None));
    }
    let order = |u: &UnbuiltObject| (u.target.clone(), u.kernel.clone(), u.variant.clone());
    failed.sort_by_key(order);
    missing.sort_by_key(order);
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
    let manifest = Manifest {
        schema: manifest::SCHEMA.to_string(),
        package: Package {
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
        partial: false,
        shard: shard_of.map(|(spec, all)| manifest::Shard {
            index: spec.index,
            count: spec.count,
            targets: all.iter().map(Target::to_string).collect(),
            sources: shard::sources_digest(project),
            kbuild: env!("CARGO_PKG_VERSION").to_string(),
        }),
    };
    let manifest_path = out_dir.join("manifest.json");
    let manifest_json = manifest.to_json();
    fsutil::write_if_changed(&manifest_path, manifest_json.as_bytes()).map_err(|err| {
        BuildError::Write {
            path: manifest_path.display().to_string(),
            err,
        }
    })?;
    write_load_index(
        &manifest,
        manifest_json.as_bytes(),
        &manifest_path,
        &out_dir,
    )?;
    let seconds = start.elapsed().as_secs_f64();
    let remote = remote.map(|r| r.stats());
    reporter.event(&Event::Summary {
        compiled,
        cached,
        failed: failures.len(),
        seconds: round3(seconds),
        manifest: Some(manifest_path.display().to_string()),
        remote_cache: remote.clone(),
    });
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

/// The cross-target audit of kernels with pattern entries: per (kernel, variant), every
/// target's object must export the same matching symbols. A group that disagrees fails: its
/// objects leave the output and the manifest lists them as `failed`, with the error.
fn cross_target_audit(
    project: &Project,
    records: &mut Vec<ObjectRecord>,
    out_dir: &Path,
    failed: &mut Vec<UnbuiltObject>,
) -> Vec<Failure> {
    use std::collections::BTreeSet;
    let mut failures = Vec::new();
    let mut drop: BTreeSet<(String, Option<String>)> = BTreeSet::new();
    for k in project.kernels.iter().filter(|k| k.has_patterns()) {
        let mut groups: BTreeMap<Option<String>, BTreeMap<String, BTreeSet<String>>> =
            BTreeMap::new();
        for r in records.iter().filter(|r| r.kernel == k.name) {
            let matched: BTreeSet<String> = crate::entries::concrete(
                &k.entries
                    .iter()
                    .filter(|e| !e.is_exact())
                    .cloned()
                    .collect::<Vec<_>>(),
                &r.entries,
            )
            .iter()
            .map(|s| crate::entries::cross_target_key(s))
            .collect();
            groups
                .entry(r.variant.clone())
                .or_default()
                .insert(r.target.clone(), matched);
        }
        for (variant, per_target) in groups {
            let Some(message) =
                crate::audit::cross_target(&k.name, variant.as_deref(), &k.entries, &per_target)
            else {
                continue;
            };
            let name = match &variant {
                Some(v) => format!("{}.{v}", k.name),
                None => k.name.clone(),
            };
            let targets: Vec<&str> = per_target.keys().map(String::as_str).collect();
            failures.push(Failure {
                label: format!("{name} for {}", targets.join(", ")),
                cause: format!("coverage audit: {message}"),
                command: None,
                log: String::new(),
            });
            for t in per_target.keys() {
                failed.push(UnbuiltObject {
                    kernel: k.name.clone(),
                    variant: variant.clone(),
                    target: t.clone(),
                    error: Some(format!("coverage audit: {message}")),
                });
            }
            drop.insert((k.name.clone(), variant));
        }
    }
    records.retain(|r| {
        let gone = drop.contains(&(r.kernel.clone(), r.variant.clone()));
        if gone {
            let _ = std::fs::remove_file(out_dir.join(&r.path));
        }
        !gone
    });
    if !drop.is_empty() {
        failed.sort_by_key(|u| (u.target.clone(), u.kernel.clone(), u.variant.clone()));
    }
    failures
}

fn out_dir_of(project: &Project, opts: &BuildOptions) -> PathBuf {
    opts.out_dir
        .clone()
        .unwrap_or_else(|| project.out_dir.clone())
}

/// kbuild's compat header under `<out_dir>/include` (absolute: compilers run in the project
/// root, `--out-dir` is relative to the current directory); `None` when the project opted out.
fn write_compat_header(project: &Project, out_dir: &Path) -> Result<Option<PathBuf>, BuildError> {
    if !project.compat_header {
        return Ok(None);
    }
    let abs = std::path::absolute(out_dir).unwrap_or_else(|_| out_dir.to_path_buf());
    let dir = crate::compat_header::write(&abs).map_err(|e| BuildError::Write {
        path: e.path.display().to_string(),
        err: e.source,
    })?;
    Ok(Some(dir))
}

/// `manifest.kbi` beside the manifest (after it: it records the manifest's length, mtime and
/// blake3),
/// so a loader opens the build without parsing JSON.
fn write_load_index(
    manifest: &Manifest,
    manifest_json: &[u8],
    manifest_path: &Path,
    out_dir: &Path,
) -> Result<(), BuildError> {
    let write_err = |path: &Path, err: std::io::Error| BuildError::Write {
        path: path.display().to_string(),
        err,
    };
    // The bytes just written (or found equal): no second read of the manifest.
    let meta = std::fs::metadata(manifest_path).map_err(|e| write_err(manifest_path, e))?;
    let stamp = load_index::ManifestStamp::of(&meta, manifest_json);
    let path = out_dir.join(load_index::LOAD_INDEX_FILE);
    let bytes = load_index::encode(manifest, stamp).map_err(|e| {
        write_err(
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    fsutil::write_if_changed(&path, &bytes).map_err(|e| write_err(&path, e))?;
    Ok(())
}

/// The remote cache of this build: `--remote-cache` or Kbuild.toml `[build] remote-cache`.
fn open_remote(
    project: &Project,
    opts: &BuildOptions,
    observer: &dyn Observer,
) -> Result<Option<RemoteCache>, BuildError> {
    let Some(url) = opts.remote_cache.as_ref().or(project.remote_cache.as_ref()) else {
        return Ok(None);
    };
    let mode = match (opts.remote_cache_mode, &project.remote_cache_mode) {
        (Some(m), _) => m,
        (None, Some(s)) => s.parse().map_err(|source| BuildError::RemoteCacheMode {
            file: project.file.display().to_string(),
            source,
        })?,
        (None, None) => RemoteMode::Read,
    };
    open_remote_client(url, mode, opts, observer)
}

#[cfg(feature = "remote-cache")]
fn open_remote_client(
    url: &str,
    mode: RemoteMode,
    opts: &BuildOptions,
    _: &dyn Observer,
) -> Result<Option<RemoteCache>, BuildError> {
    Ok(Some(RemoteCache::open(
        url,
        mode,
        opts.plain_http,
        &opts.env,
    )?))
}

#[cfg(not(feature = "remote-cache"))]
fn open_remote_client(
    url: &str,
    _: RemoteMode,
    _: &BuildOptions,
    observer: &dyn Observer,
) -> Result<Option<RemoteCache>, BuildError> {
    observer.note(&format!(
        "kbuild: remote cache {url}: this build of kbuild has no remote-cache feature; compiling locally"
    ));
    Ok(None)
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

fn run_job(ctx: &Ctx, job: &Job) -> Done {
    let start = Instant::now();
    let fail = |cause: String, command: Option<String>, log: String| Done {
        status: JobStatus::Failed,
        record: None,
        failure: Some(Failure {
            label: job.label(),
            cause,
            command,
            log,
        }),
        seconds: start.elapsed().as_secs_f64(),
    };
    let Some(cmd) = driver::command(
        ctx.project,
        job,
        ctx.tcs,
        ctx.env,
        ctx.compat_dir.as_deref(),
    ) else {
        return fail(
            format!("no {} toolchain", job.target.vendor().toolchain()),
            None,
            String::new(),
        );
    };
    let target_name = job.target.to_string();
    let action = cmd.action_key(&target_name);
    let remote_hit = || {
        let remote = ctx.remote?;
        match remote.fetch(ctx.cache, &action, &ctx.dep_roots) {
            Fetch::Hit(e) => return Some(e),
            Fetch::Miss => {}
            Fetch::Refused(why) => ctx.reporter.note(&format!(
                "kbuild: remote cache entry for {} refused ({why}); compiling locally",
                job.label()
            )),
            Fetch::Unavailable(why) => ctx.reporter.note(&format!(
                "kbuild: remote cache {} unavailable ({why}); compiling locally",
                remote.url()
            )),
        }
        None
    };
    let (entry, status) = match ctx.cache.lookup(&action, &ctx.project.root) {
        Some(hit) => (hit, JobStatus::Cached),
        None => match remote_hit() {
            Some(hit) => (hit, JobStatus::Cached),
            None => {
                ctx.reporter.started(&job.label());
                match compile(ctx, &cmd, &action, &job.target) {
                    Ok(e) => {
                        if let Some(why) = ctx.remote.and_then(|r| r.upload(&action, &e)) {
                            ctx.reporter.note(&format!(
                                "kbuild: remote cache upload failed ({why}); not uploading the rest of this build"
                            ));
                        }
                        (e, JobStatus::Compiled)
                    }
                    Err(f) => return fail(f.cause.to_string(), Some(f.command), f.log),
                }
            }
        },
    };
    let kernel = &ctx.project.kernels[job.kernel];
    let audited =
        match crate::audit::audit(&kernel.name, &job.target, &kernel.entries, &entry.object) {
            Ok(a) => a,
            Err(e) => {
                return fail(
                    format!("coverage audit: {e}"),
                    Some(entry.meta.command.clone()),
                    String::new(),
                )
            }
        };
    let log = (job.target.object_kind() == ObjectKind::Cubin).then_some(entry.log.as_str());
    let mut params: BTreeMap<String, Vec<kbuild_manifest::params::Param>> = BTreeMap::new();
    let resources: BTreeMap<String, kbuild_manifest::resources::Resources> =
        match object_resources(&entry.object, log, kernel.block_size.map(BlockSize::config)) {
            Ok(r) => r
                .kernels
                .into_iter()
                .map(|k| {
                    if let Some(mut p) = k.params {
                        if let Some(types) = kbuild_manifest::demangle::parameter_types(&k.name) {
                            kbuild_manifest::params::apply_types(&mut p, &types);
                        }
                        params.insert(k.name.clone(), p);
                    }
                    (k.name, k.resources)
                })
                .collect(),
            Err(e) => {
                return fail(
                    format!("reading resources: {e}"),
                    Some(entry.meta.command.clone()),
                    String::new(),
                )
            }
        };
    // A kernel with patterns records what its entries name (concrete symbols); one with
    // exact names only records every symbol the object exports, as it always has.
    let (entries, resources, demangled) = if kernel.has_patterns() {
        let named = crate::entries::concrete(&kernel.entries, &audited.ident.entries);
        let keep = |k: &String| named.contains(k);
        params.retain(|k, _| keep(k));
        (
            named.clone(),
            resources.into_iter().filter(|(k, _)| keep(k)).collect(),
            audited
                .demangled
                .into_iter()
                .filter(|(k, _)| keep(k))
                .collect(),
        )
    } else {
        (audited.ident.entries, resources, audited.demangled)
    };
    let dest = ctx.out_dir.join(&job.out_rel);
    if let Err(e) = fsutil::write_if_changed(&dest, &entry.object) {
        return fail(
            format!("writing {}: {e}", dest.display()),
            None,
            String::new(),
        );
    }
    if let Err(e) = fsutil::write_if_changed(
        &dest.with_extension(format!("{}.log", job.target.object_kind().extension())),
        entry.log.as_bytes(),
    ) {
        return fail(
            format!("writing the compiler log next to {}: {e}", dest.display()),
            None,
            String::new(),
        );
    }
    let record = ObjectRecord {
        kernel: job.kernel_name.clone(),
        variant: job.variant_name().map(str::to_string),
        defines: job
            .variant
            .as_ref()
            .map(|v| v.defines.clone())
            .unwrap_or_default(),
        target: target_name,
        path: job.out_rel.display().to_string(),
        sha256: kbuild_base::digest::sha256_hex(&entry.object),
        // What the loader checks before load: several times sha256's speed.
        blake3: Some(kbuild_base::digest::blake3_hex(&entry.object)),
        size: entry.object.len() as u64,
        format: job.target.object_kind().extension().to_string(),
        entries,
        demangled,
        resources,
        params,
        cache_key: entry.key,
        compile_args: cmd.recorded_args(),
    };
    Done {
        status,
        record: Some(record),
        failure: None,
        seconds: match status {
            JobStatus::Compiled => entry.meta.seconds,
            _ => start.elapsed().as_secs_f64(),
        },
    }
}

/// Why a cache miss did not become a cache entry.
#[derive(Debug, thiserror::Error)]
enum CompileCause {
    #[error("creating scratch dir in {}: {source}", .dir.display())]
    Scratch {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Compiler(CompileError),
    /// The compiler wrote something that is not the target's object.
    #[error("compiler output rejected: {0}")]
    Rejected(crate::audit::AuditError),
    #[error("dependency {0} vanished during the compile")]
    DependencyVanished(String),
    #[error("storing in the cache {}: {source}", .root.display())]
    Store {
        root: PathBuf,
        source: std::io::Error,
    },
}

/// A failed compile: why, the command line shown to the user, and the compiler's output.
#[derive(Debug)]
struct CompileFailure {
    cause: CompileCause,
    command: String,
    log: String,
}

impl CompileFailure {
    fn new(cause: CompileCause, command: String, log: String) -> Self {
        CompileFailure {
            cause,
            command,
            log,
        }
    }
}

/// Compile a cache miss and store it.
fn compile(
    ctx: &Ctx,
    cmd: &CompileCommand,
    action: &str,
    target: &Target,
) -> Result<crate::cache::Entry, CompileFailure> {
    let scratch = ctx.cache.scratch();
    let tmp = fsutil::tempdir_in(&scratch, "job").map_err(|source| {
        let cause = CompileCause::Scratch {
            dir: scratch.clone(),
            source,
        };
        CompileFailure::new(cause, String::new(), String::new())
    })?;
    let shown = cmd.display(&tmp);
    let result = driver::run(cmd, &ctx.project.root, &tmp, ctx.timeout);
    let _ = std::fs::remove_dir_all(&tmp);
    let out = result.map_err(|e: CompileError| {
        let log = e.log().to_string();
        CompileFailure::new(CompileCause::Compiler(e), shown.clone(), log)
    })?;
    if let Err(e) = crate::audit::check_target(target, &out.object) {
        return Err(CompileFailure::new(
            CompileCause::Rejected(e),
            shown,
            out.log,
        ));
    }
    let root = &ctx.project.root;
    let canon_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
    let mut deps: Vec<Dep> = Vec::new();
    // The compat header's files are keyed by their bytes (in the action key), not by a path
    // that names this build's out-dir: a clone elsewhere, or another --out-dir, still hits.
    let compat = ctx.compat_dir.as_ref().map(|d| {
        let canon = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        (d.clone(), canon)
    });
    for p in &out.deps {
        if let Some((dir, canon)) = &compat {
            let abs = root.join(p);
            if abs.starts_with(dir) || abs.starts_with(canon) {
                continue;
            }
        }
        // Project files are recorded relative to the project root, so a clone elsewhere hits.
        let recorded = match p.strip_prefix(&canon_root) {
            Ok(rel) => rel.display().to_string(),
            Err(_) => p.display().to_string(),
        };
        let Some(h) = ctx.cache.hash_dep(root, &recorded) else {
            return Err(CompileFailure::new(
                CompileCause::DependencyVanished(recorded),
                shown,
                out.log,
            ));
        };
        deps.push((recorded, h));
    }
    ctx.cache
        .store(
            action,
            deps,
            out.object,
            out.log,
            shown.clone(),
            out.seconds,
        )
        .map_err(|source| {
            let cause = CompileCause::Store {
                root: ctx.cache.root().to_path_buf(),
                source,
            };
            CompileFailure::new(cause, shown, String::new())
        })
}

fn provenance(project: &Project, tcs: &Toolchains) -> Provenance {
    let git = crate::git::provenance(&project.root);
    let mut toolchains = Vec::new();
    if let Some(c) = &tcs.cuda {
        toolchains.push(ToolchainIdentity {
            kind: "cuda".into(),
            version: c
                .version_text
                .lines()
                .find(|l| l.contains("release"))
                .unwrap_or_default()
                .to_string(),
            path: c.nvcc.display().to_string(),
            identity: c.identity.clone(),
        });
    }
    if let Some(h) = &tcs.hip {
        toolchains.push(ToolchainIdentity {
            kind: "hip".into(),
            version: h
                .version_text
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
            path: h.clang.display().to_string(),
            identity: h.identity.clone(),
        });
    }
    let mut flags = BTreeMap::new();
    flags.insert(
        Vendor::Nvidia.toolchain().to_string(),
        project.flags.cuda.clone(),
    );
    flags.insert(
        Vendor::Amd.toolchain().to_string(),
        project.flags.hip.clone(),
    );
    Provenance {
        git_commit: git.as_ref().map(|g| g.0.clone()),
        git_dirty: git.map(|g| g.1),
        toolchains,
        flags,
        host: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
    }
}

/// Longest-processing-time-first from the durations of earlier builds (unknown jobs first:
/// they are the ones we know least about), so the last job to finish is a short one.
fn order_longest_first(jobs: &mut [Job], cache_dir: &Path) {
    let timings: BTreeMap<String, f64> = std::fs::read(cache_dir.join("timings.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let estimate = |j: &Job| timings.get(&j.label()).copied().unwrap_or(f64::MAX);
    jobs.sort_by(|a, b| estimate(b).total_cmp(&estimate(a)));
}

fn save_timings(cache_dir: &Path, new: BTreeMap<String, f64>) {
    let path = cache_dir.join("timings.json");
    let mut all: BTreeMap<String, f64> = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    all.extend(new);
    if let Ok(bytes) = serde_json::to_vec(&all) {
        let _ = fsutil::write_atomic(&path, &bytes);
    }
}
