//! The CUDA driver through cudarc with dynamic loading (`cuda-13000` bindings): nothing is
//! linked at build time. cudarc panics when libcuda is missing, so [`probe`] opens it with
//! `libloading` first, and every cudarc call runs under `catch_unwind` (a symbol missing from
//! an old driver is then an error too).

use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;
use cudarc::driver::CudaContext;

use crate::error::{LoaderError, Result};

/// The names libcuda is opened by (the driver package installs `libcuda.so.1`).
pub const LIBRARY_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// Why libcuda could not be opened: each name tried and what the dynamic loader said.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .tried.iter().map(|(n, e)| format!("{n}: {e}")).collect::<Vec<_>>().join("; "))]
pub struct CudaNotFound {
    pub tried: Vec<(&'static str, String)>,
}

/// Open libcuda without cudarc; `Ok(name)` of the first that loads.
pub fn probe() -> std::result::Result<&'static str, CudaNotFound> {
    let mut tried = Vec::new();
    for name in LIBRARY_NAMES {
        // SAFETY: loading the driver library runs its initialisers only.
        match unsafe { libloading::Library::new(name) } {
            Ok(_) => return Ok(name),
            Err(e) => tried.push((name, e.to_string())),
        }
    }
    Err(CudaNotFound { tried })
}

/// Run a cudarc call, turning its errors and panics into [`LoaderError::Runtime`].
pub(crate) fn guarded<T>(
    api: &str,
    f: impl FnOnce() -> std::result::Result<T, DriverError>,
) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(LoaderError::runtime(api, e.to_string())),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("cudarc panicked");
            Err(LoaderError::runtime(api, msg.to_string()))
        }
    }
}

/// One CUDA device as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CudaInfo {
    pub index: u32,
    pub name: String,
    pub compute_capability: (u32, u32),
    pub total_mem: u64,
    pub multiprocessors: u32,
}

/// `cuDriverGetVersion` (13000 = CUDA 13.0).
pub fn driver_version() -> Result<i32> {
    guarded("cuDriverGetVersion", || {
        let mut v = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut v) }.result()?;
        Ok(v)
    })
}

/// Every device; `cuInit` failing for want of a device is zero devices.
pub fn devices() -> Result<Vec<CudaInfo>> {
    guarded("cuInit", || match result::init() {
        Ok(()) => Ok(()),
        Err(DriverError(sys::cudaError_enum::CUDA_ERROR_NO_DEVICE)) => Ok(()),
        Err(e) => Err(e),
    })?;
    let count = guarded("cuDeviceGetCount", || match result::device::get_count() {
        Err(DriverError(sys::cudaError_enum::CUDA_ERROR_NO_DEVICE)) => Ok(0),
        other => other,
    })?;
    let mut out = Vec::new();
    for i in 0..count {
        let info = guarded("cuDeviceGet", || {
            let dev = result::device::get(i)?;
            let attr = |a| {
                // SAFETY: dev comes from cuDeviceGet.
                unsafe { result::device::get_attribute(dev, a) }
            };
            use sys::CUdevice_attribute_enum as A;
            let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
            let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
            let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            // SAFETY: dev comes from cuDeviceGet.
            let mem = unsafe { result::device::total_mem(dev) }?;
            let name = result::device::get_name(dev)?;
            Ok(CudaInfo {
                index: u32::try_from(i).unwrap_or(0),
                name,
                compute_capability: (
                    u32::try_from(major).unwrap_or(0),
                    u32::try_from(minor).unwrap_or(0),
                ),
                total_mem: mem as u64,
                multiprocessors: u32::try_from(sms).unwrap_or(0),
            })
        })?;
        out.push(info);
    }
    Ok(out)
}

/// A device's primary context, for loading modules onto it.
#[derive(Debug, Clone)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
}

impl CudaDevice {
    pub fn open(ordinal: u32) -> Result<CudaDevice> {
        let ctx = guarded("cuDevicePrimaryCtxRetain", || {
            CudaContext::new(ordinal as usize)
        })?;
        Ok(CudaDevice { ctx })
    }

