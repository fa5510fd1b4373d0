//! `kbuild init [DIR]`: write a first Kbuild.toml (the library's `init`), then say what it
//! found.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kbuild_base::env::Env;
use kbuild_build::init::{init, InitOptions, InitReport};

use crate::cli::InitArgs;
use crate::progress::BuildProgress;

pub fn run(args: InitArgs, env: &Env) -> Result<ExitCode> {
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let targets = if args.targets.targets.is_empty() {
        None
    } else {
        Some(
            args.targets
                .targets
                .iter()
                .map(|t| t.0.as_str())
                .collect::<Vec<_>>()
                .join(","),
        )
    };
    let mut defines = std::collections::BTreeMap::new();
    for d in &args.defines {
        let (name, value) = d.split_once('=').unwrap_or((d.as_str(), "1"));
        if name.is_empty() || !name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()) {
            anyhow::bail!("-D {d}: `{name}` is not a macro name (NAME or NAME=VALUE)");
        }
        defines.insert(name.to_string(), value.to_string());
    }
    let opts = InitOptions {
        dir: dir.clone(),
        targets,
        force: args.force,
        include_dirs: args.include_dirs,
        defines,
        cuda_flags: args.cuda_flags,
        hip_flags: args.hip_flags,
        cache_dir: None,
        env: env.clone(),
    };
    if !args.json && crate::progress::verbosity() > crate::progress::Verbosity::Quiet {
        eprintln!(
            "kbuild init: scanning {} and building each translation unit once per vendor to find its entries",
            dir.display()
        );
    }
    let report = init(&opts, &BuildProgress::plain())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report, &dir);
    }
    Ok(if report.kernels == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_summary(r: &InitReport, dir: &Path) {
    println!(
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
    println!(
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
    for u in &r.units {
        match u.status {
            "failed" => {
                for (t, e) in &u.errors {
                    println!(
                        "  {} ({}): does not compile for {t}, commented out: {e}",
                        u.kernel, u.source
                    );
                }
            }
            "partial" => {
                for (t, e) in &u.errors {
                    println!(
                        "  {} ({}): does not compile for {t}, restricted to the other vendor's targets: {e}",
                        u.kernel, u.source
                    );
                }
            }
            _ => {}
        }
    }
    if r.kernels == 0 {
        println!("  no translation unit built: fix them and uncomment their kernels, or rerun `kbuild init --force`");
    } else {
        println!(
            "next: kbuild build --manifest-path {}",
            dir.join(kbuild_build::config::FILE_NAME).display()
        );
    }
}
