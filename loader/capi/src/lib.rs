//! The C ABI of kbuild-loader (`loader/include/kbuild_loader.h`, library `libkbuild_capi.so`): open, explain (text or JSON), get function, launch,
//! last error. Every function catches panics; failures return NULL / -1 and leave a message
//! for [`kbuild_last_error`] on the calling thread.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use kbuild_manifest::compat::parse_version;

use kbuild_loader::bundle::Trust;
use kbuild_loader::explain::{explain_json, explain_text};
use kbuild_loader::{DeviceOptions, Function, Gpu, LaunchConfig, Loader, LoaderError, Stream};

/// `flags` bit of [`kbuild_loader_open`]: a simulated AMD runtime loads no generic objects.
pub const KBUILD_NO_GENERIC: c_uint = 1;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn guard<T>(fallback: T, f: impl FnOnce() -> Result<T, LoaderError>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_error(&e.to_string());
            fallback
        }
        Err(_) => {
            set_error("kbuild-loader panicked (a bug: please report it)");
            fallback
        }
    }
}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn opt_str<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, LoaderError> {
    if p.is_null() {
        return Ok(None);
    }
    CStr::from_ptr(p)
        .to_str()
        .map(Some)
        .map_err(|_| LoaderError::Argument {
            name: what.to_string(),
            problem: "is not UTF-8",
        })
}

/// A string argument that must be there.
unsafe fn req_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, LoaderError> {
    opt_str(p, what)?.ok_or_else(|| null(what))
}

/// A handle argument that must be there.
unsafe fn live<'a, T>(p: *const T, what: &str) -> Result<&'a T, LoaderError> {
    p.as_ref().ok_or_else(|| null(what))
}

fn null(what: &str) -> LoaderError {
    LoaderError::Argument {
        name: what.to_string(),
        problem: "is NULL",
    }
}

/// An open package for one device.
pub struct KbuildLoader {
    loader: Loader,
    device: CString,
}

/// A function ready to launch; a Triton kernel's carries its launch record.
pub struct KbuildFunction {
    function: Function,
    triton: Option<kbuild_manifest::triton::TritonLaunch>,
}

/// Mirrors `kbuild_launch_config` in the header.
#[repr(C)]
pub struct KbuildLaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_bytes: c_uint,
    pub stream: *mut c_void,
}

/// Open a build directory, manifest or bundle (under the environment's signature policy,
/// `KBUILD_SIGNATURE_POLICY` and `KBUILD_TRUSTED_KEYS`). `device`: NULL (KBUILD_DEVICE, else detect), "auto",
/// or a target to simulate ("sm_90", "gfx1151"). `driver`: NULL or a simulated CUDA driver
/// version ("13.0"). Returns NULL on error.
///
/// # Safety
/// String arguments are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_open(
    path: *const c_char,
    device: *const c_char,
    driver: *const c_char,
    flags: c_uint,
) -> *mut KbuildLoader {
    guard(std::ptr::null_mut(), || {
        let path = req_str(path, "path")?;
        // The C ABI is an edge: the environment of the process that loaded it.
        let env = kbuild_base::env::Env::from_process();
        let mut opts = DeviceOptions::from_env(&env);
        if let Some(d) = opt_str(device, "device")? {
            opts.device = Some(d.to_string());
        }
        if let Some(d) = opt_str(driver, "driver")? {
            opts.driver = Some(parse_version(d).ok_or_else(|| LoaderError::Argument {
                name: format!("driver `{d}`"),
                problem: "is not a version like 13.0",
            })?);
        }
        opts.no_generic = flags & KBUILD_NO_GENERIC != 0;
        let gpu = Gpu::open(&opts)?;
        // A bundle gets the signature policy of the environment (KBUILD_SIGNATURE_POLICY,
        // KBUILD_TRUSTED_KEYS), as pull applies it; a build directory is local and unsigned.
        let trust = Trust::from_env(&env).map_err(|e| LoaderError::Untrusted {
            path: Path::new(path).to_path_buf(),
            reason: e.to_string(),
        })?;
        let loader = Loader::open_trusted(Path::new(path), &gpu, &trust)?;
        let device = CString::new(gpu.device().device.name()).unwrap_or_default();
        Ok(Box::into_raw(Box::new(KbuildLoader { loader, device })))
    })
}

