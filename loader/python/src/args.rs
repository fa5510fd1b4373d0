//! Python launch arguments → the `void**` both drivers take, checked against the kernel's
//! launch ABI as the manifest records it (`objects[].params`, kbuild_manifest::params) before
//! anything reaches the driver.
//!
//! What each argument is: a tensor (anything with `data_ptr()` and `device`, torch's) or a
//! [`Pointer`] is an 8-byte device pointer; a [`Scalar`] (`kbuild.int32(5)`) has its own size;
//! a Python `int` or `float` takes the size of the parameter it goes to (an int into 4 bytes
//! is an int32, range-checked; into 8 an int64; into a pointer a raw address; a float into 4
//! bytes an f32, into 8 an f64; a float into a pointer or a parameter whose C type is an
//! integer is refused).

use std::ffi::c_void;

use kbuild_loader::launch::{check_count, pack_arg, LooseArg};
use kbuild_manifest::params::Param;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyTuple};

use crate::LaunchError;

/// A raw device pointer argument: `kbuild.Pointer(tensor.data_ptr())`, or any address.
#[pyclass(frozen, module = "kbuild", name = "Pointer")]
#[derive(Clone, Copy)]
pub struct Pointer {
    value: u64,
}

#[pymethods]
impl Pointer {
    #[new]
    fn new(value: u64) -> Pointer {
        Pointer { value }
    }

    /// The address.
    #[getter]
    fn value(&self) -> u64 {
        self.value
    }

    fn __int__(&self) -> u64 {
        self.value
    }

    fn __index__(&self) -> u64 {
        self.value
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Pointer>()
            .is_ok_and(|o| o.get().value == self.value)
    }

    fn __hash__(&self) -> u64 {
        self.value
    }

    fn __repr__(&self) -> String {
        format!("kbuild.Pointer(0x{:x})", self.value)
    }
}

/// A kernel argument of an explicit C type: `kbuild.int32(n)`, `kbuild.int64(n)`,
/// `kbuild.uint32(n)`, `kbuild.uint64(n)`, `kbuild.float32(x)`, `kbuild.float64(x)`.
#[pyclass(frozen, module = "kbuild", name = "Scalar")]
#[derive(Clone, Copy)]
pub struct Scalar {
    bits: u64,
    size: u64,
    float: bool,
    ctype: &'static str,
}

#[pymethods]
impl Scalar {
    /// Its size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// The C type it stands for (`int32_t`, `float`, …).
    #[getter]
    fn ctype(&self) -> &'static str {
        self.ctype
    }

    fn __repr__(&self) -> String {
        let value = match (self.float, self.size) {
            (true, 4) => f32::from_bits(self.bits as u32).to_string(),
            (true, _) => f64::from_bits(self.bits).to_string(),
            (false, 4) if self.ctype.starts_with('u') => (self.bits as u32).to_string(),
            (false, 4) => (self.bits as u32 as i32).to_string(),
            (false, _) if self.ctype.starts_with('u') => self.bits.to_string(),
            (false, _) => (self.bits as i64).to_string(),
        };
        let name = match self.ctype {
            "int32_t" => "int32",
            "int64_t" => "int64",
            "uint32_t" => "uint32",
            "uint64_t" => "uint64",
            "float" => "float32",
            _ => "float64",
        };
        format!("kbuild.{name}({value})")
    }
}

fn scalar_range(v: i128, ctype: &str, lo: i128, hi: i128) -> PyResult<()> {
    if v < lo || v > hi {
        return Err(pyo3::exceptions::PyOverflowError::new_err(format!(
            "{v} does not fit in {ctype}"
        )));
    }
    Ok(())
}

/// An `int32_t` argument.
#[pyfunction]
pub fn int32(value: i64) -> PyResult<Scalar> {
    scalar_range(value.into(), "int32_t", i32::MIN.into(), i32::MAX.into())?;
    Ok(Scalar {
        bits: u64::from(value as i32 as u32),
        size: 4,
        float: false,
        ctype: "int32_t",
    })
}

