//! `kbuild [build]`: build every kernel × variant × target, or print the compile commands.

use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::env::Env;
use kbuild_build::build::{build, commands, shards, BuildOptions};
use kbuild_build::config;

use crate::cli::BuildArgs;
use crate::progress::BuildProgress;

pub fn run(args: BuildArgs, env: &Env) -> Result<ExitCode> {
    let mut project = config::open(args.manifest_path.as_deref())?;
    if let Some(l) = args.launcher {
        project.launcher = Some(l);
    }
    let (targets, targets_all) = crate::cli::build_targets(&args.targets)?;
    let opts = BuildOptions {
        targets,
        targets_all,
        out_dir: args.out,
        jobs: args.jobs.map(|j| j as usize),
        keep_going: args.keep_going,
        fat: args.fat,
        job_timeout: args.job_timeout,
        cache_dir: None,
        remote_cache: args.remote_cache,
        remote_cache_mode: args.remote_cache_mode,
        plain_http: args.plain_http,
        shard: args.shard,
        env: env.clone(),
    };
    if let Some(count) = args.print_shards {
        let (all, split) = shards(&project, &opts, count, &BuildProgress::plain())?;
        if args.json {
            let list: Vec<serde_json::Value> = split
                .iter()
                .map(|s| {
                    let t: Vec<String> = s.targets.iter().map(ToString::to_string).collect();
                    serde_json::json!({"index": s.index, "targets": t, "cost": s.cost})
                })
                .collect();
            let all: Vec<String> = all.iter().map(ToString::to_string).collect();
            println!(
                "{}",
                serde_json::json!({"schema": "kbuild.shards/v1", "count": count, "targets": all, "shards": list})
            );
        } else {
            for s in &split {
                let t: Vec<String> = s.targets.iter().map(ToString::to_string).collect();
                let list = if t.is_empty() {
                    "(no targets)".to_string()
                } else {
                    t.join(", ")
                };
                println!("shard {}/{count} (cost {}): {list}", s.index, s.cost);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.print_commands {
        let out_dir = opts
            .out_dir
            .clone()
            .unwrap_or_else(|| project.out_dir.clone());
        for (job, cmd) in commands(&project, &opts, &BuildProgress::plain())? {
            let line = serde_json::json!({
                "kernel": job.kernel_name, "variant": job.variant_name(), "target": job.target.to_string(),
                "cwd": project.root, "launcher": cmd.launcher, "program": cmd.program, "args": cmd.args(),
                "output": out_dir.join(&job.out_rel),
            });
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = build(&project, &opts, &BuildProgress::new(args.json, env))?;
    if report.failures.is_empty() {
        if let Some(file) = args.check_baseline {
            let file = file.unwrap_or_else(|| kbuild_build::baseline::default_path(&project));
            return super::baseline::check(&report.manifest_path, &file, args.json, env);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        if !args.json {
            eprintln!(
                "kbuild: {} job(s) failed; the manifest lists the objects that built and, as `failed` and `missing`, those that did not (package and publish refuse it without --allow-partial)",
                report.failures.len()
            );
        }
        Ok(ExitCode::from(1))
    }
}
