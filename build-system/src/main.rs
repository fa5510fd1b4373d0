//! The `kbuild` command line: parses arguments and dispatches to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use kbuild::build::{build, BuildOptions};
use kbuild::config;
use kbuild::toolchain;
use kbuild_manifest::target::{parse_target_list, Target, Vendor};

/// Ahead-of-time GPU kernel builds: every kernel, every target, cached.
#[derive(Parser)]
#[command(name = "kbuild", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    build: BuildArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Build every kernel × variant × target (the default command).
    Build(BuildArgs),
    /// Resource-usage diff (registers, LDS, scratch, spills, occupancy, sizes) of two builds
    /// (each a manifest, build output dir, bundle or baseline), or of the working tree against
    /// a git revision; `--fail-on` makes it a CI gate (exit 1).
    Diff {
        /// The base side.
        #[arg(required_unless_present = "base", conflicts_with = "base")]
        old: Option<PathBuf>,
        /// The head side.
        #[arg(required_unless_present = "base", conflicts_with = "base")]
        new: Option<PathBuf>,
        /// Build this git revision in a temporary worktree and diff it with the working tree.
        #[arg(long, value_name = "GIT_REV")]
        base: Option<String>,
        #[arg(long, default_value = "text", value_parser = ["md", "text", "json"])]
        format: String,
        /// Gate rules: spills, occupancy, registers:+N, registers:+N%, lds:+N, scratch.
        #[arg(long, value_name = "RULES", value_parser = parse_fail_on)]
        fail_on: Option<FailOn>,
        /// Allowlist of known cases (kbuild-allow.toml).
        #[arg(long, value_name = "FILE")]
        allow: Option<PathBuf>,
        /// With --base: targets of both builds (default: each side's project list).
        #[arg(long, value_name = "LIST", value_parser = parse_targets)]
        targets: Option<TargetList>,
        /// With --base: path to Kbuild.toml.
        #[arg(long, value_name = "PATH")]
        manifest_path: Option<PathBuf>,
        #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        jobs: Option<u32>,
    },
    /// The committed resource baseline (kernels/resources.json).
    #[command(subcommand)]
    Baseline(BaselineCommand),
    /// List the GPUs the CUDA driver and the HIP runtime report (none is a normal answer).
    Devices {
        #[arg(long)]
        json: bool,
    },
    /// Which code object of a build runs on a device (detected or simulated), with the rule
    /// that accepted or rejected every candidate; exit 1 when a kernel has none.
    Explain(kbuild::explain_cmd::ExplainArgs),
    /// Package a build into a deterministic bundle dist/NAME-VERSION.kbundle (tar+zstd,
    /// manifest.json first, objects once by sha256).
    Package(kbuild::registry_cmd::PackageArgs),
    /// Publish a bundle to a registry (a directory or oci://HOST[:PORT]/REPO).
    Publish(kbuild::registry_cmd::PublishArgs),
    /// Fetch a version (semver requirement) and only the targets a device runs; verify,
    /// cache, write Kbuild.lock.
    Pull(kbuild::registry_cmd::PullArgs),
    /// List cached and published versions.
    Ls(kbuild::registry_cmd::LsArgs),
    /// Make an ed25519 signing key pair.
    Keygen(kbuild::registry_cmd::KeygenArgs),
    /// Sign a bundle file or a published version.
    Sign(kbuild::registry_cmd::SignArgs),
    /// Run a workload over the project's kernels through the loader (`kbuild run gdn`).
    #[command(subcommand)]
    Run(kbuild::run_cmd::RunCommand),
    /// Show the resources (registers, shared/LDS, stack/scratch, spills, occupancy) of code
    /// objects: cubins, hsaco, PTX, fatbins, offload bundles, host ELF files with device code.
    Inspect {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// List or install toolchains.
    #[command(subcommand)]
    Toolchain(ToolchainCommand),
    /// Remove the build output (and with --cache, the compile cache).
    Clean {
        #[arg(long)]
        manifest_path: Option<PathBuf>,
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also empty the content-addressed compile cache.
        #[arg(long)]
        cache: bool,
    },
}

