//! The HIP runtime through `libloading` and a small hand-declared FFI: nothing is linked at
//! build time, every symbol is looked up when first needed, and a missing library or symbol
//! is an error, never a panic.
//!
//! Search order: each directory of [`HipSearch::dirs`] (`$ROCM_PATH/lib`, `/opt/rocm/lib`),
//! then the dynamic linker's own search for `libamdhip64.so`, `.so.7`, `.so.6`, `.so.5`.
//!
//! `hipDeviceProp_t` changed layout in ROCm 6.0: the library exports
//! `hipGetDevicePropertiesR0600` (ROCm 6/7 layout, 1472 bytes) beside the old
//! `hipGetDeviceProperties` / `hipGetDevicePropertiesR0000` (ROCm 5 layout, 792 bytes). The
//! offsets below are those of `hip_runtime_api.h` (ROCm 5.2: measured here with gcc
//! `offsetof` on Debian's libamdhip64-dev; R0600: the ROCm 6 header's struct).

use kbuild_base::env::{names, Env};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::{Path, PathBuf};

pub use crate::error::HipNotFound;
use crate::error::{LoaderError, Result};

pub type HipError = c_int;
pub type HipModule = *mut c_void;
pub type HipFunction = *mut c_void;
pub type HipStream = *mut c_void;

const HIP_SUCCESS: HipError = 0;
const HIP_ERROR_NO_DEVICE: HipError = 100;
const HIP_ERROR_INSUFFICIENT_DRIVER: HipError = 35;

/// The library names tried in each directory and then through the system search.
pub const LIBRARY_NAMES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// Where to look for libamdhip64.
#[derive(Debug, Clone)]
pub struct HipSearch {
    pub dirs: Vec<PathBuf>,
    /// Also ask the dynamic linker (LD_LIBRARY_PATH, ld.so.cache) for the bare names.
    pub system: bool,
}

impl Default for HipSearch {
    /// `/opt/rocm/lib`, then the system search (no environment: see [`HipSearch::from_env`]).
    fn default() -> HipSearch {
        HipSearch {
            dirs: vec![PathBuf::from("/opt/rocm/lib")],
            system: true,
        }
    }
}

impl HipSearch {
    /// `KBUILD_HIP_SEARCH=DIR[:DIR]` replaces the whole search (no system search); otherwise
    /// `$ROCM_PATH/lib`, `$HIP_PATH/lib`, `/opt/rocm/lib`, then the system search.
    pub fn from_env(env: &Env) -> HipSearch {
        if let Some(only) = env.get(names::KBUILD_HIP_SEARCH) {
            return HipSearch {
                dirs: std::env::split_paths(only).collect(),
                system: false,
            };
        }
        let mut dirs: Vec<PathBuf> = [names::ROCM_PATH, names::HIP_PATH]
            .iter()
            .filter_map(|var| env.path(var))
            .map(|p| p.join("lib"))
            .collect();
        dirs.extend(HipSearch::default().dirs);
        HipSearch { dirs, system: true }
    }

    /// Only these directories (tests; a pinned ROCm).
    pub fn only(dirs: impl IntoIterator<Item = PathBuf>) -> HipSearch {
        HipSearch {
            dirs: dirs.into_iter().collect(),
            system: false,
        }
    }

    /// Every candidate, in order: paths in the directories, then bare names.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for d in &self.dirs {
            for n in LIBRARY_NAMES {
                out.push(d.join(n));
            }
        }
        if self.system {
            out.extend(LIBRARY_NAMES.iter().map(PathBuf::from));
        }
        out
    }
}

/// Which `hipDeviceProp_t` layout a properties call filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PropsLayout {
    /// ROCm 6.0+ `hipDeviceProp_tR0600`.
    R0600,
    /// ROCm 5 `hipDeviceProp_t` (exported as R0000 by ROCm 6).
    R0000,
}

/// Field offsets of one layout.
struct Layout {
    total_global_mem: usize,
    warp_size: usize,
    major: usize,
    minor: usize,
    multi_processor_count: usize,
    gcn_arch_name: usize,
}

const R0600: Layout = Layout {
    total_global_mem: 288,
    warp_size: 308,
    major: 360,
    minor: 364,
    multi_processor_count: 388,
    gcn_arch_name: 1160,
};
const R0000: Layout = Layout {
    total_global_mem: 256,
    warp_size: 276,
    major: 328,
    minor: 332,
    multi_processor_count: 336,
    gcn_arch_name: 396,
};
/// Larger than either struct (1472 / 792 bytes), so a runtime that writes a little more than
/// its header said still writes into our buffer.
const PROPS_BUFFER: usize = 4096;

