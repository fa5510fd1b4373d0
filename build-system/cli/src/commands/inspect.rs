//! `kbuild inspect FILE...`: read each path (code objects, containers, build dirs,
//! manifest.json, bundles), print resources as a table or `kbuild.inspect/v1` JSON. A path
//! that cannot be read gets an error line on stderr (and an `errors` entry in the JSON); the
//! rest print.

use std::path::PathBuf;
use std::process::ExitCode;

use kbuild_base::env::Env;
use kbuild_build::sides::inspect_path;
use kbuild_bundle::archive::ArchiveLimits;
use kbuild_manifest::resources::{BlockSize, InspectReport, INSPECT_SCHEMA};
use kbuild_report::inspect::inspect_table;

/// Inspect `files`; exit 1 when any could not be read. `block_size`: `--block-size`.
pub fn run(files: &[PathBuf], json: bool, block_size: Option<u32>, env: &Env) -> ExitCode {
    let limits = ArchiveLimits::from_env(env);
    let block_size = block_size.map(BlockSize::flag);
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        let found = inspect_path(f, limits, block_size);
        objects.extend(found.objects);
        errors.extend(found.errors);
    }
    for e in &errors {
        eprintln!("error: {}: {}", e.path, e.error);
    }
    let mut failed = !errors.is_empty();
    if json {
        let report = InspectReport {
            schema: INSPECT_SCHEMA,
            objects,
            errors,
        };
        match serde_json::to_string_pretty(&report) {
            Ok(s) => outln!("{s}"),
            Err(e) => {
                eprintln!("error: rendering JSON: {e}");
                failed = true;
            }
        }
    } else {
        out!("{}", inspect_table(&objects));
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