#[derive(Subcommand)]
enum BaselineCommand {
    /// Rebuild and rewrite the baseline (a --targets subset replaces only those targets).
    Update {
        #[arg(long, value_name = "LIST", value_parser = parse_targets)]
        targets: Option<TargetList>,
        #[arg(long, value_name = "PATH")]
        manifest_path: Option<PathBuf>,
        /// The baseline file (default: resources.json next to Kbuild.toml).
        #[arg(long, value_name = "FILE")]
        baseline: Option<PathBuf>,
        /// Take the resources from this build output dir or manifest instead of building.
        #[arg(long, value_name = "PATH")]
        from: Option<PathBuf>,
        #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        jobs: Option<u32>,
    },
}

/// A parsed `--fail-on` value.
#[derive(Clone)]
struct FailOn(Vec<kbuild_manifest::diff::gate::Rule>);

fn parse_fail_on(s: &str) -> Result<FailOn, kbuild_manifest::diff::gate::GateRuleError> {
    kbuild_manifest::diff::gate::parse_rules(s).map(FailOn)
}

#[derive(Subcommand)]
enum ToolchainCommand {
    /// Show each toolchain's path, version and the catalogue targets it can build.
    List {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        manifest_path: Option<PathBuf>,
    },
    /// Install a toolchain (both when none is named). Idempotent.
    Install {
        #[arg(value_parser = ["cuda", "hip"])]
        which: Option<String>,
    },
}

#[derive(Args, Default)]
struct BuildArgs {
    /// Targets: names (sm_89, gfx1100, gfx90a:xnack-, compute_90), groups (ampere, rdna3, all),
    /// or TORCH_CUDA_ARCH_LIST syntax (8.0;8.9;9.0+PTX). Default: the project's list.
    #[arg(long, value_name = "LIST", value_parser = parse_targets)]
    targets: Option<TargetList>,
    /// Path to Kbuild.toml (default: found from the current directory).
    #[arg(long, value_name = "PATH")]
    manifest_path: Option<PathBuf>,
    /// Output directory (default: the project's out-dir).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Parallel compiles (default: number of cores; a make/cargo jobserver is honoured).
    #[arg(short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    /// Keep building other jobs after a failure.
    #[arg(long)]
    keep_going: bool,
    /// Also write one fatbin per CUDA kernel and one offload bundle per HIP kernel.
    #[arg(long)]
    fat: bool,
    /// One JSON event per line on stdout.
    #[arg(long)]
    json: bool,
    /// Kill a compile that runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS")]
    job_timeout: Option<u64>,
    /// Print each job's compile command as a JSON line instead of building.
    #[arg(long)]
    print_commands: bool,
    /// Prefix every compiler command with this launcher (`sccache`, a wrapper); overrides
    /// Kbuild.toml `launcher` and KBUILD_LAUNCHER. It is part of no cache key.
    #[arg(long, value_name = "CMD")]
    launcher: Option<String>,
    /// Fetch cache entries another machine compiled from this OCI repository
    /// (oci://HOST[:PORT]/REPO; overrides Kbuild.toml `remote-cache`). Never fails a build.
    #[arg(long, value_name = "URL")]
    remote_cache: Option<String>,
    /// `read` (default) or `read-write` (also upload what this build compiles).
    #[arg(long, value_name = "MODE", value_parser = clap::value_parser!(kbuild::remote_cache::RemoteMode))]
    remote_cache_mode: Option<kbuild::remote_cache::RemoteMode>,
    /// Talk to the remote cache over http:// (a local test registry).
    #[arg(long)]
    plain_http: bool,
    /// After building, fail (exit 1, printing the diff) if the resources drifted from the
    /// committed baseline (default: resources.json next to Kbuild.toml).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true)]
    check_baseline: Option<Option<PathBuf>>,
}

