//! kbuild's remote execution client: each compile job of a build becomes a Bazel Remote
//! Execution API (REAPI v2) action, run by any service that speaks it (BuildBuddy, EngFlow,
//! NativeLink, Buildbarn, BuildGrid).
//!
//! The build library asks through [`kbuild_build::remote_exec::RemoteExecutor`] and knows
//! nothing of gRPC; this crate is the CLI's (feature `remote-exec`). One action: the input root
//! (the project files the compile reads, the compat header), the `Command` (the compile's
//! arguments with paths relative to the input root, its outputs), the `Action` (with kbuild's
//! toolchain identity and the configured properties as its platform, and the job's timeout).
//! The action cache is asked first; on a miss the blobs the service lacks are uploaded and the
//! action executed; the outputs come back checked against their digests.
//!
//! Failure never fails a build: an unreachable service, a refusal (named with its gRPC code
//! and the action) or a lost worker past its deadline gives the job back to a local compile.
//! After the service is found unavailable, every later job compiles locally at once.

mod client;
mod options;
mod tree;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kbuild_build::remote_exec::{
    RemoteAction, RemoteExecError, RemoteExecStats, RemoteExecutor, RemoteRun,
};
use tonic::{Code, Status};

pub use options::{RemoteExecArgs, RemoteExecOptionsError};

use client::{code_name, Capabilities, Client, Headers};
use tree::{Blob, InputFile};

/// Where and how actions run.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// `grpc://host:port` (plain) or `grpcs://host:port` (TLS, the system's web roots).
    pub endpoint: String,
    /// The REAPI instance name ("" for the default).
    pub instance: String,
    /// Headers added to every call (`x-buildbuddy-api-key`, `authorization`).
    pub headers: Vec<(String, String)>,
    /// Platform properties besides kbuild's toolchain identity (`OSFamily`, `container-image`,
    /// a pool name).
    pub platform: Vec<(String, String)>,
    /// Actions in flight at once (uploads and executions); more jobs wait.
    pub max_in_flight: usize,
    /// Executions watched over an open stream at once; the others poll `GetOperation`.
    pub max_streams: usize,
    /// A CA certificate (PEM) trusted besides the web roots, for a service with a private CA.
    pub ca_pem: Option<Vec<u8>>,
    /// How long an action may wait for a worker (queued, or requeued after losing one)
    /// before the job is given back to a local compile; on a worker it has its own timeout.
    pub queue_deadline: Duration,
    /// Actions carry their toolchain (input directories) instead of naming it.
    pub hermetic: bool,
}

/// Why the service cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum RemoteConnectError {
    #[error("remote execution {endpoint}: {why}")]
    Endpoint { endpoint: String, why: String },
    #[error("remote execution {endpoint}: {code}: {message}")]
    Service {
        endpoint: String,
        code: &'static str,
        message: String,
    },
    #[error(
        "remote execution {endpoint}: the service does not execute actions (exec_enabled is false)"
    )]
    NoExecution { endpoint: String },
    #[error("remote execution: starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// A connected REAPI service.
pub struct RemoteExecution {
    rt: tokio::runtime::Runtime,
    client: Client,
    caps: Capabilities,
    cfg: RemoteConfig,
    gate: tokio::sync::Semaphore,
    /// Permits to hold an Execute/WaitExecution stream open.
    streams: tokio::sync::Semaphore,
    stats: Mutex<RemoteExecStats>,
    /// Set once the service is found unavailable: later jobs compile locally at once.
    off: AtomicBool,
    /// The permits `gate` still has in all (lowered by RESOURCE_EXHAUSTED answers).
    capacity: std::sync::atomic::AtomicUsize,
    /// The toolchain directories hermetic actions carry, hashed and uploaded once a build.
    trees: Mutex<BTreeMap<std::path::PathBuf, Arc<TreeSlot>>>,
}

