//! `kbuild.open`, `kbuild.pull` and the package: selection and explain for a detected or
//! simulated device (rendered by `kbuild_loader::explain`, as `kbuild explain` renders it),
//! launch parameters, and kernels loaded for a device.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kbuild_base::env::Env;
use kbuild_bundle::sign::Trust;
use kbuild_loader::detect::{self, DeviceOptions, ResolvedDevice};
use kbuild_loader::explain::{explain_json, explain_text};
use kbuild_loader::hip::HipSearch;
use kbuild_loader::{Gpu, Loader, LoaderError, Package};
use kbuild_manifest::params::Param;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::kernel::PyKernel;
use crate::{args, kbuild_err, loader_err, KbuildError};

/// How to make the package again, for a second device (a [`Loader`] owns its package).
enum Reopen {
    Path(PathBuf, Trust),
    Bundle(Box<kbuild_bundle::Bundle>, PathBuf),
}

impl Reopen {
    fn open(&self) -> Result<Package, LoaderError> {
        match self {
            Reopen::Path(p, trust) => Package::open_trusted(p, trust),
            Reopen::Bundle(b, origin) => Package::from_bundle((**b).clone(), origin.clone()),
        }
    }
}

struct State {
    /// The package while no device has loaded from it (the first loader takes it).
    package: Option<Package>,
    /// Loaders by CUDA/HIP device index.
    loaders: Vec<(usize, Arc<Loader>)>,
}

/// A package: a build directory, manifest, bundle or pulled version.
#[pyclass(frozen, module = "kbuild._native", name = "Package")]
pub struct PyPackage {
    state: Mutex<State>,
    reopen: Reopen,
}

fn poisoned() -> PyErr {
    KbuildError::new_err("the package's state was poisoned by a panic in another thread")
}

/// The device `device` names: a target to simulate (`sm_90`, `gfx1100`), or `None` / `auto`
/// for the detected GPU (`KBUILD_DEVICE` as the CLI reads it when `None`).
pub(crate) fn resolve(device: Option<&str>, index: Option<usize>) -> PyResult<ResolvedDevice> {
    let env = Env::from_process();
    let mut opts = DeviceOptions::from_env(&env);
    if let Some(d) = device {
        opts.device = Some(d.to_string());
    }
    opts.index = index;
    detect::resolve(&opts).map_err(loader_err)
}

impl PyPackage {
    fn new(package: Package, reopen: Reopen) -> PyPackage {
        PyPackage {
            state: Mutex::new(State {
                package: Some(package),
                loaders: Vec::new(),
            }),
            reopen,
        }
    }

    /// Run `f` on the package (wherever it is now).
    fn with<T>(&self, f: impl FnOnce(&Package) -> PyResult<T>) -> PyResult<T> {
        let state = self.state.lock().map_err(|_| poisoned())?;
        match (&state.package, state.loaders.first()) {
            (Some(p), _) => f(p),
            (None, Some((_, l))) => f(l.package()),
            (None, None) => Err(poisoned()),
        }
    }

    /// The loader for detected device `index`, made on first use.
    fn loader(&self, gpu: &Gpu, index: usize) -> PyResult<Arc<Loader>> {
        let mut state = self.state.lock().map_err(|_| poisoned())?;
        if let Some((_, l)) = state.loaders.iter().find(|(i, _)| *i == index) {
            return Ok(Arc::clone(l));
        }
        let package = match state.package.take() {
            Some(p) => p,
            None => self.reopen.open().map_err(loader_err)?,
        };
        let loader = Arc::new(Loader::from_package(package, gpu));
        state.loaders.push((index, Arc::clone(&loader)));
        Ok(loader)
    }