/// Close a loader (NULL is ignored). Functions taken from it stay valid.
///
/// # Safety
/// `loader` is NULL or from [`kbuild_loader_open`], closed once.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_close(loader: *mut KbuildLoader) {
    if !loader.is_null() {
        drop(Box::from_raw(loader));
    }
}

/// The device name (`sm_90`, `gfx90a:sramecc+:xnack-`), owned by the loader.
///
/// # Safety
/// `loader` is a live loader.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_device(loader: *const KbuildLoader) -> *const c_char {
    match loader.as_ref() {
        Some(l) => l.device.as_ptr(),
        None => {
            set_error("loader is NULL");
            std::ptr::null()
        }
    }
}

/// 1 when every kernel has a selected object, 0 when some has none, -1 on error.
///
/// # Safety
/// `loader` is a live loader.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_complete(loader: *const KbuildLoader) -> c_int {
    match loader.as_ref() {
        Some(l) => c_int::from(l.loader.selection().complete()),
        None => {
            set_error("loader is NULL");
            -1
        }
    }
}

/// The selection trace: text (`json` = 0) or `kbuild.explain/v1` JSON (`json` = 1).
/// Free the result with [`kbuild_string_free`].
///
/// # Safety
/// `loader` is a live loader.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_explain(
    loader: *const KbuildLoader,
    json: c_int,
) -> *mut c_char {
    guard(std::ptr::null_mut(), || {
        let l = live(loader, "loader")?;
        let source = l.loader.package().origin().display().to_string();
        let device = l.loader.gpu().device();
        let text = if json != 0 {
            let partial = l
                .loader
                .package()
                .manifest()
                .ok()
                .and_then(|m| m.partial_note());
            let mut s = explain_json(l.loader.selection(), device, &source, partial.as_deref());
            s.push('\n');
            s
        } else {
            explain_text(l.loader.selection(), device, &source)
        };
        Ok(CString::new(text)
            .map_err(|_| LoaderError::NulByte {
                what: "explain text".into(),
            })?
            .into_raw())
    })
}

/// The selected target of `kernel` (`variant` may be NULL), or NULL with the no-match error.
/// Free the result with [`kbuild_string_free`].
///
/// # Safety
/// `loader` is live; strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_selected_target(
    loader: *const KbuildLoader,
    kernel: *const c_char,
    variant: *const c_char,
) -> *mut c_char {
    guard(std::ptr::null_mut(), || {
        let l = live(loader, "loader")?;
        let kernel = req_str(kernel, "kernel")?;
        let variant = opt_str(variant, "variant")?;
        let sel = l.loader.selection();
        let c = sel.require(sel.kernel(kernel, variant)?)?;
        Ok(CString::new(c.target).unwrap_or_default().into_raw())
    })
}

/// Load (if needed) the object of `kernel` and look up `entry`: sha256 checked before load,
/// attributes compared after. NULL on error (a simulated device always errs here).
///
/// # Safety
/// `loader` is live; strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_get_function(
    loader: *const KbuildLoader,
    kernel: *const c_char,
    variant: *const c_char,
    entry: *const c_char,
) -> *mut KbuildFunction {
    guard(std::ptr::null_mut(), || {
        let l = live(loader, "loader")?;
        let kernel = req_str(kernel, "kernel")?;
        let entry = req_str(entry, "entry")?;
        let function = l
            .loader
            .function(kernel, opt_str(variant, "variant")?, entry)?;
        Ok(Box::into_raw(Box::new(KbuildFunction {
            function,
            triton: None,
        })))
    })
}

