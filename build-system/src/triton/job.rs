//! One Triton job: the request a worker gets for a kernel × variant × target, the job's cache
//! key (Triton's own source key of the function and every @jit function it calls, so an edit
//! rebuilds exactly the kernels it reaches), and the object and launch record it returns.

use std::collections::BTreeMap;
use std::path::Path;

use kbuild_manifest::target::{Target, Vendor};
use kbuild_manifest::triton::{TritonLaunch, TritonParam, TritonRemoved};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::cache::Cache;
use crate::config::{triton_arch, Kernel, TritonKernel, Variant, LAUNCH_AXES};

use super::worker::{Pool, WorkerError};

#[derive(Debug, thiserror::Error)]
pub enum TritonError {
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The worker refused the request (import, specialization or compile error).
    #[error("{0}")]
    Refused(String),
    #[error("the Triton worker's answer lacks or mistypes `{0}`")]
    Answer(&'static str),
    #[error("reading the object the worker wrote, {path}: {err}")]
    Read { path: String, err: String },
    #[error("target {target}: {why}")]
    Target {
        target: String,
        why: crate::config::NotForTriton,
    },
}

/// One Triton job: a kernel × variant × target of the project at `root`.
pub struct TritonJob<'a> {
    pub root: &'a Path,
    pub kernel: &'a Kernel,
    pub spec: &'a TritonKernel,
    pub variant: Option<&'a Variant>,
    pub target: &'a Target,
}

/// The worker request of a job (`op` and `out` added by the caller).
fn request(job: &TritonJob) -> Result<Value, TritonError> {
    let (root, kernel, t, variant, target) =
        (job.root, job.kernel, job.spec, job.variant, job.target);
    let arch = triton_arch(target).map_err(|why| TritonError::Target {
        target: target.to_string(),
        why,
    })?;
    let mut constexprs: BTreeMap<String, Value> = BTreeMap::new();
    for (k, v) in &t.constexprs {
        constexprs.insert(k.clone(), serde_json::from_str(v).unwrap_or(Value::Null));
    }
    let mut options = json!({
        "num_warps": t.num_warps,
        "num_stages": t.num_stages,
        "num_ctas": t.num_ctas,
        "maxnreg": t.maxnreg,
    });
    // Only when asked for, so the requests (and keys) of other kernels stay as they were.
    if t.cooperative {
        options["launch_cooperative_grid"] = Value::Bool(true);
    }
    if t.pdl {
        options["launch_pdl"] = Value::Bool(true);
    }
    // A variant axis sets a constexpr (its value as the number or bool it reads as), or a
    // launch option (`num_warps`, `num_stages`, `num_ctas`, `maxnreg`: an autotune config).
    for (k, v) in variant.map(|v| &v.defines).into_iter().flatten() {
        let value = serde_json::from_str::<Value>(v)
            .ok()
            .filter(|x| x.is_number() || x.is_boolean())
            .unwrap_or_else(|| Value::String(v.clone()));
        match k.as_str() {
            k if LAUNCH_AXES.contains(&k) => options[k] = value,
            _ => {
                constexprs.insert(k.clone(), value);
            }
        }
    }
    let import: Value = serde_json::from_str(&t.import).unwrap_or_else(|_| json!({}));
    let mut req = json!({
        "file": root.join(&kernel.source).display().to_string(),
        "function": t.function,
        "family": match target.vendor() { Vendor::Nvidia => "nvidia", Vendor::Amd => "amd" },
        "import": import,
        "signature": t.signature,
        "constexprs": constexprs,
        "divisible_16": t.divisible_16,
        "equal_to_1": t.equal_to_1,
        "options": options,
        "target": arch,
    });
    // Only when asked: requests without it, and so their cache keys, stay as they were.
    if t.heuristics {
        req["heuristics"] = json!(true);
    }
    Ok(req)
}

fn ok_or_refused(answer: Value) -> Result<Value, TritonError> {
    match answer.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(answer),
        _ => Err(TritonError::Refused(
            answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("the worker gave no reason")
                .to_string(),
        )),
    }
}