/// A parsed `--targets` value (one argument, many targets).
#[derive(Clone)]
struct TargetList(Vec<Target>);

fn parse_targets(s: &str) -> Result<TargetList, String> {
    parse_target_list(s)
        .map(TargetList)
        .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KBUILD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::env::var_os("NO_COLOR").is_none())
        .try_init();
}

fn load_project(manifest_path: Option<PathBuf>) -> Result<config::Project> {
    let file = match manifest_path {
        Some(p) => p,
        None => config::find(&std::env::current_dir().context("reading the current directory")?)?,
    };
    Ok(config::load(&file)?)
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        None => run_build(cli.build),
        Some(Command::Build(args)) => run_build(args),
        Some(Command::Inspect { files, json }) => Ok(kbuild::inspect::run(&files, json)),
        Some(Command::Devices { json }) => Ok(kbuild::explain_cmd::run_devices(json)),
        Some(Command::Explain(args)) => kbuild::explain_cmd::run_explain(args),
        Some(Command::Package(args)) => kbuild::registry_cmd::run_package(args),
        Some(Command::Publish(args)) => kbuild::registry_cmd::run_publish(args),
        Some(Command::Pull(args)) => kbuild::registry_cmd::run_pull(args),
        Some(Command::Ls(args)) => kbuild::registry_cmd::run_ls(args),
        Some(Command::Keygen(args)) => kbuild::registry_cmd::run_keygen(args),
        Some(Command::Sign(args)) => kbuild::registry_cmd::run_sign(args),
        Some(Command::Run(cmd)) => kbuild::run_cmd::run(cmd),
        Some(Command::Diff {
            old,
            new,
            base,
            format,
            fail_on,
            allow,
            targets,
            manifest_path,
            jobs,
        }) => Ok(kbuild::diff_cmd::run(&kbuild::diff_cmd::DiffRequest {
            old,
            new,
            base,
            format: format.parse().map_err(anyhow::Error::msg)?,
            rules: fail_on.map(|f| f.0).unwrap_or_default(),
            allow,
            targets: targets.map(|t| t.0),
            manifest_path,
            jobs: jobs.map(|j| j as usize),
        })),
        Some(Command::Baseline(BaselineCommand::Update {
            targets,
            manifest_path,
            baseline,
            from,
            jobs,
        })) => {
            let project = load_project(manifest_path)?;
            let req = kbuild::baseline::UpdateRequest {
                build: BuildOptions {
                    targets: targets.map(|t| t.0),
                    jobs: jobs.map(|j| j as usize),
                    ..BuildOptions::default()
                },
                path: baseline,
                from,
            };
            kbuild::baseline::update(&project, &req)
        }
        Some(Command::Toolchain(ToolchainCommand::Install { which })) => {
            if which.as_deref() != Some("hip") {
                println!("{}", toolchain::install_cuda()?);
            }
            if which.as_deref() != Some("cuda") {
                for line in toolchain::install_hip()? {
                    println!("{line}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Toolchain(ToolchainCommand::List {
            json,
            manifest_path,
        })) => {
            let tc_config = match manifest_path {
                Some(p) => config::load(&p)?.toolchain,
                None => std::env::current_dir()
                    .ok()
                    .and_then(|d| config::find(&d).ok())
                    .and_then(|f| config::load(&f).ok())
                    .map(|p| p.toolchain)
                    .unwrap_or_default(),
            };
            let tcs = toolchain::Toolchains::discover(&tc_config, &kbuild::fsutil::cache_dir());
            list_toolchains(&tcs, json);
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Clean {
            manifest_path,
            out,
            cache,
        }) => {
            let out = match out {
                Some(o) => o,
                None => load_project(manifest_path)?.out_dir,
            };
            if out.exists() {
                std::fs::remove_dir_all(&out)
                    .with_context(|| format!("removing {}", out.display()))?;
                println!("removed {}", out.display());
            }
            if cache {
                let c = kbuild::fsutil::cache_dir();
                if c.exists() {
                    std::fs::remove_dir_all(&c)
                        .with_context(|| format!("removing {}", c.display()))?;
                    println!("removed {}", c.display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_build(args: BuildArgs) -> Result<ExitCode> {
    let mut project = load_project(args.manifest_path)?;
    if let Some(l) = args.launcher {
        project.launcher = Some(l);
    }
    let opts = BuildOptions {
        targets: args.targets.map(|t| t.0),
        out_dir: args.out,
        jobs: args.jobs.map(|j| j as usize),
        keep_going: args.keep_going,
        fat: args.fat,
        json: args.json,
        job_timeout: args.job_timeout,
        cache_dir: None,
        remote_cache: args.remote_cache,
        remote_cache_mode: args.remote_cache_mode,
        plain_http: args.plain_http,
    };
    if args.print_commands {
        let out_dir = opts
            .out_dir
            .clone()
            .unwrap_or_else(|| project.out_dir.clone());
        for (job, cmd) in kbuild::build::commands(&project, &opts)? {
            let line = serde_json::json!({
                "kernel": job.kernel_name, "variant": job.variant_name(), "target": job.target.to_string(),
                "cwd": project.root, "launcher": cmd.launcher, "program": cmd.program, "args": cmd.key_args,
                "output": out_dir.join(&job.out_rel),
            });
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = build(&project, &opts)?;
    if report.failures.is_empty() {
        if let Some(file) = args.check_baseline {
            let file = file.unwrap_or_else(|| kbuild::baseline::default_path(&project));
            return kbuild::baseline::check(&report.manifest_path, &file, args.json);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        if !args.json {
            eprintln!(
                "error: {} job(s) failed; the manifest lists only the objects that built",
                report.failures.len()
            );
        }
        Ok(ExitCode::from(1))
    }
}

fn list_toolchains(tcs: &toolchain::Toolchains, json: bool) {
    let cuda = tcs.cuda.as_ref().map(|c| {
        serde_json::json!({
            "kind": "cuda", "found_by": c.found_by, "path": c.nvcc, "version": c.version.to_string(),
            "version_text": c.version_text.lines().find(|l| l.contains("release")).unwrap_or_default(),
            "identity": c.identity, "targets": toolchain::buildable_targets(tcs, Vendor::Nvidia),
        })
    });
    let hip = tcs.hip.as_ref().map(|h| {
        serde_json::json!({
            "kind": "hip", "found_by": h.found_by, "path": h.clang, "device_libs": h.device_libs,
            "version": h.version.to_string(), "version_text": h.version_text.lines().next().unwrap_or_default(),
            "identity": h.identity, "targets": toolchain::buildable_targets(tcs, Vendor::Amd),
        })
    });
    if json {
        println!(
            "{}",
            serde_json::json!({"schema": "kbuild.toolchains/v1", "cuda": cuda, "hip": hip})
        );
        return;
    }
    for (name, v, hint) in [
        ("cuda", cuda, "kbuild toolchain install cuda"),
        ("hip", hip, "kbuild toolchain install hip"),
    ] {
        match v {
            Some(v) => {
                println!(
                    "{name}: {} ({})",
                    v["path"].as_str().unwrap_or_default(),
                    v["found_by"].as_str().unwrap_or_default()
                );
                println!(
                    "  version: {}",
                    v["version_text"].as_str().unwrap_or_default()
                );
                if let Some(d) = v.get("device_libs").and_then(|d| d.as_str()) {
                    println!("  device libs: {d}");
                }
                let targets: Vec<&str> = v["targets"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|t| t.as_str()).collect())
                    .unwrap_or_default();
                println!(
                    "  builds: {}",
                    if targets.is_empty() {
                        "nothing (see `kbuild toolchain install`)".to_string()
                    } else {
                        targets.join(" ")
                    }
                );
            }
            None => println!("{name}: not found (hint: {hint})"),
        }
    }
}
