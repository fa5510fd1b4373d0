//! Compiler drivers: the exact device-only command for a job, and running it.

use kbuild_base::env::{names, Env};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kbuild_manifest::target::{ObjectKind, Vendor};

use crate::compat_header;
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
    /// Where [`compat_header::ROOT`] in `key_args` points (`<out-dir>/include`, absolute);
    /// `None` when the project opted out of the compat header.
    pub compat_dir: Option<PathBuf>,
    /// [`compat_header::digest`] when the command uses the header (part of the key).
    pub compat_digest: Option<String>,
    /// How the dependency file is asked for (not part of the key: the object is the same).
    pub depfile: DepfileFrom,
    /// How many `-D` arguments from the kernel's `defines` and its variant end `key_args`,
    /// just before the source (the rest of the command is shared by the kernel's variants).
    pub unit_defines: usize,
}

/// How a compiler is asked for the dependency file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepfileFrom {
    /// `-MD -MF FILE`: hip-clang writes it while it preprocesses; nvcc runs one more
    /// preprocessing pass of its host compiler for it.
    Compiler,
    /// nvcc's device pass: its own preprocessing writes the file
    /// (`-Xcompiler -MD,-MF,FILE`), listing the headers the device code includes. Saves
    /// nvcc's second preprocessing pass, a fifth of a small kernel's compile. Not through a
    /// launcher (a compiler cache parses nvcc's `-MD` itself).
    DevicePreprocessor,
}

impl CompileCommand {
    /// The arguments the compiler gets (output paths aside): `key_args` with the compat
    /// header's symbolic root resolved.
    pub fn args(&self) -> Vec<String> {
        match &self.compat_dir {
            Some(dir) => self
                .key_args
                .iter()
                .map(|a| compat_header::resolve(a, dir))
                .collect(),
            None => self.key_args.clone(),
        }
    }

    /// The action key of this compile on `target`: compiler identity, arguments and the compat
    /// header's bytes (the header is not in the dependency list, see [`compat_header`]).
    pub fn action_key(&self, target: &str) -> String {
        let mut parts = self.key_args.clone();
        if let Some(d) = &self.compat_digest {
            parts.push(format!("kbuild-compat-header={d}"));
        }
        crate::cache::Cache::action_key(&self.identity, target, &parts)
    }

    /// The compiler's identity as a remote worker advertises it (the `kbuild-toolchain`
    /// platform property): the first 32 hex digits of the identity's blake3.
    pub fn toolchain_id(&self) -> String {
        blake3::hash(self.identity.as_bytes()).to_hex()[..32].to_string()
    }

    /// The directories of the compiler's own installation, which a hermetic remote action
    /// carries: the prefix the program is in (`<prefix>/bin/<program>`: nvcc's tree with
    /// its `nvvm`, `include` and `lib`; clang's with its resource directory and libraries) and
    /// the device libraries a HIP compile names. The host's C library, headers and host
    /// compiler stay the worker's. Empty when the program is not in a prefix of its own
    /// (`/usr/bin/nvcc`: a system directory cannot travel).
    pub fn toolchain_dirs(&self) -> Vec<PathBuf> {
        let Some(prefix) = self
            .program
            .parent()
            .filter(|bin| bin.file_name().is_some_and(|n| n == "bin"))
            .and_then(Path::parent)
            .filter(|p| {
                !["/", "/usr", "/usr/local", "/opt"]
                    .iter()
                    .any(|s| *p == Path::new(s))
            })
        else {
            return Vec::new();
        };
        let mut dirs = vec![prefix.to_path_buf()];
        for a in &self.key_args {
            if let Some(d) = a.strip_prefix("--rocm-device-lib-path=") {
                let d = PathBuf::from(d);
                if d.is_absolute() && !dirs.iter().any(|p| d.starts_with(p)) {
                    dirs.push(d);
                }
            }
        }
        dirs
    }

