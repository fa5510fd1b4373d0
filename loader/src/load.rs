//! Loading: a [`Gpu`] (the resolved device and its runtime, opened once per process), a
//! [`Loader`] over one package (modules selected and loaded lazily per kernel), the object's
//! digest checked before every load, function attributes compared with the manifest after it.
//!
//! From the kernel name to the driver call, the loader reads the package's load index in
//! place: choosing the object and reading its record allocate nothing.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kbuild_manifest::load_index::EntryParams;
use kbuild_manifest::triton::TritonLaunch;

use crate::error::{LoaderError, Result};
use crate::launch::check_args;
use crate::package::Package;
use crate::select::{Selection, Verdicts};

mod attributes;
mod gpu;
mod module;
mod scratch;
#[cfg(test)]
mod tests;

pub use attributes::AttributeCheck;
use gpu::Backend;
pub use gpu::Gpu;
use module::ModuleInner;
pub use module::{Function, LoadedModule};

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
        let index = self.selected_object(kernel, variant)?;
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

    /// The object selected for `kernel` (`variant`), by index; a kernel with none is
    /// [`LoaderError::NoMatch`].
    fn selected_object(&self, kernel: &str, variant: Option<&str>) -> Result<usize> {
        let index = {
            let mut state = self.state.lock().map_err(|_| LoaderError::Poisoned {
                what: "loader's module table",
            })?;
            self.chosen(&mut state, kernel, variant)?
        };
        match index {
            Some(index) => Ok(index),
            None => {
                let all = self.selection();
                let choice = all.kernel(kernel, variant)?;
                Err(LoaderError::NoMatch(Box::new(all.no_match(choice))))
            }
        }
    }

    /// The launch record of the object selected for `kernel` (`variant`) when it was built
    /// from a Triton kernel (`None` for CUDA/HIP kernels): what
    /// [`Function::launch_triton`] launches by.
    pub fn triton_launch(
        &self,
        kernel: &str,
        variant: Option<&str>,
    ) -> Result<Option<TritonLaunch>> {
        let index = self.selected_object(kernel, variant)?;
        Ok(self.package.triton_launch(index)?.cloned())
    }

    /// [`Self::triton_launch`] of a kernel that must have been built from Triton:
    /// [`LoaderError::NotTriton`] otherwise.
    pub fn require_triton_launch(
        &self,
        kernel: &str,
        variant: Option<&str>,
    ) -> Result<TritonLaunch> {
        self.triton_launch(kernel, variant)?
            .ok_or_else(|| LoaderError::NotTriton {
                kernel: kernel.to_string(),
            })
    }

    /// Check a Triton launch of `kernel` (`variant`) as [`Function::launch_triton`] would,
    /// without loading anything (a simulated device answers too): `values[i]` is argument i
    /// read as [`crate::launch::check_triton_args`] reads it, `sizes[i]` its size.
    pub fn check_triton_args(
        &self,
        kernel: &str,
        variant: Option<&str>,
        values: &[u64],
        sizes: &[usize],
    ) -> Result<()> {
        let record = self.require_triton_launch(kernel, variant)?;
        crate::launch::triton_config(&record.function, &record, (1, 1, 1), Default::default())?;
        crate::launch::check_triton_args(&record.function, &record, values)
            .map_err(|e| LoaderError::Args(Box::new(e)))?;
        let mut all = sizes.to_vec();
        all.extend(std::iter::repeat_n(
            8,
            crate::launch::triton_scratch_count(&record),
        ));
        self.check_args(kernel, variant, &record.function, &all)?;
        Ok(())
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
