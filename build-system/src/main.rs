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
    let project = load_project(args.manifest_path)?;
    let opts = BuildOptions {
        targets: args.targets.map(|t| t.0),
        out_dir: args.out,
        jobs: args.jobs.map(|j| j as usize),
        keep_going: args.keep_going,
        fat: args.fat,
        json: args.json,
        job_timeout: args.job_timeout,
        cache_dir: None,
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