/// An `int64_t` argument.
#[pyfunction]
pub fn int64(value: i64) -> Scalar {
    Scalar {
        bits: value as u64,
        size: 8,
        float: false,
        ctype: "int64_t",
    }
}

/// A `uint32_t` argument.
#[pyfunction]
pub fn uint32(value: u32) -> Scalar {
    Scalar {
        bits: u64::from(value),
        size: 4,
        float: false,
        ctype: "uint32_t",
    }
}

/// A `uint64_t` argument.
#[pyfunction]
pub fn uint64(value: u64) -> Scalar {
    Scalar {
        bits: value,
        size: 8,
        float: false,
        ctype: "uint64_t",
    }
}

/// A `float` argument.
#[pyfunction]
pub fn float32(value: f64) -> Scalar {
    Scalar {
        bits: u64::from((value as f32).to_bits()),
        size: 4,
        float: true,
        ctype: "float",
    }
}

/// A `double` argument.
#[pyfunction]
pub fn float64(value: f64) -> Scalar {
    Scalar {
        bits: value.to_bits(),
        size: 8,
        float: true,
        ctype: "double",
    }
}

/// The arguments packed: one 8-byte slot per argument (a smaller value in its low bytes, as
/// the little-endian targets read it).
pub(crate) struct Packed {
    slots: Vec<u64>,
    /// Each argument's size in bytes, for the loader's own check.
    sizes: Vec<usize>,
}

impl Packed {
    /// Pointers to each slot, valid while `self` is.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect()
    }

    pub(crate) fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Each argument's value (its address for a pointer) as the slot holds it.
    pub(crate) fn values(&self) -> &[u64] {
        &self.slots
    }
}

/// The caller's parameters of an entry (AMD hidden arguments are the runtime's).
pub(crate) fn visible(params: &[Param]) -> Vec<Param> {
    params.iter().filter(|p| !p.hidden).cloned().collect()
}

impl Scalar {
    /// The argument as the loader's launch check takes it.
    fn loose(&self) -> LooseArg {
        LooseArg::Typed {
            bits: self.bits,
            size: self.size,
            float: self.float,
            ctype: self.ctype,
        }
    }
}

/// Pack `args` for `entry`, whose parameters the manifest records as `params` (`None`: it
/// records none), for a kernel on CUDA device `device` (`None`: a simulated device, whose
/// tensors only need to be on a GPU). Each value is packed by the loader's launch check
/// ([`kbuild_loader::launch::pack_arg`]), whose messages name the argument and parameter;
/// every refusal is a [`LaunchError`].
pub(crate) fn pack(
    entry: &str,
    params: Option<&[Param]>,
    args: &Bound<'_, PyTuple>,
    device: Option<u32>,
) -> PyResult<Packed> {
    let refused = |e: kbuild_loader::LaunchError| LaunchError::new_err(e.to_string());
    if let Some(params) = params {
        // The loader's count (the hidden AMD arguments are not among `params` here).
        check_count(entry, params, args.len()).map_err(refused)?;
    }
    let mut slots = Vec::with_capacity(args.len());
    let mut sizes = Vec::with_capacity(args.len());
    for (i, obj) in args.iter().enumerate() {
        let arg = classify(entry, i, &obj, device)?;
        let Some(p) = params.and_then(|ps| ps.get(i)) else {
            // No record to size a Python number by: only self-sized arguments go.
            slots.push(match arg {
                LooseArg::Pointer(v) => {
                    sizes.push(8);
                    v
                }
                LooseArg::Typed { bits, size, .. } => {
                    sizes.push(size as usize);
                    bits
                }
                LooseArg::Int(_) | LooseArg::Float(_) => {
                    let what = if matches!(arg, LooseArg::Int(_)) { "an int" } else { "a float" };
                    return Err(LaunchError::new_err(format!(
                        "{entry}: argument {i} is {what}, and the manifest records no parameters of `{entry}` to size it by (an object built before kbuild recorded them); pass kbuild.int32(...), kbuild.int64(...), kbuild.float32(...) or kbuild.float64(...)"
                    )));
                }
            });
            continue;
        };
        slots.push(pack_arg(entry, i, arg, p).map_err(refused)?);
        sizes.push(p.size as usize);
    }
    Ok(Packed { slots, sizes })
}