/// What `hipGetDeviceProperties` says about one device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HipProps {
    pub name: String,
    /// `gfx90a:sramecc+:xnack-`.
    pub gcn_arch_name: String,
    pub total_global_mem: u64,
    pub warp_size: u32,
    pub major: i32,
    pub minor: i32,
    pub multi_processor_count: u32,
    pub layout: PropsLayout,
}

type FnIntOut = unsafe extern "C" fn(*mut c_int) -> HipError;
type FnProps = unsafe extern "C" fn(*mut c_void, c_int) -> HipError;
type FnErrorString = unsafe extern "C" fn(HipError) -> *const c_char;
type FnSetDevice = unsafe extern "C" fn(c_int) -> HipError;
type FnModuleLoadData = unsafe extern "C" fn(*mut HipModule, *const c_void) -> HipError;
type FnModuleUnload = unsafe extern "C" fn(HipModule) -> HipError;
type FnModuleGetFunction =
    unsafe extern "C" fn(*mut HipFunction, HipModule, *const c_char) -> HipError;
type FnFuncGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, HipFunction) -> HipError;
type FnModuleLaunchKernel = unsafe extern "C" fn(
    HipFunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    HipStream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> HipError;

/// An opened libamdhip64.
pub struct HipRuntime {
    lib: libloading::Library,
    path: PathBuf,
}

impl std::fmt::Debug for HipRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipRuntime")
            .field("path", &self.path)
            .finish()
    }
}

impl HipRuntime {
    /// Open the first library of the search that loads.
    pub fn open(search: &HipSearch) -> std::result::Result<HipRuntime, HipNotFound> {
        let mut tried = Vec::new();
        for candidate in search.candidates() {
            let is_path = candidate.components().count() > 1;
            if is_path && !candidate.exists() {
                tried.push(candidate.display().to_string());
                continue;
            }
            // SAFETY: loading libamdhip64 runs its initialisers, which is what using HIP means.
            match unsafe { libloading::Library::new(&candidate) } {
                Ok(lib) => {
                    return Ok(HipRuntime {
                        lib,
                        path: candidate,
                    })
                }
                Err(e) => tried.push(format!("{} ({e})", candidate.display())),
            }
        }
        Err(HipNotFound { tried })
    }