/// Free a function (NULL is ignored).
///
/// # Safety
/// `function` is NULL or from [`kbuild_loader_get_function`], freed once.
#[no_mangle]
pub unsafe extern "C" fn kbuild_function_free(function: *mut KbuildFunction) {
    if !function.is_null() {
        drop(Box::from_raw(function));
    }
}

fn launch_config(c: &KbuildLaunchConfig) -> LaunchConfig {
    LaunchConfig {
        grid: (c.grid[0], c.grid[1], c.grid[2]),
        block: (c.block[0], c.block[1], c.block[2]),
        shared_bytes: c.shared_bytes,
        stream: Stream::from_raw(c.stream),
        programmatic: false,
        cluster: 1,
        cooperative: false,
    }
}

/// `count` elements at `p` (NULL or 0: none).
///
/// # Safety
/// `p` is NULL or points at `count` elements.
unsafe fn slice<'a, T>(p: *const T, count: usize, what: &str) -> Result<&'a [T], LoaderError> {
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(what));
    }
    Ok(std::slice::from_raw_parts(p, count))
}

/// Launch without any argument check (kept for existing callers; see
/// [`kbuild_function_launch_checked`]): `args` is an array of pointers to each argument
/// value, as `cuLaunchKernel` takes. 0 on success, -1 on error.
///
/// # Safety
/// `function` and `config` are valid; `args` matches the kernel's parameters.
#[no_mangle]
pub unsafe extern "C" fn kbuild_function_launch(
    function: *const KbuildFunction,
    config: *const KbuildLaunchConfig,
    args: *mut *mut c_void,
    nargs: c_uint,
) -> c_int {
    guard(-1, || {
        let f = live(function, "function")?;
        let cfg = launch_config(live(config, "config")?);
        let params: &mut [*mut c_void] = if nargs == 0 || args.is_null() {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(args, nargs as usize)
        };
        f.function.launch_raw_unchecked(&cfg, params)?;
        Ok(0)
    })
}

/// Launch after checking the arguments against the kernel's parameters: `args[i]` points at
/// argument i's value and `sizes[i]` is its size in bytes; `count` of each. A wrong count or
/// size is refused before the driver is called (-1; the message, e.g.
/// `rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (int n)`, in
/// [`kbuild_last_error`]). Without parameters in the package the launch is unchecked (see
/// [`kbuild_function_params_known`]). 0 on success.
///
/// # Safety
/// `function` and `config` are valid; `args` and `sizes` hold `count` elements, each
/// `args[i]` pointing at `sizes[i]` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn kbuild_function_launch_checked(
    function: *const KbuildFunction,
    config: *const KbuildLaunchConfig,
    args: *const *mut c_void,
    sizes: *const usize,
    count: usize,
) -> c_int {
    guard(-1, || {
        let f = live(function, "function")?;
        let cfg = launch_config(live(config, "config")?);
        let sizes = slice(sizes, count, "sizes")?;
        let mut params = slice(args, count, "args")?.to_vec();
        f.function.launch_raw(&cfg, &mut params, sizes)?;
        Ok(0)
    })
}

/// 1 when launches of `function` are checked (the package carries its parameters), 0 when
/// they are not (a load index of version 3 or a manifest without parameters: rebuild), -1 on
/// error. `count` and `hidden`, when not NULL, get the number of caller-visible parameters
/// and of hidden ones (AMDGPU arguments the runtime passes).
///
/// # Safety
/// `function` is valid; `count` and `hidden` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kbuild_function_params_known(
    function: *const KbuildFunction,
    count: *mut usize,
    hidden: *mut usize,
) -> c_int {
    guard(-1, || {
        let f = live(function, "function")?;
        let Some(params) = f.function.params() else {
            return Ok(0);
        };
        if let Some(c) = count.as_mut() {
            *c = params.len();
        }
        if let Some(h) = hidden.as_mut() {
            *h = f.function.hidden_params().unwrap_or(0) as usize;
        }
        Ok(1)
    })
}

