//! Triton kernels: the long-lived compile workers (`worker.rs`, a pool of Python processes
//! running `triton/worker.py`) and a Triton job's request, cache key and result (`job.rs`).

mod job;
mod worker;

pub use job::{compile_job, job_key, TritonError, TritonJob, TritonOutput};
pub use worker::{Pool, WorkerError};
