//! Device memory, a stream, events and graphs for the engine, over the CUDA driver that
//! kbuild-loader opened (cudarc's raw driver calls, loaded at run time). Kernels come only
//! from the loader; this module moves bytes and records work.
//!
//! Every call binds the loader's context to the calling thread first, so an engine may move
//! between threads (not be used from two at once).

use std::sync::Arc;

use kbuild_loader::cudarc::driver::{result, sys, CudaContext, DriverError};
use kbuild_loader::{Gpu, Stream};

use crate::error::{EngineError, Result};

fn cuda_err(api: &'static str) -> impl Fn(DriverError) -> EngineError {
    move |e| EngineError::Cuda {
        api,
        message: e.to_string(),
    }
}

/// The device side of an engine: the loader's CUDA context and one non-blocking stream.
pub struct Cuda {
    ctx: Arc<CudaContext>,
    stream: sys::CUstream,
}

impl std::fmt::Debug for Cuda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cuda").finish_non_exhaustive()
    }
}

impl Cuda {
    /// The device of `gpu` (a detected NVIDIA GPU; AMD and simulated devices are refused with
    /// what is missing).
    pub fn new(gpu: &Gpu) -> Result<Cuda> {
        let name = gpu.device().describe();
        if gpu.device().simulated() {
            return Err(EngineError::Unsupported(format!(
                "device {name} is simulated: the engine needs a real GPU (unset KBUILD_DEVICE / --device)"
            )));
        }
        let Some(dev) = gpu.cuda() else {
            return Err(EngineError::Unsupported(format!(
                "device {name}: the GDN engine drives CUDA devices only so far (device memory on HIP needs hipMalloc/hipMemcpy in kbuild-loader)"
            )));
        };
        let ctx = Arc::clone(dev.context());
        ctx.bind_to_thread().map_err(cuda_err("cuCtxSetCurrent"))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(cuda_err("cuStreamCreate"))?;
        Ok(Cuda { ctx, stream })
    }

    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(cuda_err("cuCtxSetCurrent"))
    }

    /// The stream kernels are launched on (for [`kbuild_loader::LaunchConfig::on`]).
    pub fn stream(&self) -> Stream {
        Stream::from_raw(self.stream.cast())
    }

    /// `len` f32 elements, zeroed.
    pub fn alloc(&self, len: usize) -> Result<Buffer> {
        self.bind()?;
        let bytes = len.max(1) * 4;
        // SAFETY: a plain allocation of `bytes`; zeroed before anyone reads it.
        let ptr = unsafe { result::malloc_sync(bytes) }.map_err(cuda_err("cuMemAlloc"))?;
        let buf = Buffer {
            ptr,
            len,
            ctx: Arc::clone(&self.ctx),
        };
        // SAFETY: `ptr` holds `bytes` bytes.
        unsafe { result::memset_d8_sync(ptr, 0, bytes) }.map_err(cuda_err("cuMemsetD8"))?;
        Ok(buf)
    }

    fn check(buf: &Buffer, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > buf.len) {
            return Err(EngineError::OutOfBounds {
                offset,
                end: offset.saturating_add(len),
                len: buf.len,
            });
        }
        Ok(())
    }

    /// Copy `data` into `buf[offset..]` (synchronous with respect to the stream).
    pub fn upload(&self, buf: &Buffer, offset: usize, data: &[f32]) -> Result<()> {
        Cuda::check(buf, offset, data.len())?;
        self.bind()?;
        self.sync()?;
        // SAFETY: the destination range is inside the allocation (checked).
        unsafe { result::memcpy_htod_sync(buf.ptr + (offset * 4) as u64, data) }
            .map_err(cuda_err("cuMemcpyHtoD"))
    }

    /// `buf[offset..offset + len]` after the stream's work.
    pub fn download(&self, buf: &Buffer, offset: usize, len: usize) -> Result<Vec<f32>> {
        Cuda::check(buf, offset, len)?;
        self.sync()?;
        let mut out = vec![0f32; len];
        // SAFETY: the source range is inside the allocation (checked).
        unsafe { result::memcpy_dtoh_sync(&mut out, buf.ptr + (offset * 4) as u64) }
            .map_err(cuda_err("cuMemcpyDtoH"))?;
        Ok(out)
    }

    /// Fill the whole buffer with NaN (all-ones bytes), on the stream.
    pub fn poison(&self, buf: &Buffer) -> Result<()> {
        self.bind()?;
        // SAFETY: the whole allocation.
        unsafe { result::memset_d8_async(buf.ptr, 0xff, buf.len * 4, self.stream) }
            .map_err(cuda_err("cuMemsetD8Async"))
    }

    /// Device-to-device copy of `elements` f32 from `src[src_off..]` to `dst[dst_off..]`, on
    /// the stream.
    pub fn copy(
        &self,
        dst: &Buffer,
        dst_off: usize,
        src: &Buffer,
        src_off: usize,
        elements: usize,
    ) -> Result<()> {
        Cuda::check(dst, dst_off, elements)?;
        Cuda::check(src, src_off, elements)?;
        self.bind()?;
        // SAFETY: both ranges are inside their allocations (checked).
        unsafe {
            result::memcpy_dtod_async(
                dst.ptr + (dst_off * 4) as u64,
                src.ptr + (src_off * 4) as u64,
                elements * 4,
                self.stream,
            )
        }
        .map_err(cuda_err("cuMemcpyDtoDAsync"))
    }

    /// Blocks of `f` (with `block` threads, no dynamic shared memory) that the whole device
    /// holds at once: the grid of a kernel that walks its work (gdn_step_commit).
    pub fn resident_blocks(&self, f: &kbuild_loader::Function, block: u32) -> Result<u32> {
        self.bind()?;
        let Some(raw) = f.cuda_function() else {
            return Err(EngineError::Unsupported(format!(
                "`{}` is not a CUDA function",
                f.entry()
            )));
        };
        let sms = self
            .ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda_err("cuDeviceGetAttribute"))?;
        let block = i32::try_from(block).unwrap_or(i32::MAX);
        // SAFETY: a function of a module loaded in this context.
        let per_sm =
            unsafe { result::occupancy::max_active_block_per_multiprocessor(raw, block, 0) }
                .map_err(cuda_err("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
        Ok(u32::try_from(sms.max(1).saturating_mul(per_sm.max(1))).unwrap_or(1))
    }

    /// Wait for the stream.
    pub fn sync(&self) -> Result<()> {
        self.bind()?;
        // SAFETY: our stream.
        unsafe { result::stream::synchronize(self.stream) }.map_err(cuda_err("cuStreamSynchronize"))
    }

    pub fn event(&self) -> Result<Event> {
        self.bind()?;
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(cuda_err("cuEventCreate"))?;
        Ok(Event {
            raw,
            ctx: Arc::clone(&self.ctx),
        })
    }

    pub fn record(&self, event: &Event) -> Result<()> {
        self.bind()?;
        // SAFETY: a live event and our stream.
        unsafe { result::event::record(event.raw, self.stream) }.map_err(cuda_err("cuEventRecord"))
    }

    /// Milliseconds between two recorded events (waits for `end`).
    pub fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<f32> {
        self.bind()?;
        // SAFETY: live events.
        unsafe {
            result::event::synchronize(end.raw).map_err(cuda_err("cuEventSynchronize"))?;
            result::event::elapsed(start.raw, end.raw).map_err(cuda_err("cuEventElapsedTime"))
        }
    }

    /// Start recording the stream's work into a graph (nothing runs until
    /// [`Self::end_capture`] and a launch of the graph).
    pub fn begin_capture(&self) -> Result<()> {
        self.sync()?;
        // SAFETY: our stream.
        unsafe {
            result::stream::begin_capture(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        }
        .map_err(cuda_err("cuStreamBeginCapture"))
    }

    /// Stop recording and instantiate the graph.
    pub fn end_capture(&self) -> Result<Graph> {
        self.bind()?;
        // SAFETY: capture was begun on this stream.
        let graph = unsafe { result::stream::end_capture(self.stream) }
            .map_err(cuda_err("cuStreamEndCapture"))?;
        // SAFETY: a graph just captured.
        let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
        let exec = match exec {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: ours, destroyed once.
                let _ = unsafe { result::graph::destroy(graph) };
                return Err(cuda_err("cuGraphInstantiate")(e));
            }
        };
        Ok(Graph {
            graph,
            exec,
            ctx: Arc::clone(&self.ctx),
        })
    }

    /// Launch an instantiated graph on the stream.
    pub fn launch_graph(&self, graph: &Graph) -> Result<()> {
        self.bind()?;
        // SAFETY: a live graph and our stream.
        unsafe { result::graph::launch(graph.exec, self.stream) }.map_err(cuda_err("cuGraphLaunch"))
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        if self.bind().is_ok() {
            // SAFETY: our stream, destroyed once.
            unsafe {
                let _ = result::stream::synchronize(self.stream);
                let _ = result::stream::destroy(self.stream);
            }
        }
    }
}

/// A device allocation of f32 elements; freed on drop.
pub struct Buffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} f32)", self.len)
    }
}

impl Buffer {
    /// Device address of element `offset` (a kernel argument).
    pub fn at(&self, offset: usize) -> kbuild_loader::DevicePtr {
        kbuild_loader::DevicePtr(self.ptr + (offset.min(self.len) * 4) as u64)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.len * 4
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by Cuda::alloc, freed once.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

pub struct Event {
    raw: sys::CUevent,
    ctx: Arc<CudaContext>,
}

impl Drop for Event {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: created by Cuda::event, destroyed once.
            let _ = unsafe { result::event::destroy(self.raw) };
        }
    }
}

/// An instantiated CUDA graph.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    ctx: Arc<CudaContext>,
}

impl Drop for Graph {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: ours, destroyed once.
            unsafe {
                let _ = result::graph::exec_destroy(self.exec);
                let _ = result::graph::destroy(self.graph);
            }
        }
    }
}
