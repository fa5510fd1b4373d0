//! Run-time side of kbuild: detects the GPU, selects the code object that runs on it (with an
//! explanation of every candidate), verifies and loads it, and launches its kernels.
//!
//! Nothing is linked at build time: the CUDA driver is opened through cudarc's dynamic
//! loading, the HIP runtime through `libloading`; a machine with neither builds and runs this
//! crate (detection then reports "no CUDA driver found" / "HIP runtime not found").
//!
//! ```no_run
//! use kbuild_loader::{DeviceOptions, Gpu, LaunchConfig, Loader, DevicePtr};
//! # fn main() -> kbuild_loader::Result<()> {
//! let gpu = Gpu::open(&DeviceOptions::default())?;            // detect
//! let loader = Loader::open("target/kbuild".as_ref(), &gpu)?;  // manifest + selection
//! let f = loader.function("rmsnorm", None, "rmsnorm_f32")?;   // sha256, load, attributes
//! # let (x, w, y) = (DevicePtr(0), DevicePtr(0), DevicePtr(0));
//! unsafe { f.launch(&LaunchConfig::linear(64, 256), &(x, w, y, 64i32, 4096i32, 1e-6f32))? };
//! # Ok(()) }
//! ```
//!
//! The compat rules are [`kbuild_manifest::compat`]'s, the same table the build and the
//! registry use. The C ABI is in `include/kbuild_loader.h`.

#[cfg(feature = "registry")]
pub mod bundle;
pub mod cuda;
pub mod detect;
mod error;
pub mod explain;
#[cfg(feature = "registry")]
pub mod explain_source;
#[cfg(test)]
mod fixtures;
pub mod hip;
mod index;
pub mod launch;
pub mod load;
pub mod package;
pub mod pick;
pub mod select;
pub mod source;

pub use cudarc;
pub use detect::{detect, DeviceOptions, ResolvedDevice};
pub use error::{LoaderError, NoMatch, PickError, Result};
pub use launch::{
    ArgKind, ArgLayout, DevicePtr, KernelArg, KernelArgs, LaunchConfig, LaunchError, Stream,
};
pub use load::{AttributeCheck, Function, Gpu, LoadedModule, Loader};
pub use package::{ObjectRef, Package};
pub use pick::{pick_device_targets, pick_targets, DevicePickError};
pub use select::{Candidate, KernelChoice, Selection};

/// Counts this thread's allocations, so that tests can check that a path makes none.
#[cfg(test)]
pub(crate) mod alloc_count {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    struct Counting;

    thread_local! {
        static COUNT: Cell<usize> = const { Cell::new(0) };
    }

    // SAFETY: forwards to the system allocator; only counts.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            System.alloc(layout)
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            System.dealloc(ptr, layout)
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            System.realloc(ptr, layout, new)
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// How many allocations `f` made on this thread.
    pub(crate) fn allocations<T>(f: impl FnOnce() -> T) -> (usize, T) {
        let before = COUNT.with(Cell::get);
        let out = f();
        (COUNT.with(Cell::get) - before, out)
    }
}
