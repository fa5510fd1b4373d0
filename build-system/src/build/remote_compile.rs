//! A cache miss compiled on a remote executor ([`crate::remote_exec`]): the action made from
//! the compile command, its inputs known before it runs, and what comes back turned into the
//! same [`CompileOutput`] a local compile gives (so the cache, audit and manifest are the
//! same). Anything short of a result or a compile error of the compiler's own gives the job
//! back to a local compile. A compile that fails with the inputs of a recorded dependency set
//! runs once more with freshly scanned ones (the sources may include a new file).

use std::path::{Path, PathBuf};

use kbuild_manifest::target::Target;

use crate::driver::{self, CompileCommand, CompileError, CompileOutput};
use crate::remote_cache::DepCheck;
use crate::remote_exec::{
    RemoteAction, RemoteExecutor, RemoteInput, RemoteTree, COMPAT_ROOT, OUT_ROOT,
    TOOLCHAIN_PROPERTY, TOOLCHAIN_ROOT,
};

use super::Ctx;

/// How a remote attempt ended.
pub(super) enum Remote {
    /// The compile ran (or was served from the service's cache) and succeeded.
    Done(CompileOutput),
    /// The compile ran and failed: reported as a local failure would be.
    Failed(CompileError),
    /// Not run remotely (why): compile locally.
    Local(String),
}

