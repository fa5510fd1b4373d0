//! `kbuild toolchain install|list`: install the pinned toolchains, show what was found.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_build::config;
use kbuild_build::toolchain::{self, Installed, ToolOutput, ToolchainError, Toolchains};
use kbuild_manifest::target::Vendor;

/// Install a toolchain (both when none is named). Idempotent. One line per toolchain; pip's
/// and apt's own output only with `-v`, or on stderr when the install fails.
pub fn install(which: Option<&str>, env: &Env) -> Result<ExitCode> {
    let output = match crate::progress::verbosity() {
        crate::progress::Verbosity::Verbose => ToolOutput::Shown,
        _ => ToolOutput::Captured,
    };
    if which != Some("hip") {
        println!("{}", shown(toolchain::install_cuda(env, output))?);
    }
    if which != Some("cuda") {
        println!("{}", shown(toolchain::install_hip(env, output))?);
    }
    Ok(ExitCode::SUCCESS)
}

/// A failed install's captured tool output goes to stderr before its error.
fn shown(r: Result<Installed, ToolchainError>) -> Result<Installed, ToolchainError> {
    if let Err(e) = &r {
        if let Some(out) = e.tool_output() {
            eprint!("{out}");
            if !out.ends_with('\n') {
                eprintln!();
            }
        }
    }
    r
}

/// Each toolchain's path, version and the catalogue targets it can build.
pub fn list(json: bool, manifest_path: Option<&Path>, env: &Env) -> Result<ExitCode> {
    let tc_config = match manifest_path {
        Some(p) => config::load(p)?.toolchain,
        // Outside a project the defaults apply.
        None => config::open(None).map(|p| p.toolchain).unwrap_or_default(),
    };
    let tcs = Toolchains::discover(&tc_config, &Dirs::from_env(env)?.cache, env);
    list_toolchains(&tcs, json);
    Ok(ExitCode::SUCCESS)
}

fn list_toolchains(tcs: &Toolchains, json: bool) {
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
