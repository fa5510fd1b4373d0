//! The typed launch API: grid, block, dynamic shared memory, stream, and arguments as a tuple
//! of plain values ([`KernelArg`]), turned into the `void**` both drivers take; and (in
//! `check.rs`) the one check of a launch's arguments against the entry's parameters
//! ([`check_args`], [`check_layout`]), which every checked launch (typed, raw, C ABI) runs
//! before the driver sees anything.

use std::ffi::c_void;

use crate::error::{LoaderError, Result};

mod args;
mod check;
mod pack;
mod triton;
pub use crate::error::LaunchError;
pub use args::{ArgKind, ArgLayout, DevicePtr, KernelArg, KernelArgs};
pub use check::{check_args, check_count, check_layout, describe_param};
pub use pack::{pack_arg, LooseArg};
pub use triton::{
    check_triton_args, check_triton_count, read_value, triton_args, triton_config,
    triton_scratch_count,
};

/// A CUDA `CUstream` or HIP `hipStream_t`; [`Stream::DEFAULT`] is the null (legacy) stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream(*mut c_void);

// SAFETY: a stream handle is an opaque driver token usable from any thread.
unsafe impl Send for Stream {}
// SAFETY: see above.
unsafe impl Sync for Stream {}

impl Stream {
    pub const DEFAULT: Stream = Stream(std::ptr::null_mut());

    /// Wrap a raw stream handle (`CUstream`, `hipStream_t`).
    pub fn from_raw(raw: *mut c_void) -> Stream {
        Stream(raw)
    }

    pub fn raw(self) -> *mut c_void {
        self.0
    }
}

impl Default for Stream {
    fn default() -> Stream {
        Stream::DEFAULT
    }
}

/// Where and how wide to launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    /// Dynamic shared memory (LDS) bytes.
    pub shared_bytes: u32,
    pub stream: Stream,
    /// CUDA programmatic dependent launch (sm_90+): the kernel may start while the previous
    /// kernel in the stream still runs, and must wait (`griddepcontrol.wait`,
    /// kcompat.h's `kc_grid_dependency_wait`) before it touches anything that kernel writes.
    /// Ignored on HIP, where launches on one stream stay serialised.
    pub programmatic: bool,
    /// CUDA thread-block clusters (sm_90+): blocks per cluster along x, 1 for none. The grid
    /// is in blocks, a multiple of it. HIP has no clusters: more than 1 is refused there.
    pub cluster: u32,
    /// A cooperative launch (all blocks resident at once, grid-wide sync allowed); refused on
    /// HIP for now.
    pub cooperative: bool,
}

impl LaunchConfig {
    /// A 1-D launch on the default stream with no dynamic shared memory.
    pub fn linear(grid: u32, block: u32) -> LaunchConfig {
        LaunchConfig {
            grid: (grid, 1, 1),
            block: (block, 1, 1),
            shared_bytes: 0,
            stream: Stream::DEFAULT,
            programmatic: false,
            cluster: 1,
            cooperative: false,
        }
    }

    pub fn on(mut self, stream: Stream) -> LaunchConfig {
        self.stream = stream;
        self
    }

    /// The same launch as a programmatic dependent launch ([`LaunchConfig::programmatic`]).
    pub fn programmatic(mut self, on: bool) -> LaunchConfig {
        self.programmatic = on;
        self
    }

    pub fn threads_per_block(&self) -> u64 {
        u64::from(self.block.0) * u64::from(self.block.1) * u64::from(self.block.2)
    }

    /// Refuse what the driver would refuse less clearly: empty grids or blocks, and blocks
    /// larger than the kernel's bound (`__launch_bounds__` / `.max_flat_workgroup_size`).
    pub fn check(&self, entry: &str, max_threads: Option<u32>) -> Result<()> {
        let err = |what: String| LoaderError::Launch {
            entry: entry.to_string(),
            what,
        };
        if [self.grid.0, self.grid.1, self.grid.2].contains(&0) {
            return Err(err(format!("grid {:?} has a zero dimension", self.grid)));
        }
        if self.cluster == 0 || !self.grid.0.is_multiple_of(self.cluster) {
            return Err(err(format!(
                "grid x of {} blocks is not a whole number of clusters of {}",
                self.grid.0, self.cluster
            )));
        }
        let threads = self.threads_per_block();
        if threads == 0 {
            return Err(err(format!("block {:?} has a zero dimension", self.block)));
        }
        if let Some(max) = max_threads {
            if threads > u64::from(max) {
                return Err(err(format!(
                    "block of {threads} threads exceeds the kernel's bound of {max} (its __launch_bounds__ in the manifest)"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuple_params_point_at_the_values() {
        let args = (DevicePtr(0xdead_beef), 7i32, 0.5f32);
        let p = args.params();
        assert_eq!(p.len(), 3);
        // SAFETY: the pointers come from `args`, alive here, with these types.
        unsafe {
            assert_eq!(*(p[0] as *const u64), 0xdead_beef);
            assert_eq!(*(p[1] as *const i32), 7);
            assert_eq!(*(p[2] as *const f32), 0.5);
        }
        assert!(().params().is_empty());
        assert_eq!([1u32, 2, 3][..].params().len(), 3);
    }

    #[test]
    fn launch_checks() {
        let c = LaunchConfig::linear(4, 256);
        assert!(c.check("k", Some(256)).is_ok());
        assert!(c.check("k", None).is_ok());
        let e = LaunchConfig::linear(4, 512)
            .check("k", Some(256))
            .unwrap_err();
        assert!(
            e.to_string().contains("exceeds the kernel's bound of 256"),
            "{e}"
        );
        assert!(LaunchConfig::linear(0, 256).check("k", None).is_err());
        assert!(LaunchConfig::linear(1, 0).check("k", None).is_err());
    }
}