/// The PATH of a remote compile: fixed, so actions do not differ by the builder's PATH (nvcc
/// finds its host compiler there).
const REMOTE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Compile `cmd` for `target` on `rx`.
pub(super) fn compile(
    ctx: &Ctx,
    rx: &dyn RemoteExecutor,
    cmd: &CompileCommand,
    action_key: &str,
    target: &Target,
    label: &str,
    tmp: &Path,
) -> Remote {
    if cmd.launcher.is_some() {
        return Remote::Local("a launcher wraps the compiler".into());
    }
    // A hermetic action carries the compiler's installation and runs it from the input
    // root; otherwise the platform names the toolchain a worker must have.
    let mounts: Vec<(PathBuf, String)> = if rx.hermetic() {
        cmd.toolchain_dirs()
            .into_iter()
            .enumerate()
            .map(|(i, d)| (d, format!("{TOOLCHAIN_ROOT}/{i}")))
            .collect()
    } else {
        Vec::new()
    };
    let platform = if mounts.is_empty() {
        vec![(TOOLCHAIN_PROPERTY.to_string(), cmd.toolchain_id())]
    } else {
        Vec::new()
    };
    let argv: Vec<String> = argv(cmd)
        .iter()
        .map(|a| in_input_root(a, &mounts))
        .collect();
    let trees: Vec<RemoteTree> = mounts
        .iter()
        .map(|(local, path)| RemoteTree {
            path: path.clone(),
            local: local.clone(),
        })
        .collect();
    // The recorded dependency set first (no scan); when the compile fails with it, the
    // sources may include a file the set does not know yet: scan and run once more.
    let start = std::time::Instant::now();
    let mut recorded = true;
    let run = loop {
        let (inputs, from_recorded) = match inputs(ctx, cmd, action_key, target, tmp, recorded) {
            Ok(i) => i,
            Err(why) => return Remote::Local(why),
        };
        let action = RemoteAction {
            label: label.to_string(),
            argv: argv.clone(),
            env: vec![("PATH".into(), REMOTE_PATH.into())],
            working_directory: String::new(),
            inputs,
            trees: trees.clone(),
            outputs: vec![format!("{OUT_ROOT}/object"), format!("{OUT_ROOT}/deps.d")],
            platform: platform.clone(),
            timeout: ctx.timeout,
        };
        match rx.run(&action) {
            Ok(r) if r.exit_code != 0 && from_recorded => recorded = false,
            Ok(r) => break r,
            Err(e) => return Remote::Local(e.to_string()),
        }
    };
    let mut log = String::from_utf8_lossy(&run.stderr).into_owned();
    log.push_str(&String::from_utf8_lossy(&run.stdout));
    if run.exit_code != 0 {
        let on = if run.worker.is_empty() {
            String::new()
        } else {
            format!(" on worker {}", run.worker)
        };
        return Remote::Failed(CompileError::Failed {
            status: format!("exit status: {} (remote{on})", run.exit_code),
            log,
        });
    }
    let object = match run.outputs.get(&format!("{OUT_ROOT}/object")) {
        Some(o) if !o.is_empty() => o.clone(),
        _ => return Remote::Failed(CompileError::NoObject { log }),
    };
    let Some(depfile) = run.outputs.get(&format!("{OUT_ROOT}/deps.d")) else {
        return Remote::Failed(CompileError::NoDepfile { log });
    };
    let mut deps = Vec::new();
    for p in crate::depfile::parse(&String::from_utf8_lossy(depfile)) {
        match local_dep(ctx, &p, &mounts) {
            Ok(d) => deps.push(d),
            Err(why) => {
                return Remote::Failed(CompileError::Remote {
                    what: format!("{label}: the remote compile {why}"),
                    log,
                })
            }
        }
    }
    Remote::Done(CompileOutput {
        object,
        log,
        deps,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The program and arguments, with the compat header's directory at [`COMPAT_ROOT`] and the
/// outputs under [`OUT_ROOT`], all relative to the input root (the project root).
fn argv(cmd: &CompileCommand) -> Vec<String> {
    let mut argv = vec![cmd.program.display().to_string()];
    argv.extend(cmd.key_args.iter().map(|a| match &cmd.compat_dir {
        Some(_) => crate::compat_header::resolve(a, Path::new(COMPAT_ROOT)),
        None => a.clone(),
    }));
    argv.extend(driver::output_args(Path::new(OUT_ROOT), cmd.depfile));
    argv
}

/// `arg` with each toolchain directory of `mounts` (where a path continues or ends) replaced
/// by its place in the input root.
fn in_input_root(arg: &str, mounts: &[(PathBuf, String)]) -> String {
    let mut by_length: Vec<(String, &str)> = mounts
        .iter()
        .map(|(d, m)| (d.display().to_string(), m.as_str()))
        .collect();
    by_length.sort_by_key(|(d, _)| std::cmp::Reverse(d.len()));
    let mut out = arg.to_string();
    for (dir, mount) in by_length {
        let mut rest = out.as_str();
        let mut done = String::new();
        while let Some(i) = rest.find(&dir) {
            let after = &rest[i + dir.len()..];
            done.push_str(&rest[..i]);
            if after.is_empty() || after.starts_with('/') {
                done.push_str(mount);
            } else {
                done.push_str(&dir);
            }
            rest = after;
        }
        done.push_str(rest);
        out = done;
    }
    out
}

/// The input root: the project files the compile reads (from the dependency set an earlier
/// build recorded for this action when `recorded` and its files are all here, else a local
/// `-M` scan) and the compat header's directory; and whether the recorded set was used.
/// Toolchain and system headers are the worker's (its toolchain is named by the platform).
fn inputs(
    ctx: &Ctx,
    cmd: &CompileCommand,
    action_key: &str,
    target: &Target,
    tmp: &Path,
    recorded: bool,
) -> Result<(Vec<RemoteInput>, bool), String> {
    let root = &ctx.project.root;
    // A recorded set whose files are all still here; else a scan.
    let set = recorded
        .then(|| ctx.cache.dep_sets(action_key).into_iter().next())
        .flatten()
        .map(|set| {
            set.into_iter()
                .map(|(p, _)| PathBuf::from(p))
                .collect::<Vec<_>>()
        })
        .filter(|paths| {
            paths.iter().all(|p| {
                !matches!(
                    ctx.dep_roots.check(&p.display().to_string()),
                    DepCheck::Missing
                )
            })
        });
    let from_recorded = set.is_some();
    let paths: Vec<PathBuf> = match set {
        Some(paths) => paths,
        None => driver::scan_deps(cmd, target.vendor(), root, tmp, ctx.timeout)
            .map_err(|e| format!("dependency scan for the remote input root: {e}"))?,
    };
    let canon_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
    let compat = ctx.compat_dir.as_ref();
    let mut out: Vec<RemoteInput> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut add = |rel: &Path, local: PathBuf, out: &mut Vec<RemoteInput>| {
        let path = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        if seen.insert(path.clone()) {
            out.push(RemoteInput { path, local });
        }
    };
    for p in paths {
        if let Some(c) = compat {
            if p.starts_with(c) {
                continue;
            }
        }
        let rel = if p.is_absolute() {
            match p
                .strip_prefix(&canon_root)
                .or_else(|_| p.strip_prefix(root))
            {
                Ok(r) => r.to_path_buf(),
                // A toolchain or system header: the worker's own.
                Err(_) => continue,
            }
        } else {
            p.clone()
        };
        match ctx.dep_roots.check(&rel.display().to_string()) {
            DepCheck::Ok => add(&rel, root.join(&rel), &mut out),
            DepCheck::Missing => {
                return Err(format!("input {} is gone", rel.display()));
            }
            DepCheck::Refused(why) => return Err(why),
        }
    }
    if let Some(dir) = compat {
        // The header's files as the build wrote them there.
        for (name, _) in crate::compat_header::FILES {
            add(&Path::new(COMPAT_ROOT).join(name), dir.join(name), &mut out);
        }
    }
    Ok((out, from_recorded))
}

/// A dependency the remote compile reports, as a local compile would have reported it: the
/// compat header's and a carried toolchain's files at their local place, project files relative, toolchain and system
/// headers as they are; anything else (a file outside the input root and the toolchain
/// roots) is refused, naming it.
fn local_dep(ctx: &Ctx, p: &Path, mounts: &[(PathBuf, String)]) -> Result<PathBuf, String> {
    if let (Ok(rest), Some(dir)) = (p.strip_prefix(COMPAT_ROOT), ctx.compat_dir.as_ref()) {
        return Ok(dir.join(rest));
    }
    // A carried toolchain finds its own headers from where it runs, so they come back as
    // absolute paths inside the worker's input root (`/…/lease-x/_kbuild/toolchain/0/…`).
    let text = p.display().to_string();
    let in_root = match text.find(&format!("/{TOOLCHAIN_ROOT}/")) {
        Some(i) if !mounts.is_empty() && p.is_absolute() => Path::new(&text[i + 1..]),
        _ => p,
    };
    for (local, mount) in mounts {
        if let Ok(rest) = in_root.strip_prefix(mount) {
            return Ok(local.join(rest));
        }
    }
    match ctx.dep_roots.check(&p.display().to_string()) {
        DepCheck::Ok => Ok(p.to_path_buf()),
        DepCheck::Missing => Err(format!(
            "read {}, which is not in its input root nor on this machine",
            p.display()
        )),
        DepCheck::Refused(why) => Err(format!("read a file outside its input root: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::DepfileFrom;

    fn command(depfile: DepfileFrom) -> CompileCommand {
        CompileCommand {
            program: PathBuf::from("/opt/cuda/bin/nvcc"),
            key_args: vec![
                "-arch=sm_89".into(),
                format!("-I{}", crate::compat_header::ROOT),
                format!("-I{}/hip-shim", crate::compat_header::ROOT),
                "-Ik/inc".into(),
                "k/a.cu".into(),
            ],
            launcher: None,
            identity: "nvcc 13.5".into(),
            compat_dir: Some(PathBuf::from("/home/u/proj/out/include")),
            compat_digest: None,
            depfile,
            unit_defines: 0,
        }
    }

    #[test]
    fn the_remote_command_names_only_paths_inside_its_input_root() {
        let argv = argv(&command(DepfileFrom::DevicePreprocessor));
        assert_eq!(
            argv,
            [
                "/opt/cuda/bin/nvcc",
                "-arch=sm_89",
                "-I_kbuild/include",
                "-I_kbuild/include/hip-shim",
                "-Ik/inc",
                "k/a.cu",
                "-Xcompiler",
                "-MD,-MF,_kbuild/out/deps.d",
                "-o",
                "_kbuild/out/object",
            ]
        );
        let argv = argv_tail(&command(DepfileFrom::Compiler));
        assert_eq!(
            argv,
            [
                "-MD",
                "-MF",
                "_kbuild/out/deps.d",
                "-o",
                "_kbuild/out/object"
            ]
        );
    }

    fn argv_tail(cmd: &CompileCommand) -> Vec<String> {
        argv(cmd).split_off(6)
    }

    #[test]
    fn a_hermetic_command_runs_its_carried_toolchain_from_the_input_root() {
        let nvcc = command(DepfileFrom::Compiler);
        assert_eq!(nvcc.toolchain_dirs(), [PathBuf::from("/opt/cuda")]);
        let mut clang = nvcc.clone();
        clang.program = PathBuf::from("/usr/lib/llvm-19/bin/clang++");
        clang.key_args = vec![
            "--rocm-path=/usr".into(),
            "--rocm-device-lib-path=/home/u/.local/share/kbuild/toolchains/dl".into(),
            "k/a.cu".into(),
        ];
        let dirs = clang.toolchain_dirs();
        assert_eq!(
            dirs,
            [
                PathBuf::from("/usr/lib/llvm-19"),
                PathBuf::from("/home/u/.local/share/kbuild/toolchains/dl")
            ]
        );
        let mounts: Vec<(PathBuf, String)> = dirs
            .into_iter()
            .enumerate()
            .map(|(i, d)| (d, format!("{TOOLCHAIN_ROOT}/{i}")))
            .collect();
        let argv: Vec<String> = argv(&clang)
            .iter()
            .map(|a| in_input_root(a, &mounts))
            .collect();
        assert_eq!(argv[0], "_kbuild/toolchain/0/bin/clang++");
        assert_eq!(
            argv[1], "--rocm-path=/usr",
            "the host's ROCm stays the worker's"
        );
        assert_eq!(argv[2], "--rocm-device-lib-path=_kbuild/toolchain/1");
        // Only whole path parts are replaced.
        assert_eq!(
            in_input_root("-I/usr/lib/llvm-19x/include", &mounts),
            "-I/usr/lib/llvm-19x/include"
        );
        // A compiler in a system directory has no prefix of its own to carry.
        clang.program = PathBuf::from("/usr/bin/clang++");
        clang.key_args.clear();
        assert!(clang.toolchain_dirs().is_empty());
    }

    #[test]
    fn the_toolchain_id_is_the_identity_digest() {
        let c = command(DepfileFrom::Compiler);
        assert_eq!(c.toolchain_id().len(), 32);
        let mut other = c.clone();
        other.identity = "nvcc 13.4".into();
        assert_ne!(c.toolchain_id(), other.toolchain_id());
    }
}