    /// `name` as (kernel, entry): a kernel with one entry, or an entry of one kernel.
    fn resolve_name(p: &Package, name: &str) -> PyResult<(String, String)> {
        let objects = p.objects();
        let entries_of = |kernel: &str| {
            let mut e: Vec<String> = Vec::new();
            for o in objects.iter().filter(|o| o.kernel == kernel) {
                for n in o.entries() {
                    if !e.iter().any(|x| x == n) {
                        e.push(n.to_string());
                    }
                }
            }
            e
        };
        if p.kernels().iter().any(|k| k == name) {
            let entries = entries_of(name);
            return match entries.as_slice() {
                [one] => Ok((name.to_string(), one.clone())),
                _ => Err(KbuildError::new_err(format!(
                    "kernel `{name}` has entries {}: name one of them",
                    entries.join(", ")
                ))),
            };
        }
        let mut kernels: Vec<&str> = Vec::new();
        for o in &objects {
            if o.entries().any(|e| e == name) && !kernels.contains(&o.kernel) {
                kernels.push(o.kernel);
            }
        }
        match kernels.as_slice() {
            [one] => Ok((one.to_string(), name.to_string())),
            [] => Err(loader_err(LoaderError::UnknownKernel {
                kernel: name.to_string(),
                variant: None,
                known: p.kernels().join(", "),
            })),
            many => Err(KbuildError::new_err(format!(
                "entry `{name}` is in kernels {}: ask for it through a package of one of them",
                many.join(", ")
            ))),
        }
    }

    /// The caller's parameters of `entry` in manifest object `object` (`None`: not recorded).
    fn params_of(p: &Package, object: usize, entry: &str) -> PyResult<Option<Vec<Param>>> {
        let m = p.manifest().map_err(loader_err)?;
        Ok(m.objects
            .get(object)
            .and_then(|o| o.params.get(entry))
            .map(|ps| args::visible(ps)))
    }

    /// The object a simulated (or resolved) device selects for `kernel` (`variant`).
    fn selected(
        p: &Package,
        device: &ResolvedDevice,
        kernel: &str,
        variant: Option<&str>,
    ) -> PyResult<kbuild_loader::Candidate> {
        let sel = p.select(&device.device);
        let choice = sel.kernel(kernel, variant).map_err(loader_err)?;
        sel.require(choice).map_err(loader_err)
    }
}

#[pymethods]
impl PyPackage {
    /// `kbuild.explain/v1` JSON, as `kbuild explain --json` prints it.
    #[pyo3(signature = (device=None, kernel=None))]
    fn explain_json(&self, device: Option<&str>, kernel: Option<&str>) -> PyResult<String> {
        let resolved = resolve(device, None)?;
        self.with(|p| {
            let mut sel = p.select(&resolved.device);
            if let Some(k) = kernel {
                sel = sel.only_kernel(k).map_err(loader_err)?;
            }
            let partial = p.manifest().ok().and_then(|m| m.partial_note());
            Ok(explain_json(
                &sel,
                &resolved,
                &p.origin().display().to_string(),
                partial.as_deref(),
            ))
        })
    }

    /// The readable trace, as `kbuild explain` prints it (with each no-match's error line).
    #[pyo3(signature = (device=None, kernel=None))]
    fn explain_text(&self, device: Option<&str>, kernel: Option<&str>) -> PyResult<String> {
        let resolved = resolve(device, None)?;
        self.with(|p| {
            let mut sel = p.select(&resolved.device);
            if let Some(k) = kernel {
                sel = sel.only_kernel(k).map_err(loader_err)?;
            }
            Ok(explain_text(
                &sel,
                &resolved,
                &p.origin().display().to_string(),
            ))
        })
    }

    /// Package name, version, targets and kernels (Kbuild.toml order).
    #[getter]
    fn name(&self) -> PyResult<String> {
        self.with(|p| Ok(p.manifest().map_err(loader_err)?.package.name.clone()))
    }

    #[getter]
    fn version(&self) -> PyResult<String> {
        self.with(|p| Ok(p.manifest().map_err(loader_err)?.package.version.clone()))
    }

    #[getter]
    fn targets(&self) -> PyResult<Vec<String>> {
        self.with(|p| Ok(p.manifest().map_err(loader_err)?.targets.clone()))
    }

    #[getter]
    fn kernels(&self) -> PyResult<Vec<String>> {
        self.with(|p| Ok(p.kernels().to_vec()))
    }

    /// The manifest file, bundle or cache entry it was opened from.
    #[getter]
    fn origin(&self) -> PyResult<String> {
        self.with(|p| Ok(p.origin().display().to_string()))
    }

