//! What a build writes besides the objects: the compat header, the cross-target audit's
//! verdicts, the unbuilt objects, the manifest's provenance, the manifest and its load index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kbuild_base::fs as fsutil;
use kbuild_manifest::load_index;
use kbuild_manifest::manifest::{
    Manifest, ObjectRecord, Provenance, ToolchainIdentity, UnbuiltObject,
};
use kbuild_manifest::target::Vendor;

use crate::config::Project;
use crate::plan::Job;
use crate::toolchain::Toolchains;

use super::{BuildError, Failure};

/// kbuild's compat header under `<out_dir>/include` (absolute: compilers run in the project
/// root, `--out-dir` is relative to the current directory); `None` when the project opted out.
pub(super) fn write_compat_header(
    project: &Project,
    out_dir: &Path,
) -> Result<Option<PathBuf>, BuildError> {
    if !project.compat_header {
        return Ok(None);
    }
    let abs = std::path::absolute(out_dir).unwrap_or_else(|_| out_dir.to_path_buf());
    // `include` and `include/hip-shim` are kbuild's own: never written through a link.
    let include = crate::compat_header::include_dir(Path::new(""));
    for (name, _) in crate::compat_header::FILES {
        if let Some(rel) = include.join(name).parent() {
            crate::clean::real_dir(&abs, rel)?;
        }
    }
    let dir = crate::compat_header::write(&abs).map_err(|e| BuildError::Write {
        path: e.path.display().to_string(),
        err: e.source,
    })?;
    Ok(Some(dir))
}

/// The cross-target audit of kernels with pattern entries: per (kernel, variant) and list of
/// entries (all targets, a vendor's, a target's), every target the list applies to must
/// export the same matching symbols. A target lacking some fails: its object leaves the
/// output and the manifest lists it as `failed`, with the error; the targets that export them
/// keep theirs.
pub(super) fn cross_target_audit(
    project: &Project,
    records: &mut Vec<ObjectRecord>,
    out_dir: &Path,
    failed: &mut Vec<UnbuiltObject>,
) -> Vec<Failure> {
    use crate::entries::EntryScope;
    use kbuild_manifest::target::Target;
    use std::collections::BTreeSet;
    type PerTarget = BTreeMap<String, BTreeSet<String>>;
    let mut failures = Vec::new();
    // (kernel, variant, target) → why it failed.
    let mut drop: BTreeMap<(String, Option<String>, String), Vec<String>> = BTreeMap::new();
    for k in project.kernels.iter().filter(|k| k.has_patterns()) {
        // variant → scope (by name) → target → matched symbols.
        let mut groups: BTreeMap<Option<String>, BTreeMap<String, (EntryScope, PerTarget)>> =
            BTreeMap::new();
        for r in records.iter().filter(|r| r.kernel == k.name) {
            let Ok(target) = r.target.parse::<Target>() else {
                continue;
            };
            for (scope, matched) in k.entries.matched_by_scope(&target, &r.entries) {
                let keys = matched
                    .iter()
                    .map(|s| crate::entries::cross_target_key(s))
                    .collect();
                groups
                    .entry(r.variant.clone())
                    .or_default()
                    .entry(scope.to_string())
                    .or_insert_with(|| (scope, BTreeMap::new()))
                    .1
                    .insert(r.target.clone(), keys);
            }
        }
        for (variant, scopes) in groups {
            let mut lacking: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (scope, per_target) in scopes.values() {
                let patterns = k
                    .entries
                    .lists
                    .iter()
                    .find(|(s, _)| s == scope)
                    .map(|(_, l)| l.as_slice())
                    .unwrap_or_default();
                for (t, why) in crate::audit::cross_target(
                    &k.name,
                    variant.as_deref(),
                    scope,
                    patterns,
                    per_target,
                ) {
                    lacking.entry(t).or_default().push(why);
                }
            }
            if lacking.is_empty() {
                continue;
            }
            let name = match &variant {
                Some(v) => format!("{}.{v}", k.name),
                None => k.name.clone(),
            };
            let targets: Vec<&str> = lacking.keys().map(String::as_str).collect();
            let causes: Vec<String> = lacking.values().flatten().cloned().collect();
            failures.push(Failure {
                label: format!("{name} for {}", targets.join(", ")),
                cause: format!("coverage audit: {}", causes.join("; ")),
                command: None,
                log: String::new(),
            });
            for (t, why) in lacking {
                drop.insert((k.name.clone(), variant.clone(), t), why);
            }
        }
    }
    records.retain(|r| {
        let key = (r.kernel.clone(), r.variant.clone(), r.target.clone());
        let Some(why) = drop.get(&key) else {
            return true;
        };
        let _ = std::fs::remove_file(out_dir.join(&r.path));
        failed.push(UnbuiltObject {
            kernel: r.kernel.clone(),
            variant: r.variant.clone(),
            target: r.target.clone(),
            error: Some(format!("coverage audit: {}", why.join("; "))),
        });
        false
    });
    if !drop.is_empty() {
        failed.sort_by_key(|u| (u.target.clone(), u.kernel.clone(), u.variant.clone()));
    }
    failures
}