    /// The library that was opened (a path or a bare name the linker resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn symbol<T: Copy>(&self, name: &str) -> Result<T> {
        // SAFETY: `T` is the declared C signature of `name` (see the type aliases above);
        // the pointer is only used while `self.lib` is alive.
        unsafe {
            self.lib.get::<T>(name).map(|s| *s).map_err(|e| {
                LoaderError::runtime(
                    name,
                    format!("symbol not found in {}: {e}", self.path.display()),
                )
            })
        }
    }

    fn has_symbol(&self, name: &str) -> bool {
        // SAFETY: only the lookup, nothing is called.
        unsafe { self.lib.get::<*const c_void>(name).is_ok() }
    }

    /// `hipGetErrorString`, or the number when even that is missing.
    pub fn error_string(&self, code: HipError) -> String {
        let text = self
            .symbol::<FnErrorString>("hipGetErrorString")
            .ok()
            // SAFETY: hipGetErrorString returns a static NUL-terminated string or null.
            .map(|f| unsafe { f(code) })
            .filter(|p| !p.is_null())
            // SAFETY: checked non-null; the runtime owns the static string.
            .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        match text {
            Some(t) => format!("{t} ({code})"),
            None => format!("hip error {code}"),
        }
    }

    fn check(&self, api: &str, code: HipError) -> Result<()> {
        if code == HIP_SUCCESS {
            Ok(())
        } else {
            Err(LoaderError::runtime(api, self.error_string(code)))
        }
    }

    /// `hipRuntimeGetVersion` as (major, minor, patch): HIP_VERSION = major·10⁷ + minor·10⁵ + patch.
    pub fn runtime_version(&self) -> Result<(u32, u32, u32)> {
        let f = self.symbol::<FnIntOut>("hipRuntimeGetVersion")?;
        let mut v: c_int = 0;
        // SAFETY: f writes one int.
        self.check("hipRuntimeGetVersion", unsafe { f(&mut v) })?;
        let v = u32::try_from(v).unwrap_or(0);
        Ok((v / 10_000_000, (v / 100_000) % 100, v % 100_000))
    }

    /// Number of devices; "no device" and "no driver" are zero, not errors.
    pub fn device_count(&self) -> Result<u32> {
        let f = self.symbol::<FnIntOut>("hipGetDeviceCount")?;
        let mut n: c_int = 0;
        // SAFETY: f writes one int.
        let code = unsafe { f(&mut n) };
        match code {
            HIP_SUCCESS => Ok(u32::try_from(n).unwrap_or(0)),
            HIP_ERROR_NO_DEVICE | HIP_ERROR_INSUFFICIENT_DRIVER => Ok(0),
            c => Err(LoaderError::runtime(
                "hipGetDeviceCount",
                self.error_string(c),
            )),
        }
    }

    /// Device properties through whichever layout this runtime exports.
    pub fn properties(&self, device: u32) -> Result<HipProps> {
        let (f, layout, offsets) = if self.has_symbol("hipGetDevicePropertiesR0600") {
            (
                self.symbol::<FnProps>("hipGetDevicePropertiesR0600")?,
                PropsLayout::R0600,
                R0600,
            )
        } else if self.has_symbol("hipGetDevicePropertiesR0000") {
            (
                self.symbol::<FnProps>("hipGetDevicePropertiesR0000")?,
                PropsLayout::R0000,
                R0000,
            )
        } else {
            (
                self.symbol::<FnProps>("hipGetDeviceProperties")?,
                PropsLayout::R0000,
                R0000,
            )
        };
        let mut buf = vec![0u8; PROPS_BUFFER];
        let index = c_int::try_from(device).map_err(|_| LoaderError::Argument {
            name: format!("device index {device}"),
            problem: "does not fit the runtime's int",
        })?;
        // SAFETY: the buffer is larger than either struct layout.
        self.check("hipGetDeviceProperties", unsafe {
            f(buf.as_mut_ptr().cast(), index)
        })?;
        Ok(parse_props(&buf, &offsets, layout))
    }

    pub fn set_device(&self, device: u32) -> Result<()> {
        let f = self.symbol::<FnSetDevice>("hipSetDevice")?;
        let index = c_int::try_from(device).unwrap_or(c_int::MAX);
        // SAFETY: plain int argument.
        self.check("hipSetDevice", unsafe { f(index) })
    }

    /// `hipModuleLoadData`. The image must stay valid only for the call.
    pub fn module_load_data(&self, image: &[u8]) -> Result<HipModule> {
        let f = self.symbol::<FnModuleLoadData>("hipModuleLoadData")?;
        let mut m: HipModule = std::ptr::null_mut();
        // SAFETY: image is a complete code object in memory; m receives the handle.
        self.check("hipModuleLoadData", unsafe {
            f(&mut m, image.as_ptr().cast())
        })?;
        Ok(m)
    }

    /// # Safety
    /// `module` must come from [`Self::module_load_data`] and not be unloaded yet.
    pub unsafe fn module_unload(&self, module: HipModule) -> Result<()> {
        let f = self.symbol::<FnModuleUnload>("hipModuleUnload")?;
        self.check("hipModuleUnload", f(module))
    }

    /// # Safety
    /// `module` must be a live module handle.
    pub unsafe fn module_get_function(&self, module: HipModule, name: &str) -> Result<HipFunction> {
        let f = self.symbol::<FnModuleGetFunction>("hipModuleGetFunction")?;
        let c = CString::new(name).map_err(|_| LoaderError::NulByte {
            what: format!("entry name `{name}`"),
        })?;
        let mut func: HipFunction = std::ptr::null_mut();
        self.check("hipModuleGetFunction", f(&mut func, module, c.as_ptr()))?;
        Ok(func)
    }

    /// `hipFuncGetAttribute` (attribute numbers as CUDA's `CUfunction_attribute`).
    ///
    /// # Safety
    /// `func` must be a live function handle.
    pub unsafe fn func_attribute(&self, func: HipFunction, attribute: c_int) -> Result<i64> {
        let f = self.symbol::<FnFuncGetAttribute>("hipFuncGetAttribute")?;
        let mut v: c_int = 0;
        self.check("hipFuncGetAttribute", f(&mut v, attribute, func))?;
        Ok(i64::from(v))
    }

    /// `hipModuleLaunchKernel`.
    ///
    /// # Safety
    /// `func` must be live and `params` must match the kernel's parameters.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        func: HipFunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        stream: HipStream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let f = self.symbol::<FnModuleLaunchKernel>("hipModuleLaunchKernel")?;
        self.check(
            "hipModuleLaunchKernel",
            f(
                func,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                shared_bytes,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
        )
    }
}

