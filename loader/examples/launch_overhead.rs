//! Host time per launch of a small kernel (rmsnorm_f32, one row of 256): the loader's
//! `Function::launch` against a raw `cuLaunchKernel` of the same `CUfunction` with a prepared
//! `void**`. scripts/device/python-h200.sh runs it beside the Python binding's figure.
//!
//!     launch_overhead BUILD_DIR|BUNDLE [LAUNCHES]
//!
//! Prints one JSON line: microseconds per launch, median of 5 batches of LAUNCHES / 5 (a batch
//! longer than the launch queue waits for the GPU when the kernel runs longer than a launch
//! takes), and `*_host_us`: the median over batches of 100 launches, each timed alone and the
//! GPU's run waited for outside the timing, so the figure is the host's time only.

use std::error::Error;
use std::time::Instant;

use kbuild_loader::cudarc::driver::{result, sys};
use kbuild_loader::{DeviceOptions, DevicePtr, Gpu, KernelArgs, LaunchConfig, Loader};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut argv = std::env::args().skip(1);
    let path = argv
        .next()
        .ok_or("usage: launch_overhead BUILD_DIR|BUNDLE [LAUNCHES]")?;
    let n: usize = argv
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let gpu = Gpu::open(&DeviceOptions::default())?;
    let loader = Loader::open(path.as_ref(), &gpu)?;
    let f = loader.function("rmsnorm", None, "rmsnorm_f32")?;
    let raw = f.cuda_function().ok_or("not a CUDA device")?;
    let (rows, cols) = (1i32, 256i32);
    // SAFETY: plain device allocations of the sizes the kernel reads and writes.
    let (x, w, y) = unsafe {
        (
            result::malloc_sync(256 * 4)?,
            result::malloc_sync(256 * 4)?,
            result::malloc_sync(256 * 4)?,
        )
    };
    let args = (
        DevicePtr(x),
        DevicePtr(w),
        DevicePtr(y),
        rows,
        cols,
        1e-6f32,
    );
    let cfg = LaunchConfig::linear(1, 256);
    let mut params = args.params();
    let time = |launch: &mut dyn FnMut() -> Result<(), Box<dyn Error>>| {
        let mut batches = Vec::new();
        for _ in 0..6 {
            result::ctx::synchronize()?;
            let t = Instant::now();
            for _ in 0..n / 5 {
                launch()?;
            }
            batches.push(t.elapsed().as_secs_f64() * 1e6 / (n / 5) as f64);
        }
        result::ctx::synchronize()?;
        batches.remove(0); // warm-up
        let mut host = Vec::new();
        for _ in 0..200 {
            result::ctx::synchronize()?;
            let t = Instant::now();
            for _ in 0..100 {
                launch()?;
            }
            host.push(t.elapsed().as_secs_f64() * 1e6 / 100.0);
        }
        result::ctx::synchronize()?;
        Ok::<(f64, f64), Box<dyn Error>>((median(batches), median(host)))
    };
    // SAFETY: rmsnorm_f32's arguments (kernels/rmsnorm.cu) on buffers of one row.
    let (loader_us, loader_host_us) = time(&mut || Ok(unsafe { f.launch(&cfg, &args) }?))?;
    let (raw_us, raw_host_us) = time(&mut || {
        // SAFETY: as above; `params` points at `args`, alive here.
        unsafe {
            sys::cuLaunchKernel(
                raw,
                1,
                1,
                1,
                256,
                1,
                1,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()?;
        Ok(())
    })?;
    println!(
        "{{\"schema\": \"kbuild.launch-overhead/v1\", \"launches\": {n}, \"raw_cuLaunchKernel_us\": {raw_us:.3}, \"loader_launch_us\": {loader_us:.3}, \"raw_cuLaunchKernel_host_us\": {raw_host_us:.3}, \"loader_launch_host_us\": {loader_host_us:.3}}}"
    );
    // SAFETY: allocated above, freed once.
    unsafe {
        result::free_sync(x)?;
        result::free_sync(w)?;
        result::free_sync(y)?;
    }
    Ok(())
}
