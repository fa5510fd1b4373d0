//! Remote execution of compile jobs: what the build asks of an executor, and nothing of how.
//!
//! A cache miss may run on a remote executor (the Bazel Remote Execution API, through the
//! CLI's `kbuild-remote-exec` crate) instead of here. The build library knows only this
//! interface, so a `build.rs` user and the loader get no gRPC or async runtime: the executor
//! is handed in through [`crate::build::BuildOptions::remote_exec`].
//!
//! One compile is a [`RemoteAction`]: the argument vector with every path relative to the
//! input root (the project's files where they are in the project, the compat header under
//! [`COMPAT_ROOT`], outputs under [`OUT_ROOT`]), the files of the input root, the outputs the
//! compile writes, the platform properties a worker must match (kbuild's toolchain identity
//! among them) and the timeout. The executor answers with what the compile wrote and printed
//! ([`RemoteRun`]), or says why it could not run it ([`RemoteExecError`]); the build then
//! compiles locally, so remote execution never fails a build that would build here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Where the compat header's include directory is placed in the input root.
pub const COMPAT_ROOT: &str = "_kbuild/include";
/// Where a remote compile writes its outputs, in the input root.
pub const OUT_ROOT: &str = "_kbuild/out";
/// The platform property that carries the compiler's identity: a worker must advertise the
/// same value (it has that toolchain at the same absolute path).
pub const TOOLCHAIN_PROPERTY: &str = "kbuild-toolchain";
/// Where a hermetic action's toolchain directories are placed in the input root
/// (`_kbuild/toolchain/0`, `/1`, …).
pub const TOOLCHAIN_ROOT: &str = "_kbuild/toolchain";

/// A local directory placed whole in the input root (a toolchain a hermetic action carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTree {
    /// Its path in the input root.
    pub path: String,
    /// The local directory.
    pub local: PathBuf,
}

/// One file of the input root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteInput {
    /// Its path in the input root (relative, `/`-separated, no `..`).
    pub path: String,
    /// The local file with its bytes.
    pub local: PathBuf,
}

/// A compile as an action.
#[derive(Debug, Clone)]
pub struct RemoteAction {
    /// What the compile is, for messages: `gdn_conv for sm_89`.
    pub label: String,
    /// The program (an absolute path the worker has) and its arguments.
    pub argv: Vec<String>,
    /// The environment of the compile.
    pub env: Vec<(String, String)>,
    /// The working directory, relative to the input root ("" for the root).
    pub working_directory: String,
    /// The input root's files.
    pub inputs: Vec<RemoteInput>,
    /// Whole directories of the input root (a hermetic action's toolchain).
    pub trees: Vec<RemoteTree>,
    /// The files the compile writes, relative to the working directory.
    pub outputs: Vec<String>,
    /// Platform properties, sorted by name (REAPI wants them so).
    pub platform: Vec<(String, String)>,
    /// The compile's deadline on the worker.
    pub timeout: Option<Duration>,
}

/// What a remote compile did.
#[derive(Debug, Clone, Default)]
pub struct RemoteRun {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The declared outputs the compile wrote, by their declared path.
    pub outputs: BTreeMap<String, Vec<u8>>,
    /// Served from the service's action cache (no execution).
    pub cached: bool,
    /// The worker that ran it, when the service says.
    pub worker: String,
}

/// Why an action did not run remotely; the build compiles it locally.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteExecError {
    /// The service is unreachable or gave up (UNAVAILABLE, a lost worker past its deadline):
    /// the executor may switch itself off for the rest of the build.
    #[error("{label}: remote execution unavailable: {why}")]
    Unavailable { label: String, why: String },
    /// The service refused or failed this action (named status and message).
    #[error("{label}: remote execution refused: {why}")]
    Refused { label: String, why: String },
}

/// What a build's remote executions came to (for the summary).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RemoteExecStats {
    /// Actions sent.
    pub actions: usize,
    /// Answered from the service's action cache.
    pub cache_hits: usize,
    /// Executed by a worker.
    pub executed: usize,
    /// Given back to a local compile (service unavailable or refusing).
    pub fell_back: usize,
    /// Executions watched (partly) by polling the operation rather than over a stream.
    pub polled: usize,
    /// Blobs and bytes uploaded.
    pub uploaded_blobs: usize,
    pub uploaded_bytes: u64,
}

/// A remote executor of compile actions. `run` is called from the build's job threads, many at
/// once; an implementation bounds its own concurrency.
pub trait RemoteExecutor: Send + Sync + std::fmt::Debug {
    /// Run `action` (action cache first, then a worker) and return what it did.
    fn run(&self, action: &RemoteAction) -> Result<RemoteRun, RemoteExecError>;
    /// What this executor did so far.
    fn stats(&self) -> RemoteExecStats;
    /// Where it sends actions, for messages (`grpc://host:port`, instance).
    fn describe(&self) -> String;
    /// Whether actions carry their toolchain (the compiler's installation as input
    /// directories, run from the input root) rather than name it for a worker that has it.
    fn hermetic(&self) -> bool {
        false
    }
}
