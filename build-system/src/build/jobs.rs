//! The job runner: each job from the local cache, else the remote cache, else a compile
//! ([`super::compile`]); then its audit, resources and parameters, its object and log
//! written, its manifest record made. Jobs run in parallel; the order is longest first.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use kbuild_base::fs as fsutil;
use kbuild_manifest::manifest::ObjectRecord;
use kbuild_manifest::resources::{object_resources_by_entry, BlockSize};
use kbuild_manifest::target::ObjectKind;
use kbuild_manifest::triton::TritonLaunch;

use crate::cache::{Entry, Made};
use crate::driver;
use crate::events::{Event, JobStatus};
use crate::plan::Job;
use crate::remote_cache::Fetch;

use super::compile::compile;
use super::{failure_text, round3, Ctx, Failure};

pub(super) struct Done {
    pub(super) status: JobStatus,
    pub(super) record: Option<ObjectRecord>,
    pub(super) failure: Option<Failure>,
    pub(super) seconds: f64,
}
/// What the job runner did: the records and failures of the jobs that ran, which jobs failed
/// (indices into the job list, in the order they finished), which ran at all, and the
/// compile times of this build (for the next build's order).
pub(super) struct JobsRun {
    pub(super) records: Vec<ObjectRecord>,
    pub(super) failures: Vec<Failure>,
    pub(super) failed_jobs: Vec<usize>,
    pub(super) ran: Vec<bool>,
    pub(super) compiled: usize,
    pub(super) cached: usize,
    pub(super) timings: BTreeMap<String, f64>,
}

/// Run `jobs` on `workers` threads (under an inherited jobserver, if any), each through
/// [`run_job`]; the first failure stops the rest unless `keep_going`. Each finished job is
/// reported as it finishes (a failure also as a note with its command and output). After an
/// interrupt nothing more is reported or recorded.
pub(super) fn run_jobs(ctx: &Ctx, jobs: &[Job], workers: usize, keep_going: bool) -> JobsRun {
    let reporter = ctx.reporter;
    let jobserver = crate::exec::inherited_jobserver();
    let mut out = JobsRun {
        records: Vec::new(),
        failures: Vec::new(),
        failed_jobs: Vec::new(),
        ran: vec![false; jobs.len()],
        compiled: 0,
        cached: 0,
        timings: BTreeMap::new(),
    };
    let stops = |d: &Done| d.failure.is_some() && !keep_going;
    crate::exec::run(
        jobs,
        workers,
        jobserver.as_ref(),
        |job| run_job(ctx, job),
        stops,
        |i, done| {
            if crate::interrupt::interrupted() {
                // A killed compiler is no failure of the job: nothing to report or record.
                return;
            }
            let job = &jobs[i];
            if let Some(r) = out.ran.get_mut(i) {
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
                    out.compiled += 1;
                    out.timings.insert(job.label(), done.seconds);
                }
                JobStatus::Cached => out.cached += 1,
                JobStatus::Failed => {}
            }
            if let Some(r) = done.record {
                out.records.push(r);
            }
            if let Some(f) = done.failure {
                reporter.note(&failure_text(&f));
                out.failures.push(f);
                out.failed_jobs.push(i);
            }
        },
    );
    out
}