/// One Python argument as the launch check takes it: a tensor or [`Pointer`] is an address, a
/// [`Scalar`] a typed value, an `int` or `float` a number sized by its parameter.
fn classify(
    entry: &str,
    i: usize,
    obj: &Bound<'_, PyAny>,
    device: Option<u32>,
) -> PyResult<LooseArg> {
    let py = obj.py();
    let err = |what: String| LaunchError::new_err(format!("{entry}: argument {i} {what}"));
    if let Ok(p) = obj.cast::<Pointer>() {
        return Ok(LooseArg::Pointer(p.get().value));
    }
    if let Ok(s) = obj.cast::<Scalar>() {
        return Ok(s.get().loose());
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(LooseArg::Float(obj.extract::<f64>()?));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(v) = obj.extract::<i64>() {
            return Ok(LooseArg::Int(v.into()));
        }
        if let Ok(v) = obj.extract::<u64>() {
            return Ok(LooseArg::Int(v.into()));
        }
        return Err(err(format!("is {obj}, larger than any kernel parameter")));
    }
    let data_ptr = intern!(py, "data_ptr");
    // A torch tensor: its own methods, called unbound (this is on every launch's path).
    if let Some(torch) = torch_tensor(obj)? {
        return torch.pointer(obj, device).map_err(&err);
    }
    // A tensor: it must live where the kernel runs. A torch tensor answers `is_cuda` and
    // `get_device()` without building a device object; another tensor type with `data_ptr()`
    // is asked for its `device`.
    let torch_is_cuda = obj
        .getattr(intern!(py, "is_cuda"))
        .ok()
        .and_then(|v| v.extract::<bool>().ok());
    let (on_cuda, index) = match torch_is_cuda {
        Some(false) => (false, None),
        Some(true) => (
            true,
            Some(
                obj.call_method0(intern!(py, "get_device"))?
                    .extract::<i64>()?,
            ),
        ),
        None if obj.hasattr(data_ptr)? => {
            let dev = obj.getattr(intern!(py, "device"))?;
            let kind: String = dev.getattr(intern!(py, "type"))?.extract()?;
            let index: Option<i64> = dev.getattr(intern!(py, "index"))?.extract()?;
            (kind == "cuda", index)
        }
        None => {
            return Err(err(format!(
                "is a {}: pass a tensor, an int, a float, a kbuild.Pointer or a kbuild scalar (kbuild.int32(...))",
                obj.get_type().name()?
            )))
        }
    };
    let on_device = on_cuda
        && match (device, index) {
            (Some(d), Some(t)) => t == i64::from(d),
            _ => true,
        };
    if !on_device {
        return Err(err(wrong_device(obj, device)));
    }
    let ptr: u64 = obj.call_method0(data_ptr)?.extract()?;
    Ok(LooseArg::Pointer(ptr))
}

/// What is wrong with a tensor that is not on the kernel's `device`: where it is.
fn wrong_device(obj: &Bound<'_, PyAny>, device: Option<u32>) -> String {
    let dev = obj
        .getattr(intern!(obj.py(), "device"))
        .and_then(|d| d.str().map(|s| s.to_string()))
        .unwrap_or_else(|_| "another device".into());
    let want = match device {
        Some(d) => format!("cuda:{d}"),
        None => "a GPU".to_string(),
    };
    format!("is a tensor on {dev}, the kernel runs on {want}")
}

