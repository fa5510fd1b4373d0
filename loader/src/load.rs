//! Loading: a [`Gpu`] (the resolved device and its runtime, opened once per process), a
//! [`Loader`] over one package (modules selected and loaded lazily per kernel), the object's
//! digest checked before every load, function attributes compared with the manifest after it.
//!
//! From the kernel name to the driver call, the loader reads the package's load index in
//! place: choosing the object and reading its record allocate nothing.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kbuild_manifest::compat::Device;
use kbuild_manifest::load_index::{EntryParams, LoadFigures};
use kbuild_manifest::params::Param;

use crate::cuda::{self, CudaDevice, CudaModule};
use crate::detect::{self, DeviceOptions, ResolvedDevice};
use crate::error::{LoaderError, Result};
use crate::hip::{HipFunction, HipModule, HipRuntime, HipSearch};
use crate::launch::{check_args, check_layout, KernelArgs, LaunchConfig};
use crate::package::{Index, ObjectRef, Package};
use crate::select::{Selection, Verdicts};

#[derive(Clone, Debug)]
enum Backend {
    Simulated,
    Cuda(CudaDevice),
    Hip(Arc<HipRuntime>, u32),
}

/// The device to load onto: detected (with its runtime opened) or simulated.
#[derive(Clone, Debug)]
pub struct Gpu {
    device: ResolvedDevice,
    backend: Backend,
}

impl Gpu {
    /// Resolve `opts` (detect, or simulate `--device`) and open the device's runtime.
    pub fn open(opts: &DeviceOptions) -> Result<Gpu> {
        let device = detect::resolve(opts)?;
        Gpu::from_resolved_with(device, &opts.hip)
    }

    /// Open the runtime of an already resolved device (a simulated one opens nothing).
    pub fn from_resolved(device: ResolvedDevice) -> Result<Gpu> {
        Gpu::from_resolved_with(device, &HipSearch::default())
    }

    /// [`Gpu::from_resolved`], finding the HIP runtime through `hip`.
    pub fn from_resolved_with(device: ResolvedDevice, hip: &HipSearch) -> Result<Gpu> {
        let backend = match (&device.detected, device.device) {
            (None, _) => Backend::Simulated,
            (Some(d), Device::Cuda { .. }) => Backend::Cuda(CudaDevice::open(d.index)?),
            (Some(d), Device::Amd { .. }) => {
                let rt = HipRuntime::open(hip)?;
                rt.set_device(d.index)?;
                Backend::Hip(Arc::new(rt), d.index)
            }
        };
        Ok(Gpu { device, backend })
    }

    /// A simulated device: selection and explain only.
    pub fn simulated(device: Device) -> Gpu {
        Gpu {
            device: ResolvedDevice {
                device,
                detected: None,
            },
            backend: Backend::Simulated,
        }
    }

    pub fn device(&self) -> &ResolvedDevice {
        &self.device
    }

    /// The CUDA device (context), when this is a detected NVIDIA GPU.
    pub fn cuda(&self) -> Option<&CudaDevice> {
        match &self.backend {
            Backend::Cuda(c) => Some(c),
            _ => None,
        }
    }

    /// The HIP runtime, when this is a detected AMD GPU.
    pub fn hip(&self) -> Option<&HipRuntime> {
        match &self.backend {
            Backend::Hip(rt, _) => Some(rt),
            _ => None,
        }
    }
}

/// A package opened for one device: objects are selected and loaded on first use of their
/// kernel; the whole selection (explain) is made when first asked for.
pub struct Loader {
    package: Package,
    gpu: Gpu,
    selection: std::sync::OnceLock<Selection>,
    state: Mutex<State>,
}

/// What loading changes: the modules loaded so far (by object) and the verdicts judged.
struct State {
    modules: Vec<Option<Arc<LoadedModule>>>,
    verdicts: Verdicts,
    /// (kernel, variant) → the object chosen for it, so a kernel's second entry (or a
    /// `function` after `preload`) does not choose again.
    chosen: Vec<(Box<str>, Option<Box<str>>, usize)>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("package", &self.package)
            .field("device", &self.gpu.device.device.name())
            .finish_non_exhaustive()
    }
}

