//! `kbuild devices`: the GPUs the CUDA driver and the HIP runtime report (detection and its
//! rendering live in `kbuild-loader`, shared with the C ABI).

use std::process::ExitCode;

use kbuild_base::env::Env;
use kbuild_loader::detect;
use kbuild_loader::explain::{devices_json, devices_text};

/// `kbuild devices [--json]`: always exits 0; no runtime or no device is a normal answer.
pub fn run(json: bool, env: &Env) -> ExitCode {
    let detection = detect::detect_with(&kbuild_loader::hip::HipSearch::from_env(env));
    if json {
        outln!("{}", devices_json(&detection));
    } else {
        out!("{}", devices_text(&detection));
    }
    ExitCode::SUCCESS
}
