//! `--fat`: one NVIDIA fatbin (fatbinary) per CUDA kernel variant and one clang offload
//! bundle (clang-offload-bundler) per HIP kernel variant, so a single file can be handed to
//! `cuModuleLoadData` / `hipModuleLoadData`. Cached like compiles, keyed on the inputs' bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kbuild_manifest::manifest::{ContainerRecord, ObjectRecord};
use kbuild_manifest::target::{Target, Vendor};

use crate::cache::{Cache, Made};
use crate::toolchain::Toolchains;
use kbuild_base::fs as fsutil;

type WriteError = (String, std::io::Error);

/// Write the containers for `records`; returns their manifest records.
pub fn write_containers(
    tcs: &Toolchains,
    cache: &Cache,
    out_dir: &Path,
    records: &[ObjectRecord],
) -> Result<Vec<ContainerRecord>, WriteError> {
    let mut groups: BTreeMap<(String, Option<String>, Vendor), Vec<&ObjectRecord>> =
        BTreeMap::new();
    for r in records {
        let Ok(t) = r.target.parse::<Target>() else {
            continue;
        };
        groups
            .entry((r.kernel.clone(), r.variant.clone(), t.vendor()))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for ((kernel, variant, vendor), members) in groups {
        let stem = match &variant {
            Some(v) => format!("{kernel}.{v}"),
            None => kernel.clone(),
        };
        let (ext, format) = match vendor {
            Vendor::Nvidia => ("fatbin", "fatbin"),
            Vendor::Amd => ("hipfb", "offload-bundle"),
        };
        let rel = PathBuf::from("fat").join(format!("{stem}.{ext}"));
        let bytes = match vendor {
            Vendor::Nvidia => {
                let Some(tc) = &tcs.cuda else { continue };
                let mut args = vec!["-64".to_string()];
                for m in &members {
                    let t: Target = m.target.parse().map_err(|_| bad(&m.target))?;
                    let kind = if t.ptx { "ptx" } else { "elf" };
                    let sm = t.processor.name.trim_start_matches("sm_");
                    args.push(format!(
                        "--image3=kind={kind},sm={sm},file={}",
                        out_dir.join(&m.path).display()
                    ));
                }
                run_cached(
                    cache,
                    &tc.identity,
                    &tc.fatbinary(),
                    &args,
                    &members,
                    |tmp| vec![format!("--create={}", tmp.display())],
                )?
            }
            Vendor::Amd => {
                let Some(tc) = &tcs.hip else { continue };
                let mut targets = vec!["host-x86_64-unknown-linux-gnu".to_string()];
                let mut inputs = vec!["--input=/dev/null".to_string()];
                for m in &members {
                    targets.push(format!("hipv4-amdgcn-amd-amdhsa--{}", m.target));
                    inputs.push(format!("--input={}", out_dir.join(&m.path).display()));
                }
                let mut args = vec![
                    "--type=o".to_string(),
                    "--bundle-align=4096".into(),
                    format!("--targets={}", targets.join(",")),
                ];
                args.extend(inputs);
                run_cached(cache, &tc.identity, &tc.bundler(), &args, &members, |tmp| {
                    vec![format!("--output={}", tmp.display())]
                })?
            }
        };
        let dest = out_dir.join(&rel);
        fsutil::write_if_changed(&dest, &bytes).map_err(|e| (dest.display().to_string(), e))?;
        out.push(ContainerRecord {
            kernel,
            variant,
            format: format.to_string(),
            path: rel.display().to_string(),
            sha256: kbuild_base::digest::sha256_hex(&bytes),
            size: bytes.len() as u64,
            targets: members.iter().map(|m| m.target.clone()).collect(),
        });
    }
    Ok(out)
}

fn bad(target: &str) -> WriteError {
    (
        target.to_string(),
        std::io::Error::other("unknown target in manifest"),
    )
}

/// Run a container tool unless the cache has its output for these exact inputs.
fn run_cached(
    cache: &Cache,
    identity: &str,
    tool: &Path,
    args: &[String],
    members: &[&ObjectRecord],
    output_arg: impl Fn(&Path) -> Vec<String>,
) -> Result<Vec<u8>, WriteError> {
    // Key on the inputs' content, not their paths.
    let mut key_args: Vec<String> = vec![tool
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()];
    key_args.extend(
        args.iter()
            .filter(|a| !a.contains("file=") && !a.starts_with("--input="))
            .cloned(),
    );
    key_args.extend(members.iter().map(|m| format!("{}={}", m.target, m.sha256)));
    let action = Cache::action_key(identity, "container", &key_args);
    if let Some(hit) = cache.lookup(&action, Path::new("/")) {
        return Ok(hit.object);
    }
    let scratch = cache.scratch();
    let tmp_dir =
        fsutil::tempdir_in(&scratch, "fat").map_err(|e| (scratch.display().to_string(), e))?;
    let tmp = tmp_dir.join("out");
    let output = Command::new(tool)
        .args(args)
        .args(output_arg(&tmp))
        .output();
    let result = match output {
        Ok(o) if o.status.success() => {
            std::fs::read(&tmp).map_err(|e| (tmp.display().to_string(), e))
        }
        Ok(o) => Err((
            tool.display().to_string(),
            std::io::Error::other(format!(
                "exited with {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
        )),
        Err(e) => Err((tool.display().to_string(), e)),
    };
    let _ = std::fs::remove_dir_all(&tmp_dir);
    let bytes = result?;
    let cmd = format!("{} {}", tool.display(), args.join(" "));
    cache
        .store(
            &action,
            Vec::new(),
            Made {
                object: bytes.clone(),
                log: String::new(),
                command: cmd,
                seconds: 0.0,
                launch: None,
            },
        )
        .map_err(|e| (cache.root().display().to_string(), e))?;
    Ok(bytes)
}
