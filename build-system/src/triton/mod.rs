//! Triton kernels: the long-lived compile workers (`worker.rs`, a pool of Python processes
//! running `triton/worker.py`), a Triton job's request, cache key and result (`job.rs`), and
//! the variants an `autotune = true` kernel reads from its function (`autotune.rs`).

pub mod autotune;
mod job;
mod worker;

pub use job::{compile_job, job_key, TritonError, TritonJob, TritonOutput};
pub use worker::{Pool, WorkerError};
