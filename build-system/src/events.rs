//! Build events and the [`Observer`] a build reports them to.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Compiled,
    Cached,
    Failed,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    Job {
        kernel: String,
        variant: Option<String>,
        target: String,
        status: JobStatus,
        seconds: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// `--shard I/N`: which of the resolved targets this shard builds (before any job).
    Shard {
        index: u32,
        count: u32,
        /// This shard's targets, in the order of the whole list (empty: nothing to build).
        targets: Vec<String>,
        /// The whole resolved list the shards split.
        all_targets: Vec<String>,
        /// Estimated cost of this shard and of the whole list (`kbuild_build::shard`).
        cost: u64,
        total_cost: u64,
    },
    /// `kbuild init`: one translation unit's discovery compiles finished (one line per unit,
    /// so a long init shows progress where no bar is drawn).
    Unit {
        /// 1-based count of units finished, of `total`.
        index: usize,
        total: usize,
        source: String,
        /// Discovery targets it built for, and those it failed for.
        built: Vec<String>,
        failed: Vec<String>,
        /// Compile time of its jobs.
        seconds: f64,
    },
    Summary {
        compiled: usize,
        cached: usize,
        failed: usize,
        seconds: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        manifest: Option<String>,
        /// Hits, uploads, refused entries and why the remote was switched off, if it was.
        #[serde(skip_serializing_if = "Option::is_none")]
        remote_cache: Option<crate::remote_cache::RemoteStats>,
        /// Actions sent to the remote executor, answered from its cache, executed there, and
        /// given back to a local compile.
        #[serde(skip_serializing_if = "Option::is_none")]
        remote_execution: Option<crate::remote_exec::RemoteExecStats>,
        /// Per target: how many of the project's kernels it built, and why the rest are absent.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        targets: Vec<kbuild_manifest::manifest::TargetCoverage>,
    },
}

/// Where a build's progress goes. The library only reports; the `kbuild` binary draws a
/// progress bar, plain lines or JSON, the build.rs API prints plain lines for cargo.
pub trait Observer: Sync {
    /// The build planned `jobs` jobs (before any starts).
    fn planned(&self, _jobs: usize) {}
    /// A job started compiling (`label` is `kernel[.variant] for target`).
    fn started(&self, _label: &str) {}
    /// A job finished, or the build did.
    fn event(&self, e: &Event);
    /// Free text for people (failure details, remote-cache notes).
    fn note(&self, text: &str);
}

/// Sees nothing (tests, callers that only want the report).
pub struct Quiet;

impl Observer for Quiet {
    fn event(&self, _: &Event) {}
    fn note(&self, _: &str) {}
}

impl Event {
    /// The event as one line for people (`  compiled k for sm_89 (0.42 s)`). None for a
    /// failed job: its error (naming kernel and target, with the command and the compiler's
    /// output) comes as the build's note, and a failure is said once.
    pub fn line(&self) -> Option<String> {
        plain_line(self)
    }

    /// A job event's label as [`Observer::started`] had it: `kernel[.variant] for target`.
    pub fn job_label(&self) -> Option<String> {
        match self {
            Event::Job {
                kernel,
                variant: Some(v),
                target,
                ..
            } => Some(format!("{kernel}.{v} for {target}")),
            Event::Job { kernel, target, .. } => Some(format!("{kernel} for {target}")),
            Event::Shard { .. } | Event::Unit { .. } | Event::Summary { .. } => None,
        }
    }
}

fn plain_line(e: &Event) -> Option<String> {
    match e {
        Event::Job {
            kernel,
            variant,
            target,
            status,
            seconds,
            ..
        } => {
            let name = match variant {
                Some(v) => format!("{kernel}.{v}"),
                None => kernel.clone(),
            };
            match status {
                JobStatus::Compiled => {
                    Some(format!("  compiled {name} for {target} ({seconds:.2} s)"))
                }
                JobStatus::Cached => Some(format!("    cached {name} for {target}")),
                JobStatus::Failed => None,
            }
        }
        Event::Shard {
            index,
            count,
            targets,
            all_targets,
            cost,
            total_cost,
        } => Some(if targets.is_empty() {
            format!(
                "kbuild: shard {index}/{count} has no targets ({} target(s) over {count} shards): nothing to build; its manifest lists no targets",
                all_targets.len()
            )
        } else {
            format!(
                "kbuild: shard {index}/{count}: {} of {} targets ({}), estimated cost {cost} of {total_cost}",
                targets.len(),
                all_targets.len(),
                targets.join(", ")
            )
        }),
        Event::Unit {
            index,
            total,
            source,
            built,
            failed,
            seconds,
        } => {
            let mut what = Vec::new();
            if !built.is_empty() {
                what.push(format!("built for {}", built.join(", ")));
            }
            if !failed.is_empty() {
                what.push(format!("failed for {}", failed.join(", ")));
            }
            Some(format!(
                "  [{index}/{total}] {source}: {} ({seconds:.2} s)",
                what.join(", ")
            ))
        }
        Event::Summary {
            compiled,
            cached,
            failed,
            seconds,
            manifest,
            remote_cache,
            remote_execution,
            targets,
        } => Some(
            format!(
            "kbuild: {compiled} compiled, {cached} cached, {failed} failed in {seconds:.2} s{}{}",
            manifest
                .as_ref()
                .map(|m| format!("; manifest {m}"))
                .unwrap_or_default(),
            remote_cache
                .as_ref()
                .map(|r| format!(
                    "; remote cache: {} fetched, {} uploaded{}{}",
                    r.hits,
                    r.uploads,
                    if r.refused > 0 { format!(", {} refused", r.refused) } else { String::new() },
                    if r.unavailable.is_some() { " (unavailable)" } else { "" }
                ))
                .unwrap_or_default()
        ) + &remote_execution.as_ref().map(|r| format!(
            "\nkbuild: remote execution: {} actions, {} from the service's cache, {} executed ({} polled), {} compiled here instead; {} blobs ({} bytes) uploaded",
            r.actions, r.cache_hits, r.executed, r.polled, r.fell_back, r.uploaded_blobs, r.uploaded_bytes
        )).unwrap_or_default() + &targets_line(targets),
        ),
    }
}

/// `\nkbuild: per target: sm_89 3 of 3 kernels, gfx1100 1 of 3 kernels (2 restricted by
/// Kbuild.toml)`; empty without targets.
fn targets_line(targets: &[kbuild_manifest::manifest::TargetCoverage]) -> String {
    if targets.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = targets
        .iter()
        .map(|c| c.line().replacen(':', "", 1))
        .collect();
    format!("\nkbuild: per target: {}", parts.join(", "))
}
