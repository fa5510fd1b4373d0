//! A loaded code object and the kernel entries looked up in it: attributes compared at
//! lookup, arguments checked against the entry's parameters before every launch.

use std::sync::Arc;

use kbuild_manifest::load_index::{EntryParams, LoadFigures};
use kbuild_manifest::params::Param;
use kbuild_manifest::triton::TritonLaunch;

use super::attributes::{check_attributes, describe_attributes, AttributeCheck, RuntimeFigures};
use super::scratch::ScratchBuffers;
use crate::cuda::{self, CudaModule};
use crate::error::{LoaderError, Result};
use crate::hip::{HipFunction, HipModule, HipRuntime};
use crate::index::PackageIndex;
use crate::launch::{
    check_args, check_layout, check_triton_args, read_value, triton_config, triton_scratch_count,
    KernelArgs, LaunchConfig, Stream,
};
use crate::package::ObjectRef;

pub(crate) enum ModuleInner {
    Cuda(CudaModule),
    Hip {
        rt: Arc<HipRuntime>,
        raw: HipModule,
    },
    /// A module no driver loaded (unit tests of the launch path on a machine without one).
    #[cfg(test)]
    Detached,
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if let ModuleInner::Hip { rt, raw } = self {
            // SAFETY: loaded by us, unloaded once.
            let _ = unsafe { rt.module_unload(*raw) };
        }
    }
}

/// A loaded code object; it keeps the package's load index alive for its record.
pub struct LoadedModule {
    pub(crate) index: Arc<PackageIndex>,
    pub(crate) object: usize,
    pub(crate) origin: std::path::PathBuf,
    pub(crate) inner: ModuleInner,
}

// SAFETY: module handles are usable from any thread (the CUDA side binds its context per
// call); the HIP handle is only passed to the runtime.
unsafe impl Send for LoadedModule {}
// SAFETY: see above; nothing mutates a module after load.
unsafe impl Sync for LoadedModule {}

impl std::fmt::Debug for LoadedModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("LoadedModule");
        if let Ok(o) = self.record() {
            d.field("target", &o.target).field("path", &o.path);
        }
        d.finish_non_exhaustive()
    }
}

impl LoadedModule {
    /// The object's record (kernel, target, path, digests, entries and their figures).
    pub fn record(&self) -> Result<ObjectRef<'_>> {
        self.index.object(self.object, &self.origin)
    }

    /// The raw `CUmodule`, for code that needs more than functions (globals).
    pub fn cuda_module(&self) -> Option<&CudaModule> {
        match &self.inner {
            ModuleInner::Cuda(m) => Some(m),
            _ => None,
        }
    }

    /// Look up `entry` and check its attributes against the manifest.
    pub fn function(self: &Arc<Self>, entry: &str) -> Result<Function> {
        let record = self.record()?;
        let Some(found) = record.entry(entry) else {
            return Err(LoaderError::UnknownEntry {
                object: record.path.to_string(),
                entry: entry.to_string(),
                exports: record.entries().collect::<Vec<_>>().join(", "),
            });
        };
        let (raw, loaded) = match &self.inner {
            ModuleInner::Cuda(m) => {
                let f = m.function(entry)?;
                // SAFETY: `f` belongs to the live module `m`.
                let a = unsafe { cuda::attributes(f) }?;
                (RawFunction::Cuda(f), RuntimeFigures::from(a))
            }
            ModuleInner::Hip { rt, raw } => {
                // SAFETY: the module is live while `self` is.
                let f = unsafe { rt.module_get_function(*raw, entry) }?;
                // SAFETY: `f` belongs to the live module. Attribute numbers as CUDA's.
                let get = |a| unsafe { rt.func_attribute(f, a) };
                let loaded = RuntimeFigures {
                    registers: get(4).ok(),
                    shared_bytes: get(1)?,
                    local_bytes: get(3)?,
                    max_threads: get(0).unwrap_or(0),
                };
                (RawFunction::Hip(f), loaded)
            }
            #[cfg(test)]
            ModuleInner::Detached => {
                return Err(LoaderError::runtime("detached module", "no driver"));
            }
        };
        // Compared now (a difference is an error); the readable table is made when asked for.
        check_attributes(record.path, entry, &found.figures, &loaded)?;
        Ok(Function {
            module: Arc::clone(self),
            entry: entry.to_string(),
            raw,
            max_threads: found
                .figures
                .max_threads()
                .or_else(|| u32::try_from(loaded.max_threads).ok().filter(|t| *t > 0)),
            compared: (found.figures, loaded),
            checks: std::sync::OnceLock::new(),
            abi: std::sync::OnceLock::new(),
            shared_allowed: std::sync::atomic::AtomicU32::new(cuda::DEFAULT_DYNAMIC_SHARED),
        })
    }
}