/// One carried directory: its tree (hashed on first use) and whether the service has it.
#[derive(Default)]
struct TreeSlot {
    tree: std::sync::OnceLock<Result<Arc<tree::DirTree>, String>>,
    uploaded: tokio::sync::OnceCell<()>,
}

impl std::fmt::Debug for RemoteExecution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteExecution")
            .field("endpoint", &self.cfg.endpoint)
            .field("instance", &self.cfg.instance)
            .finish()
    }
}

/// Blobs a compile's outputs may be; larger ones are refused.
const MAX_OUTPUT: i64 = 512 << 20;

impl RemoteExecution {
    /// Connect and ask the service what it does (`GetCapabilities`).
    pub fn connect(cfg: RemoteConfig) -> Result<RemoteExecution, RemoteConnectError> {
        let endpoint_err = |why: String| RemoteConnectError::Endpoint {
            endpoint: cfg.endpoint.clone(),
            why,
        };
        let (uri, tls) = if let Some(rest) = cfg.endpoint.strip_prefix("grpcs://") {
            (format!("https://{rest}"), true)
        } else if let Some(rest) = cfg.endpoint.strip_prefix("grpc://") {
            (format!("http://{rest}"), false)
        } else {
            return Err(endpoint_err(
                "not a grpc://HOST:PORT or grpcs://HOST:PORT address".into(),
            ));
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("kbuild-remote-exec")
            .build()
            .map_err(RemoteConnectError::Runtime)?;
        let mut endpoint = tonic::transport::Endpoint::from_shared(uri)
            .map_err(|e| endpoint_err(e.to_string()))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_while_idle(true);
        if tls {
            let mut config = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
            if let Some(pem) = &cfg.ca_pem {
                config = config.ca_certificate(tonic::transport::Certificate::from_pem(pem));
            }
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| endpoint_err(format!("TLS: {e}")))?;
        }
        let mut headers = Vec::new();
        for (k, v) in &cfg.headers {
            let key = k
                .to_ascii_lowercase()
                .parse()
                .map_err(|_| endpoint_err(format!("header name `{k}` is not valid")))?;
            let value = v
                .parse()
                .map_err(|_| endpoint_err(format!("header `{k}`: its value is not valid")))?;
            headers.push((key, value));
        }
        let channel = {
            let _guard = rt.enter();
            endpoint.connect_lazy()
        };
        let mut client = Client::new(channel, Headers(headers), &cfg.instance);
        let caps = rt
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(30), client.capabilities()).await
            })
            .map_err(|_| endpoint_err("GetCapabilities did not answer within 30 s".into()))?
            .map_err(|s| RemoteConnectError::Service {
                endpoint: cfg.endpoint.clone(),
                code: code_name(s.code()),
                message: s.message().to_string(),
            })?;
        if !caps.execution {
            return Err(RemoteConnectError::NoExecution {
                endpoint: cfg.endpoint.clone(),
            });
        }
        client.max_batch = caps.max_batch;
        Ok(RemoteExecution {
            rt,
            client,
            caps,
            gate: tokio::sync::Semaphore::new(cfg.max_in_flight.max(1)),
            streams: tokio::sync::Semaphore::new(cfg.max_streams.max(1)),
            capacity: std::sync::atomic::AtomicUsize::new(cfg.max_in_flight.max(1)),
            cfg,
            stats: Mutex::new(RemoteExecStats::default()),
            off: AtomicBool::new(false),
            trees: Mutex::new(BTreeMap::new()),
        })
    }

    fn count(&self, f: impl FnOnce(&mut RemoteExecStats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }

    /// What a service error means for this action: unavailable (the service or its workers
    /// are gone: stop asking) or refused (this action only).
    fn error(&self, label: &str, s: &Status) -> RemoteExecError {
        let why = format!(
            "{} from {}: {}",
            code_name(s.code()),
            self.cfg.endpoint,
            s.message()
        );
        match s.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled => {
                RemoteExecError::Unavailable {
                    label: label.to_string(),
                    why,
                }
            }
            _ => RemoteExecError::Refused {
                label: label.to_string(),
                why,
            },
        }
    }

    async fn run_async(&self, a: &RemoteAction) -> Result<RemoteRun, RemoteExecError> {
        let label = a.label.as_str();
        let refused = |why: String| RemoteExecError::Refused {
            label: label.to_string(),
            why,
        };
        // Read the input root's files (the caller named each; size-capped).
        let mut files = Vec::with_capacity(a.inputs.len());
        for i in &a.inputs {
            let data = kbuild_base::read::read_capped(&i.local, MAX_INPUT, "a remote input")
                .map_err(|e| refused(format!("reading input: {e}")))?;
            files.push(InputFile {
                path: i.path.clone(),
                data,
                executable: false,
            });
        }
        // Carried directories: hashed once a build (a toolchain is hundreds of megabytes).
        let mut trees = Vec::with_capacity(a.trees.len());
        for t in &a.trees {
            let slot = match self.trees.lock() {
                Ok(mut m) => m.entry(t.local.clone()).or_default().clone(),
                Err(_) => return Err(refused("the tree table was poisoned".into())),
            };
            let tree = slot
                .tree
                .get_or_init(|| {
                    let started = std::time::Instant::now();
                    let tree = tree::dir_tree(&t.local).map_err(|e| e.to_string())?;
                    tracing::info!(
                        "toolchain directory {}: {} files, {} bytes, hashed in {:.1} s",
                        t.local.display(),
                        tree.files.len(),
                        tree.bytes,
                        started.elapsed().as_secs_f64()
                    );
                    Ok(Arc::new(tree))
                })
                .clone()
                .map_err(|e| refused(format!("toolchain directory {e}")))?;
            trees.push((t.path.clone(), slot, tree));
        }
        let mounts: Vec<(String, _)> = trees
            .iter()
            .map(|(path, _, tree)| (path.clone(), tree.digest.clone()))
            .collect();
        let (root, mut blobs) =
            tree::input_root(files, &mounts).map_err(|e| refused(e.to_string()))?;
        // The action's own properties (its toolchain) and the configured ones.
        let mut properties = a.platform.clone();
        properties.extend(self.cfg.platform.iter().cloned());
        let platform = tree::platform(&properties);
        let command = tree::command(
            &a.argv,
            &a.env,
            &a.working_directory,
            &a.outputs,
            &platform,
            self.caps.output_paths,
        );
        let action = tree::action(&command.digest, &root, a.timeout, &platform);
        let action_digest = action.digest.clone();
        // The output paths the service reports are relative to the working directory.
        let mut client = self.client.clone();
        let cached = client
            .cached_result(&action_digest, &a.outputs)
            .await
            .map_err(|s| self.error(label, &s))?;
        let (result, was_cached) = match cached {
            Some(r) => (r, true),
            None => {
                blobs.push(command);
                blobs.push(action);
                let refs: Vec<&Blob> = blobs.iter().collect();
                // A compile with no timeout of its own still gets an hour on a worker.
                let executing =
                    a.timeout.unwrap_or(Duration::from_secs(3600)) + Duration::from_secs(30);
                let mut attempt = 0;
                let response = loop {
                    attempt += 1;
                    let tried = async {
                        // A carried tree is uploaded by the first action that needs it (the
                        // others wait for it); a retry checks it again.
                        for (_, slot, tree) in &trees {
                            let upload = async {
                                let (n, bytes) = client.clone().upload_tree(tree).await?;
                                self.count(|st| {
                                    st.uploaded_blobs += n;
                                    st.uploaded_bytes += bytes;
                                });
                                Ok::<(), Status>(())
                            };
                            if attempt > 1 {
                                upload.await?;
                            } else {
                                slot.uploaded.get_or_try_init(|| upload).await?;
                            }
                        }
                        let (n, bytes) = client.upload_missing(&refs).await?;
                        self.count(|st| {
                            st.uploaded_blobs += n;
                            st.uploaded_bytes += bytes;
                        });
                        let executed = client
                            .execute(
                                &action_digest,
                                &a.outputs,
                                self.cfg.queue_deadline,
                                executing,
                                &self.streams,
                            )
                            .await?;
                        if executed.polls > 0 {
                            self.count(|st| st.polled += 1);
                        }
                        let response = executed.response;
                        match response.status.as_ref().filter(|s| s.code != 0) {
                            Some(s) => Err(Status::new(Code::from_i32(s.code), s.message.clone())),
                            None => Ok(response),
                        }
                    }
                    .await;
                    match tried {
                        Ok(r) => break r,
                        // A busy service, or a blob it dropped between the upload and the
                        // execution (REAPI's FAILED_PRECONDITION for missing inputs): upload
                        // again and retry, a few times, backing off.
                        Err(s) if attempt < RETRIES && retryable(&s) => {
                            tracing::debug!("{label}: {}; retrying", s.message());
                            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
                        }
                        Err(s) => return Err(self.error(label, &s)),
                    }
                };
                let Some(result) = response.result else {
                    return Err(refused("the service returned no action result".into()));
                };
                (result, response.cached_result)
            }
        };
        self.fetch(&mut client, label, result, was_cached).await
    }

    /// The outputs, stdout and stderr of `result`, read from the CAS where not inline.
    async fn fetch(
        &self,
        client: &mut Client,
        label: &str,
        result: bazel_remote_apis::build::bazel::remote::execution::v2::ActionResult,
        cached: bool,
    ) -> Result<RemoteRun, RemoteExecError> {
        let refused = |why: String| RemoteExecError::Refused {
            label: label.to_string(),
            why,
        };
        let mut outputs = BTreeMap::new();
        for f in &result.output_files {
            let Some(d) = &f.digest else {
                return Err(refused(format!("output {} has no digest", f.path)));
            };
            if d.size_bytes > MAX_OUTPUT {
                return Err(refused(format!(
                    "output {} is {} bytes, over kbuild's {MAX_OUTPUT}",
                    f.path, d.size_bytes
                )));
            }
            let data = if !f.contents.is_empty() || d.size_bytes == 0 {
                if tree::digest_of(&f.contents) != *d {
                    return Err(refused(format!(
                        "output {}: its inline bytes do not hash to its digest",
                        f.path
                    )));
                }
                f.contents.clone()
            } else {
                let mut v = client
                    .read(std::slice::from_ref(d))
                    .await
                    .map_err(|s| self.error(label, &s))?;
                v.pop().unwrap_or_default()
            };
            outputs.insert(f.path.clone(), data);
        }
        let mut stdout = result.stdout_raw.clone();
        let mut stderr = result.stderr_raw.clone();
        let (out_digest, err_digest) = (result.stdout_digest.clone(), result.stderr_digest.clone());
        for (buf, digest) in [(&mut stdout, out_digest), (&mut stderr, err_digest)] {
            if let Some(d) = digest.filter(|d| buf.is_empty() && d.size_bytes > 0) {
                if d.size_bytes > MAX_OUTPUT {
                    return Err(refused(format!("a log of {} bytes", d.size_bytes)));
                }
                *buf = client
                    .read(std::slice::from_ref(&d))
                    .await
                    .map_err(|s| self.error(label, &s))?
                    .pop()
                    .unwrap_or_default();
            }
        }
        let worker = result
            .execution_metadata
            .map(|m| m.worker)
            .unwrap_or_default();
        Ok(RemoteRun {
            exit_code: result.exit_code,
            stdout,
            stderr,
            outputs,
            cached,
            worker,
        })
    }
}