/// torch's tensor classes and two of its methods, looked up once torch is imported (never
/// importing it): called unbound they skip building a bound method per argument and launch.
struct TorchTensor {
    base: Py<pyo3::types::PyType>,
    /// `torch.Tensor` and `torch.nn.Parameter`: an exact type check, before `isinstance`.
    plain: [Py<pyo3::types::PyType>; 2],
    get_device: Py<PyAny>,
    data_ptr: Py<PyAny>,
    /// torch sees one GPU: a CUDA tensor is on it, and its index need not be asked.
    one_device: bool,
}

static TORCH_TENSOR: pyo3::sync::PyOnceLock<TorchTensor> = pyo3::sync::PyOnceLock::new();

/// The torch fast path for `obj` when it is a torch tensor.
fn torch_tensor<'a>(obj: &Bound<'a, PyAny>) -> PyResult<Option<&'a TorchTensor>> {
    let py = obj.py();
    let torch = match TORCH_TENSOR.get(py) {
        Some(t) => t,
        None => match load_torch(py) {
            Some(t) => TORCH_TENSOR.get_or_init(py, || t),
            None => return Ok(None),
        },
    };
    let ty = obj.get_type();
    if torch.plain.iter().any(|t| ty.is(t.bind(py))) {
        return Ok(Some(torch));
    }
    Ok(obj.is_instance(torch.base.bind(py))?.then_some(torch))
}

/// torch's classes and methods, when `torch` is imported (`None` otherwise, or when torch
/// lacks them).
fn load_torch(py: Python<'_>) -> Option<TorchTensor> {
    use pyo3::types::PyType;
    let modules = py
        .import(intern!(py, "sys"))
        .and_then(|s| s.getattr(intern!(py, "modules")))
        .ok()?;
    let torch = modules.get_item(intern!(py, "torch")).ok()?;
    let class = |owner: &Bound<'_, PyAny>, name: &str| -> Option<Py<PyType>> {
        owner
            .getattr(name)
            .ok()?
            .cast_into::<PyType>()
            .ok()
            .map(Bound::unbind)
    };
    let base = class(&torch.getattr(intern!(py, "_C")).ok()?, "TensorBase")?;
    let tensor = class(&torch, "Tensor")?;
    let parameter = class(&torch.getattr(intern!(py, "nn")).ok()?, "Parameter")?;
    let one_device = torch
        .getattr(intern!(py, "cuda"))
        .and_then(|c| c.call_method0(intern!(py, "device_count")))
        .and_then(|n| n.extract::<i64>())
        .is_ok_and(|n| n == 1);
    let base_ref = base.bind(py);
    Some(TorchTensor {
        get_device: base_ref.getattr(intern!(py, "get_device")).ok()?.unbind(),
        data_ptr: base_ref.getattr(intern!(py, "data_ptr")).ok()?.unbind(),
        base,
        plain: [tensor, parameter],
        one_device,
    })
}

impl TorchTensor {
    /// The tensor's address, when it is a CUDA tensor on `device`; else what is wrong.
    fn pointer(&self, obj: &Bound<'_, PyAny>, device: Option<u32>) -> Result<LooseArg, String> {
        let py = obj.py();
        let fail = |e: PyErr| e.to_string();
        let on_cuda: bool = obj
            .getattr(intern!(py, "is_cuda"))
            .and_then(|v| v.extract())
            .map_err(fail)?;
        // With one GPU in torch's view a CUDA tensor is on device 0; else ask which.
        let elsewhere = on_cuda
            && match device {
                Some(d) if self.one_device => d != 0,
                Some(d) => {
                    let index: i64 = self
                        .get_device
                        .bind(py)
                        .call1((obj,))
                        .and_then(|v| v.extract())
                        .map_err(fail)?;
                    index != i64::from(d)
                }
                None => false,
            };
        if !on_cuda || elsewhere {
            return Err(wrong_device(obj, device));
        }
        let ptr: u64 = self
            .data_ptr
            .bind(py)
            .call1((obj,))
            .and_then(|v| v.extract())
            .map_err(fail)?;
        Ok(LooseArg::Pointer(ptr))
    }
}