/// How many objects [`Loader::preload`]'s reader thread reads ahead of the driver at most.
const LOOKAHEAD: usize = 8;

impl Loader {
    /// Open a build directory or manifest for `gpu`.
    pub fn open(path: &Path, gpu: &Gpu) -> Result<Loader> {
        Ok(Loader::from_package(Package::open(path)?, gpu))
    }

    /// Open a build directory, manifest or bundle for `gpu`, applying `trust` to a bundle
    /// ([`Package::open_trusted`]).
    #[cfg(feature = "registry")]
    pub fn open_trusted(path: &Path, gpu: &Gpu, trust: &crate::bundle::Trust) -> Result<Loader> {
        Ok(Loader::from_package(
            Package::open_trusted(path, trust)?,
            gpu,
        ))
    }

    /// A loader over any package (a bundle or pulled cache entry of the registry).
    pub fn from_package(package: Package, gpu: &Gpu) -> Loader {
        let state = State {
            modules: vec![None; package.object_count()],
            verdicts: Verdicts::new(gpu.device.device),
            chosen: Vec::new(),
        };
        Loader {
            package,
            gpu: gpu.clone(),
            selection: std::sync::OnceLock::new(),
            state: Mutex::new(state),
        }
    }

    /// Every kernel's choice with its trace (made on first call).
    pub fn selection(&self) -> &Selection {
        self.selection
            .get_or_init(|| self.package.select(&self.gpu.device.device))
    }