fn read_c_string(buf: &[u8], offset: usize, max: usize) -> String {
    let Some(bytes) = buf.get(offset..offset.saturating_add(max).min(buf.len())) else {
        return String::new();
    };
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn read_i32(buf: &[u8], offset: usize) -> i32 {
    buf.get(offset..offset + 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_ne_bytes)
        .unwrap_or(0)
}

fn read_u64(buf: &[u8], offset: usize) -> u64 {
    buf.get(offset..offset + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
        .unwrap_or(0)
}

fn parse_props(buf: &[u8], l: &Layout, layout: PropsLayout) -> HipProps {
    HipProps {
        name: read_c_string(buf, 0, 256),
        gcn_arch_name: read_c_string(buf, l.gcn_arch_name, 256),
        total_global_mem: read_u64(buf, l.total_global_mem),
        warp_size: u32::try_from(read_i32(buf, l.warp_size)).unwrap_or(0),
        major: read_i32(buf, l.major),
        minor: read_i32(buf, l.minor),
        multi_processor_count: u32::try_from(read_i32(buf, l.multi_processor_count)).unwrap_or(0),
        layout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(buf: &mut [u8], off: usize, bytes: &[u8]) {
        buf[off..off + bytes.len()].copy_from_slice(bytes);
    }

    #[test]
    fn both_layouts_parse() {
        for (layout, l, tag) in [
            (R0600, &R0600, PropsLayout::R0600),
            (R0000, &R0000, PropsLayout::R0000),
        ] {
            let _ = layout;
            let mut buf = vec![0u8; PROPS_BUFFER];
            put(&mut buf, 0, b"AMD Instinct MI210\0");
            put(&mut buf, l.gcn_arch_name, b"gfx90a:sramecc+:xnack-\0");
            put(&mut buf, l.total_global_mem, &(64u64 << 30).to_ne_bytes());
            put(&mut buf, l.warp_size, &64i32.to_ne_bytes());
            put(&mut buf, l.major, &9i32.to_ne_bytes());
            put(&mut buf, l.minor, &0i32.to_ne_bytes());
            put(&mut buf, l.multi_processor_count, &104i32.to_ne_bytes());
            let p = parse_props(&buf, l, tag);
            assert_eq!(p.name, "AMD Instinct MI210");
            assert_eq!(p.gcn_arch_name, "gfx90a:sramecc+:xnack-");
            assert_eq!(p.total_global_mem, 64 << 30);
            assert_eq!(
                (p.warp_size, p.major, p.multi_processor_count),
                (64, 9, 104)
            );
        }
    }

    #[test]
    fn unterminated_strings_and_short_buffers_do_not_panic() {
        let buf = vec![b'x'; 300];
        let p = parse_props(&buf, &R0600, PropsLayout::R0600);
        assert_eq!(p.name.len(), 256);
        assert_eq!(p.gcn_arch_name, "");
        assert_eq!(p.total_global_mem, u64::from_ne_bytes([b'x'; 8]));
        assert_eq!(p.major, 0);
    }

    #[test]
    fn search_order() {
        let s = HipSearch {
            dirs: vec![PathBuf::from("/r/lib"), PathBuf::from("/opt/rocm/lib")],
            system: true,
        };
        let c: Vec<String> = s
            .candidates()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(c[0], "/r/lib/libamdhip64.so");
        assert_eq!(c[3], "/r/lib/libamdhip64.so.5");
        assert_eq!(c[4], "/opt/rocm/lib/libamdhip64.so");
        assert_eq!(
            &c[8..],
            [
                "libamdhip64.so",
                "libamdhip64.so.7",
                "libamdhip64.so.6",
                "libamdhip64.so.5"
            ]
        );
    }

    #[test]
    fn empty_search_is_not_found_without_panic() {
        let dir = tempfile::tempdir().unwrap();
        let e = HipRuntime::open(&HipSearch::only([dir.path().to_path_buf()])).unwrap_err();
        assert!(e.to_string().starts_with("HIP runtime not found"), "{e}");
        assert_eq!(e.tried.len(), 4);
    }

    /// Debian's libamdhip64-5 on a machine without an AMD GPU: found, version read, zero
    /// devices, and no panic anywhere (scripts/test installs the package).
    #[test]
    fn debian_libamdhip64_5_without_a_gpu() {
        assert!(
            Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5").exists(),
            "this test needs Debian's libamdhip64-5 (scripts/test installs it)"
        );
        let rt = HipRuntime::open(&HipSearch {
            dirs: vec![],
            system: true,
        })
        .unwrap();
        let (major, minor, _) = rt.runtime_version().unwrap();
        assert_eq!((major, minor), (5, 2), "{rt:?}");
        assert_eq!(rt.device_count().unwrap(), 0);
        assert!(rt.properties(0).is_err());
        assert!(rt.error_string(100).contains("hipErrorNoDevice"));
        // Detection over it: detect's tests.
    }

    #[test]
    fn missing_symbols_are_errors() {
        assert!(
            Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5").exists(),
            "this test needs Debian's libamdhip64-5 (scripts/test installs it)"
        );
        let rt = HipRuntime::open(&HipSearch {
            dirs: vec![],
            system: true,
        })
        .unwrap();
        let e = rt
            .symbol::<FnIntOut>("hipNoSuchFunction")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hipNoSuchFunction") && e.contains("symbol not found"),
            "{e}"
        );
    }
}