    /// The cudarc context (for allocations and streams in the engine and tests).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn bind(&self) -> Result<()> {
        guarded("cuCtxSetCurrent", || self.ctx.bind_to_thread())
    }

    /// `cuModuleLoadData` of a cubin, or of PTX (which the driver wants NUL-terminated).
    pub fn load(&self, image: &[u8], ptx: bool) -> Result<CudaModule> {
        self.bind()?;
        let owned;
        let data: &[u8] = if ptx && image.last() != Some(&0) {
            let mut v = Vec::with_capacity(image.len() + 1);
            v.extend_from_slice(image);
            v.push(0);
            owned = v;
            &owned
        } else {
            image
        };
        // SAFETY: `data` is a complete cubin or NUL-terminated PTX that outlives the call.
        let raw = guarded("cuModuleLoadData", || unsafe {
            result::module::load_data(data.as_ptr().cast::<c_void>())
        })?;
        Ok(CudaModule {
            raw,
            device: self.clone(),
        })
    }
}

/// A loaded module; unloaded on drop.
#[derive(Debug)]
pub struct CudaModule {
    raw: sys::CUmodule,
    device: CudaDevice,
}

// SAFETY: CUmodule handles may be used from any thread with the context bound.
unsafe impl Send for CudaModule {}
// SAFETY: see above; the module is immutable after load.
unsafe impl Sync for CudaModule {}

impl CudaModule {
    pub fn raw(&self) -> sys::CUmodule {
        self.raw
    }

    /// [`alloc_async`] on this module's device (its context bound first).
    ///
    /// # Safety
    /// As [`alloc_async`].
    pub unsafe fn alloc_async(
        &self,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<sys::CUdeviceptr> {
        self.device.bind()?;
        alloc_async(bytes, stream)
    }

    /// [`free_async`] on this module's device.
    ///
    /// # Safety
    /// As [`free_async`].
    pub unsafe fn free_async(&self, ptr: sys::CUdeviceptr, stream: sys::CUstream) -> Result<()> {
        self.device.bind()?;
        free_async(ptr, stream)
    }

    /// `cuModuleGetFunction`.
    pub fn function(&self, name: &str) -> Result<sys::CUfunction> {
        let c = CString::new(name).map_err(|_| LoaderError::NulByte {
            what: format!("entry name `{name}`"),
        })?;
        self.device.bind()?;
        // SAFETY: the module is live for `self`'s lifetime.
        guarded("cuModuleGetFunction", || unsafe {
            result::module::get_function(self.raw, c)
        })
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        if self.device.bind().is_ok() {
            // SAFETY: loaded by us, unloaded once.
            let _ = guarded("cuModuleUnload", || unsafe {
                result::module::unload(self.raw)
            });
        }
    }
}

/// What the driver says a loaded function uses (`cuFuncGetAttribute`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FuncAttributes {
    /// CU_FUNC_ATTRIBUTE_NUM_REGS.
    pub registers: i64,
    /// CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES (static shared).
    pub shared_bytes: i64,
    /// CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES (stack frame per thread).
    pub local_bytes: i64,
    /// CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK.
    pub max_threads: i64,
    /// CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES.
    pub const_bytes: i64,
}