    /// What the signature policy said (bundles and pulled versions; `None` for a build).
    #[getter]
    fn trust_note(&self) -> PyResult<Option<String>> {
        self.with(|p| Ok(p.trust_note()))
    }

    /// The signature policy's warning, when it let a bundle or pulled version through with
    /// one (`kbuild pull` prints it as `warning: …`); `None` otherwise.
    #[getter]
    fn trust_warning(&self) -> PyResult<Option<String>> {
        self.with(|p| Ok(p.trust_warning().map(str::to_string)))
    }

    /// `(kernel, entry, target, parameters JSON or None)` of what `device` selects for
    /// `name` (an entry, or a kernel with one entry).
    #[pyo3(signature = (name, variant=None, device=None))]
    fn params_json(
        &self,
        name: &str,
        variant: Option<&str>,
        device: Option<&str>,
    ) -> PyResult<(String, String, String, Option<String>)> {
        let resolved = resolve(device, None)?;
        self.with(|p| {
            let (kernel, entry) = PyPackage::resolve_name(p, name)?;
            let c = PyPackage::selected(p, &resolved, &kernel, variant)?;
            let params = PyPackage::params_of(p, c.object, &entry)?;
            let json = params
                .map(|ps| serde_json::to_string(&ps))
                .transpose()
                .map_err(kbuild_err)?;
            Ok((kernel, entry, c.target, json))
        })
    }

    /// Check `args` against the launch ABI of what `device` selects for `name`, loading
    /// nothing; raises `LaunchError` as a launch would.
    #[pyo3(signature = (name, args, variant=None, device=None))]
    fn check_launch(
        &self,
        name: &str,
        args: &Bound<'_, PyTuple>,
        variant: Option<&str>,
        device: Option<&str>,
    ) -> PyResult<()> {
        let resolved = resolve(device, None)?;
        let (entry, params) = self.with(|p| {
            let (kernel, entry) = PyPackage::resolve_name(p, name)?;
            let c = PyPackage::selected(p, &resolved, &kernel, variant)?;
            Ok((entry.clone(), PyPackage::params_of(p, c.object, &entry)?))
        })?;
        let index = resolved.detected.as_ref().map(|d| d.index);
        args::pack(&entry, params.as_deref(), args, index).map(|_| ())
    }

    /// The kernel `name` loaded on detected device `index` (torch's current device), or, with
    /// `device` a target, selected for that simulated device (checks only, no launch).
    #[pyo3(signature = (name, variant=None, device=None, index=None))]
    fn kernel(
        &self,
        py: Python<'_>,
        name: &str,
        variant: Option<&str>,
        device: Option<&str>,
        index: Option<usize>,
    ) -> PyResult<PyKernel> {
        let resolved = resolve(device, index)?;
        let (kernel, entry) = self.with(|p| PyPackage::resolve_name(p, name))?;
        let variant = variant.map(String::from);
        if resolved.simulated() {
            let (target, params, triton) = self.with(|p| {
                let c = PyPackage::selected(p, &resolved, &kernel, variant.as_deref())?;
                let triton = p.triton_launch(c.object).map_err(loader_err)?.cloned();
                Ok((
                    c.target.clone(),
                    PyPackage::params_of(p, c.object, &entry)?,
                    triton,
                ))
            })?;
            return Ok(PyKernel::selected_only(
                kernel,
                variant,
                entry,
                target,
                resolved.device.name(),
                params,
                triton,
            ));
        }
        let detected_index = resolved.detected.as_ref().map(|d| d.index).unwrap_or(0);
        let description = resolved.describe();
        let gpu = py
            .detach(|| {
                Gpu::from_resolved_with(resolved, &HipSearch::from_env(&Env::from_process()))
            })
            .map_err(loader_err)?;
        let loader = self.loader(&gpu, index.unwrap_or(0))?;
        let function = py
            .detach(|| loader.function(&kernel, variant.as_deref(), &entry))
            .map_err(loader_err)?;
        let object = function.record().map_err(loader_err)?.index;
        let target = function.record().map_err(loader_err)?.target.to_string();
        let params = PyPackage::params_of(loader.package(), object, &entry)?;
        let triton = loader
            .package()
            .triton_launch(object)
            .map_err(loader_err)?
            .cloned();
        Ok(PyKernel::loaded(
            kernel,
            variant,
            entry,
            target,
            description,
            detected_index,
            params,
            triton,
            function,
            gpu,
        ))
    }
}

