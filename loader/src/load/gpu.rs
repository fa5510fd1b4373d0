//! The device to load onto: a resolved device and its runtime, opened once per process.

use std::sync::Arc;

use kbuild_manifest::compat::Device;

use crate::cuda::CudaDevice;
use crate::detect::{self, DeviceOptions, ResolvedDevice};
use crate::error::Result;
use crate::hip::{HipRuntime, HipSearch};

#[derive(Clone, Debug)]
pub(crate) enum Backend {
    Simulated,
    Cuda(CudaDevice),
    Hip(Arc<HipRuntime>, u32),
}

/// The device to load onto: detected (with its runtime opened) or simulated.
#[derive(Clone, Debug)]
pub struct Gpu {
    pub(crate) device: ResolvedDevice,
    pub(crate) backend: Backend,
}

impl Gpu {
    /// Resolve `opts` (detect, or simulate `--device`) and open the device's runtime.
    pub fn open(opts: &DeviceOptions) -> Result<Gpu> {
        let device = detect::resolve(opts)?;
        Gpu::from_resolved_with(device, &opts.hip)
    }

    /// Open the runtime of an already resolved device (a simulated one opens nothing).
    pub fn from_resolved(device: ResolvedDevice) -> Result<Gpu> {
        Gpu::from_resolved_with(device, &HipSearch::default())
    }

    /// [`Gpu::from_resolved`], finding the HIP runtime through `hip`.
    pub fn from_resolved_with(device: ResolvedDevice, hip: &HipSearch) -> Result<Gpu> {
        let backend = match (&device.detected, device.device) {
            (None, _) => Backend::Simulated,
            (Some(d), Device::Cuda { .. }) => Backend::Cuda(CudaDevice::open(d.index)?),
            (Some(d), Device::Amd { .. }) => {
                let rt = HipRuntime::open(hip)?;
                rt.set_device(d.index)?;
                Backend::Hip(Arc::new(rt), d.index)
            }
        };
        Ok(Gpu { device, backend })
    }

    /// A simulated device: selection and explain only.
    pub fn simulated(device: Device) -> Gpu {
        Gpu {
            device: ResolvedDevice {
                device,
                detected: None,
            },
            backend: Backend::Simulated,
        }
    }

    pub fn device(&self) -> &ResolvedDevice {
        &self.device
    }

    /// The CUDA device (context), when this is a detected NVIDIA GPU.
    pub fn cuda(&self) -> Option<&CudaDevice> {
        match &self.backend {
            Backend::Cuda(c) => Some(c),
            _ => None,
        }
    }

    /// The HIP runtime, when this is a detected AMD GPU.
    pub fn hip(&self) -> Option<&HipRuntime> {
        match &self.backend {
            Backend::Hip(rt, _) => Some(rt),
            _ => None,
        }
    }
}