    pub fn package(&self) -> &Package {
        &self.package
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The module holding `kernel` (`variant`), loaded on first use.
    pub fn module(&self, kernel: &str, variant: Option<&str>) -> Result<Arc<LoadedModule>> {
        let mut state = self.state.lock().map_err(|_| LoaderError::Poisoned {
            what: "loader's module table",
        })?;
        match self.chosen(&mut state, kernel, variant)? {
            Some(index) => self.load_object(&mut state, index),
            None => {
                // Unknown kernel or variant, or nothing runs: the trace says which.
                let all = self.selection();
                let choice = all.kernel(kernel, variant)?;
                Err(LoaderError::NoMatch(Box::new(all.no_match(choice))))
            }
        }
    }

    /// The launch parameters of `entry` of `kernel` (`variant`) in the object selected for
    /// it, without loading anything (a simulated device answers too); `None` when the index
    /// carries none ([`Function::params`]).
    pub fn entry_params(
        &self,
        kernel: &str,
        variant: Option<&str>,
        entry: &str,
    ) -> Result<Option<EntryParams>> {
        let index = {
            let mut state = self.state.lock().map_err(|_| LoaderError::Poisoned {
                what: "loader's module table",
            })?;
            self.chosen(&mut state, kernel, variant)?
        };
        let Some(index) = index else {
            let all = self.selection();
            let choice = all.kernel(kernel, variant)?;
            return Err(LoaderError::NoMatch(Box::new(all.no_match(choice))));
        };
        let record = self.package.object(index)?;
        if record.entry(entry).is_none() {
            return Err(LoaderError::UnknownEntry {
                object: record.path.to_string(),
                entry: entry.to_string(),
                exports: record.entries().collect::<Vec<_>>().join(", "),
            });
        }
        self.package
            .shared_index()
            .entry_params(index, entry, self.package.origin())
    }

    /// Check argument sizes for `entry` of `kernel` (`variant`) as a checked launch of it
    /// would ([`crate::launch::check_args`]), without loading anything. `Ok(true)`: checked
    /// and they fit; `Ok(false)`: the index carries no parameters to check against.
    pub fn check_args(
        &self,
        kernel: &str,
        variant: Option<&str>,
        entry: &str,
        sizes: &[usize],
    ) -> Result<bool> {
        match self.entry_params(kernel, variant, entry)? {
            Some(abi) => {
                check_args(entry, &abi.params, sizes).map_err(|e| e.with_hidden(abi.hidden))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// `entry` of `kernel` (`variant`): load the module if needed, look the function up and
    /// compare its attributes with the manifest.
    pub fn function(&self, kernel: &str, variant: Option<&str>, entry: &str) -> Result<Function> {
        self.module(kernel, variant)?.function(entry)
    }

    /// Load every module of `wanted` (kernel, variant) now, in that order. While the driver
    /// loads one object, a second thread reads and verifies the next ones (at most
    /// LOOKAHEAD ahead); this thread reads an object itself when the reader has not claimed it
    /// yet, so the files and the digests cost little beyond the driver's own time and nothing
    /// waits for the reader thread to start. Later [`Loader::module`] and
    /// [`Loader::function`] calls for them find the modules loaded.
    pub fn preload(&self, wanted: &[(&str, Option<&str>)]) -> Result<()> {
        let mut state = self.state.lock().map_err(|_| LoaderError::Poisoned {
            what: "loader's module table",
        })?;
        let mut todo: Vec<usize> = Vec::with_capacity(wanted.len());
        for (kernel, variant) in wanted {
            let Some(index) = self.chosen(&mut state, kernel, *variant)? else {
                drop(state);
                let all = self.selection();
                let choice = all.kernel(kernel, *variant)?;
                return Err(LoaderError::NoMatch(Box::new(all.no_match(choice))));
            };
            let loaded = matches!(state.modules.get(index), Some(Some(_)));
            if !loaded && !todo.contains(&index) {
                todo.push(index);
            }
        }
        if todo.len() < 2 || matches!(self.gpu.backend, Backend::Simulated) {
            for index in todo {
                self.load_object(&mut state, index)?;
            }
            return Ok(());
        }
        let package = &self.package;
        let n = todo.len();
        // One slot per object: the verified bytes, put there by whoever read them.
        let slots: Vec<Mutex<Option<Result<Vec<u8>>>>> = (0..n).map(|_| Mutex::new(None)).collect();
        // The next object nobody has claimed: the reader thread and this one both take from
        // it, in order, so this thread reads an object itself whenever the reader has not got
        // to it yet (the first ones, while the reader starts) and never waits on a sleeping
        // thread.
        let next = AtomicUsize::new(0);
        // How far this thread has got, so the reader stays at most LOOKAHEAD objects ahead.
        let loading = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let read = |i: usize| {
            package
                .object(todo[i])
                .and_then(|o| package.read_object(&o))
        };
        let put = |i: usize, r: Result<Vec<u8>>| {
            if let Ok(mut slot) = slots[i].lock() {
                *slot = Some(r);
            }
        };
        std::thread::scope(|scope| {
            scope.spawn(|| loop {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let at = next.load(Ordering::Acquire);
                if at >= n {
                    break;
                }
                if at >= loading.load(Ordering::Acquire) + LOOKAHEAD {
                    std::thread::yield_now();
                    continue;
                }
                if next
                    .compare_exchange(at, at + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    put(at, read(at));
                }
            });
            let result = (|| {
                for i in 0..n {
                    loading.store(i, Ordering::Release);
                    let claimed_here = next
                        .compare_exchange(i, i + 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok();
                    let bytes = if claimed_here {
                        read(i)
                    } else {
                        // The reader holds it: it is a few µs from done.
                        let mut spins = 0u32;
                        loop {
                            let taken = slots[i]
                                .lock()
                                .map_err(|_| LoaderError::Poisoned {
                                    what: "object reader slot",
                                })?
                                .take();
                            if let Some(r) = taken {
                                break r;
                            }
                            spins = spins.saturating_add(1);
                            if spins < 1 << 14 {
                                std::hint::spin_loop();
                            } else {
                                std::thread::yield_now();
                            }
                        }
                    }?;
                    self.load_verified(&mut state, todo[i], bytes)?;
                }
                Ok(())
            })();
            stop.store(true, Ordering::Release);
            result
        })
    }

    /// The object for `kernel` (`variant`), remembered once chosen; `None` when nothing runs.
    fn chosen(
        &self,
        state: &mut State,
        kernel: &str,
        variant: Option<&str>,
    ) -> Result<Option<usize>> {
        let known = state
            .chosen
            .iter()
            .find(|(k, v, _)| &**k == kernel && v.as_deref() == variant);
        if let Some(&(_, _, index)) = known {
            return Ok(Some(index));
        }
        let chosen = match self.selection.get() {
            Some(all) => all.kernel(kernel, variant)?.selected().map(|c| c.object),
            None => self.package.choose(&mut state.verdicts, kernel, variant),
        };
        if let Some(index) = chosen {
            state
                .chosen
                .push((kernel.into(), variant.map(Into::into), index));
        }
        Ok(chosen)
    }

    fn load_object(&self, state: &mut State, index: usize) -> Result<Arc<LoadedModule>> {
        if let Some(Some(m)) = state.modules.get(index) {
            return Ok(Arc::clone(m));
        }
        if matches!(self.gpu.backend, Backend::Simulated) {
            return Err(LoaderError::Simulated {
                device: self.gpu.device.device.name(),
            });
        }
        let object = self.package.object(index)?;
        // Checked before the bytes reach the driver; these very bytes are what it gets.
        let bytes = self.package.read_object(&object)?;
        self.load_verified(state, index, bytes)
    }

    /// Hand object `index`'s verified `bytes` to the driver and keep the module.
    fn load_verified(
        &self,
        state: &mut State,
        index: usize,
        mut bytes: Vec<u8>,
    ) -> Result<Arc<LoadedModule>> {
        let object = self.package.object(index)?;
        let inner = match &self.gpu.backend {
            Backend::Cuda(dev) => {
                let ptx = object.format == "ptx";
                if ptx && bytes.last() != Some(&0) {
                    // The driver wants PTX NUL-terminated: end the checked buffer, not a copy.
                    bytes.push(0);
                }
                ModuleInner::Cuda(dev.load(&bytes, ptx)?)
            }
            Backend::Hip(rt, index) => {
                // HIP's current device is per thread: make it ours before loading.
                rt.set_device(*index)?;
                ModuleInner::Hip {
                    raw: rt.module_load_data(&bytes)?,
                    rt: Arc::clone(rt),
                }
            }
            Backend::Simulated => {
                return Err(LoaderError::Simulated {
                    device: self.gpu.device.device.name(),
                })
            }
        };
        let module = Arc::new(LoadedModule {
            index: self.package.shared_index(),
            object: index,
            origin: self.package.origin().to_path_buf(),
            inner,
        });
        if let Some(slot) = state.modules.get_mut(index) {
            *slot = Some(Arc::clone(&module));
        }
        Ok(module)
    }
}

enum ModuleInner {
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
    index: Arc<Index>,
    object: usize,
    origin: std::path::PathBuf,
    inner: ModuleInner,
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
                (RawFunction::Cuda(f), Loaded::from(a))
            }
            ModuleInner::Hip { rt, raw } => {
                // SAFETY: the module is live while `self` is.
                let f = unsafe { rt.module_get_function(*raw, entry) }?;
                // SAFETY: `f` belongs to the live module. Attribute numbers as CUDA's.
                let get = |a| unsafe { rt.func_attribute(f, a) };
                let loaded = Loaded {
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
        })
    }
}

/// What the runtime reports for a loaded function.
#[derive(Debug, Clone, Copy)]
struct Loaded {
    registers: Option<i64>,
    shared_bytes: i64,
    local_bytes: i64,
    max_threads: i64,
}

impl From<cuda::FuncAttributes> for Loaded {
    fn from(a: cuda::FuncAttributes) -> Loaded {
        Loaded {
            registers: Some(a.registers),
            shared_bytes: a.shared_bytes,
            local_bytes: a.local_bytes,
            max_threads: a.max_threads,
        }
    }
}

/// One compared attribute.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttributeCheck {
    /// Manifest field: `registers`, `lds_bytes`, `scratch_bytes`.
    pub field: &'static str,
    /// What the runtime reports after load.
    pub loaded: i64,
    /// What the manifest says (`32`, or `32 (+1024 reserved)`).
    pub manifest: String,
    /// How they were compared, e.g. that the driver's figure includes the reservation.
    pub note: String,
}

/// Compare the runtime's figures with the manifest's; a difference is an error. Nothing is
/// allocated when they agree (this is on every function's load path).
///
/// CUDA: `NUM_REGS` = `registers`; `LOCAL_SIZE_BYTES` = `scratch_bytes`;
/// `SHARED_SIZE_BYTES` = `lds_bytes`, or `lds_bytes + reserved_shared_bytes` (the sm_90+
/// 1 KiB system reservation, which a driver may count in). PTX is JIT-compiled by the driver,
/// so there are no build-time figures to compare. AMD: `SHARED_SIZE_BYTES` = `lds_bytes` and
/// `LOCAL_SIZE_BYTES` = `scratch_bytes` (registers are reported per the runtime's own unit
/// and not compared).
fn check_attributes(
    object: &str,
    entry: &str,
    figures: &LoadFigures,
    loaded: &Loaded,
) -> Result<()> {
    for c in compared_fields(figures, loaded) {
        if !c.agrees {
            return Err(LoaderError::AttributeMismatch {
                object: object.to_string(),
                entry: entry.to_string(),
                field: c.field,
                loaded: c.loaded,
                manifest: c.manifest_text(),
            });
        }
    }
    Ok(())
}

/// The compared attributes as [`AttributeCheck`]s (all agreed: loading checked them).
fn describe_attributes(figures: &LoadFigures, loaded: &Loaded) -> Vec<AttributeCheck> {
    compared_fields(figures, loaded)
        .map(|c| AttributeCheck {
            field: c.field,
            loaded: c.loaded,
            manifest: c.manifest_text(),
            note: c.note.into(),
        })
        .collect()
}

/// One attribute compared: what the runtime says, what the manifest says, whether they agree.
struct Compared {
    field: &'static str,
    loaded: i64,
    manifest: i64,
    /// The sm_90+ shared-memory reservation, shown beside `lds_bytes`.
    reserved: i64,
    agrees: bool,
    note: &'static str,
}

impl Compared {
    fn manifest_text(&self) -> String {
        if self.reserved > 0 {
            format!("{} (+{} reserved)", self.manifest, self.reserved)
        } else {
            self.manifest.to_string()
        }
    }
}

fn compared_fields(figures: &LoadFigures, loaded: &Loaded) -> impl Iterator<Item = Compared> {
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let fields: [Option<Compared>; 3] = match *figures {
        LoadFigures::Cuda {
            registers,
            lds_bytes,
            reserved_shared_bytes,
            scratch_bytes,
            ..
        } => {
            let regs = loaded.registers.unwrap_or(-1);
            let lds = as_i64(lds_bytes);
            let reserved = i64::try_from(reserved_shared_bytes).unwrap_or(0);
            let (shared_ok, shared_note) = if loaded.shared_bytes == lds {
                (true, "SHARED_SIZE_BYTES = lds_bytes")
            } else if reserved > 0 && loaded.shared_bytes == lds + reserved {
                (
                    true,
                    "SHARED_SIZE_BYTES = lds_bytes + reserved_shared_bytes",
                )
            } else {
                (false, "SHARED_SIZE_BYTES")
            };
            let scratch = as_i64(scratch_bytes);
            [
                Some(Compared {
                    field: "registers",
                    loaded: regs,
                    manifest: i64::from(registers),
                    reserved: 0,
                    agrees: regs == i64::from(registers),
                    note: "NUM_REGS",
                }),
                Some(Compared {
                    field: "lds_bytes",
                    loaded: loaded.shared_bytes,
                    manifest: lds,
                    reserved,
                    agrees: shared_ok,
                    note: shared_note,
                }),
                Some(Compared {
                    field: "scratch_bytes",
                    loaded: loaded.local_bytes,
                    manifest: scratch,
                    reserved: 0,
                    agrees: loaded.local_bytes == scratch,
                    note: "LOCAL_SIZE_BYTES",
                }),
            ]
        }
        LoadFigures::Amd {
            lds_bytes,
            scratch_bytes,
            ..
        } => {
            let (lds, scratch) = (as_i64(lds_bytes), as_i64(scratch_bytes));
            [
                Some(Compared {
                    field: "lds_bytes",
                    loaded: loaded.shared_bytes,
                    manifest: lds,
                    reserved: 0,
                    agrees: loaded.shared_bytes == lds,
                    note: "hipFuncGetAttribute",
                }),
                Some(Compared {
                    field: "scratch_bytes",
                    loaded: loaded.local_bytes,
                    manifest: scratch,
                    reserved: 0,
                    agrees: loaded.local_bytes == scratch,
                    note: "hipFuncGetAttribute",
                }),
                None,
            ]
        }
        LoadFigures::Ptx | LoadFigures::None => [None, None, None],
    };
    fields.into_iter().flatten()
}

#[derive(Debug, Clone, Copy)]
enum RawFunction {
    Cuda(cudarc::driver::sys::CUfunction),
    Hip(HipFunction),
}

/// A kernel entry ready to launch; keeps its module loaded.
#[derive(Debug)]
pub struct Function {
    module: Arc<LoadedModule>,
    entry: String,
    raw: RawFunction,
    max_threads: Option<u32>,
    /// The manifest's figures and the runtime's, as compared at load.
    compared: (LoadFigures, Loaded),
    checks: std::sync::OnceLock<Vec<AttributeCheck>>,
    /// The entry's launch parameters, read from the index on first launch (not at load: the
    /// load path reads no blob); the error text when they cannot be read.
    abi: std::sync::OnceLock<std::result::Result<Option<EntryParams>, String>>,
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
                .map_err(|e| e.to_string())
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
        if params.len() != sizes.len() {
            return Err(LoaderError::Launch {
                entry: self.entry.clone(),
                what: format!(
                    "{} argument pointers but {} sizes",
                    params.len(),
                    sizes.len()
                ),
            });
        }
        cfg.check(&self.entry, self.max_threads)?;
        self.check_args(sizes)?;
        self.dispatch(cfg, params)
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

    /// The driver call, after the checks.
    unsafe fn dispatch(
        &self,
        cfg: &LaunchConfig,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        match (&self.raw, &self.module.inner) {
            (RawFunction::Cuda(f), ModuleInner::Cuda(_)) => cuda::launch(
                *f,
                cfg.grid,
                cfg.block,
                cfg.shared_bytes,
                cfg.stream.raw().cast(),
                params,
                cfg.programmatic,
            ),
            // The driver call a CUDA function would make, on a machine without a driver.
            #[cfg(test)]
            (RawFunction::Cuda(f), ModuleInner::Detached) => cuda::launch(
                *f,
                cfg.grid,
                cfg.block,
                cfg.shared_bytes,
                cfg.stream.raw().cast(),
                params,
                cfg.programmatic,
            ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use kbuild_manifest::resources::{CudaResources, Resources};

    fn record(registers: u32, lds: u64, reserved: u64, scratch: u64) -> LoadFigures {
        let mut o = crate::select::tests::object("k", None, "sm_90a", None);
        o.resources.insert(
            "k".into(),
            Resources::Cuda(CudaResources {
                registers,
                lds_bytes: lds,
                reserved_shared_bytes: reserved,
                scratch_bytes: scratch,
                spill_store_bytes: Some(0),
                spill_load_bytes: Some(0),
                const_bytes: 388,
                barriers: 1,
                max_threads: Some(256),
                occupancy: None,
                note: None,
            }),
        );
        LoadFigures::of(o.resources.get("k"))
    }

    fn loaded(registers: i64, shared: i64, local: i64) -> Loaded {
        Loaded {
            registers: Some(registers),
            shared_bytes: shared,
            local_bytes: local,
            max_threads: 256,
        }
    }

    #[test]
    fn matching_attributes_pass_with_or_without_the_reservation() {
        let r = record(32, 32, 1024, 0);
        check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 32, 0)).unwrap();
        let c = describe_attributes(&r, &loaded(32, 32, 0));
        assert_eq!(c.len(), 3);
        assert_eq!(c[1].note, "SHARED_SIZE_BYTES = lds_bytes");
        check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 1056, 0)).unwrap();
        let c = describe_attributes(&r, &loaded(32, 1056, 0));
        assert_eq!(
            c[1].note,
            "SHARED_SIZE_BYTES = lds_bytes + reserved_shared_bytes"
        );
        assert_eq!(c[1].manifest, "32 (+1024 reserved)");
        assert_eq!(r.max_threads(), Some(256));
    }

    #[test]
    fn a_difference_is_a_stale_artifact() {
        let r = record(32, 32, 1024, 0);
        let e = check_attributes("sm_90a/k.cubin", "k", &r, &loaded(40, 32, 0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`k` registers is 40 after load, the manifest says 32"),
            "{e}"
        );
        assert!(e.contains("stale or swapped"), "{e}");
        let e = check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 64, 0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lds_bytes is 64"), "{e}");
        let e = check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 32, 16))
            .unwrap_err()
            .to_string();
        assert!(e.contains("scratch_bytes is 16"), "{e}");
        // Without a reservation the 1 KiB form is not accepted.
        let r = record(32, 32, 0, 0);
        assert!(check_attributes("sm_90a/k.cubin", "k", &r, &loaded(32, 1056, 0)).is_err());
    }

