//! The scratch memory a Triton kernel asks for per program (global scratch for device-side
//! tensor descriptors and the like, profile scratch for instrumentation): allocated for one
//! launch in stream order (`cuMemAllocAsync` before, `cuMemFreeAsync` after, on the launch's
//! stream), so concurrent launches never share it and a capturing stream records both into
//! the graph. The size is Triton's: programs × num_ctas × bytes per program.

use kbuild_manifest::triton::TritonLaunch;

use crate::cuda::CudaModule;
use crate::error::{LoaderError, Result};
use crate::launch::Stream;

/// The alignment every stream-ordered allocation has at least (the driver's 256 bytes).
const ALLOCATION_ALIGN: u64 = 256;

/// The device addresses passed as the kernel's trailing scratch pointers (0 when not needed).
pub(crate) struct ScratchBuffers<'m> {
    pub global: u64,
    pub profile: u64,
    module: Option<&'m CudaModule>,
}

impl<'m> ScratchBuffers<'m> {
    /// Allocate what `record` asks for over `grid` programs, on `stream`, through `cuda`
    /// (the launch's CUDA module; `None` on HIP, where scratch memory is refused for now).
    pub fn for_launch(
        entry: &str,
        record: &TritonLaunch,
        grid: (u32, u32, u32),
        cuda: Option<&'m CudaModule>,
        stream: Stream,
    ) -> Result<ScratchBuffers<'m>> {
        let mut out = ScratchBuffers {
            global: 0,
            profile: 0,
            module: None,
        };
        let refuse = |what: String| LoaderError::Launch {
            entry: entry.to_string(),
            what,
        };
        let wanted = [
            (
                record.global_scratch_size,
                record.global_scratch_align,
                "global",
            ),
            (
                record.profile_scratch_size,
                record.profile_scratch_align,
                "profile",
            ),
        ];
        if wanted.iter().all(|(size, _, _)| *size == 0) {
            return Ok(out);
        }
        let Some(module) = cuda else {
            return Err(refuse(
                "the kernel needs scratch memory, which kbuild allocates through the CUDA driver only (not on HIP yet)".into(),
            ));
        };
        out.module = Some(module);
        let programs = u64::from(grid.0) * u64::from(grid.1) * u64::from(grid.2);
        for (i, (size, align, which)) in wanted.into_iter().enumerate() {
            if size == 0 {
                continue;
            }
            if align > ALLOCATION_ALIGN || !align.is_power_of_two() {
                let _ = out.release(stream);
                return Err(refuse(format!(
                    "its {which} scratch asks for an alignment of {align} bytes; allocations are aligned to {ALLOCATION_ALIGN}"
                )));
            }
            let bytes = programs
                .checked_mul(u64::from(record.num_ctas.max(1)))
                .and_then(|n| n.checked_mul(size))
                .and_then(|n| usize::try_from(n).ok());
            let Some(bytes) = bytes else {
                let _ = out.release(stream);
                return Err(refuse(format!(
                    "its {which} scratch of {size} bytes per program over {programs} programs overflows"
                )));
            };
            // SAFETY: the launch's stream, which the caller keeps live (launch_triton's
            // contract).
            match unsafe { module.alloc_async(bytes, stream.raw().cast()) } {
                Ok(ptr) if i == 0 => out.global = ptr,
                Ok(ptr) => out.profile = ptr,
                Err(e) => {
                    let _ = out.release(stream);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// Free both buffers after the work queued on `stream` (the launch) is done.
    pub fn free(mut self, stream: Stream) -> Result<()> {
        self.release(stream)
    }

    fn release(&mut self, stream: Stream) -> Result<()> {
        let Some(module) = self.module else {
            return Ok(());
        };
        let mut result = Ok(());
        for ptr in [&mut self.global, &mut self.profile] {
            if *ptr != 0 {
                // SAFETY: allocated by `alloc_async` above and freed once (zeroed after).
                let freed = unsafe { module.free_async(*ptr, stream.raw().cast()) };
                *ptr = 0;
                result = result.and(freed);
            }
        }
        result
    }
}