/// Attempts of one action's upload and execution (the first and two retries).
const RETRIES: u32 = 3;
/// Times an action is tried again after RESOURCE_EXHAUSTED (waiting 0.25 s more each time).
const BUSY_RETRIES: u64 = 20;

/// Whether a failed upload or execution is worth another try: the service was busy, dropped
/// the stream, or lacks an input it had been given.
fn retryable(s: &Status) -> bool {
    matches!(s.code(), Code::Aborted | Code::Unavailable)
        || (s.code() == Code::FailedPrecondition
            && s.message().to_ascii_lowercase().contains("missing"))
}

/// Inputs are the project's sources and headers: a cap keeps a hostile tree from making a
/// build read a huge or endless file.
const MAX_INPUT: u64 = 256 << 20;

impl RemoteExecutor for RemoteExecution {
    fn run(&self, action: &RemoteAction) -> Result<RemoteRun, RemoteExecError> {
        if self.off.load(Ordering::Relaxed) {
            return Err(RemoteExecError::Unavailable {
                label: action.label.clone(),
                why: "switched off for this build after an earlier failure".into(),
            });
        }
        self.count(|s| s.actions += 1);
        let result = self.rt.block_on(async {
            // Back-pressure: at most `capacity` actions between upload and result. A service
            // that says it is exhausted takes one from the capacity each time (never the last)
            // and the action waits and tries again, so the build settles at what the service
            // sustains instead of giving its jobs back to this machine.
            let mut attempt = 0u64;
            loop {
                let Ok(permit) = self.gate.acquire().await else {
                    return Err(RemoteExecError::Unavailable {
                        label: action.label.clone(),
                        why: "the executor was closed".into(),
                    });
                };
                let r = self.run_async(action).await;
                let busy = matches!(&r, Err(RemoteExecError::Refused { why, .. })
                    if why.starts_with(code_name(Code::ResourceExhausted)));
                if !busy || attempt >= BUSY_RETRIES {
                    return r;
                }
                let shrunk = self
                    .capacity
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                        (c > 1).then(|| c - 1)
                    })
                    .is_ok();
                if shrunk {
                    permit.forget();
                } else {
                    drop(permit);
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(250 * attempt.min(20))).await;
            }
        });
        match &result {
            Ok(r) if r.cached => self.count(|s| s.cache_hits += 1),
            Ok(_) => self.count(|s| s.executed += 1),
            Err(RemoteExecError::Unavailable { .. }) => {
                self.off.store(true, Ordering::Relaxed);
                self.count(|s| s.fell_back += 1);
            }
            Err(_) => self.count(|s| s.fell_back += 1),
        }
        result
    }

    fn stats(&self) -> RemoteExecStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn hermetic(&self) -> bool {
        self.cfg.hermetic
    }

    fn describe(&self) -> String {
        if self.cfg.instance.is_empty() {
            self.cfg.endpoint.clone()
        } else {
            format!("{} (instance {})", self.cfg.endpoint, self.cfg.instance)
        }
    }
}

/// `opts` with the remote executor `args`, the environment or Kbuild.toml `[remote]`
/// (`project`) name, connected; unchanged when none of them names a service.
pub fn attach(
    mut opts: kbuild_build::build::BuildOptions,
    args: &RemoteExecArgs,
    project: &kbuild_build::config::RemoteSettings,
    env: &kbuild_base::env::Env,
) -> Result<kbuild_build::build::BuildOptions, ExecutorError> {
    let Some(cfg) = args.config(project, env)? else {
        return Ok(opts);
    };
    // A service that cannot be reached or trusted costs this build its remote execution, not
    // the build: it compiles here, and says why.
    match RemoteExecution::connect(cfg) {
        Ok(rx) => opts.remote_exec = Some(std::sync::Arc::new(rx)),
        Err(e) => tracing::warn!("{e}; compiling locally"),
    }
    Ok(opts)
}

/// Why a build's remote executor could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error(transparent)]
    Options(#[from] RemoteExecOptionsError),
    #[error(transparent)]
    Connect(#[from] RemoteConnectError),
}
