//! Triton compile workers: `python3 -I -u worker.py --site SITE`, JSON lines both ways, one
//! request at a time per worker. A build starts them as its jobs need them (at most one per
//! parallel job) and they end with it, so no Python starts per compile.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::toolchain::{TritonToolchain, WORKER_PY};

/// The largest response line read (a compile's metadata, parameters and ptxas log).
const MAX_RESPONSE: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("writing the Triton worker script to {path}: {err}")]
    Script { path: String, err: std::io::Error },
    #[error("starting the Triton worker ({python}): {err}")]
    Start { python: String, err: std::io::Error },
    #[error("the Triton worker died ({0}); its stderr is in the build's log")]
    Died(String),
    #[error("the Triton worker answered with something that is not a JSON object: {0}")]
    Protocol(String),
    /// The request ran past the job timeout; the worker was killed.
    #[error("the Triton compile ran longer than the job timeout ({0} s); its worker was stopped")]
    Timeout(u64),
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(
        tc: &TritonToolchain,
        script: &PathBuf,
        cache: &PathBuf,
    ) -> Result<Worker, WorkerError> {
        let mut child = Command::new(&tc.python)
            .arg("-I")
            .arg("-u")
            .arg(script)
            .arg("--site")
            .arg(&tc.site)
            .env("TRITON_CACHE_DIR", cache)
            .env("TRITON_DISABLE_LINE_INFO", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|err| WorkerError::Start {
                python: tc.python.display().to_string(),
                err,
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(WorkerError::Died("no pipes".into()));
        };
        Ok(Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    fn call(&mut self, request: &Value, timeout: Option<Duration>) -> Result<Value, WorkerError> {
        let mut line = request.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .and_then(|()| self.stdin.flush())
            .map_err(|e| WorkerError::Died(format!("writing a request: {e}")))?;
        let answered = Arc::new(AtomicBool::new(false));
        let killed = Arc::new(AtomicBool::new(false));
        if let Some(limit) = timeout {
            watchdog(self.child.id(), limit, &answered, &killed);
        }
        let mut buf = Vec::new();
        let read = (&mut self.stdout)
            .take(MAX_RESPONSE)
            .read_until(b'\n', &mut buf);
        answered.store(true, Ordering::SeqCst);
        if killed.load(Ordering::SeqCst) {
            return Err(WorkerError::Timeout(timeout.map_or(0, |t| t.as_secs())));
        }
        let read = read.map_err(|e| WorkerError::Died(format!("reading its answer: {e}")))?;
        if read == 0 {
            let status = self.child.try_wait().ok().flatten();
            return Err(WorkerError::Died(match status {
                Some(s) => format!("exit {s}"),
                None => "closed its output".into(),
            }));
        }
        if !buf.ends_with(b"\n") {
            return Err(WorkerError::Protocol(format!(
                "an answer over {MAX_RESPONSE} bytes"
            )));
        }
        match serde_json::from_slice::<Value>(&buf) {
            Ok(v) if v.is_object() => Ok(v),
            _ => Err(WorkerError::Protocol(
                String::from_utf8_lossy(&buf[..buf.len().min(200)]).into_owned(),
            )),
        }
    }
}

/// Kill worker `pid` when it has not answered within `limit` (a detached thread that ends as
/// soon as the answer comes).
fn watchdog(pid: u32, limit: Duration, answered: &Arc<AtomicBool>, killed: &Arc<AtomicBool>) {
    let (answered, killed) = (Arc::clone(answered), Arc::clone(killed));
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < limit {
            if answered.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !answered.load(Ordering::SeqCst) {
            killed.store(true, Ordering::SeqCst);
            #[cfg(unix)]
            // SAFETY: kill(2) on our own child's pid; a pid reused after the child was reaped
            // cannot be one, since the child is reaped only when its Worker drops.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    });
}

impl Drop for Worker {
    fn drop(&mut self) {
        // End of input ends the worker; a stuck one is killed.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workers of one build.
pub struct Pool {
    tc: TritonToolchain,
    script: PathBuf,
    /// Triton's own cache, private to the build's scratch dir.
    cache: PathBuf,
    idle: Mutex<Vec<Worker>>,
}

impl Pool {
    /// A pool over `tc`; the worker script is written under `scratch` (content-named, so
    /// builds share it).
    pub fn new(tc: &TritonToolchain, scratch: &std::path::Path) -> Result<Pool, WorkerError> {
        let hash = blake3::hash(WORKER_PY.as_bytes()).to_hex();
        let script = scratch.join(format!("kbuild-triton-worker-{}.py", &hash[..16]));
        if !script.is_file() {
            let _ = std::fs::create_dir_all(scratch);
            kbuild_base::fs::write_atomic(&script, WORKER_PY.as_bytes()).map_err(|err| {
                WorkerError::Script {
                    path: script.display().to_string(),
                    err,
                }
            })?;
        }
        let cache = scratch.join("triton-cache");
        Ok(Pool {
            tc: tc.clone(),
            script,
            cache,
            idle: Mutex::new(Vec::new()),
        })
    }

    pub fn toolchain(&self) -> &TritonToolchain {
        &self.tc
    }

    /// Send one request to an idle worker (started when none is idle) and return its
    /// answer; past `timeout` the worker is killed. A worker that failed is dropped, not
    /// reused.
    pub fn call(&self, request: &Value, timeout: Option<Duration>) -> Result<Value, WorkerError> {
        let idle = self.idle.lock().ok().and_then(|mut v| v.pop());
        let mut worker = match idle {
            Some(w) => w,
            None => Worker::start(&self.tc, &self.script, &self.cache)?,
        };
        let answer = worker.call(request, timeout)?;
        if let Ok(mut v) = self.idle.lock() {
            v.push(worker);
        }
        Ok(answer)
    }
}