    /// A manifest of one cubin `k` exporting `k(const float* x, int n)`, with or without
    /// its launch parameters.
    fn with_params(params: bool) -> kbuild_manifest::manifest::Manifest {
        let mut o = crate::select::tests::object("k", None, "sm_90", None);
        if params {
            o.params = [("k".to_string(), kbuild_manifest::fixtures::params_x_n())].into();
        }
        crate::select::tests::manifest(vec![o])
    }

    /// Function `k` of a module no driver loaded: its launches go to `cuLaunchKernel` (which,
    /// on a machine without libcuda, fails to load the driver).
    fn detached(m: kbuild_manifest::manifest::Manifest) -> Function {
        let p = Package::from_manifest(m).unwrap();
        let module = Arc::new(LoadedModule {
            index: p.shared_index(),
            object: 0,
            origin: p.origin().to_path_buf(),
            inner: ModuleInner::Detached,
        });
        Function {
            module,
            entry: "k".into(),
            raw: RawFunction::Cuda(std::ptr::null_mut()),
            max_threads: Some(256),
            compared: (LoadFigures::None, loaded(0, 0, 0)),
            checks: std::sync::OnceLock::new(),
            abi: std::sync::OnceLock::new(),
        }
    }

    fn reached_the_driver(r: Result<()>) -> bool {
        // Without libcuda the driver fails to load; with one, a null function is refused.
        matches!(r, Err(LoaderError::Runtime { ref api, .. }) if api.starts_with("cuLaunchKernel"))
    }