/// What the runtime reports for a loaded function.

#[derive(Debug, Clone, Copy)]
pub(crate) enum RawFunction {
    Cuda(cudarc::driver::sys::CUfunction),
    Hip(HipFunction),
}

/// A kernel entry ready to launch; keeps its module loaded.
#[derive(Debug)]
pub struct Function {
    pub(crate) module: Arc<LoadedModule>,
    pub(crate) entry: String,
    pub(crate) raw: RawFunction,
    pub(crate) max_threads: Option<u32>,
    /// The manifest's figures and the runtime's, as compared at load.
    pub(crate) compared: (LoadFigures, RuntimeFigures),
    pub(crate) checks: std::sync::OnceLock<Vec<AttributeCheck>>,
    /// The entry's launch parameters, read from the index on first launch (not at load: the
    /// load path reads no blob); the error text when they cannot be read.
    pub(crate) abi: std::sync::OnceLock<Result<Option<EntryParams>>>,
    /// The dynamic shared memory this function has been allowed so far (CUDA: the opt-in
    /// attribute, set once per larger launch; 48 KiB needs none).
    pub(crate) shared_allowed: std::sync::atomic::AtomicU32,
}

// SAFETY: function handles are plain driver handles, valid on any thread while the module is.
unsafe impl Send for Function {}
// SAFETY: see above.
unsafe impl Sync for Function {}