/// Open a build directory, manifest or bundle, with the user's signature policy (as
/// `kbuild explain` applies it to a bundle).
#[pyfunction]
pub fn open(py: Python<'_>, path: PathBuf) -> PyResult<PyPackage> {
    let env = Env::from_process();
    let trust = Trust::load(&env).map_err(kbuild_err)?;
    let package = py
        .detach(|| Package::open_trusted(&path, &trust))
        .map_err(loader_err)?;
    Ok(PyPackage::new(package, Reopen::Path(path, trust)))
}

/// `kbuild pull NAME[@REQ] --registry REG [--device TARGET|auto] [--plain-http]`: resolve,
/// fetch (only the layers the device runs, when a device is named), verify, check
/// signatures, cache. No lockfile is read or written.
#[cfg(feature = "pull")]
#[pyfunction]
#[pyo3(signature = (spec, registry=None, plain_http=false, device=None))]
pub fn pull(
    py: Python<'_>,
    spec: &str,
    registry: Option<String>,
    plain_http: bool,
    device: Option<String>,
) -> PyResult<PyPackage> {
    use kbuild_base::dirs::Dirs;
    use kbuild_bundle::cache::BundleCache;
    use kbuild_registry::oci::OciOptions;
    use kbuild_registry::progress::Silent;
    use kbuild_registry::pull::{self, PullRequest};
    use kbuild_registry::store::Registry;

    let env = Env::from_process();
    let (name, want) = pull::parse_spec(spec).map_err(kbuild_err)?;
    let dirs = Dirs::from_env(&env).map_err(kbuild_err)?;
    let spec = registry.unwrap_or_else(|| dirs.data.join("registry").display().to_string());
    let opts = OciOptions {
        plain_http,
        ..OciOptions::from_env(&env)
    };
    let registry = Registry::parse(&spec, opts).map_err(kbuild_err)?;
    let cache = BundleCache::new(&dirs.registry_cache());
    let trust = Trust::load(&env).map_err(kbuild_err)?;
    let device = match device {
        None => None,
        Some(d) => Some(resolve(Some(&d), None)?),
    };
    let pulled = py.detach(|| {
        let req = PullRequest {
            registry: &registry,
            cache: &cache,
            name: &name,
            want: &want,
            offline: false,
            locked: None,
            trust: &trust,
            progress: &Silent,
        };
        let select =
            |m: &kbuild_manifest::manifest::Manifest| -> Result<Vec<String>, pull::SelectError> {
                match &device {
                    None => Ok(m.targets.clone()),
                    Some(d) => {
                        kbuild_loader::pick_targets(m, &d.device).map_err(|e| e.to_string().into())
                    }
                }
            };
        // The message now: the error itself is large, and the GIL is not held here.
        pull::pull(&req, &select).map_err(|e| crate::chain_text(&e))
    });
    let pulled = pulled.map_err(KbuildError::new_err)?;
    let origin = cache
        .root()
        .join(format!("{name}@{}", pulled.bundle.version()));
    let bundle = Box::new(pulled.bundle);
    let package = Package::from_bundle((*bundle).clone(), origin.clone())
        .map_err(loader_err)?
        .with_trust(pulled.verdict);
    Ok(PyPackage::new(package, Reopen::Bundle(bundle, origin)))
}

#[cfg(not(feature = "pull"))]
#[pyfunction]
#[pyo3(signature = (spec, registry=None, plain_http=false, device=None))]
pub fn pull(
    spec: &str,
    registry: Option<String>,
    plain_http: bool,
    device: Option<String>,
) -> PyResult<PyPackage> {
    let _ = (spec, registry, plain_http, device);
    Err(KbuildError::new_err(
        "this kbuild wheel was built without the `pull` feature",
    ))
}
