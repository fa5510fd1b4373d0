//! The reports of the build commands: the JSON documents, typed (`kbuild.shards/v1` of
//! `--print-shards`, the compile-command lines of `--print-commands`, `kbuild.toolchains/v1`,
//! the `baseline` event of `--check-baseline --json`), and the text of `kbuild toolchain
//! list` and `kbuild init`. The binary prints them.

use std::fmt::Write as _;

use std::path::{Path, PathBuf};

use kbuild_manifest::target::{Target, Vendor};
use serde::Serialize;

use crate::baseline::BaselineCheck;
use crate::driver::CompileCommand;
use crate::init::InitReport;
use crate::plan::Job;
use crate::shard::Shard;
use crate::toolchain::{buildable_targets, Toolchains};

pub const SHARDS_SCHEMA: &str = "kbuild.shards/v1";
pub const TOOLCHAINS_SCHEMA: &str = "kbuild.toolchains/v1";

/// `kbuild.shards/v1`: how `count` shards split the resolved `targets`.
#[derive(Debug, Serialize)]
pub struct ShardsReport {
    pub schema: &'static str,
    pub count: u32,
    pub targets: Vec<String>,
    pub shards: Vec<ShardDoc>,
}

/// One shard of [`ShardsReport`].
#[derive(Debug, Serialize)]
pub struct ShardDoc {
    pub index: u32,
    pub targets: Vec<String>,
    pub cost: u64,
}

impl ShardsReport {
    pub fn new(count: u32, targets: &[Target], shards: &[Shard]) -> ShardsReport {
        let names = |ts: &[Target]| ts.iter().map(ToString::to_string).collect();
        ShardsReport {
            schema: SHARDS_SCHEMA,
            count,
            targets: names(targets),
            shards: shards
                .iter()
                .map(|s| ShardDoc {
                    index: s.index,
                    targets: names(&s.targets),
                    cost: s.cost,
                })
                .collect(),
        }
    }

    /// `shard I/N (cost C): TARGETS`, one line per shard.
    pub fn text(&self) -> String {
        let line = |s: &ShardDoc| {
            let list = match s.targets.is_empty() {
                true => "(no targets)".to_string(),
                false => s.targets.join(", "),
            };
            format!(
                "shard {}/{} (cost {}): {list}\n",
                s.index, self.count, s.cost
            )
        };
        self.shards.iter().map(line).collect()
    }
}

/// One line of `--print-commands`: a job and the command that builds it.
#[derive(Debug, Serialize)]
pub struct CommandLine<'a> {
    pub kernel: &'a str,
    pub variant: Option<&'a str>,
    pub target: String,
    pub cwd: &'a Path,
    pub launcher: Option<&'a str>,
    pub program: &'a Path,
    pub args: Vec<String>,
    pub output: PathBuf,
    /// The value of the `kbuild-toolchain` platform property a remote worker must advertise
    /// to run this compile (docs/scale.md).
    pub remote_toolchain: String,
}

impl<'a> CommandLine<'a> {
    /// `job` run by `cmd` in the project `root`, writing under `out_dir`.
    pub fn new(root: &'a Path, out_dir: &Path, job: &'a Job, cmd: &'a CompileCommand) -> Self {
        CommandLine {
            kernel: &job.kernel_name,
            variant: job.variant_name(),
            target: job.target.to_string(),
            cwd: root,
            launcher: cmd.launcher.as_deref(),
            program: &cmd.program,
            args: cmd.args(),
            output: out_dir.join(&job.out_rel),
            remote_toolchain: cmd.toolchain_id(),
        }
    }
}

/// One toolchain of `kbuild.toolchains/v1`.
#[derive(Debug, Serialize)]
pub struct ToolchainDoc {
    pub kind: &'static str,
    pub found_by: &'static str,
    /// nvcc or clang.
    pub path: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_libs: Option<PathBuf>,
    pub version: String,
    /// The line of `--version` that names the release.
    pub version_text: String,
    pub identity: String,
    /// The catalogue targets it can build.
    pub targets: Vec<String>,
}

/// `kbuild.toolchains/v1`: each toolchain found, or `null`.
#[derive(Debug, Serialize)]
pub struct ToolchainsReport {
    pub schema: &'static str,
    pub cuda: Option<ToolchainDoc>,
    pub hip: Option<ToolchainDoc>,
}

impl ToolchainsReport {
    pub fn new(tcs: &Toolchains) -> ToolchainsReport {
        let cuda = tcs.cuda.as_ref().map(|c| ToolchainDoc {
            kind: "cuda",
            found_by: c.found_by,
            path: c.nvcc.clone(),
            device_libs: None,
            version: c.version.to_string(),
            version_text: c
                .version_text
                .lines()
                .find(|l| l.contains("release"))
                .unwrap_or_default()
                .to_string(),
            identity: c.identity.clone(),
            targets: buildable_targets(tcs, Vendor::Nvidia),
        });
        let hip = tcs.hip.as_ref().map(|h| ToolchainDoc {
            kind: "hip",
            found_by: h.found_by,
            path: h.clang.clone(),
            device_libs: Some(h.device_libs.clone()),
            version: h.version.to_string(),
            version_text: h
                .version_text
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
            identity: h.identity.clone(),
            targets: buildable_targets(tcs, Vendor::Amd),
        });
        ToolchainsReport {
            schema: TOOLCHAINS_SCHEMA,
            cuda,
            hip,
        }
    }
}