pub(super) fn run_job(ctx: &Ctx, job: &Job) -> Done {
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
    let kernel = &ctx.project.kernels[job.kernel];
    let target_name = job.target.to_string();
    let got = match &kernel.triton {
        Some(t) => triton_entry(ctx, job, t),
        None => compiled_entry(ctx, job),
    };
    let (entry, status, compile_args) = match got {
        Ok(e) => e,
        Err((cause, command, log)) => return fail(cause, command, log),
    };
    let entries = kernel.entries.for_target(&job.target);
    let audited = match crate::audit::audit(&kernel.name, &job.target, &entries, &entry.object) {
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
    // `block-size` per entry: an entry two patterns give different sizes fails the object.
    let mut block_sizes: BTreeMap<&str, u32> = BTreeMap::new();
    for e in &audited.ident.entries {
        match kernel.block_size.for_entry(e) {
            Ok(Some(n)) => {
                block_sizes.insert(e.as_str(), n);
            }
            Ok(None) => {}
            Err(conflict) => {
                return fail(
                    conflict.to_string(),
                    Some(entry.meta.command.clone()),
                    String::new(),
                )
            }
        }
    }
    // A Triton object's launch: its block and dynamic shared memory, which the object lacks.
    let launch: Option<TritonLaunch> = entry.meta.launch.as_deref().cloned();
    let dynamic_shared = launch
        .as_ref()
        .map_or(0, |l| u32::try_from(l.shared).unwrap_or(u32::MAX));
    if let Some(l) = &launch {
        let limit = kbuild_manifest::occupancy::max_dynamic_shared(job.target.processor, 0);
        if let Some(limit) = limit.filter(|&m| dynamic_shared > m) {
            let why = format!(
                "needs {} bytes of dynamic shared memory per block; {} allows {limit}: it could never launch",
                l.shared, job.target
            );
            if ctx.strict {
                return fail(why, Some(entry.meta.command.clone()), String::new());
            }
            ctx.reporter.note(&format!(
                "warning: {}: {why}; left out of the build (--strict makes it an error)",
                job.label()
            ));
            let _ = std::fs::remove_file(ctx.out_dir.join(&job.out_rel));
            return Done {
                status,
                record: None,
                failure: None,
                seconds: start.elapsed().as_secs_f64(),
            };
        }
    }
    let by_entry = |name: &str| match (block_sizes.get(name), &launch) {
        (Some(&n), _) => Some(BlockSize {
            dynamic_shared,
            ..BlockSize::config(n)
        }),
        (None, Some(l)) => Some(BlockSize::triton(l.block_threads(), dynamic_shared)),
        (None, None) => None,
    };
    let resources: BTreeMap<String, kbuild_manifest::resources::Resources> =
        match object_resources_by_entry(&entry.object, log, &by_entry) {
            Ok(r) => r
                .kernels
                .into_iter()
                .map(|k| {
                    if let Some(mut p) = k.params {
                        if let Some(types) = kbuild_manifest::demangle::parameter_types(&k.name) {
                            kbuild_manifest::params::apply_types(&mut p, &types);
                        }
                        if let Some(l) = &launch {
                            l.name_params(&mut p);
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
        let named = crate::entries::concrete(&entries, &audited.ident.entries);
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
        triton: launch,
        cache_key: entry.key,
        compile_args,
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

/// Why a job has no cache entry: the cause, the command shown, the compiler's output.
type NoEntry = (String, Option<String>, String);

/// A CUDA/HIP job's entry: the local cache, else the remote cache, else a compile; with its
/// status and the recorded compile arguments.
fn compiled_entry(ctx: &Ctx, job: &Job) -> Result<(Entry, JobStatus, Vec<String>), NoEntry> {
    let Some(cmd) = driver::command(
        ctx.project,
        job,
        ctx.tcs,
        ctx.env,
        ctx.compat_dir.as_deref(),
    ) else {
        return Err((
            format!("no {} toolchain", job.target.vendor().toolchain()),
            None,
            String::new(),
        ));
    };
    // The last gate before a compiler (and, through nvcc, `sh`) sees the arguments: it also
    // covers what Kbuild.toml's checks do not see, such as the resolved out-dir path.
    if let Some(e) = cmd
        .args()
        .iter()
        .find_map(|a| kbuild_base::ident::check_compiler_arg("compile argument", a).err())
    {
        return Err((e.to_string(), None, String::new()));
    }
    let action = cmd.action_key(&job.target.to_string());
    let (entry, status) = match ctx.cache.lookup(&action, &ctx.project.root) {
        Some(hit) => (hit, JobStatus::Cached),
        None => match remote_hit(ctx, job, &action) {
            Some(hit) => (hit, JobStatus::Cached),
            None => {
                ctx.reporter.started(&job.label());
                match compile(ctx, &cmd, &action, &job.target, &job.label()) {
                    Ok(e) => {
                        upload(ctx, &action, &e);
                        (e, JobStatus::Compiled)
                    }
                    Err(f) => return Err((f.cause.to_string(), Some(f.command), f.log)),
                }
            }
        },
    };
    Ok((entry, status, cmd.recorded_args()))
}

/// The remote cache's entry for `action`, when there is one and it passes its checks (a
/// refusal or an unreachable cache is a note, and the job compiles locally).
fn remote_hit(ctx: &Ctx, job: &Job, action: &str) -> Option<Entry> {
    let remote = ctx.remote?;
    match remote.fetch(ctx.cache, action, &ctx.dep_roots) {
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
}

/// A Triton job's entry: keyed by the function's source key (a worker imports the module),
/// from the local or remote cache, else compiled by a worker of the build's pool.
fn triton_entry(
    ctx: &Ctx,
    job: &Job,
    t: &crate::config::TritonKernel,
) -> Result<(Entry, JobStatus, Vec<String>), NoEntry> {
    let Some(pool) = ctx.triton.as_ref() else {
        return Err(("no Triton toolchain".into(), None, String::new()));
    };
    let root = &ctx.project.root;
    let work = crate::triton::TritonJob {
        root,
        kernel: &ctx.project.kernels[job.kernel],
        spec: t,
        variant: job.variant.as_ref(),
        target: &job.target,
    };
    let action = crate::triton::job_key(pool, ctx.timeout, &work)
        .map_err(|e| (e.to_string(), None, String::new()))?;
    if let Some(hit) = ctx.cache.lookup(&action, root) {
        return Ok((hit, JobStatus::Cached, Vec::new()));
    }
    if let Some(hit) = remote_hit(ctx, job, &action) {
        return Ok((hit, JobStatus::Cached, Vec::new()));
    }
    ctx.reporter.started(&job.label());
    let scratch_root = ctx.cache.scratch();
    let scratch = fsutil::tempdir_in(&scratch_root, "triton-job").map_err(|e| {
        (
            format!("creating a scratch dir in {}: {e}", scratch_root.display()),
            None,
            String::new(),
        )
    })?;
    let start = Instant::now();
    let out = crate::triton::compile_job(pool, ctx.timeout, &work, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let out = out.map_err(|e| (e.to_string(), None, String::new()))?;
    let launch = Some(Box::new(out.launch));
    let seconds = start.elapsed().as_secs_f64();
    let entry = ctx
        .cache
        .store(
            &action,
            Vec::new(),
            Made {
                object: out.object,
                log: out.log,
                command: out.shown,
                seconds,
                launch,
            },
        )
        .map_err(|e| {
            (
                format!("storing in the cache {}: {e}", ctx.cache.root().display()),
                None,
                String::new(),
            )
        })?;
    upload(ctx, &action, &entry);
    Ok((entry, JobStatus::Compiled, Vec::new()))
}

/// Hand a compiled entry to the remote cache (read-write mode); a failure is a note, once.
fn upload(ctx: &Ctx, action: &str, entry: &Entry) {
    if let Some(why) = ctx.remote.and_then(|r| r.upload(action, entry)) {
        ctx.reporter.note(&format!(
            "kbuild: remote cache upload failed ({why}); not uploading the rest of this build"
        ));
    }
}

/// Longest-processing-time-first from the durations of earlier builds (unknown jobs first:
/// they are the ones we know least about), so the last job to finish is a short one.
pub(super) fn order_longest_first(jobs: &mut [Job], cache_dir: &Path) {
    let timings: BTreeMap<String, f64> = std::fs::read(cache_dir.join("timings.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let estimate = |j: &Job| timings.get(&j.label()).copied().unwrap_or(f64::MAX);
    jobs.sort_by(|a, b| estimate(b).total_cmp(&estimate(a)));
}

pub(super) fn save_timings(cache_dir: &Path, new: BTreeMap<String, f64>) {
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
