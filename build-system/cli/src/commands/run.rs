//! `kbuild run gdn`: the Gated DeltaNet engine (kbuild-engine) over the kernels of a build or
//! bundle, through the loader: parity verdicts against the fp64 reference (`--check`, the
//! default) and the benchmark table (`--bench`); rendering (text, JSON) lives here.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_engine::report::{bench_table, check_line};
use kbuild_engine::run::{dump_inputs, run_gdn, RunEvent, RunRequest};
use kbuild_loader::{DeviceOptions, Gpu, Loader};

use crate::cli::{GdnArgs, RunCommand};
use crate::render::print_json_line;

/// `kbuild run ...`
pub fn run(cmd: RunCommand, env: &Env) -> Result<ExitCode> {
    match cmd {
        RunCommand::Gdn(args) => gdn(args, env),
    }
}

fn gdn(args: GdnArgs, env: &Env) -> Result<ExitCode> {
    let req = RunRequest {
        layers: args.layers as usize,
        tokens: args.tokens,
        commits: args.commits,
        seeds: args.seeds,
        inputs: args.inputs,
        trajectory: args.trajectory,
        iters: args.iters as usize,
        check: args.check,
        bench: args.bench,
    };
    if let Some(path) = &args.dump_inputs {
        let d = dump_inputs(&req, path)?;
        eprintln!(
            "wrote {} ({} MB: {} layers, {} tokens, {} and the fp64 reference)",
            path.display(),
            d.bytes / 1_000_000,
            d.geometry.layers,
            d.geometry.window,
            d.inputs
        );
        return Ok(ExitCode::SUCCESS);
    }
    let prepared = req.prepare()?;
    let bundle = match &args.bundle {
        Some(b) => b.clone(),
        None => args.project.default_out_dir()?,
    };
    let gpu = Gpu::open(&DeviceOptions::from_env(env))?;
    let loader = Loader::open_trusted(&bundle, &gpu, &args.trust.trust(env)?)?;
    let (json, g) = (args.json, prepared.geometry);
    let outcome = run_gdn(
        &loader,
        &prepared,
        &mut |device| {
            if !json {
                outln!(
                    "kbuild run gdn: {} layers (dk = dv = {}, Hk = {}, Hv = {}, C = {}), window {}, kernels {} on {device}",
                    g.layers, g.dk, g.hk, g.hv, g.channels(), g.window,
                    loader.package().origin().display(),
                );
            }
        },
        &mut |event| match event {
            _ if json => {}
            RunEvent::Check(c) => outln!("{}", check_line(c)),
            RunEvent::Parity { passed, failed } => {
                outln!("parity: {passed} passed, {failed} failed")
            }
            RunEvent::Bench(r) => out!("{}", bench_table(r)),
        },
    )?;
    if json {
        print_json_line(&outcome.report())?;
    }
    Ok(if outcome.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
