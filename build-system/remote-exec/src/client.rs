//! The REAPI calls, async over tonic: capabilities, the content-addressable storage (find
//! missing, batch and ByteStream uploads and reads), the action cache and Execute (with
//! WaitExecution when the stream drops). Every call is bounded by a deadline; every service
//! error is returned with its gRPC code, for the caller to name with its action.

use std::time::Duration;

use bazel_remote_apis::build::bazel::remote::execution::v2 as re;
use bazel_remote_apis::google::bytestream as bs;
use bazel_remote_apis::google::longrunning::{self as lr, operation, Operation};
use prost::Message;
use tonic::metadata::{Ascii, MetadataKey, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use crate::tree::{Blob, DirTree};

/// Adds the configured headers (an API key, BuildBuddy/EngFlow style) to every call.
#[derive(Clone)]
pub struct Headers(pub Vec<(MetadataKey<Ascii>, MetadataValue<Ascii>)>);

impl tonic::service::Interceptor for Headers {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        for (k, v) in &self.0 {
            req.metadata_mut().insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

type Svc = InterceptedService<Channel, Headers>;

/// Larger than any blob kbuild sends in one message; tonic's default is 4 MiB.
const MAX_MESSAGE: usize = 64 << 20;
/// ByteStream chunks.
const CHUNK: usize = 1 << 20;

/// The clients of one service endpoint and instance.
#[derive(Clone)]
pub struct Client {
    pub instance: String,
    cas: re::content_addressable_storage_client::ContentAddressableStorageClient<Svc>,
    ac: re::action_cache_client::ActionCacheClient<Svc>,
    exec: re::execution_client::ExecutionClient<Svc>,
    caps: re::capabilities_client::CapabilitiesClient<Svc>,
    bytestream: bs::byte_stream_client::ByteStreamClient<Svc>,
    operations: lr::operations_client::OperationsClient<Svc>,
    /// Blobs of up to this many bytes go in batches (the server's limit less framing).
    pub max_batch: usize,
    /// Cleared when the service answers `GetOperation` with UNIMPLEMENTED (no Operations
    /// API): executions then wait for a stream permit before they start.
    can_poll: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What the server says it does.
#[derive(Debug, Clone)]
pub struct Capabilities {
    pub max_batch: usize,
    pub execution: bool,
    /// REAPI 2.1+: `output_paths`.
    pub output_paths: bool,
}

impl Client {
    pub fn new(channel: Channel, headers: Headers, instance: &str) -> Client {
        macro_rules! client {
            ($m:ident :: $t:ident) => {
                $m::$t::with_interceptor(channel.clone(), headers.clone())
                    .max_decoding_message_size(MAX_MESSAGE)
                    .max_encoding_message_size(MAX_MESSAGE)
            };
        }
        use bs::byte_stream_client;
        use lr::operations_client;
        use re::{
            action_cache_client, capabilities_client, content_addressable_storage_client,
            execution_client,
        };
        Client {
            instance: instance.to_string(),
            cas: client!(content_addressable_storage_client::ContentAddressableStorageClient),
            ac: client!(action_cache_client::ActionCacheClient),
            exec: client!(execution_client::ExecutionClient),
            caps: client!(capabilities_client::CapabilitiesClient),
            bytestream: client!(byte_stream_client::ByteStreamClient),
            operations: client!(operations_client::OperationsClient),
            max_batch: 4 << 20,
            can_poll: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
        }
    }

    /// `GetCapabilities`: SHA-256 must be among the digest functions, and remote execution
    /// enabled.
    pub async fn capabilities(&mut self) -> Result<Capabilities, Status> {
        let caps = self
            .caps
            .get_capabilities(re::GetCapabilitiesRequest {
                instance_name: self.instance.clone(),
            })
            .await?
            .into_inner();
        let sha256 = re::digest_function::Value::Sha256 as i32;
        let cache = caps.cache_capabilities.unwrap_or_default();
        let exec = caps.execution_capabilities.unwrap_or_default();
        if !cache.digest_functions.contains(&sha256) && exec.digest_function != sha256 {
            return Err(Status::failed_precondition(
                "the server does not offer SHA-256 digests",
            ));
        }
        // A batch carries framing beside the blobs: leave a margin under the server's limit.
        let limit = usize::try_from(cache.max_batch_total_size_bytes).unwrap_or(0);
        let max_batch = if limit == 0 { 4 << 20 } else { limit };
        let high = caps.high_api_version.unwrap_or_default();
        Ok(Capabilities {
            max_batch: max_batch.saturating_sub(64 << 10).max(64 << 10),
            execution: exec.exec_enabled,
            output_paths: (high.major, high.minor) >= (2, 1),
        })
    }

    /// Upload what the server lacks of `blobs`: small ones in batches, large ones over
    /// ByteStream. Returns (blobs, bytes) uploaded.
    pub async fn upload_missing(&mut self, blobs: &[&Blob]) -> Result<(usize, u64), Status> {
        let digests: Vec<&re::Digest> = blobs.iter().map(|b| &b.digest).collect();
        let missing = self.find_missing(&digests).await?;
        let todo: Vec<&Blob> = blobs
            .iter()
            .copied()
            .filter(|b| missing.contains(b.digest.hash.as_str()))
            .collect();
        self.upload(&todo).await?;
        Ok((todo.len(), todo.iter().map(|b| b.data.len() as u64).sum()))
    }

    /// The hashes of `digests` the server lacks (asked in pieces: a toolchain is thousands).
    async fn find_missing(
        &mut self,
        digests: &[&re::Digest],
    ) -> Result<std::collections::HashSet<String>, Status> {
        let mut missing = std::collections::HashSet::new();
        for piece in digests.chunks(10_000) {
            let answer = self
                .cas
                .find_missing_blobs(re::FindMissingBlobsRequest {
                    instance_name: self.instance.clone(),
                    blob_digests: piece.iter().map(|d| (*d).clone()).collect(),
                    digest_function: 0,
                })
                .await?
                .into_inner();
            missing.extend(answer.missing_blob_digests.into_iter().map(|d| d.hash));
        }
        Ok(missing)
    }

    /// Upload what the server lacks of a local directory tree: its `Directory` blobs, and its
    /// files read again from disk (each checked against the digest it was listed with).
    /// Returns (blobs, bytes) uploaded.
    pub async fn upload_tree(&mut self, tree: &DirTree) -> Result<(usize, u64), Status> {
        let digests: Vec<&re::Digest> = tree
            .dirs
            .iter()
            .map(|b| &b.digest)
            .chain(tree.files.iter().map(|(d, _)| d))
            .collect();
        let mut missing = self.find_missing(&digests).await?;
        let dirs: Vec<&Blob> = tree
            .dirs
            .iter()
            .filter(|b| missing.remove(&b.digest.hash))
            .collect();
        self.upload(&dirs).await?;
        let (mut count, mut bytes) = (dirs.len(), dirs.iter().map(|b| b.data.len() as u64).sum());
        let mut pending: Vec<Blob> = Vec::new();
        let mut pending_bytes = 0;
        for (digest, path) in &tree.files {
            // Each file once, however many paths share its bytes.
            if !missing.remove(&digest.hash) {
                continue;
            }
            let size = u64::try_from(digest.size_bytes).unwrap_or(0);
            let data = kbuild_base::read::read_capped(path, size, "a toolchain file")
                .map_err(|e| Status::failed_precondition(e.to_string()))?;
            let blob = Blob::new(data);
            if blob.digest != *digest {
                return Err(Status::failed_precondition(format!(
                    "{} changed while the build ran",
                    path.display()
                )));
            }
            count += 1;
            bytes += size;
            pending_bytes += blob.data.len();
            pending.push(blob);
            // At most a batch's worth (or one large file) read ahead of its upload.
            if pending_bytes >= self.max_batch {
                self.upload(&pending.iter().collect::<Vec<_>>()).await?;
                pending.clear();
                pending_bytes = 0;
            }
        }
        self.upload(&pending.iter().collect::<Vec<_>>()).await?;
        Ok((count, bytes))
    }

    /// Upload `todo`: small blobs in batches under the server's limit, large ones over
    /// ByteStream.
    async fn upload(&mut self, todo: &[&Blob]) -> Result<(), Status> {
        let mut batch: Vec<&Blob> = Vec::new();
        let mut batch_bytes = 0;
        for b in todo {
            if b.data.len() > self.max_batch {
                self.write_stream(b).await?;
                continue;
            }
            if batch_bytes + b.data.len() > self.max_batch {
                self.write_batch(&batch).await?;
                batch.clear();
                batch_bytes = 0;
            }
            batch_bytes += b.data.len();
            batch.push(b);
        }
        if !batch.is_empty() {
            self.write_batch(&batch).await?;
        }
        Ok(())
    }

    async fn write_batch(&mut self, blobs: &[&Blob]) -> Result<(), Status> {
        let responses = self
            .cas
            .batch_update_blobs(re::BatchUpdateBlobsRequest {
                instance_name: self.instance.clone(),
                requests: blobs
                    .iter()
                    .map(|b| re::batch_update_blobs_request::Request {
                        digest: Some(b.digest.clone()),
                        data: b.data.clone(),
                        compressor: 0,
                    })
                    .collect(),
                digest_function: 0,
            })
            .await?
            .into_inner()
            .responses;
        for r in responses {
            if let Some(s) = r.status.filter(|s| s.code != 0) {
                let hash = r.digest.map(|d| d.hash).unwrap_or_default();
                return Err(Status::new(
                    Code::from_i32(s.code),
                    format!("uploading blob {hash}: {}", s.message),
                ));
            }
        }
        Ok(())
    }

    async fn write_stream(&mut self, blob: &Blob) -> Result<(), Status> {
        let name = format!(
            "{}uploads/{}/blobs/{}/{}",
            prefix(&self.instance),
            upload_id(),
            blob.digest.hash,
            blob.digest.size_bytes
        );
        let chunks: Vec<bs::WriteRequest> = blob
            .data
            .chunks(CHUNK)
            .enumerate()
            .map(|(i, c)| bs::WriteRequest {
                resource_name: if i == 0 { name.clone() } else { String::new() },
                write_offset: (i * CHUNK) as i64,
                finish_write: (i + 1) * CHUNK >= blob.data.len(),
                data: c.to_vec(),
            })
            .collect();
        let written = self
            .bytestream
            .write(tokio_stream::iter(chunks))
            .await?
            .into_inner()
            .committed_size;
        if written != blob.digest.size_bytes {
            return Err(Status::data_loss(format!(
                "ByteStream write of {} committed {written} of {} bytes",
                blob.digest.hash, blob.digest.size_bytes
            )));
        }
        Ok(())
    }

    /// Read blobs (batched when they fit, else over ByteStream), each checked against its
    /// digest.
    pub async fn read(&mut self, digests: &[re::Digest]) -> Result<Vec<Vec<u8>>, Status> {
        let mut out = Vec::with_capacity(digests.len());
        for d in digests {
            let data = if d.size_bytes == 0 {
                Vec::new()
            } else if usize::try_from(d.size_bytes).unwrap_or(usize::MAX) <= self.max_batch {
                let r = self
                    .cas
                    .batch_read_blobs(re::BatchReadBlobsRequest {
                        instance_name: self.instance.clone(),
                        digests: vec![d.clone()],
                        acceptable_compressors: Vec::new(),
                        digest_function: 0,
                    })
                    .await?
                    .into_inner();
                let Some(r) = r.responses.into_iter().next() else {
                    return Err(Status::data_loss(format!("blob {} not returned", d.hash)));
                };
                if let Some(s) = r.status.filter(|s| s.code != 0) {
                    return Err(Status::new(
                        Code::from_i32(s.code),
                        format!("reading blob {}: {}", d.hash, s.message),
                    ));
                }
                r.data
            } else {
                self.read_stream(d).await?
            };
            if crate::tree::digest_of(&data) != *d {
                return Err(Status::data_loss(format!(
                    "blob {} does not hash to its digest",
                    d.hash
                )));
            }
            out.push(data);
        }
        Ok(out)
    }

    async fn read_stream(&mut self, d: &re::Digest) -> Result<Vec<u8>, Status> {
        let name = format!(
            "{}blobs/{}/{}",
            prefix(&self.instance),
            d.hash,
            d.size_bytes
        );
        let mut stream = self
            .bytestream
            .read(bs::ReadRequest {
                resource_name: name,
                read_offset: 0,
                read_limit: 0,
            })
            .await?
            .into_inner();
        let mut data = Vec::new();
        while let Some(chunk) = stream.message().await? {
            if data.len() + chunk.data.len() > usize::try_from(d.size_bytes).unwrap_or(0) {
                return Err(Status::data_loss(format!(
                    "blob {} is longer than its digest says",
                    d.hash
                )));
            }
            data.extend_from_slice(&chunk.data);
        }
        Ok(data)
    }

    /// `GetActionResult`; `None` on a miss.
    pub async fn cached_result(
        &mut self,
        action: &re::Digest,
        outputs: &[String],
    ) -> Result<Option<re::ActionResult>, Status> {
        let r = self
            .ac
            .get_action_result(re::GetActionResultRequest {
                instance_name: self.instance.clone(),
                action_digest: Some(action.clone()),
                inline_stdout: true,
                inline_stderr: true,
                inline_output_files: outputs.to_vec(),
                digest_function: 0,
            })
            .await;
        match r {
            Ok(r) => Ok(Some(r.into_inner())),
            Err(s) if s.code() == Code::NotFound => Ok(None),
            Err(s) => Err(s),
        }
    }

    /// `Execute`, followed to its end. Two deadlines, by the operation's stage: `queued`
    /// while it waits for a worker (an action no worker can take waits forever otherwise; a
    /// lost worker's action goes back to the queue), `executing` once a worker runs it. Past
    /// either, the operation is cancelled (best effort) and DEADLINE_EXCEEDED returned.
    ///
    /// Watching an operation over a stream (Execute's, then WaitExecution's after a drop)
    /// holds a call open on the service for the whole wait, and a service that serves each
    /// call on a thread of a fixed pool (BuildGrid) stops answering its own workers once a
    /// client holds the pool. So streams are held only with a permit of `streams`; an
    /// operation without one drops its stream once it is named and polls `GetOperation`
    /// (one short call now and then) until it ends or a permit frees up.
    pub async fn execute(
        &mut self,
        action: &re::Digest,
        outputs: &[String],
        queued: Duration,
        executing: Duration,
        streams: &tokio::sync::Semaphore,
    ) -> Result<Executed, Status> {
        let mut watch = Watch {
            name: String::new(),
            stage: 0,
            deadline: tokio::time::Instant::now() + queued,
            queued,
            executing,
            polls: 0,
        };
        use std::sync::atomic::Ordering;
        let mut permit = if self.can_poll.load(Ordering::Relaxed) {
            streams.try_acquire().ok()
        } else {
            // An operation nobody watches may be cancelled by such a service: wait for a
            // stream first.
            let p = streams.acquire().await;
            Some(p.map_err(|_| Status::cancelled("the executor was closed"))?)
        };
        let mut stream = Some(
            self.exec
                .execute(re::ExecuteRequest {
                    instance_name: self.instance.clone(),
                    skip_cache_lookup: false,
                    action_digest: Some(action.clone()),
                    execution_policy: None,
                    results_cache_policy: None,
                    digest_function: 0,
                    inline_stdout: true,
                    inline_stderr: true,
                    inline_output_files: outputs.to_vec(),
                })
                .await?
                .into_inner(),
        );
        let mut reopened = 0;
        let mut poll_wait = POLL_FIRST;
        loop {
            if let Some(s) = stream.as_mut() {
                // Read the stream to its end, or, without a permit, until it names the
                // operation.
                loop {
                    let next = tokio::time::timeout_at(watch.deadline, s.message()).await;
                    let Ok(next) = next else {
                        return Err(self.give_up(&watch).await);
                    };
                    match next {
                        Ok(Some(op)) => {
                            if let Some(done) = watch.update(op) {
                                return done.map(|r| watch.executed(r));
                            }
                            if permit.is_none() {
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(s) if s.code() == Code::Unavailable && !watch.name.is_empty() => break,
                        Err(s) => return Err(s),
                    }
                }
                stream = None;
                if watch.name.is_empty() {
                    return Err(Status::unavailable(
                        "Execute ended before naming its operation",
                    ));
                }
                if permit.is_some() {
                    // The stream ended early (a dropped connection): watch again.
                    reopened += 1;
                    if reopened > 8 {
                        return Err(Status::unavailable(format!(
                            "operation {}: the stream kept ending before the operation did",
                            watch.name
                        )));
                    }
                    stream = Some(self.wait_execution(&watch.name).await?);
                }
                continue;
            }
            // Polling: wait a little (longer each time, up to a cap), then ask once.
            if permit.is_none() {
                permit = streams.try_acquire().ok();
                if permit.is_some() {
                    stream = Some(self.wait_execution(&watch.name).await?);
                    continue;
                }
            }
            let wake = (tokio::time::Instant::now() + poll_wait).min(watch.deadline);
            tokio::time::sleep_until(wake).await;
            poll_wait = (poll_wait * 3 / 2).min(POLL_MAX);
            if tokio::time::Instant::now() >= watch.deadline {
                return Err(self.give_up(&watch).await);
            }
            watch.polls += 1;
            let got = self
                .operations
                .get_operation(lr::GetOperationRequest {
                    name: watch.name.clone(),
                })
                .await;
            match got {
                Ok(op) => {
                    if let Some(done) = watch.update(op.into_inner()) {
                        return done.map(|r| watch.executed(r));
                    }
                }
                // A service without the Operations API: wait for a stream instead.
                Err(s) if s.code() == Code::Unimplemented => {
                    self.can_poll.store(false, Ordering::Relaxed);
                    let acquired = tokio::time::timeout_at(watch.deadline, streams.acquire()).await;
                    match acquired {
                        Ok(Ok(p)) => permit = Some(p),
                        Ok(Err(_)) => return Err(Status::cancelled("the executor was closed")),
                        Err(_) => return Err(self.give_up(&watch).await),
                    }
                    stream = Some(self.wait_execution(&watch.name).await?);
                }
                Err(s) if s.code() == Code::Unavailable => {}
                Err(s) => return Err(s),
            }
        }
    }

    async fn wait_execution(&mut self, name: &str) -> Result<tonic::Streaming<Operation>, Status> {
        Ok(self
            .exec
            .wait_execution(re::WaitExecutionRequest {
                name: name.to_string(),
            })
            .await?
            .into_inner())
    }

    /// Cancel the operation (nobody waits for it any more; best effort) and say why.
    async fn give_up(&mut self, watch: &Watch) -> Status {
        let (name, executing) = (
            watch.name.as_str(),
            watch.stage == re::execution_stage::Value::Executing as i32,
        );
        if !name.is_empty() {
            let cancel = self
                .operations
                .cancel_operation(lr::CancelOperationRequest {
                    name: name.to_string(),
                });
            let _ = tokio::time::timeout(Duration::from_secs(5), cancel).await;
        }
        Status::deadline_exceeded(if executing {
            format!(
                "operation {name}: its worker gave no result in time (lost or stuck); cancelled"
            )
        } else {
            format!(
                "operation {name}: no worker took it in time (none matches its platform, or all are busy); cancelled"
            )
        })
    }
}

/// The first wait between two polls of an operation, and the longest.
const POLL_FIRST: Duration = Duration::from_millis(200);
const POLL_MAX: Duration = Duration::from_secs(2);

/// A finished execution, and how it was watched.
#[derive(Debug)]
pub struct Executed {
    pub response: re::ExecuteResponse,
    /// `GetOperation` calls made (0: watched over a stream throughout).
    pub polls: u32,
}

/// One operation being watched: its name, stage and the stage's deadline.
struct Watch {
    name: String,
    stage: i32,
    deadline: tokio::time::Instant,
    queued: Duration,
    executing: Duration,
    polls: u32,
}

impl Watch {
    /// Take in an update: `Some` once the operation is done.
    fn update(&mut self, op: Operation) -> Option<Result<re::ExecuteResponse, Status>> {
        if !op.name.is_empty() {
            self.name.clone_from(&op.name);
        }
        if op.done {
            return Some(finished(op));
        }
        let executing_stage = re::execution_stage::Value::Executing as i32;
        let now = op
            .metadata
            .as_ref()
            .and_then(|m| re::ExecuteOperationMetadata::decode(m.value.as_slice()).ok())
            .map_or(self.stage, |m| m.stage);
        if now != self.stage {
            // A new stage starts its own clock (a requeued action waits for a worker again).
            let limit = if now == executing_stage {
                self.executing
            } else {
                self.queued
            };
            self.deadline = tokio::time::Instant::now() + limit;
            self.stage = now;
        }
        None
    }

    fn executed(&self, response: re::ExecuteResponse) -> Executed {
        Executed {
            response,
            polls: self.polls,
        }
    }
}

/// The `ExecuteResponse` of a finished operation.
fn finished(op: Operation) -> Result<re::ExecuteResponse, Status> {
    match op.result {
        Some(operation::Result::Response(any)) => re::ExecuteResponse::decode(any.value.as_slice())
            .map_err(|e| Status::internal(format!("operation {}: its response: {e}", op.name))),
        Some(operation::Result::Error(s)) => Err(Status::new(Code::from_i32(s.code), s.message)),
        None => Err(Status::internal(format!(
            "operation {} is done with no result",
            op.name
        ))),
    }
}

/// `instance/` or nothing, the prefix of ByteStream resource names.
fn prefix(instance: &str) -> String {
    if instance.is_empty() {
        String::new()
    } else {
        format!("{instance}/")
    }
}

/// A version-4-shaped UUID for a ByteStream upload, unique per process and call.
fn upload_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!(
        "{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let h = blake3::hash(seed.as_bytes());
    let b = h.as_bytes();
    let hex = kbuild_base::digest::hex(&b[..16]);
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// The gRPC code's name, as the service's errors are reported (`RESOURCE_EXHAUSTED`).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_ids_are_uuid_shaped_and_unique() {
        let (a, b) = (upload_id(), upload_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.as_bytes()[14], b'4');
        assert_eq!(a.matches('-').count(), 4);
    }
}
