//! A cache miss compiled in a scratch directory, its output checked to be the target's
//! object, its dependencies hashed, and the result stored in the local cache.

use std::path::PathBuf;

use kbuild_base::fs as fsutil;
use kbuild_manifest::target::Target;

use crate::cache::{Dep, Made};
use crate::driver;
use crate::driver::{CompileCommand, CompileError};

use super::remote_compile::Remote;
use super::Ctx;

/// Why a cache miss did not become a cache entry.
#[derive(Debug, thiserror::Error)]
pub(super) enum CompileCause {
    #[error("creating scratch dir in {}: {source}", .dir.display())]
    Scratch {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Compiler(CompileError),
    /// The compiler wrote something that is not the target's object.
    #[error("compiler output rejected: {0}")]
    Rejected(crate::audit::AuditError),
    #[error("dependency {0} vanished during the compile")]
    DependencyVanished(String),
    #[error("storing in the cache {}: {source}", .root.display())]
    Store {
        root: PathBuf,
        source: std::io::Error,
    },
}

/// A failed compile: why, the command line shown to the user, and the compiler's output.
#[derive(Debug)]
pub(super) struct CompileFailure {
    pub(super) cause: CompileCause,
    pub(super) command: String,
    pub(super) log: String,
}

impl CompileFailure {
    fn new(cause: CompileCause, command: String, log: String) -> Self {
        CompileFailure {
            cause,
            command,
            log,
        }
    }
}

/// How many compiles given back by a remote executor run here at once.
pub(super) struct LocalSlots {
    free: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

/// One of [`LocalSlots`], given back when dropped.
pub(super) struct LocalSlot<'a>(&'a LocalSlots);

impl LocalSlots {
    pub(super) fn new(n: usize) -> LocalSlots {
        LocalSlots {
            free: std::sync::Mutex::new(n.max(1)),
            freed: std::sync::Condvar::new(),
        }
    }

    fn acquire(&self) -> LocalSlot<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        LocalSlot(self)
    }
}

impl Drop for LocalSlot<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|e| e.into_inner());
        *free += 1;
        self.0.freed.notify_one();
    }
}

/// Compile a cache miss and store it.
pub(super) fn compile(
    ctx: &Ctx,
    cmd: &CompileCommand,
    action: &str,
    target: &Target,
    label: &str,
) -> Result<crate::cache::Entry, CompileFailure> {
    let scratch = ctx.cache.scratch();
    let tmp = fsutil::tempdir_in(&scratch, "job").map_err(|source| {
        let cause = CompileCause::Scratch {
            dir: scratch.clone(),
            source,
        };
        CompileFailure::new(cause, String::new(), String::new())
    })?;
    let shown = cmd.display(&tmp);
    let result = match ctx.remote_exec {
        Some(rx) => match super::remote_compile::compile(ctx, rx, cmd, action, target, label, &tmp)
        {
            Remote::Done(out) => Ok(out),
            Remote::Failed(e) => Err(e),
            Remote::Local(why) => {
                ctx.reporter
                    .note(&format!("note: {why}; compiling locally"));
                // `-j` is sized for the service: compiles given back run on this machine's
                // cores, a few at a time.
                let _slot = ctx.local_slots.as_ref().map(LocalSlots::acquire);
                run(ctx, cmd, &tmp)
            }
        },
        None => run(ctx, cmd, &tmp),
    };
    let _ = std::fs::remove_dir_all(&tmp);
    let out = result.map_err(|e: CompileError| {
        let log = e.log().to_string();
        CompileFailure::new(CompileCause::Compiler(e), shown.clone(), log)
    })?;
    if let Err(e) = crate::audit::check_target(target, &out.object) {
        return Err(CompileFailure::new(
            CompileCause::Rejected(e),
            shown,
            out.log,
        ));
    }
    let root = &ctx.project.root;
    let canon_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
    let mut deps: Vec<Dep> = Vec::new();
    // The compat header's files are keyed by their bytes (in the action key), not by a path
    // that names this build's out-dir: a clone elsewhere, or another --out-dir, still hits.
    let compat = ctx.compat_dir.as_ref().map(|d| {
        let canon = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        (d.clone(), canon)
    });
    for p in &out.deps {
        if let Some((dir, canon)) = &compat {
            let abs = root.join(p);
            if abs.starts_with(dir) || abs.starts_with(canon) {
                continue;
            }
        }
        // Project files are recorded relative to the project root, so a clone elsewhere hits.
        let recorded = match p.strip_prefix(&canon_root) {
            Ok(rel) => rel.display().to_string(),
            Err(_) => p.display().to_string(),
        };
        let Some(h) = ctx.cache.hash_dep(root, &recorded) else {
            return Err(CompileFailure::new(
                CompileCause::DependencyVanished(recorded),
                shown,
                out.log,
            ));
        };
        deps.push((recorded, h));
    }
    ctx.cache
        .store(
            action,
            deps,
            Made {
                object: out.object,
                log: out.log,
                command: shown.clone(),
                seconds: out.seconds,
                launch: None,
            },
        )
        .map_err(|source| {
            let cause = CompileCause::Store {
                root: ctx.cache.root().to_path_buf(),
                source,
            };
            CompileFailure::new(cause, shown, String::new())
        })
}

/// Run the compiler, loading the precompiled compat header where the build has one for this
/// command; a compile that fails with it runs again without it (see [`crate::pch`]).
fn run(
    ctx: &Ctx,
    cmd: &CompileCommand,
    tmp: &std::path::Path,
) -> Result<driver::CompileOutput, CompileError> {
    let root = &ctx.project.root;
    let pch = ctx
        .pch
        .as_ref()
        .and_then(|set| set.for_command(cmd, root, ctx.timeout));
    let Some(pch) = pch else {
        return driver::run(cmd, root, tmp, ctx.timeout);
    };
    match driver::run_with(cmd, root, tmp, ctx.timeout, &pch.args()) {
        Ok(mut out) => {
            tracing::debug!(
                "compiled with the precompiled compat header: {}",
                cmd.display(tmp)
            );
            let args = cmd.args();
            if let Some(source) = args.last() {
                out.deps = pch.plain_deps(out.deps, std::path::Path::new(source));
            }
            Ok(out)
        }
        Err(e @ (CompileError::Interrupted | CompileError::Timeout(..))) => Err(e),
        Err(_) => driver::run(cmd, root, tmp, ctx.timeout),
    }
}