/// Check argument sizes for `entry` of `kernel` (`variant` may be NULL) as
/// [`kbuild_function_launch_checked`] would, without loading or launching (a simulated device
/// answers too): 1 checked and they fit, 0 nothing to check against, -1 refused or error
/// (message in [`kbuild_last_error`]).
///
/// # Safety
/// `loader` is live; strings are NULL or NUL-terminated; `sizes` holds `count` elements.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_check_args(
    loader: *const KbuildLoader,
    kernel: *const c_char,
    variant: *const c_char,
    entry: *const c_char,
    sizes: *const usize,
    count: usize,
) -> c_int {
    guard(-1, || {
        let l = live(loader, "loader")?;
        let kernel = req_str(kernel, "kernel")?;
        let entry = req_str(entry, "entry")?;
        let sizes = slice(sizes, count, "sizes")?;
        let checked = l
            .loader
            .check_args(kernel, opt_str(variant, "variant")?, entry, sizes)?;
        Ok(c_int::from(checked))
    })
}

/// A Triton kernel's function with its launch record: load the object (once), look up the
/// record's function. NULL on error, as [`kbuild_loader_get_function`], or for a kernel that
/// was not built from Triton.
///
/// # Safety
/// `loader` is valid; `kernel` is NUL-terminated; `variant` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_get_triton_function(
    loader: *const KbuildLoader,
    kernel: *const c_char,
    variant: *const c_char,
) -> *mut KbuildFunction {
    guard(std::ptr::null_mut(), || {
        let l = live(loader, "loader")?;
        let kernel = req_str(kernel, "kernel")?;
        let variant = opt_str(variant, "variant")?;
        let record = l.loader.require_triton_launch(kernel, variant)?;
        let function = l.loader.function(kernel, variant, &record.function)?;
        Ok(Box::into_raw(Box::new(KbuildFunction {
            function,
            triton: Some(record),
        })))
    })
}

/// Launch a Triton kernel as its launch record says: `grid` programs on `stream`; block,
/// dynamic shared memory, PDL and the NULL scratch pointers from the record. `args`/`sizes`:
/// the record's parameters without the scratch pointers. Checked before the driver: count,
/// divisible-by-16 assumptions, sizes. 0 on success, -1 on error.
///
/// # Safety
/// `function` is from [`kbuild_loader_get_triton_function`]; `grid` points at 3 values;
/// `args[i]` points at `sizes[i]` readable bytes, `count` of each.
#[no_mangle]
pub unsafe extern "C" fn kbuild_function_launch_triton(
    function: *const KbuildFunction,
    grid: *const c_uint,
    stream: *mut c_void,
    args: *const *mut c_void,
    sizes: *const usize,
    count: usize,
) -> c_int {
    guard(-1, || {
        let f = live(function, "function")?;
        let Some(record) = &f.triton else {
            // A function taken with kbuild_loader_get_function carries no record.
            return Err(LoaderError::NotTriton {
                kernel: f.function.entry().to_string(),
            });
        };
        let grid = slice(grid, 3, "grid")?;
        let sizes = slice(sizes, count, "sizes")?;
        let params = slice(args, count, "args")?;
        f.function.launch_triton(
            record,
            (grid[0], grid[1], grid[2]),
            Stream::from_raw(stream),
            params,
            sizes,
        )?;
        Ok(0)
    })
}