/// # Safety
/// `f` must be a function of a live module.
pub unsafe fn attributes(f: sys::CUfunction) -> Result<FuncAttributes> {
    use sys::CUfunction_attribute_enum as A;
    let get = |a| {
        guarded("cuFuncGetAttribute", || {
            result::function::get_function_attribute(f, a)
        })
    };
    Ok(FuncAttributes {
        registers: i64::from(get(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?),
        shared_bytes: i64::from(get(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?),
        local_bytes: i64::from(get(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?),
        max_threads: i64::from(get(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?),
        const_bytes: i64::from(get(A::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)?),
    })
}

/// Dynamic shared memory a block may ask for without opting in (48 KiB on every CUDA GPU).
pub const DEFAULT_DYNAMIC_SHARED: u32 = 48 * 1024;

/// Let `f` launch with `bytes` of dynamic shared memory: past 48 KiB a kernel must opt in
/// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`), up to the device's opt-in limit.
///
/// # Safety
/// `f` must be live.
pub unsafe fn allow_dynamic_shared(f: sys::CUfunction, bytes: u32) -> Result<()> {
    let value = i32::try_from(bytes).unwrap_or(i32::MAX);
    guarded("cuFuncSetAttribute", || {
        result::function::set_function_attribute(
            f,
            sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            value,
        )
    })
}

/// The launch attributes kbuild sets (`cuLaunchKernelEx`); all off is a plain `cuLaunchKernel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchAttributes {
    /// Programmatic stream serialisation: the kernel may overlap the previous one.
    pub programmatic: bool,
    /// Blocks per cluster along x (1: no cluster); Triton's clusters are `(num_ctas, 1, 1)`,
    /// scheduled spread, as its own launcher makes them.
    pub cluster: u32,
    /// All blocks resident at once (grid-wide synchronisation).
    pub cooperative: bool,
}

/// Clusters over 8 blocks are not portable: the function must allow them first.
const PORTABLE_CLUSTER: u32 = 8;

/// `cuLaunchKernel`, or `cuLaunchKernelEx` with the attributes `attrs` asks for.
///
/// # Safety
/// `f` must be live; `params` must point at values matching the kernel's parameters.
pub unsafe fn launch(
    f: sys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_bytes: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
    attrs: LaunchAttributes,
) -> Result<()> {
    if !attrs.programmatic && attrs.cluster <= 1 && !attrs.cooperative {
        return guarded("cuLaunchKernel", || {
            result::launch_kernel(f, grid, block, shared_bytes, stream, params)
        });
    }
    if attrs.cluster > PORTABLE_CLUSTER {
        guarded("cuFuncSetAttribute", || {
            result::function::set_function_attribute(
                f,
                sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                1,
            )
        })?;
    }
    guarded("cuLaunchKernelEx", || {
        use sys::CUlaunchAttributeID as Id;
        let attribute = |id: Id, value: sys::CUlaunchAttributeValue| sys::CUlaunchAttribute {
            id,
            pad: [0; 4],
            value,
        };
        let mut list = Vec::with_capacity(4);
        // SAFETY (each zeroed value): the attribute values are plain integers and structs of
        // integers, for which all-zero is valid.
        if attrs.programmatic {
            let mut v: sys::CUlaunchAttributeValue = std::mem::zeroed();
            v.programmaticStreamSerializationAllowed = 1;
            list.push(attribute(
                Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                v,
            ));
        }
        if attrs.cooperative {
            let mut v: sys::CUlaunchAttributeValue = std::mem::zeroed();
            v.cooperative = 1;
            list.push(attribute(Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE, v));
        }
        if attrs.cluster > 1 {
            let mut v: sys::CUlaunchAttributeValue = std::mem::zeroed();
            v.clusterDim.x = attrs.cluster;
            v.clusterDim.y = 1;
            v.clusterDim.z = 1;
            list.push(attribute(Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, v));
            let mut v: sys::CUlaunchAttributeValue = std::mem::zeroed();
            v.clusterSchedulingPolicyPreference =
                sys::CUclusterSchedulingPolicy::CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
            list.push(attribute(
                Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                v,
            ));
        }
        // The list and the config live across the call.
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: shared_bytes,
            hStream: stream,
            attrs: list.as_mut_ptr(),
            numAttrs: list.len() as u32,
        };
        sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()).result()
    })
}

/// A stream-ordered device allocation of `bytes` (`cuMemAllocAsync`): usable by work queued
/// on `stream` after this call, and recorded into a graph when `stream` is capturing.
///
/// # Safety
/// `stream` is a live stream of the current context (or null: the default stream).
pub unsafe fn alloc_async(bytes: usize, stream: sys::CUstream) -> Result<sys::CUdeviceptr> {
    guarded("cuMemAllocAsync", || result::malloc_async(stream, bytes))
}

/// Frees `ptr` once the work queued on `stream` before this call is done (`cuMemFreeAsync`).
///
/// # Safety
/// `ptr` came from [`alloc_async`] and is freed once.
pub unsafe fn free_async(ptr: sys::CUdeviceptr, stream: sys::CUstream) -> Result<()> {
    guarded("cuMemFreeAsync", || result::free_async(ptr, stream))
}
