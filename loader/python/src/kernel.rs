//! A kernel entry ready to launch (loaded on a detected GPU) or selected for a simulated
//! device (its arguments can be checked; nothing launches).

use std::ffi::c_void;

use kbuild_loader::launch::{check_triton_args, check_triton_count, triton_scratch_count};
use kbuild_loader::{Function, Gpu, LaunchConfig, LoaderError, Stream};
use kbuild_manifest::params::Param;
use kbuild_manifest::triton::TritonLaunch;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyTuple};

use crate::{args, kbuild_err, loader_err, LaunchError};

/// A kernel loaded on a detected GPU: its function, the device and the device's index.
struct LoadedOn {
    function: Function,
    gpu: Gpu,
    index: u32,
}

/// A kernel entry of a package on one device.
#[pyclass(frozen, module = "kbuild._native", name = "Kernel")]
pub struct PyKernel {
    kernel: String,
    variant: Option<String>,
    entry: String,
    target: String,
    device: String,
    /// The caller's launch parameters as the manifest records them (`None`: not recorded).
    params: Option<Vec<Param>>,
    /// The launch record of a Triton kernel's object.
    triton: Option<TritonLaunch>,
    loaded: Option<LoadedOn>,
    /// torch's accessor of its current raw stream (`torch._C._cuda_getCurrentRawStream`),
    /// found on the first launch that needs it.
    torch_stream: std::sync::OnceLock<Py<PyAny>>,
}

