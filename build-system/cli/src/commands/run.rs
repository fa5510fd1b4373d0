//! `kbuild run gdn`: the Gated DeltaNet engine (kbuild-engine) over the kernels of a build or
//! bundle, through the loader: parity verdicts against the fp64 reference (`--check`, the
//! default) and the benchmark table (`--bench`); rendering (text, JSON) lives here.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kbuild_base::env::Env;

use crate::cli::{GdnArgs, RunCommand};
use crate::render::print_json_line;
use kbuild_engine::bench::{self, BenchOptions};
use kbuild_engine::parity::{self, ParityOptions, ParityReport};
use kbuild_engine::report::{bench_table, check_line, RunReport};
use kbuild_engine::{files, GdnEngine, Geometry, Inputs};
use kbuild_loader::{DeviceOptions, Gpu, Loader};

/// `kbuild run ...`
pub fn run(cmd: RunCommand, env: &Env) -> Result<ExitCode> {
    match cmd {
        RunCommand::Gdn(args) => run_gdn(args, env),
    }
}

fn run_gdn(args: GdnArgs, env: &Env) -> Result<ExitCode> {
    let geometry = Geometry::with_layers(args.layers as usize);
    geometry.validate()?;
    for &t in &args.tokens {
        geometry.check_tokens(t).context("--tokens")?;
    }
    for &n in &args.commits {
        geometry
            .check_commit(n, geometry.window)
            .context("--commits")?;
    }
    if args.seeds.is_empty() {
        bail!("--seeds: give at least one seed");
    }
    if let Some(path) = &args.dump_inputs {
        let inputs = Inputs::seeded(geometry, args.seeds[0]);
        let size = files::write_dump(path, &inputs)?;
        eprintln!(
            "wrote {} ({} MB: {} layers, {} tokens, {} and the fp64 reference)",
            path.display(),
            size / 1_000_000,
            geometry.layers,
            geometry.window,
            inputs.describe()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let sources = files::run_inputs(args.inputs.as_deref(), &args.seeds, geometry)?;
    let bundle = match &args.bundle {
        Some(b) => b.clone(),
        None => args.project.default_out_dir()?,
    };
    let gpu = Gpu::open(&DeviceOptions::from_env(env))?;
    let loader = Loader::open_trusted(&bundle, &gpu, &args.trust.trust(env)?)?;
    let mut engine = GdnEngine::new(&loader, geometry)?;
    let check = args.check || !args.bench;
    if !args.json {
        outln!(
            "kbuild run gdn: {} layers (dk = dv = {}, Hk = {}, Hv = {}, C = {}), window {}, kernels {} on {}",
            geometry.layers,
            geometry.dk,
            geometry.hk,
            geometry.hv,
            geometry.channels(),
            geometry.window,
            loader.package().origin().display(),
            engine.device()
        );
    }
    let json = args.json;
    let parity_report = if check {
        let opts = ParityOptions {
            tokens: args.tokens.clone(),
            trajectory_steps: args.trajectory,
            ..ParityOptions::default()
        };
        let report = parity::run(&mut engine, &sources, &opts, &mut |c| {
            if !json {
                outln!("{}", check_line(c));
            }
        })?;
        if !json {
            let failed = report.checks.iter().filter(|c| !c.pass).count();
            outln!(
                "parity: {} passed, {failed} failed",
                report.checks.len() - failed
            );
        }
        Some(report)
    } else {
        None
    };
    let bench_report = if args.bench {
        let opts = BenchOptions {
            tokens: args.tokens.clone(),
            commits: args.commits.clone(),
            iters: args.iters as usize,
            ..BenchOptions::default()
        };
        let report = bench::run(&mut engine, &opts, &mut |_| {})?;
        if !json {
            out!("{}", bench_table(&report));
        }
        Some(report)
    } else {
        None
    };
    if json {
        print_json_line(&RunReport::new(
            engine.device(),
            &geometry,
            parity_report.as_ref(),
            bench_report.as_ref(),
        ))?;
    }
    let ok = parity_report.as_ref().is_none_or(ParityReport::passed);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