impl Function {
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// The object it came from (target, path, digests, entries and their figures).
    pub fn record(&self) -> Result<ObjectRef<'_>> {
        self.module.record()
    }

    /// The attributes compared after load (all matched, or loading failed).
    pub fn attribute_checks(&self) -> &[AttributeCheck] {
        self.checks.get_or_init(|| {
            let (figures, loaded) = &self.compared;
            describe_attributes(figures, loaded)
        })
    }

    /// The raw `CUfunction`, for users of the driver API.
    pub fn cuda_function(&self) -> Option<cudarc::driver::sys::CUfunction> {
        match self.raw {
            RawFunction::Cuda(f) => Some(f),
            RawFunction::Hip(_) => None,
        }
    }

    /// The entry's launch parameters, read once (on first call) from the package's index.
    fn abi(&self) -> Result<Option<&EntryParams>> {
        let abi = self.abi.get_or_init(|| {
            self.module
                .index
                .entry_params(self.module.object, &self.entry, &self.module.origin)
        });
        match abi {
            Ok(a) => Ok(a.as_ref()),
            Err(what) => Err(LoaderError::Launch {
                entry: self.entry.clone(),
                what: format!("its launch parameters cannot be read: {what}"),
            }),
        }
    }

    /// The caller-visible launch parameters every checked launch compares its arguments
    /// with. `None` when the package carries none for this entry: a `manifest.kbi` of layout
    /// version 3 (written before they were recorded; the next build rewrites it), a manifest
    /// without `params`, an object that does not record them (a cubin with a parameter block
    /// but no records), or an index whose parameters cannot be read (launches then fail and
    /// say why). Checked launches of such an entry go to the driver unchecked.
    pub fn params(&self) -> Option<&[Param]> {
        self.abi().ok().flatten().map(|a| a.params.as_slice())
    }

    /// How many hidden parameters (AMDGPU `hidden_*`) the runtime passes after the visible
    /// ones; `None` as for [`Self::params`].
    pub fn hidden_params(&self) -> Option<u32> {
        self.abi().ok().flatten().map(|a| a.hidden)
    }

    /// Check argument sizes as [`Self::launch_raw`] does, without launching: `Ok(true)` when
    /// checked and they fit, `Ok(false)` when there are no parameters to check against.
    pub fn check_args(&self, sizes: &[usize]) -> Result<bool> {
        match self.abi()? {
            Some(abi) => {
                check_args(&self.entry, &abi.params, sizes)
                    .map_err(|e| e.with_hidden(abi.hidden))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Launch with typed arguments (a tuple of [`crate::launch::KernelArg`]s). On CUDA a
    /// launch into a capturing stream is recorded into the graph like any other launch.
    ///
    /// Checked before the driver is called: the launch configuration (empty grid or block, a
    /// block over the kernel's bound) and, when the package carries the entry's parameters
    /// ([`Self::params`]), the arguments' count, sizes, kinds and places
    /// ([`crate::launch::check_layout`]). A mismatch is [`LoaderError::Args`].
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, and any
    /// device pointers must be valid for what the kernel does with them (the check sees sizes,
    /// not what a pointer points at, and nothing when [`Self::params`] is `None`).
    pub unsafe fn launch<A: KernelArgs + ?Sized>(
        &self,
        cfg: &LaunchConfig,
        args: &A,
    ) -> Result<()> {
        cfg.check(&self.entry, self.max_threads)?;
        if let Some(abi) = self.abi()? {
            check_layout(&self.entry, &abi.params, &args.layouts())
                .map_err(|e| e.with_hidden(abi.hidden))?;
        }
        let mut params = args.params();
        self.dispatch(cfg, &mut params)
    }

    /// Launch with an array of pointers to the argument values (`void**` as the driver) and
    /// each value's size in bytes. Checked before the driver is called: the configuration,
    /// then the count and sizes against the entry's parameters when the package carries them
    /// ([`crate::launch::check_args`]; sizes alone say nothing of alignment, so places are not
    /// checked: the driver copies each value to the kernel's own offset anyway).
    ///
    /// # Safety
    /// As [`Self::launch`]; `params[i]` points at `sizes[i]` readable bytes.
    pub unsafe fn launch_raw(
        &self,
        cfg: &LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
        sizes: &[usize],
    ) -> Result<()> {
        self.same_count(params, sizes)?;
        cfg.check(&self.entry, self.max_threads)?;
        self.check_args(sizes)?;
        self.dispatch(cfg, params)
    }

    /// Launch a Triton kernel as its launch record says ([`Package::triton_launch`],
    /// [`crate::Loader::triton_launch`]), as Triton's own launcher does: `grid` programs, each
    /// a cluster of `num_ctas` blocks along x (cluster launch attribute when more than one),
    /// the block (num_warps × warp size) and dynamic shared memory of the record (opting the
    /// kernel in beyond 48 KiB), cooperative and programmatic dependent launches when
    /// recorded, and the scratch pointers after the caller's arguments: NULL when the record
    /// needs none, else memory of programs × num_ctas × size bytes allocated for this launch
    /// in stream order on `stream` and freed after it (CUDA only; so a CUDA graph captures
    /// both). `params`/`sizes` are the arguments of the record's parameters, scratch pointers
    /// left out. Checked before the driver is called: the count and the values the object
    /// assumes divisible by 16, naming the argument ([`crate::launch::check_triton_args`]),
    /// then the configuration and sizes as [`Self::launch_raw`] checks them.
    ///
    /// [`Package::triton_launch`]: crate::Package::triton_launch
    ///
    /// # Safety
    /// As [`Self::launch_raw`].
    pub unsafe fn launch_triton(
        &self,
        record: &TritonLaunch,
        grid: (u32, u32, u32),
        stream: Stream,
        params: &[*mut std::ffi::c_void],
        sizes: &[usize],
    ) -> Result<()> {
        self.same_count(params, sizes)?;
        let cfg = triton_config(&self.entry, record, grid, stream)?;
        let values: Vec<u64> = params
            .iter()
            .zip(sizes)
            .map(|(p, s)| read_value(*p, *s))
            .collect();
        check_triton_args(&self.entry, record, &values)
            .map_err(|e| LoaderError::Args(Box::new(e)))?;
        let cuda = match &self.module.inner {
            ModuleInner::Cuda(m) => Some(m),
            _ => None,
        };
        let scratch = ScratchBuffers::for_launch(&self.entry, record, grid, cuda, stream)?;
        // The scratch pointers follow the caller's arguments (the driver copies each value).
        let addresses: [u64; 2] = [scratch.global, scratch.profile];
        let count = triton_scratch_count(record).min(addresses.len());
        let mut all = Vec::with_capacity(params.len() + count);
        all.extend_from_slice(params);
        all.extend(
            addresses[..count]
                .iter()
                .map(|a| (a as *const u64).cast_mut().cast::<std::ffi::c_void>()),
        );
        let mut all_sizes = Vec::with_capacity(all.len());
        all_sizes.extend_from_slice(sizes);
        all_sizes.extend(std::iter::repeat_n(8, count));
        let launched = self.launch_raw(&cfg, &mut all, &all_sizes);
        let freed = scratch.free(stream);
        launched.and(freed)
    }

    /// Launch with argument pointers and no argument check at all (only the configuration is
    /// checked): the escape hatch for a caller that knows better than the manifest.
    ///
    /// # Safety
    /// As [`Self::launch`], with nothing to catch a mistake.
    pub unsafe fn launch_raw_unchecked(
        &self,
        cfg: &LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        cfg.check(&self.entry, self.max_threads)?;
        self.dispatch(cfg, params)
    }

    /// A raw launch's pointers and sizes come in pairs.
    fn same_count(&self, params: &[*mut std::ffi::c_void], sizes: &[usize]) -> Result<()> {
        if params.len() == sizes.len() {
            return Ok(());
        }
        Err(LoaderError::Launch {
            entry: self.entry.clone(),
            what: format!(
                "{} argument pointers but {} sizes",
                params.len(),
                sizes.len()
            ),
        })
    }

    /// The driver call, after the checks.
    unsafe fn dispatch(
        &self,
        cfg: &LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        match (&self.raw, &self.module.inner) {
            (RawFunction::Cuda(f), ModuleInner::Cuda(_)) => {
                use std::sync::atomic::Ordering::Relaxed;
                // More than 48 KiB of dynamic shared memory (a Triton kernel's, a large
                // tile's) needs the kernel's opt-in first.
                if cfg.shared_bytes > self.shared_allowed.load(Relaxed) {
                    cuda::allow_dynamic_shared(*f, cfg.shared_bytes)?;
                    self.shared_allowed.fetch_max(cfg.shared_bytes, Relaxed);
                }
                cuda_launch(*f, cfg, params)
            }
            // The driver call a CUDA function would make, on a machine without a driver.
            #[cfg(test)]
            (RawFunction::Cuda(f), ModuleInner::Detached) => cuda_launch(*f, cfg, params),
            (RawFunction::Hip(_), ModuleInner::Hip { .. }) if cfg.cluster > 1 => {
                Err(LoaderError::Launch {
                    entry: self.entry.clone(),
                    what: format!(
                        "clusters of {} blocks are CUDA's; HIP has none",
                        cfg.cluster
                    ),
                })
            }
            (RawFunction::Hip(_), ModuleInner::Hip { .. }) if cfg.cooperative => {
                Err(LoaderError::Launch {
                    entry: self.entry.clone(),
                    what: "cooperative launches on HIP are not supported by kbuild yet".into(),
                })
            }
            (RawFunction::Hip(f), ModuleInner::Hip { rt, .. }) => rt.launch(
                *f,
                cfg.grid,
                cfg.block,
                cfg.shared_bytes,
                cfg.stream.raw(),
                params,
            ),
            _ => Err(LoaderError::Launch {
                entry: self.entry.clone(),
                what: "function and module are of different runtimes".into(),
            }),
        }
    }
}

/// `cuLaunchKernel` (or `cuLaunchKernelEx`) of `f` as `cfg` says.
///
/// # Safety
/// As [`cuda::launch`].
unsafe fn cuda_launch(
    f: cudarc::driver::sys::CUfunction,
    cfg: &LaunchConfig,
    params: &mut [*mut std::ffi::c_void],
) -> Result<()> {
    cuda::launch(
        f,
        cfg.grid,
        cfg.block,
        cfg.shared_bytes,
        cfg.stream.raw().cast(),
        params,
        cuda::LaunchAttributes {
            programmatic: cfg.programmatic,
            cluster: cfg.cluster,
            cooperative: cfg.cooperative,
        },
    )
}