    #[test]
    fn a_mismatched_launch_never_reaches_the_driver() {
        use crate::launch::DevicePtr;
        let f = detached(with_params(true));
        assert_eq!(f.params().map(<[_]>::len), Some(2));
        assert_eq!(f.hidden_params(), Some(0));
        let cfg = LaunchConfig::linear(1, 64);
        let (mut x, mut n, mut wide) = (DevicePtr(0), 4i32, 4i64);
        let mut good: Vec<*mut std::ffi::c_void> = vec![
            (&mut x as *mut DevicePtr).cast(),
            (&mut n as *mut i32).cast(),
        ];
        let mut bad: Vec<*mut std::ffi::c_void> = vec![
            (&mut x as *mut DevicePtr).cast(),
            (&mut wide as *mut i64).cast(),
        ];
        // SAFETY: nothing is launched: the check refuses, or the driver is absent / refuses
        // the null function.
        unsafe {
            let e = f.launch_raw(&cfg, &mut bad, &[8, 8]).unwrap_err();
            assert!(matches!(e, LoaderError::Args(_)), "{e}");
            assert_eq!(
                e.to_string(),
                "k: argument 1 is 8 bytes, the kernel takes 4 (int n)"
            );
            let e = f.launch(&cfg, &(x, 4i64)).unwrap_err();
            assert_eq!(
                e.to_string(),
                "k: argument 1 is 8 bytes, the kernel takes 4 (int n)"
            );
            let e = f.launch(&cfg, &(x,)).unwrap_err();
            assert_eq!(e.to_string(), "k: 1 argument given, the kernel takes 2");
            let e = f.launch_raw(&cfg, &mut good, &[8]).unwrap_err();
            assert!(
                e.to_string().contains("2 argument pointers but 1 sizes"),
                "{e}"
            );
            // The launch configuration is checked first, then the arguments.
            let e = f
                .launch(&LaunchConfig::linear(1, 512), &(x, 4i64))
                .unwrap_err();
            assert!(e.to_string().contains("exceeds the kernel's bound"), "{e}");
            // Fitting arguments go on to the driver; so does the unchecked escape hatch.
            assert!(reached_the_driver(f.launch_raw(&cfg, &mut good, &[8, 4])));
            assert!(reached_the_driver(f.launch(&cfg, &(x, 4i32))));
            assert!(reached_the_driver(f.launch_raw_unchecked(&cfg, &mut bad)));
        }
        assert!(f.check_args(&[8, 4]).unwrap());
        assert!(f.check_args(&[8, 8]).is_err());
    }

