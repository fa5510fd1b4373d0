//! `kbuild inspect FILE...`: read each file, walk containers, print resources as a table or
//! `kbuild.inspect/v1` JSON. A file that cannot be read gets an error line; the rest print.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kbuild_manifest::resources::{
    inspect, BlockSize, InspectReport, InspectedObject, INSPECT_SCHEMA,
};
use kbuild_report::inspect::inspect_table;

/// The ptxas log kbuild writes next to a cubin it built (`x.cubin.log`), if any.
fn build_log(path: &Path) -> Option<String> {
    let mut p = path.as_os_str().to_owned();
    p.push(".log");
    std::fs::read_to_string(PathBuf::from(p)).ok()
}

/// Inspect `files`; exit 1 when any could not be read. `block_size`: `--block-size`.
pub fn run(files: &[PathBuf], json: bool, block_size: Option<u32>) -> ExitCode {
    let block_size = block_size.map(BlockSize::flag);
    let mut objects: Vec<InspectedObject> = Vec::new();
    let mut failed = false;
    for f in files {
        let label = f.display().to_string();
        let data = match std::fs::read(f) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("error: {label}: {e}");
                failed = true;
                continue;
            }
        };
        let log = build_log(f);
        match inspect(&label, &data, log.as_deref(), block_size) {
            Ok(found) if found.is_empty() => {
                eprintln!("error: {label}: no GPU code object in it");
                failed = true;
            }
            Ok(found) => objects.extend(found),
            Err(e) => {
                eprintln!("error: {label}: {e}");
                failed = true;
            }
        }
    }
    if json {
        let report = InspectReport {
            schema: INSPECT_SCHEMA,
            objects,
        };
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: rendering JSON: {e}");
                failed = true;
            }
        }
    } else {
        print!("{}", inspect_table(&objects));
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
