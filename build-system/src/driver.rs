//! Compiler drivers: the exact device-only command for a job, and running it.

use kbuild_base::env::{names, Env};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kbuild_manifest::target::{ObjectKind, Vendor};

use crate::config::{Language, Project};
use crate::plan::Job;
use crate::toolchain::Toolchains;

/// A compile command, split so the cache key can leave out what differs per run.
#[derive(Debug, Clone)]
pub struct CompileCommand {
    pub program: PathBuf,
    /// Arguments that determine the output (project paths relative to the project root).
    pub key_args: Vec<String>,
    /// Prefix such as `sccache` (not part of the key).
    pub launcher: Option<String>,
    /// Identity of the compiler (part of the key).
    pub identity: String,
}

impl CompileCommand {
    /// The command line as a shell would show it, with output paths under `tmp`.
    pub fn display(&self, tmp: &Path) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(l) = &self.launcher {
            parts.push(l.clone());
        }
        parts.push(self.program.display().to_string());
        parts.extend(self.key_args.iter().cloned());
        parts.extend(output_args(tmp));
        parts
            .iter()
            .map(|p| shell_quote(p))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn output_args(tmp: &Path) -> Vec<String> {
    vec![
        "-MD".into(),
        "-MF".into(),
        tmp.join("deps.d").display().to_string(),
        "-o".into(),
        tmp.join("object").display().to_string(),
    ]
}

/// Build the command for `job`. The toolchain must have been checked for its target.
/// `env` gives `KBUILD_LAUNCHER`, used when the project sets no launcher.
pub fn command(
    project: &Project,
    job: &Job,
    tcs: &Toolchains,
    env: &Env,
) -> Option<CompileCommand> {
    let k = &project.kernels[job.kernel];
    let t = &job.target;
    let mut args: Vec<String> = Vec::new();
    let (program, identity) = match t.vendor() {
        Vendor::Nvidia => {
            let tc = tcs.cuda.as_ref()?;
            match t.object_kind() {
                ObjectKind::Ptx => args.push("-ptx".into()),
                _ => {
                    args.push("-cubin".into());
                    // The resource log (registers, spills) is only printed by ptxas -v.
                    args.extend(["-Xptxas".into(), "-v".into()]);
                }
            }
            args.push(format!("-arch={}", t.compiler_arch()));
            args.extend(k.flags.for_vendor(Vendor::Nvidia).iter().cloned());
            if k.language == Language::Cuda {
                args.extend(["-x".into(), "cu".into()]);
            }
            (tc.nvcc.clone(), tc.identity.clone())
        }
        Vendor::Amd => {
            let tc = tcs.hip.as_ref()?;
            args.extend([
                "-x".into(),
                "hip".into(),
                format!("--offload-arch={}", t.compiler_arch()),
                "--offload-device-only".into(),
                "--no-gpu-bundle-output".into(),
                format!("--rocm-path={}", tc.rocm_path.display()),
                format!("--rocm-device-lib-path={}", tc.device_libs.display()),
                "-Rpass-analysis=kernel-resource-usage".into(),
                // The default CUID hashes the command line, output path included, into a
                // `__hip_cuid_*` symbol: objects would differ per build directory.
                "-fuse-cuid=none".into(),
            ]);
            if t.processor.is_generic() {
                // Generic processors exist from code object v6 on.
                args.push("-mcode-object-version=6".into());
            }
            args.extend(k.flags.for_vendor(Vendor::Amd).iter().cloned());
            (tc.clang.clone(), tc.identity.clone())
        }
    };
    for d in &k.include_dirs {
        args.push(format!("-I{}", d.display()));
    }
    let mut defines = k.defines.clone();
    if let Some(v) = &job.variant {
        defines.extend(v.defines.clone());
    }
    for (key, value) in defines {
        args.push(format!("-D{key}={value}"));
    }
    args.push(k.source.display().to_string());
    Some(CompileCommand {
        program,
        key_args: args,
        launcher: project
            .launcher
            .clone()
            .or_else(|| env.str(names::KBUILD_LAUNCHER).map(String::from)),
        identity,
    })
}

/// What a successful compile left behind.
#[derive(Debug)]
pub struct CompileOutput {
    pub object: Vec<u8>,
    /// The compiler's stderr and stdout (ptxas -v / resource remarks).
    pub log: String,
    /// Dependency paths from the depfile, as written (relative to `cwd` for project files).
    pub deps: Vec<PathBuf>,
    pub seconds: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("could not start the compiler: {0}")]
    Spawn(std::io::Error),
    #[error("compiler exited with {status}")]
    Failed { status: String, log: String },
    #[error("compiler timed out after {0} s and was killed")]
    Timeout(u64, String),
    #[error("compiler exited 0 but wrote no object")]
    NoObject { log: String },
    #[error("compiler exited 0 but wrote no dependency file")]
    NoDepfile { log: String },
    #[error("scratch directory: {0}")]
    Io(std::io::Error),
    #[error("interrupted")]
    Interrupted,
}