    #[test]
    fn without_parameters_launches_are_unchecked_and_say_so() {
        use crate::launch::DevicePtr;
        let f = detached(with_params(false));
        assert_eq!(f.params(), None);
        assert_eq!(f.hidden_params(), None);
        assert!(!f.check_args(&[1, 2, 3]).unwrap());
        // SAFETY: as above.
        unsafe {
            assert!(reached_the_driver(f.launch(
                &LaunchConfig::linear(1, 64),
                &(DevicePtr(0), 4i64, 5i64)
            )));
        }
    }

    #[test]
    fn a_loader_checks_arguments_without_loading() {
        let dev = Device::parse("sm_90", None, None).unwrap();
        let l = Loader::from_package(
            Package::from_manifest(with_params(true)).unwrap(),
            &Gpu::simulated(dev),
        );
        assert!(l.check_args("k", None, "k", &[8, 4]).unwrap());
        let e = l.check_args("k", None, "k", &[8, 2]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 1 is 2 bytes, the kernel takes 4 (int n)"
        );
        let abi = l.entry_params("k", None, "k").unwrap().unwrap();
        assert_eq!(abi.params[1].type_name.as_deref(), Some("int"));
        let e = l.check_args("k", None, "nope", &[]).unwrap_err();
        assert!(
            e.to_string().contains("entry `nope` is not exported"),
            "{e}"
        );
        assert!(l.check_args("nope", None, "k", &[]).is_err());
        let l = Loader::from_package(
            Package::from_manifest(with_params(false)).unwrap(),
            &Gpu::simulated(dev),
        );
        assert!(!l.check_args("k", None, "k", &[8]).unwrap());
    }