impl PyKernel {
    pub(crate) fn selected_only(
        kernel: String,
        variant: Option<String>,
        entry: String,
        target: String,
        device: String,
        params: Option<Vec<Param>>,
        triton: Option<TritonLaunch>,
    ) -> PyKernel {
        PyKernel {
            kernel,
            variant,
            entry,
            target,
            device,
            params,
            triton,
            loaded: None,
            torch_stream: std::sync::OnceLock::new(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn loaded(
        kernel: String,
        variant: Option<String>,
        entry: String,
        target: String,
        device: String,
        index: u32,
        params: Option<Vec<Param>>,
        triton: Option<TritonLaunch>,
        function: Function,
        gpu: Gpu,
    ) -> PyKernel {
        PyKernel {
            kernel,
            variant,
            entry,
            target,
            device,
            params,
            triton,
            loaded: Some(LoadedOn {
                function,
                gpu,
                index,
            }),
            torch_stream: std::sync::OnceLock::new(),
        }
    }
}

impl PyKernel {
    /// The raw stream handle a launch goes to: `stream` as given (an int, or an object with
    /// `cuda_stream`, a torch.cuda.Stream), or with `None` torch's current stream on the
    /// kernel's device (so launches inside `torch.cuda.graph` capture join the graph); 0, the
    /// legacy default stream, when torch is not imported or the device is simulated.
    fn stream(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        if let Some(s) = stream.filter(|s| !s.is_none()) {
            if let Ok(raw) = s.extract::<usize>() {
                return Ok(raw);
            }
            return s.getattr(intern!(py, "cuda_stream"))?.extract();
        }
        let Some(l) = &self.loaded else {
            return Ok(0);
        };
        if let Some(get) = self.torch_stream.get() {
            return get.bind(py).call1((l.index,))?.extract();
        }
        let modules = py
            .import(intern!(py, "sys"))?
            .getattr(intern!(py, "modules"))?;
        let Ok(torch) = modules.get_item(intern!(py, "torch")) else {
            return Ok(0);
        };
        // torch's own accessor of the raw handle (what Triton's launcher calls): a fraction of
        // a microsecond, where `torch.cuda.current_stream()` builds a Stream object.
        match torch
            .getattr(intern!(py, "_C"))
            .and_then(|c| c.getattr(intern!(py, "_cuda_getCurrentRawStream")))
        {
            Ok(get) => {
                let raw = get.call1((l.index,))?.extract()?;
                let _ = self.torch_stream.set(get.unbind());
                Ok(raw)
            }
            Err(_) => torch
                .getattr(intern!(py, "cuda"))?
                .call_method1(intern!(py, "current_stream"), (l.index,))?
                .getattr(intern!(py, "cuda_stream"))?
                .extract(),
        }
    }

    /// The launch record, or the error of launching a kernel that has none by it.
    fn triton_record(&self) -> PyResult<&TritonLaunch> {
        self.triton.as_ref().ok_or_else(|| {
            let e = LoaderError::NotTriton {
                kernel: self.entry.clone(),
            };
            LaunchError::new_err(e.to_string())
        })
    }

    /// `args` of a Triton launch packed by the launch check (sized by the parameters the
    /// record names, the scratch pointers left out) after the record's count (which names the
    /// parameters); with `check_values`, also the values assumed divisible by 16 (a loaded
    /// kernel's launch leaves those to `Function::launch_triton`, which checks them anyway).
    fn pack_triton(&self, args: &Bound<'_, PyTuple>, check_values: bool) -> PyResult<args::Packed> {
        let record = self.triton_record()?;
        let refused = |e: kbuild_loader::LaunchError| LaunchError::new_err(e.to_string());
        // The record's count first: its message names the parameters.
        check_triton_count(&self.entry, record, args.len()).map_err(refused)?;
        let params = self.params.as_deref().map(|p| {
            let keep = p.len().saturating_sub(triton_scratch_count(record));
            &p[..keep]
        });
        let index = self.loaded.as_ref().map(|l| l.index);
        let packed = args::pack(&self.entry, params, args, index)?;
        if check_values {
            check_triton_args(&self.entry, record, packed.values()).map_err(refused)?;
        }
        Ok(packed)
    }
}

/// Make the device's primary context current on this thread: torch's thread may have another
/// one current (or none), and the module is in the primary context, the one torch uses.
fn bind_context(l: &LoadedOn) -> PyResult<()> {
    if let Some(cuda) = l.gpu.cuda() {
        cuda.context().bind_to_thread().map_err(|e| {
            loader_err(LoaderError::Runtime {
                api: "cuCtxSetCurrent".into(),
                message: e.to_string(),
            })
        })?;
    }
    Ok(())
}

/// A grid or block: an int or a tuple of one to three ints.
fn dims(obj: &Bound<'_, PyAny>, what: &str, entry: &str) -> PyResult<(u32, u32, u32)> {
    let bad = || {
        LaunchError::new_err(format!(
            "{entry}: {what} must be an int or a tuple of 1 to 3 ints, not {obj}"
        ))
    };
    if obj.is_instance_of::<PyInt>() {
        return Ok((obj.extract::<u32>().map_err(|_| bad())?, 1, 1));
    }
    let v: Vec<u32> = obj.extract().map_err(|_| bad())?;
    match v.as_slice() {
        [x] => Ok((*x, 1, 1)),
        [x, y] => Ok((*x, *y, 1)),
        [x, y, z] => Ok((*x, *y, *z)),
        _ => Err(bad()),
    }
}

#[pymethods]
impl PyKernel {
    #[getter]
    fn kernel(&self) -> &str {
        &self.kernel
    }

    #[getter]
    fn variant(&self) -> Option<&str> {
        self.variant.as_deref()
    }

    #[getter]
    fn entry(&self) -> &str {
        &self.entry
    }

    /// The target of the selected object (`sm_90`, `compute_90`, `gfx1100`).
    #[getter]
    fn target(&self) -> &str {
        &self.target
    }

    /// The device, as explain describes it.
    #[getter]
    fn device(&self) -> &str {
        &self.device
    }

    /// The CUDA/HIP device index it is loaded on; `None` when simulated.
    #[getter]
    fn device_index(&self) -> Option<u32> {
        self.loaded.as_ref().map(|l| l.index)
    }

    #[getter]
    fn simulated(&self) -> bool {
        self.loaded.is_none()
    }

    /// The launch parameters as JSON (`None`: the manifest records none).
    #[getter]
    fn params_json(&self) -> PyResult<Option<String>> {
        self.params
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(kbuild_err)
    }

    /// What the driver reports for the loaded function.
    #[getter]
    fn attributes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let Some(l) = &self.loaded else {
            return Err(loader_err(LoaderError::Simulated {
                device: self.device.clone(),
            }));
        };
        let d = PyDict::new(py);
        if let Some(f) = l.function.cuda_function() {
            // SAFETY: `f` belongs to the module `l.function` keeps loaded.
            let a = unsafe { kbuild_loader::cuda::attributes(f) }.map_err(loader_err)?;
            d.set_item("registers", a.registers)?;
            d.set_item("shared_bytes", a.shared_bytes)?;
            d.set_item("local_bytes", a.local_bytes)?;
            d.set_item("const_bytes", a.const_bytes)?;
            d.set_item("max_threads", a.max_threads)?;
        } else {
            for c in l.function.attribute_checks() {
                let key = match c.field {
                    "lds_bytes" => "shared_bytes",
                    "scratch_bytes" => "local_bytes",
                    other => other,
                };
                d.set_item(key, c.loaded)?;
            }
        }
        Ok(d)
    }

    /// The attributes compared with the manifest after load, as JSON.
    #[getter]
    fn attribute_checks_json(&self) -> PyResult<String> {
        let checks = self
            .loaded
            .as_ref()
            .map(|l| l.function.attribute_checks())
            .unwrap_or_default();
        serde_json::to_string(checks).map_err(kbuild_err)
    }

    /// A Triton kernel's launch record as JSON (`None` for other kernels).
    #[getter]
    fn triton_json(&self) -> PyResult<Option<String>> {
        self.triton
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(kbuild_err)
    }

    /// Check a Triton launch's `args` as `launch_triton` does, launching nothing.
    fn check_triton(&self, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.pack_triton(args, true).map(|_| ())
    }

    /// Launch a Triton kernel as its launch record says (`kbuild_loader`'s
    /// `Function::launch_triton`): `grid` programs; block, dynamic shared memory, PDL,
    /// clusters, cooperative grids and the scratch memory from the record; `args` are its
    /// parameters less the scratch pointers. Every check comes before the driver is called.
    #[pyo3(signature = (grid, *args, stream=None))]
    fn launch_triton(
        &self,
        py: Python<'_>,
        grid: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut packed = self.pack_triton(args, self.loaded.is_none())?;
        let stream = self.stream(py, stream)?;
        let grid = dims(grid, "grid", &self.entry)?;
        let (Some(l), Some(record)) = (&self.loaded, &self.triton) else {
            return Err(loader_err(LoaderError::Simulated {
                device: self.device.clone(),
            }));
        };
        bind_context(l)?;
        let pointers = packed.pointers();
        // SAFETY: the arguments were packed by the launch check against the kernel's
        // recorded parameters; each pointer is to an 8-byte slot holding a value of at most
        // its size, valid for the call.
        unsafe {
            l.function.launch_triton(
                record,
                grid,
                Stream::from_raw(stream as *mut c_void),
                &pointers,
                packed.sizes(),
            )
        }
        .map_err(loader_err)
    }

    /// Check `args` against the kernel's launch parameters (raises `LaunchError`).
    fn check(&self, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        let index = self.loaded.as_ref().map(|l| l.index);
        args::pack(&self.entry, self.params.as_deref(), args, index).map(|_| ())
    }

    /// Launch with `grid` and `block` (ints or tuples of up to 3) and `args`: torch tensors
    /// (their data_ptr; on the kernel's device), ints and floats (sized by the kernel's
    /// parameters), kbuild.Pointer or kbuild scalars (kbuild.int64(n)); `shared` dynamic
    /// shared memory bytes. `stream`: a torch.cuda.Stream, a raw stream handle, or None for
    /// torch's current stream (launches inside torch.cuda.graph capture join the graph).
    /// Every check (arguments, grid, block) comes before the driver is called.
    #[pyo3(signature = (grid, block, *args, shared=0, stream=None))]
    fn launch(
        &self,
        py: Python<'_>,
        grid: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        shared: u32,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let index = self.loaded.as_ref().map(|l| l.index);
        let mut packed = args::pack(&self.entry, self.params.as_deref(), args, index)?;
        let stream = self.stream(py, stream)?;
        let cfg = LaunchConfig {
            grid: dims(grid, "grid", &self.entry)?,
            block: dims(block, "block", &self.entry)?,
            shared_bytes: shared,
            stream: Stream::from_raw(stream as *mut c_void),
            programmatic: false,
            cluster: 1,
            cooperative: false,
        };
        let Some(l) = &self.loaded else {
            return Err(loader_err(LoaderError::Simulated {
                device: self.device.clone(),
            }));
        };
        bind_context(l)?;
        let mut pointers = packed.pointers();
        // SAFETY: the arguments were checked against the kernel's recorded parameters
        // (count, sizes, pointer or value); each pointer is to an 8-byte slot holding a value
        // of at most its size, valid for the call. The loader checks the sizes again.
        unsafe { l.function.launch_raw(&cfg, &mut pointers, packed.sizes()) }.map_err(loader_err)
    }

    fn __repr__(&self) -> String {
        let variant = self
            .variant
            .as_ref()
            .map(|v| format!(" [{v}]"))
            .unwrap_or_default();
        let on = match &self.loaded {
            Some(l) => format!("cuda:{}", l.index),
            None => format!("{} (simulated)", self.device),
        };
        format!(
            "<kbuild.Kernel {}{variant} {} from {} on {on}>",
            self.entry, self.kernel, self.target
        )
    }
}