/// Check a Triton launch of `kernel` (`variant`) exactly as
/// [`kbuild_function_launch_triton`] would, without loading or launching (a simulated device
/// answers too): 0 when the arguments fit, -1 refused (the message names the argument) or
/// error.
///
/// # Safety
/// `loader` is valid; strings as for [`kbuild_loader_get_triton_function`]; `args[i]` points
/// at `sizes[i]` readable bytes, `count` of each.
#[no_mangle]
pub unsafe extern "C" fn kbuild_loader_check_triton_args(
    loader: *const KbuildLoader,
    kernel: *const c_char,
    variant: *const c_char,
    args: *const *mut c_void,
    sizes: *const usize,
    count: usize,
) -> c_int {
    guard(-1, || {
        let l = live(loader, "loader")?;
        let kernel = req_str(kernel, "kernel")?;
        let sizes = slice(sizes, count, "sizes")?;
        let params = slice(args, count, "args")?;
        let mut values = Vec::with_capacity(count);
        for (p, s) in params.iter().zip(sizes) {
            if p.is_null() {
                return Err(null("args[i]"));
            }
            values.push(kbuild_loader::launch::read_value(*p, *s));
        }
        l.loader
            .check_triton_args(kernel, opt_str(variant, "variant")?, &values, sizes)?;
        Ok(0)
    })
}

/// The last error on this thread ("" when none); valid until the next call on this thread.
#[no_mangle]
pub extern "C" fn kbuild_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Free a string returned by this library (NULL is ignored).
///
/// # Safety
/// `s` is NULL or was returned by this library, freed once.
#[no_mangle]
pub unsafe extern "C" fn kbuild_string_free(s: *mut c_char) {
    if !s.is_null() {
        drop(CString::from_raw(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: the library's own NUL-terminated buffer, read before the next call.
        unsafe { CStr::from_ptr(kbuild_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    /// A build directory whose cubin `k` exports `k(const float* x, int n)`.
    fn build_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut o = kbuild_manifest::fixtures::object("k", "sm_90", "cubin", b"cubin");
        o.params = [("k".to_string(), kbuild_manifest::fixtures::params_x_n())].into();
        let m = kbuild_manifest::fixtures::manifest("p", "1.0.0", vec![o]);
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();
        dir
    }

    #[test]
    fn check_args_refuses_with_the_message_and_launches_refuse_null_handles() {
        let dir = build_dir();
        let path = CString::new(dir.path().to_str().unwrap()).unwrap();
        let device = CString::new("sm_90").unwrap();
        let (k, nope) = (c"k", c"nope");
        // SAFETY: valid strings and arrays; the loader is closed once.
        unsafe {
            let l = kbuild_loader_open(path.as_ptr(), device.as_ptr(), std::ptr::null(), 0);
            assert!(!l.is_null(), "{}", last_error());
            let check = |entry: &CStr, sizes: &[usize]| {
                kbuild_loader_check_args(
                    l,
                    k.as_ptr(),
                    std::ptr::null(),
                    entry.as_ptr(),
                    sizes.as_ptr(),
                    sizes.len(),
                )
            };
            assert_eq!(check(k, &[8, 4]), 1, "{}", last_error());
            assert_eq!(check(k, &[8, 8]), -1);
            assert_eq!(
                last_error(),
                "k: argument 1 is 8 bytes, the kernel takes 4 (int n)"
            );
            assert_eq!(check(k, &[8]), -1);
            assert_eq!(last_error(), "k: 1 argument given, the kernel takes 2");
            assert_eq!(check(nope, &[]), -1);
            assert!(last_error().contains("entry `nope` is not exported"));
            // A simulated device loads nothing.
            let f = kbuild_loader_get_function(l, k.as_ptr(), std::ptr::null(), k.as_ptr());
            assert!(f.is_null());
            assert!(last_error().contains("is simulated"), "{}", last_error());
            kbuild_loader_close(l);
            let cfg = KbuildLaunchConfig {
                grid: [1, 1, 1],
                block: [1, 1, 1],
                shared_bytes: 0,
                stream: std::ptr::null_mut(),
            };
            let args = [std::ptr::null_mut::<c_void>(); 2];
            let sizes = [8usize, 4];
            let r = kbuild_function_launch_checked(
                std::ptr::null(),
                &cfg,
                args.as_ptr(),
                sizes.as_ptr(),
                2,
            );
            assert_eq!((r, last_error().as_str()), (-1, "function is NULL"));
            let r = kbuild_function_params_known(
                std::ptr::null(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
            assert_eq!(r, -1);
        }
    }
}
