//! `kbuild devices` and `kbuild explain`: thin commands over `kbuild-loader` (detection,
//! selection and its rendering live there, shared with the C ABI).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use kbuild_loader::detect::{self, DeviceOptions};
use kbuild_loader::explain::{devices_json, devices_text, explain_json, explain_text};
use kbuild_loader::Package;
use kbuild_manifest::compat::{parse_version, Device};
use kbuild_manifest::target::Version;

/// Arguments of `kbuild explain`.
#[derive(Args, Debug, Default)]
pub struct ExplainArgs {
    /// A build directory (holding manifest.json) or a manifest file. Default: the project's
    /// out-dir.
    #[arg(value_name = "BUNDLE|DIR|MANIFEST")]
    pub path: Option<PathBuf>,
    /// `auto` (detect) or a target to simulate: sm_90, 9.0, gfx1151, gfx90a:sramecc+:xnack-.
    #[arg(long, value_name = "auto|TARGET", env = "KBUILD_DEVICE", value_parser = parse_device)]
    pub device: Option<String>,
    /// CUDA driver version of a simulated NVIDIA device (default: the newest kbuild knows).
    #[arg(long, value_name = "VERSION", value_parser = parse_driver)]
    pub driver: Option<Version>,
    /// A simulated AMD device's runtime does not load generic (code object v6) objects.
    #[arg(long)]
    pub no_generic: bool,
    /// Only this kernel.
    #[arg(long, value_name = "NAME")]
    pub kernel: Option<String>,
    /// `kbuild.explain/v1` JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Manifest path used to find the default out-dir.
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
}

fn parse_device(s: &str) -> Result<String, String> {
    if s == "auto" {
        return Ok(s.to_string());
    }
    Device::parse(s, None, None)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

fn parse_driver(s: &str) -> Result<Version, String> {
    parse_version(s).ok_or_else(|| format!("`{s}` is not a CUDA version like 13.0"))
}

/// `kbuild devices [--json]`: always exits 0; no runtime or no device is a normal answer.
pub fn run_devices(json: bool) -> ExitCode {
    let detection = detect::detect();
    if json {
        println!("{}", devices_json(&detection));
    } else {
        print!("{}", devices_text(&detection));
    }
    ExitCode::SUCCESS
}

/// `kbuild explain`: exit 0 when every kernel has a selection, 1 when any has none.
pub fn run_explain(args: ExplainArgs) -> Result<ExitCode> {
    let path = match &args.path {
        Some(p) => p.clone(),
        None => default_out_dir(args.manifest_path.as_deref())?,
    };
    let package = Package::open(&path)?;
    let opts = DeviceOptions {
        device: args.device.clone(),
        driver: args.driver,
        no_generic: args.no_generic,
        index: None,
    };
    let device = detect::resolve(&opts)?;
    let mut selection = package.select(&device.device);
    if let Some(k) = &args.kernel {
        selection = selection.only_kernel(k)?;
    }
    let source = package.origin().display().to_string();
    if args.json {
        println!("{}", explain_json(&selection, &device, &source));
    } else {
        print!("{}", explain_text(&selection, &device, &source));
    }
    if selection.complete() {
        Ok(ExitCode::SUCCESS)
    } else {
        if !args.json {
            for m in selection.missing() {
                eprintln!("error: {m}");
            }
        }
        Ok(ExitCode::from(1))
    }
}

fn default_out_dir(manifest_path: Option<&Path>) -> Result<PathBuf> {
    let file =
        match manifest_path {
            Some(p) => p.to_path_buf(),
            None => crate::config::find(
                &std::env::current_dir().context("reading the current directory")?,
            )
            .context("no BUNDLE|DIR|MANIFEST given and no Kbuild.toml here to find the out-dir")?,
        };
    Ok(crate::config::load(&file)?.out_dir)
}