impl CompileError {
    pub fn log(&self) -> &str {
        match self {
            CompileError::Failed { log, .. }
            | CompileError::Timeout(_, log)
            | CompileError::NoObject { log }
            | CompileError::NoDepfile { log } => log,
            _ => "",
        }
    }
}

/// Run `cmd` in `cwd` with outputs in `tmp`. `timeout`: kill the compiler (its whole process
/// group) after that long.
pub fn run(
    cmd: &CompileCommand,
    cwd: &Path,
    tmp: &Path,
    timeout: Option<Duration>,
) -> Result<CompileOutput, CompileError> {
    use std::os::unix::process::CommandExt;
    let start = Instant::now();
    let mut c = match &cmd.launcher {
        Some(l) => {
            let mut c = Command::new(l);
            c.arg(&cmd.program);
            c
        }
        None => Command::new(&cmd.program),
    };
    c.args(&cmd.key_args)
        .args(output_args(tmp))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("TMPDIR", tmp)
        .process_group(0);
    if crate::interrupt::interrupted() {
        return Err(CompileError::Interrupted);
    }
    let mut child = c.spawn().map_err(CompileError::Spawn)?;
    // Killed with its whole group on SIGINT/SIGTERM (it does not see the terminal's Ctrl-C).
    let _group = crate::interrupt::register_group(child.id());
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let (tx, rx) = std::sync::mpsc::channel();
    let out_thread = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_end(&mut s);
        }
        s
    });
    std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.read_to_end(&mut s);
        }
        let _ = tx.send(s);
    });
    // stderr closes when the compiler and everything it started exit.
    let received = match timeout {
        Some(t) => rx.recv_timeout(t).ok(),
        None => rx.recv().ok(),
    };
    let Some(err_bytes) = received else {
        kill_group(&child);
        let _ = child.kill();
        let _ = child.wait();
        let secs = timeout.map(|t| t.as_secs()).unwrap_or(0);
        return Err(CompileError::Timeout(secs, String::new()));
    };
    let status = child.wait().map_err(CompileError::Io)?;
    let out_bytes = out_thread.join().unwrap_or_default();
    let mut log = String::from_utf8_lossy(&err_bytes).into_owned();
    if !out_bytes.is_empty() {
        log.push_str(&String::from_utf8_lossy(&out_bytes));
    }
    if !status.success() {
        return Err(CompileError::Failed {
            status: status.to_string(),
            log,
        });
    }
    let object = match std::fs::read(tmp.join("object")) {
        Ok(o) if !o.is_empty() => o,
        _ => return Err(CompileError::NoObject { log }),
    };
    let deps = match std::fs::read_to_string(tmp.join("deps.d")) {
        Ok(text) => crate::depfile::parse(&text),
        Err(_) => return Err(CompileError::NoDepfile { log }),
    };
    Ok(CompileOutput {
        object,
        log,
        deps,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// SIGKILL the process group the compiler leads (it was spawned with `process_group(0)`), so
/// whatever it started dies with it. The syscall, not `kill(1)`: procps-ng 4.0.2's
/// `kill -KILL -PGID` sends the signal to pid -1, every process the user may signal.
#[cfg(unix)]
fn kill_group(child: &std::process::Child) {
    if let Ok(pgid) = libc::pid_t::try_from(child.id()) {
        if pgid > 1 {
            // SAFETY: kill(2) with a negative pid signals exactly that process group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

#[cfg(not(unix))]
fn kill_group(_child: &std::process::Child) {}
