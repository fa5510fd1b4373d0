//! `kbuild run gdn`: the Gated DeltaNet engine (kbuild-engine) over the kernels of a build or
//! bundle, through the loader: parity verdicts against the fp64 reference (`--check`, the
//! default) and the benchmark table (`--bench`); rendering (text, JSON) lives here.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kbuild_base::env::Env;

use crate::cli::{GdnArgs, RunCommand};
use crate::render::print_json_line;
use kbuild_engine::bench::{self, BenchOptions, BenchReport};
use kbuild_engine::parity::{self, Check, ParityOptions, ParityReport};
use kbuild_engine::report::RunReport;
use kbuild_engine::{GdnEngine, Geometry, Inputs};
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
        let bytes = kbuild_engine::anchor::dump(&inputs)?;
        write_atomic(path, &bytes)?;
        eprintln!(
            "wrote {} ({} MB: {} layers, {} tokens, {} and the fp64 reference)",
            path.display(),
            bytes.len() / 1_000_000,
            geometry.layers,
            geometry.window,
            inputs.describe()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let sources: Vec<Inputs> = match &args.inputs {
        Some(p) => {
            let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            vec![Inputs::from_safetensors(
                &p.display().to_string(),
                &bytes,
                geometry,
            )?]
        }
        None => args
            .seeds
            .iter()
            .map(|s| Inputs::seeded(geometry, *s))
            .collect(),
    };
    let bundle = match &args.bundle {
        Some(b) => b.clone(),
        None => args.project.default_out_dir()?,
    };
    let gpu = Gpu::open(&DeviceOptions::from_env(env))?;
    let loader = Loader::open_trusted(&bundle, &gpu, &args.trust.trust(env)?)?;
    let mut engine = GdnEngine::new(&loader, geometry)?;
    let check = args.check || !args.bench;
    if !args.json {
        println!(
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
                println!("{}", check_line(c));
            }
        })?;
        if !json {
            let failed = report.checks.iter().filter(|c| !c.pass).count();
            println!(
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
            print!("{}", bench_table(&report));
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

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    kbuild_base::fs::write_atomic(path, bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// `  PASS  name  rel-L2 2.1e-07 ≤ 1e-05` / `  FAIL  name  bitwise: 3 of 10 elements differ`.
pub fn check_line(c: &Check) -> String {
    let verdict = if c.pass { "PASS" } else { "FAIL" };
    let what = match c.kind {
        "rel-l2" => format!("rel-L2 {:.2e} ≤ {:.0e}", c.value, c.limit),
        _ => format!("bitwise: {}", c.detail),
    };
    let detail = if c.kind == "rel-l2" && !c.detail.is_empty() {
        format!(" ({})", c.detail)
    } else {
        String::new()
    };
    format!("  {verdict}  {:<58} {what}{detail}", c.name)
}

/// The benchmark table, shaped like the per-stack tables engine teams publish.
pub fn bench_table(r: &BenchReport) -> String {
    let mut s = format!(
        "benchmark: {} layers, state {:.1} MB, CUDA-graph replays (median of timed replays)\n",
        r.layers,
        r.state_bytes as f64 / 1e6
    );
    s.push_str("  op                 T/n  launches  median µs    min µs   state GB/s  vs copy\n");
    for row in &r.rows {
        let t = if row.tokens == 0 {
            "-".to_string()
        } else {
            row.tokens.to_string()
        };
        s.push_str(&format!(
            "  {:<17} {:>4} {:>9} {:>10.1} {:>9.1} {:>12.0} {:>7.2}\n",
            row.op, t, row.launches, row.median_us, row.min_us, row.gb_per_s, row.vs_copy
        ));
    }
    let per = |n: usize| {
        let get = |op: &str| {
            r.rows
                .iter()
                .find(|x| x.op == op && x.tokens == n)
                .map(|x| x.median_us)
        };
        match (get("commit per-layer"), get("commit batched")) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        }
    };
    let ratios: Vec<String> = (1..=8)
        .filter_map(|n| per(n).map(|x| format!("n={n} {x:.2}×")))
        .collect();
    if !ratios.is_empty() {
        s.push_str(&format!(
            "  batched commit speed-up over per-layer: {}\n",
            ratios.join(", ")
        ));
    }
    s
}