/// The objects this build did not produce, sorted by (target, kernel, variant): those of the
/// failed jobs (`failed_jobs` in the order of `failures`, each with its cause) and those of
/// the jobs that never ran (`ran` false: a failure stopped the build). Whatever an earlier
/// build left at their paths is removed: it is not this build's output.
pub(super) fn unbuilt_objects(
    jobs: &[Job],
    failed_jobs: &[usize],
    ran: &[bool],
    failures: &[Failure],
    out_dir: &Path,
) -> (Vec<UnbuiltObject>, Vec<UnbuiltObject>) {
    let unbuilt = |j: &Job, error: Option<String>| UnbuiltObject {
        kernel: j.kernel_name.clone(),
        variant: j.variant_name().map(str::to_string),
        target: j.target.to_string(),
        error,
    };
    let mut failed: Vec<UnbuiltObject> = Vec::new();
    for (n, &i) in failed_jobs.iter().enumerate() {
        let _ = std::fs::remove_file(out_dir.join(&jobs[i].out_rel));
        failed.push(unbuilt(&jobs[i], failures.get(n).map(|f| f.cause.clone())));
    }
    let mut missing: Vec<UnbuiltObject> = Vec::new();
    for (job, _) in jobs.iter().zip(ran).filter(|(_, r)| !**r) {
        let _ = std::fs::remove_file(out_dir.join(&job.out_rel));
        missing.push(unbuilt(job, None));
    }
    let order = |u: &UnbuiltObject| (u.target.clone(), u.kernel.clone(), u.variant.clone());
    failed.sort_by_key(order);
    missing.sort_by_key(order);
    (failed, missing)
}

/// Write `out_dir/manifest.json` (only when it changed) and the load index beside it; the
/// manifest's path.
pub(super) fn write_manifest(manifest: &Manifest, out_dir: &Path) -> Result<PathBuf, BuildError> {
    let manifest_path = out_dir.join("manifest.json");
    let manifest_json = manifest.to_json();
    fsutil::write_if_changed(&manifest_path, manifest_json.as_bytes()).map_err(|err| {
        BuildError::Write {
            path: manifest_path.display().to_string(),
            err,
        }
    })?;
    write_load_index(manifest, manifest_json.as_bytes(), &manifest_path, out_dir)?;
    Ok(manifest_path)
}

/// `manifest.kbi` beside the manifest (after it: it records the manifest's length, mtime and
/// blake3),
/// so a loader opens the build without parsing JSON.
pub(super) fn write_load_index(
    manifest: &Manifest,
    manifest_json: &[u8],
    manifest_path: &Path,
    out_dir: &Path,
) -> Result<(), BuildError> {
    let write_err = |path: &Path, err: std::io::Error| BuildError::Write {
        path: path.display().to_string(),
        err,
    };
    // The bytes just written (or found equal): no second read of the manifest.
    let meta = std::fs::metadata(manifest_path).map_err(|e| write_err(manifest_path, e))?;
    let stamp = load_index::ManifestStamp::of(&meta, manifest_json);
    let path = out_dir.join(load_index::LOAD_INDEX_FILE);
    let bytes = load_index::encode(manifest, stamp).map_err(|e| {
        write_err(
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    fsutil::write_if_changed(&path, &bytes).map_err(|e| write_err(&path, e))?;
    Ok(())
}

pub(super) fn provenance(project: &Project, tcs: &Toolchains) -> Provenance {
    let git = crate::git::provenance(&project.root);
    let mut toolchains = Vec::new();
    if let Some(c) = &tcs.cuda {
        toolchains.push(ToolchainIdentity {
            kind: "cuda".into(),
            version: c
                .version_text
                .lines()
                .find(|l| l.contains("release"))
                .unwrap_or_default()
                .to_string(),
            path: c.nvcc.display().to_string(),
            identity: c.identity.clone(),
        });
    }
    if let Some(h) = &tcs.hip {
        toolchains.push(ToolchainIdentity {
            kind: "hip".into(),
            version: h
                .version_text
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
            path: h.clang.display().to_string(),
            identity: h.identity.clone(),
        });
    }
    let mut flags = BTreeMap::new();
    flags.insert(
        Vendor::Nvidia.toolchain().to_string(),
        project.flags.cuda.clone(),
    );
    flags.insert(
        Vendor::Amd.toolchain().to_string(),
        project.flags.hip.clone(),
    );
    Provenance {
        git_commit: git.as_ref().map(|g| g.0.clone()),
        git_dirty: git.map(|g| g.1),
        toolchains,
        flags,
        host: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
    }
}
