//! `kbuild._native`: the Rust half of the `kbuild` Python package (python/kbuild wraps it).
//!
//! A thin edge over `kbuild-loader` like the C ABI: opening, selection, explain rendering
//! (`kbuild_loader::explain`, the functions `kbuild explain` prints with), loading and launching
//! are the loader's; this crate converts arguments and errors. What it adds is the check of a
//! launch's Python arguments against the kernel's launch ABI as the manifest records it
//! (`objects[].params`), made before anything reaches the driver ([`args`]).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

mod args;
mod kernel;
mod package;

create_exception!(
    kbuild,
    KbuildError,
    PyException,
    "Any kbuild error; the message is the one the kbuild CLI prints after `error: `."
);
create_exception!(
    kbuild,
    NoMatchError,
    KbuildError,
    "No code object of the kernel runs on the device (the message says what the bundle has and what to build)."
);
create_exception!(
    kbuild,
    NoDeviceError,
    KbuildError,
    "No GPU was found (pass device=\"sm_90\" or another target to explain for a simulated one)."
);
create_exception!(
    kbuild,
    SimulatedError,
    KbuildError,
    "The device is simulated: selection, explain and argument checks only, nothing loads or launches."
);
create_exception!(
    kbuild,
    LaunchError,
    KbuildError,
    "A launch refused: arguments that do not fit the kernel's parameters, a bad grid or block, or the driver's error."
);

/// The error's message and those of its sources not already in it, as the CLI's `error: `
/// line joins them (build-system/cli/src/commands/mod.rs, `error_text`).
pub(crate) fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// A loader error as the Python exception of its kind.
pub(crate) fn loader_err(e: kbuild_loader::LoaderError) -> PyErr {
    use kbuild_loader::LoaderError as E;
    let msg = chain_text(&e);
    match e {
        E::NoMatch(_) => NoMatchError::new_err(msg),
        E::NoDevice { .. } => NoDeviceError::new_err(msg),
        E::Simulated { .. } => SimulatedError::new_err(msg),
        E::Launch { .. } | E::Argument { .. } | E::Args(_) | E::NotTriton { .. } => {
            LaunchError::new_err(msg)
        }
        _ => KbuildError::new_err(msg),
    }
}

/// Any other kbuild error (registry, cache, signatures, directories).
pub(crate) fn kbuild_err(e: impl std::error::Error + 'static) -> PyErr {
    KbuildError::new_err(chain_text(&e))
}

#[pymodule]
#[pyo3(name = "_native")]
fn kbuild_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("KbuildError", py.get_type::<KbuildError>())?;
    m.add("NoMatchError", py.get_type::<NoMatchError>())?;
    m.add("NoDeviceError", py.get_type::<NoDeviceError>())?;
    m.add("SimulatedError", py.get_type::<SimulatedError>())?;
    m.add("LaunchError", py.get_type::<LaunchError>())?;
    m.add(
        "EXPLAIN_SCHEMA",
        kbuild_loader::explain::EXPLAIN_SCHEMA.to_string(),
    )?;
    m.add_class::<package::PyPackage>()?;
    m.add_class::<kernel::PyKernel>()?;
    m.add_class::<args::Pointer>()?;
    m.add_class::<args::Scalar>()?;
    m.add_function(wrap_pyfunction!(package::open, m)?)?;
    m.add_function(wrap_pyfunction!(package::pull, m)?)?;
    m.add_function(wrap_pyfunction!(args::int32, m)?)?;
    m.add_function(wrap_pyfunction!(args::int64, m)?)?;
    m.add_function(wrap_pyfunction!(args::uint32, m)?)?;
    m.add_function(wrap_pyfunction!(args::uint64, m)?)?;
    m.add_function(wrap_pyfunction!(args::float32, m)?)?;
    m.add_function(wrap_pyfunction!(args::float64, m)?)?;
    Ok(())
}