    #[test]
    fn simulated_devices_explain_but_do_not_load() {
        let dev = Device::parse("sm_90", None, None).unwrap();
        let gpu = Gpu::simulated(dev);
        let dir = tempfile::tempdir().unwrap();
        let m = crate::select::tests::manifest(vec![crate::select::tests::object(
            "k", None, "sm_90", None,
        )]);
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        let l = Loader::open(dir.path(), &gpu).unwrap();
        assert_eq!(
            l.selection()
                .kernel("k", None)
                .unwrap()
                .selected()
                .unwrap()
                .target,
            "sm_90"
        );
        let e = l.function("k", None, "k").unwrap_err();
        assert!(matches!(e, LoaderError::Simulated { .. }), "{e}");
        let e = l.function("nope", None, "k").unwrap_err().to_string();
        assert!(
            e.contains("kernel `nope` is not in the manifest (it has: k)"),
            "{e}"
        );
        // preload: an unknown kernel is refused before anything loads, and a simulated
        // device loads nothing.
        let e = l.preload(&[("k", None), ("nope", None)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("kernel `nope` is not in the manifest"),
            "{e}"
        );
        let e = l.preload(&[("k", None)]).unwrap_err();
        assert!(matches!(e, LoaderError::Simulated { .. }), "{e}");
        assert!(l.preload(&[]).is_ok());
    }
}