    /// The arguments as the manifest records them (`compile_args`): `key_args` with the
    /// machine's ROCm and device-library paths replaced by `$ROCM` and `$ROCM_DEVICE_LIBS`, so
    /// the same build on another machine records the same bytes.
    pub fn recorded_args(&self) -> Vec<String> {
        self.key_args
            .iter()
            .map(|a| {
                for (flag, root) in [
                    ("--rocm-path=", "$ROCM"),
                    ("--rocm-device-lib-path=", "$ROCM_DEVICE_LIBS"),
                ] {
                    if a.starts_with(flag) {
                        return format!("{flag}{root}");
                    }
                }
                a.clone()
            })
            .collect()
    }

    /// The command line as a shell would show it, with output paths under `tmp`.
    pub fn display(&self, tmp: &Path) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(l) = &self.launcher {
            parts.push(l.clone());
        }
        parts.push(self.program.display().to_string());
        parts.extend(self.args());
        parts.extend(output_args(tmp, self.depfile));
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

/// The output arguments of a compile writing into `tmp` (`object`, `deps.d`).
pub fn output_args(tmp: &Path, depfile: DepfileFrom) -> Vec<String> {
    let deps = tmp.join("deps.d").display().to_string();
    let mut args = match depfile {
        // `-Xcompiler` splits its value at commas: a path holding one takes nvcc's way.
        DepfileFrom::DevicePreprocessor if !deps.contains(',') => {
            vec!["-Xcompiler".into(), format!("-MD,-MF,{deps}")]
        }
        _ => vec!["-MD".into(), "-MF".into(), deps],
    };
    args.extend(["-o".into(), tmp.join("object").display().to_string()]);
    args
}

/// Whether `flags` set an optimisation level: `-O`, `-O<level>`, `--optimize[=<level>]` (nvcc
/// and clang spell it the same). A `-O` meant for another tool (`-Xcompiler -O2`) counts too:
/// the project chose its levels.
pub fn sets_opt_level(flags: &[String]) -> bool {
    flags
        .iter()
        .any(|f| f.starts_with("-O") || f == "--optimize" || f.starts_with("--optimize="))
}

/// Build the command for `job`. The toolchain must have been checked for its target.
/// `env` gives `KBUILD_LAUNCHER`, used when the project sets no launcher. `compat_dir` is the
/// written compat header's include dir (absolute), `None` when the project opted out. `None`
/// for a Triton kernel (a worker compiles it) or a target without its toolchain.
pub fn command(
    project: &Project,
    job: &Job,
    tcs: &Toolchains,
    env: &Env,
    compat_dir: Option<&Path>,
) -> Option<CompileCommand> {
    let k = &project.kernels[job.kernel];
    // A Triton kernel runs no compiler command: a worker compiles it (crate::triton).
    if k.triton.is_some() {
        return None;
    }
    let t = &job.target;
    let mut args: Vec<String> = Vec::new();
    let flags = k.flags.for_vendor(t.vendor());
    // Both vendors default to -O3 (nvcc's device code already is; hip-clang's is -O0, which
    // spills a plain vector add to scratch), unless the project picked a level.
    let default_opt = (!sets_opt_level(flags)).then(|| "-O3".to_string());
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
            args.extend(default_opt);
            args.extend(flags.iter().cloned());
            if k.language == Language::Cuda {
                args.extend(["-x".into(), "cu".into()]);
            }
            // nvcc hashes the source's absolute path into the names of internal-linkage
            // symbols (`_INTERNAL_<hash>_…`, `cuda::std`'s objects among them): given the
            // project-relative path instead, an object does not depend on where the project
            // is (another clone, a remote worker's input root). `-Xcudafe` splits at commas.
            let source = k.source.display().to_string();
            if !source.contains(',') {
                args.extend(["-Xcudafe".into(), format!("--orig_src_path_name={source}")]);
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
            args.extend(default_opt);
            args.extend(flags.iter().cloned());
            (tc.clang.clone(), tc.identity.clone())
        }
    };
    for d in &k.include_dirs {
        args.push(format!("-I{}", d.display()));
    }
    // After the project's include dirs: a project's own kcompat.h wins an `#include`.
    if compat_dir.is_some() {
        let root = compat_header::ROOT;
        args.push(format!("-I{root}"));
        if t.vendor() == Vendor::Amd && k.language == Language::Cuda {
            // The cuda_*.h shims, and the CUDA names for a file that never includes kcompat.h.
            args.push(format!("-I{root}/hip-shim"));
            args.extend(["-include".into(), "kcompat.h".into()]);
        }
    }
    let mut defines = k.defines.clone();
    if let Some(v) = &job.variant {
        defines.extend(v.defines.clone());
    }
    let unit_defines = defines.len();
    for (key, value) in defines {
        args.push(format!("-D{key}={value}"));
    }
    args.push(k.source.display().to_string());
    let launcher = project
        .launcher
        .clone()
        .or_else(|| env.str(names::KBUILD_LAUNCHER).map(String::from));
    let depfile = match (t.vendor(), &launcher) {
        (Vendor::Nvidia, None) => DepfileFrom::DevicePreprocessor,
        _ => DepfileFrom::Compiler,
    };
    Some(CompileCommand {
        program,
        key_args: args,
        launcher,
        identity,
        compat_dir: compat_dir.map(Path::to_path_buf),
        compat_digest: compat_dir.map(|_| compat_header::digest()),
        depfile,
        unit_defines,
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
    /// A remote compile whose result kbuild refuses (it read a file outside its input root).
    #[error("{what}")]
    Remote { what: String, log: String },
}

impl CompileError {
    pub fn log(&self) -> &str {
        match self {
            CompileError::Failed { log, .. }
            | CompileError::Timeout(_, log)
            | CompileError::NoObject { log }
            | CompileError::NoDepfile { log }
            | CompileError::Remote { log, .. } => log,
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
    run_with(cmd, cwd, tmp, timeout, &[])
}

/// [`run`] with `extra` arguments before the output paths (a precompiled header to load).
pub fn run_with(
    cmd: &CompileCommand,
    cwd: &Path,
    tmp: &Path,
    timeout: Option<Duration>,
    extra: &[String],
) -> Result<CompileOutput, CompileError> {
    let start = Instant::now();
    let mut c = match &cmd.launcher {
        Some(l) => {
            let mut c = Command::new(l);
            c.arg(&cmd.program);
            c
        }
        None => Command::new(&cmd.program),
    };
    c.args(cmd.args())
        .args(extra)
        .args(output_args(tmp, cmd.depfile))
        .current_dir(cwd);
    let (status, log) = run_capped(c, tmp, timeout)?;
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

/// Run `c` (a compiler) in its own process group with `TMPDIR=tmp`, killed with everything it
/// started after `timeout` or on SIGINT/SIGTERM; its exit status and its stderr then stdout.
fn run_capped(
    mut c: Command,
    tmp: &Path,
    timeout: Option<Duration>,
) -> Result<(std::process::ExitStatus, String), CompileError> {
    use std::os::unix::process::CommandExt;
    c.stdin(Stdio::null())
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
    Ok((status, log))
}

/// The dependencies of `cmd` from a preprocessing pass only (`-M`), for a compile that runs
/// elsewhere and must know its inputs first: hip-clang writes them to `-MF`, nvcc to `-o`.
/// Paths as the depfile gives them (relative to `cwd` for project files).
pub fn scan_deps(
    cmd: &CompileCommand,
    vendor: Vendor,
    cwd: &Path,
    tmp: &Path,
    timeout: Option<Duration>,
) -> Result<Vec<PathBuf>, CompileError> {
    let out = tmp.join("scan.d").display().to_string();
    let tail: Vec<String> = match vendor {
        Vendor::Nvidia => vec!["-M".into(), "-o".into(), out.clone()],
        Vendor::Amd => vec!["-M".into(), "-MF".into(), out.clone()],
    };
    let mut c = Command::new(&cmd.program);
    c.args(cmd.args()).args(&tail).current_dir(cwd);
    let start = Instant::now();
    let (status, log) = run_capped(c, tmp, timeout)?;
    if !status.success() {
        return Err(CompileError::Failed {
            status: format!("{status} (dependency scan)"),
            log,
        });
    }
    tracing::debug!("dependency scan in {:.2} s", start.elapsed().as_secs_f64());
    match std::fs::read_to_string(&out) {
        Ok(text) => Ok(crate::depfile::parse(&text)),
        Err(_) => Err(CompileError::NoDepfile { log }),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_project_opt_level_is_any_o_flag() {
        for set in [
            &["-O2"][..],
            &["-O0"],
            &["-Os"],
            &["-O"],
            &["-std=c++17", "-O1"],
            &["--optimize"],
            &["--optimize=2"],
            &["-Xcompiler", "-O2"],
        ] {
            assert!(sets_opt_level(&strings(set)), "{set:?}");
        }
        for unset in [
            &[][..],
            &["-std=c++17"],
            &["--offload-arch=gfx1100", "-DO3=1"],
        ] {
            assert!(!sets_opt_level(&strings(unset)), "{unset:?}");
        }
    }

    fn cmd(digest: Option<&str>) -> CompileCommand {
        CompileCommand {
            program: PathBuf::from("/usr/bin/clang++"),
            key_args: strings(&[
                "-x",
                "hip",
                "--rocm-path=/opt/rocm-6.1",
                "--rocm-device-lib-path=/home/me/libs",
                "-I$KBUILD_INCLUDE",
                "-I$KBUILD_INCLUDE/hip-shim",
                "-include",
                "kcompat.h",
                "k.cu",
            ]),
            launcher: None,
            identity: "id".into(),
            compat_dir: digest.map(|_| PathBuf::from("/build/out/include")),
            compat_digest: digest.map(str::to_string),
            depfile: DepfileFrom::Compiler,
            unit_defines: 0,
        }
    }

    #[test]
    fn nvcc_gets_its_depfile_from_the_device_preprocessor_unless_a_comma_forbids() {
        let tmp = Path::new("/cache/tmp/job-1");
        assert_eq!(
            output_args(tmp, DepfileFrom::DevicePreprocessor),
            strings(&[
                "-Xcompiler",
                "-MD,-MF,/cache/tmp/job-1/deps.d",
                "-o",
                "/cache/tmp/job-1/object"
            ])
        );
        let comma = Path::new("/cache,x/tmp");
        assert_eq!(
            output_args(comma, DepfileFrom::DevicePreprocessor)[..3],
            strings(&["-MD", "-MF", "/cache,x/tmp/deps.d"])
        );
        assert_eq!(
            output_args(tmp, DepfileFrom::Compiler)[..2],
            strings(&["-MD", "-MF"])
        );
    }

    #[test]
    fn the_compat_header_bytes_are_in_the_action_key() {
        let a = cmd(Some(&compat_header::digest()));
        let b = cmd(Some("another header"));
        assert_ne!(a.action_key("gfx1100"), b.action_key("gfx1100"));
        assert_eq!(a.action_key("gfx1100"), a.clone().action_key("gfx1100"));
        // The out-dir is not: another --out-dir, the same key.
        let mut moved = a.clone();
        moved.compat_dir = Some(PathBuf::from("/elsewhere/include"));
        assert_eq!(a.action_key("gfx1100"), moved.action_key("gfx1100"));
    }

    #[test]
    fn the_compiler_gets_real_paths_and_the_manifest_symbolic_ones() {
        let c = cmd(Some("d"));
        let args = c.args();
        assert!(args.contains(&"-I/build/out/include".to_string()));
        assert!(args.contains(&"-I/build/out/include/hip-shim".to_string()));
        assert!(args.contains(&"--rocm-path=/opt/rocm-6.1".to_string()));
        let recorded = c.recorded_args();
        assert_eq!(
            recorded,
            strings(&[
                "-x",
                "hip",
                "--rocm-path=$ROCM",
                "--rocm-device-lib-path=$ROCM_DEVICE_LIBS",
                "-I$KBUILD_INCLUDE",
                "-I$KBUILD_INCLUDE/hip-shim",
                "-include",
                "kcompat.h",
                "k.cu",
            ])
        );
    }
}