/// The job's action key: the Triton toolchain, the target and the whole request, with the
/// function's source key (its code and every @jit function and global it uses) in place of
/// the file's bytes.
pub fn job_key(
    pool: &Pool,
    timeout: Option<std::time::Duration>,
    job: &TritonJob,
) -> Result<String, TritonError> {
    let mut req = request(job)?;
    req["op"] = json!("key");
    let answer = ok_or_refused(pool.call(&req, timeout)?)?;
    let key = answer
        .get("key")
        .and_then(Value::as_str)
        .ok_or(TritonError::Answer("key"))?;
    if job.spec.heuristics {
        // Triton's source key leaves out a heuristic's lambda: key by what it computes.
        req["constexprs"] = answer
            .get("constexprs")
            .filter(|c| c.is_object())
            .cloned()
            .ok_or(TritonError::Answer("constexprs"))?;
    }
    // The file path is the project's: relative, so a clone elsewhere hits.
    req["file"] = json!(job.kernel.source.display().to_string());
    req["op"] = json!("compile");
    req["source_key"] = json!(key);
    Ok(Cache::action_key(
        &pool.toolchain().identity,
        &job.target.to_string(),
        &[req.to_string()],
    ))
}

/// What a compile returned: the object, ptxas' report (NVIDIA), the launch record.
pub struct TritonOutput {
    pub object: Vec<u8>,
    pub log: String,
    pub launch: TritonLaunch,
    /// The request, for the failure text and the entry's `command`.
    pub shown: String,
}

#[derive(Deserialize)]
struct Metadata {
    num_warps: u32,
    warp_size: u32,
    num_ctas: u32,
    num_stages: u32,
    shared: u64,
    global_scratch_size: u64,
    global_scratch_align: u64,
    profile_scratch_size: u64,
    profile_scratch_align: u64,
    launch_cooperative_grid: bool,
    launch_pdl: bool,
    #[serde(default)]
    tmem_size: u64,
    triton_version: String,
}

/// The largest object read back from a worker.
const MAX_OBJECT: u64 = 256 << 20;

/// Compile one job in a worker; the files it writes go to `scratch` and are removed.
pub fn compile_job(
    pool: &Pool,
    timeout: Option<std::time::Duration>,
    job: &TritonJob,
    scratch: &Path,
) -> Result<TritonOutput, TritonError> {
    let mut req = request(job)?;
    req["op"] = json!("compile");
    req["out"] = json!(scratch.join("object").display().to_string());
    let shown = format!("triton worker: {req}");
    let answer = ok_or_refused(pool.call(&req, timeout)?)?;
    let path = answer
        .get("object")
        .and_then(Value::as_str)
        .ok_or(TritonError::Answer("object"))?;
    let object = kbuild_base::read::read_capped(Path::new(path), MAX_OBJECT, "Triton object")
        .map_err(|e| TritonError::Read {
            path: path.to_string(),
            err: e.to_string(),
        })?;
    let field = |name: &'static str| answer.get(name).cloned().ok_or(TritonError::Answer(name));
    let md: Metadata =
        serde_json::from_value(field("metadata")?).map_err(|_| TritonError::Answer("metadata"))?;
    let params: Vec<TritonParam> =
        serde_json::from_value(field("params")?).map_err(|_| TritonError::Answer("params"))?;
    let removed: Vec<TritonRemoved> =
        serde_json::from_value(field("removed")?).map_err(|_| TritonError::Answer("removed"))?;
    // The worker's: the request's, with what the heuristics computed.
    let constexprs = answer
        .get("constexprs")
        .unwrap_or(&req["constexprs"])
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let launch = TritonLaunch {
        function: job.spec.function.clone(),
        triton_version: md.triton_version,
        num_warps: md.num_warps,
        warp_size: md.warp_size,
        num_ctas: md.num_ctas,
        num_stages: md.num_stages,
        shared: md.shared,
        global_scratch_size: md.global_scratch_size,
        global_scratch_align: md.global_scratch_align,
        profile_scratch_size: md.profile_scratch_size,
        profile_scratch_align: md.profile_scratch_align,
        cooperative: md.launch_cooperative_grid,
        pdl: md.launch_pdl,
        tmem_size: md.tmem_size,
        params,
        removed,
        constexprs,
    };
    let log = answer
        .get("log")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok(TritonOutput {
        object,
        log,
        launch,
        shown,
    })
}