impl ToolchainsReport {
    /// `kbuild toolchain list`'s text: each toolchain's path, version and targets, or a hint.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for (name, found) in [("cuda", &self.cuda), ("hip", &self.hip)] {
            let Some(t) = found else {
                let _ = writeln!(
                    s,
                    "{name}: not found (hint: kbuild toolchain install {name})"
                );
                continue;
            };
            let _ = writeln!(s, "{name}: {} ({})", t.path.display(), t.found_by);
            let _ = writeln!(s, "  version: {}", t.version_text);
            if let Some(d) = &t.device_libs {
                let _ = writeln!(s, "  device libs: {}", d.display());
            }
            let builds = if t.targets.is_empty() {
                "nothing (see `kbuild toolchain install`)".to_string()
            } else {
                t.targets.join(" ")
            };
            let _ = writeln!(s, "  builds: {builds}");
        }
        s
    }
}

/// `kbuild init`'s summary of what it wrote into `dir`.
pub fn init_summary(r: &InitReport, dir: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "wrote {}: {} translation unit(s), {} kernel(s), {} entr{} (found by building for {}), {} failed, {} host code only",
        r.file,
        r.units.len(),
        r.kernels,
        r.entries,
        if r.entries == 1 { "y" } else { "ies" },
        r.discovery_targets.join(", "),
        r.failures,
        r.host_only
    );
    let flags: Vec<&str> = r
        .flags
        .cuda
        .iter()
        .chain(r.flags.hip.iter().filter(|f| !r.flags.cuda.contains(f)))
        .map(String::as_str)
        .collect();
    let _ = writeln!(
        s,
        "  {}{} include dir(s), {} define(s){}",
        match &r.compile_commands {
            Some(cc) => format!("from {cc} and the command line: "),
            None => String::new(),
        },
        r.include_dirs.len(),
        r.defines.len(),
        if flags.is_empty() {
            String::new()
        } else {
            format!(", flags {}", flags.join(" "))
        }
    );
    for note in &r.skipped {
        let _ = writeln!(s, "  skipped: {note}");
    }
    if r.package_from == "the directory" {
        let _ = writeln!(
            s,
            "  package `{}` is named after the directory (no Cargo.toml, pyproject.toml or CMakeLists.txt names the library): edit [package] in {}",
            r.package, r.file
        );
    } else {
        let _ = writeln!(s, "  package `{}` (from {})", r.package, r.package_from);
    }
    if !r.per_target.is_empty() {
        let parts: Vec<String> = r
            .per_target
            .iter()
            .map(|t| format!("{} {} of {}", t.target, t.kernels, r.kernels))
            .collect();
        let _ = writeln!(s, "  kernels per target: {}", parts.join(", "));
    }
    let restricted = r.units.iter().filter(|u| u.targets.is_some()).count();
    if restricted > 0 {
        let _ = writeln!(
            s,
            "  {restricted} kernel(s) build for one vendor only (`targets = [\"nvidia\"]` or `[\"amd\"]`)"
        );
    }
    for c in &r.failure_causes {
        let _ = writeln!(
            s,
            "  {} unit{} for {}: {} ({}{})",
            c.units.len(),
            if c.units.len() == 1 { "" } else { "s" },
            c.targets.join(", "),
            c.cause,
            c.units
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if c.units.len() > 3 { ", ..." } else { "" }
        );
        if let Some(h) = &c.hint {
            let _ = writeln!(s, "      help: {h}");
        }
    }
    if r.kernels == 0 {
        let _ = writeln!(s, "  no translation unit built: fix them and uncomment their kernels, or rerun `kbuild init --force`");
    } else {
        let _ = writeln!(
            s,
            "next: kbuild build --manifest-path {}",
            dir.join(crate::config::FILE_NAME).display()
        );
    }
    s
}

/// The `{"event": "baseline", ...}` line of `kbuild build --check-baseline --json`.
#[derive(Debug, Serialize)]
pub struct BaselineEvent<'a> {
    pub event: &'static str,
    pub path: &'a str,
    pub drift: bool,
    /// The `kbuild.diff/v1` report of baseline → build.
    pub diff: serde_json::Value,
}

impl<'a> BaselineEvent<'a> {
    pub fn new(c: &'a BaselineCheck) -> BaselineEvent<'a> {
        BaselineEvent {
            event: "baseline",
            path: &c.label,
            drift: c.drift,
            diff: serde_json::from_str(&kbuild_report::diff::to_json(&c.diff, None))
                .unwrap_or_default(),
        }
    }
}

/// The closing line of a build whose jobs failed.
pub fn jobs_failed(count: usize) -> String {
    format!(
        "kbuild: {count} job(s) failed; the manifest lists the objects that built and, as `failed` and `missing`, those that did not (package and publish refuse it without --allow-partial)"
    )
}

/// `--check-baseline` without drift: what was compared.
pub fn baseline_up_to_date(c: &BaselineCheck) -> String {
    let mut msg = format!(
        "baseline {}: up to date ({} objects, {} targets)",
        c.label, c.objects, c.targets
    );
    if c.skipped_targets > 0 {
        let _ = write!(
            msg,
            "; {} more targets in it were not built",
            c.skipped_targets
        );
    }
    msg
}

/// `--check-baseline` with drift: the error, and what to do when it was intended.
pub fn baseline_drifted(c: &BaselineCheck) -> String {
    let toolchain_note = match &c.toolchains {
        Some((base, head)) => format!(
            " (the baseline was made with other toolchains: {base:?}, this build: {head:?})"
        ),
        None => String::new(),
    };
    format!(
        "kernel resources drifted from {}{toolchain_note}; if the change is \
         intended, run `kbuild baseline update` and commit {}",
        c.label, c.label
    )
}
