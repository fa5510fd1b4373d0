//! Device detection (CUDA and HIP, both optional at run time) and device specs: a detected
//! device, or one simulated by `--device TARGET` / `KBUILD_DEVICE` for explain and tests.
//! An absent runtime or zero devices is a normal result, not an error.

use kbuild_base::env::{names, Env};
use kbuild_manifest::compat::{
    cuda_processor, driver_version, runtime_loads_generic, Device, NEWEST_DRIVER,
    NO_GENERIC_RUNTIME,
};
use kbuild_manifest::target::{Vendor, Version};

use crate::cuda;
use crate::error::{LoaderError, Result};
use crate::hip::{HipRuntime, HipSearch};

/// One GPU a runtime reported.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DetectedDevice {
    pub vendor: Vendor,
    /// Ordinal within its runtime.
    pub index: u32,
    /// Marketing name (`NVIDIA H200`).
    pub name: String,
    /// `sm_90` or the full gcnArchName (`gfx90a:sramecc+:xnack-`).
    pub arch: String,
    pub memory_bytes: u64,
    pub multiprocessors: u32,
    /// The catalogue target selection uses (`sm_90`, `gfx90a:sramecc+:xnack-`), if known.
    pub target: Option<String>,
    /// The device for selection, or `None` with a note when the catalogue does not know it.
    #[serde(skip)]
    pub device: Option<Device>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What one runtime (CUDA driver or HIP) said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeReport {
    /// `cuda` or `hip`.
    pub runtime: &'static str,
    pub found: bool,
    /// The library opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// CUDA driver version (`13.0`) or HIP runtime version (`5.2.21153`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// HIP: whether the runtime loads generic code objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generic_supported: Option<bool>,
    /// "no CUDA driver found", "1 device", an error text.
    pub message: String,
    pub devices: Vec<DetectedDevice>,
    /// CUDA driver version as a number pair, for selection.
    #[serde(skip)]
    pub driver: Option<Version>,
}

/// Both runtimes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Detection {
    pub cuda: RuntimeReport,
    pub hip: RuntimeReport,
}

impl Detection {
    /// Every device, CUDA first.
    pub fn devices(&self) -> impl Iterator<Item = &DetectedDevice> {
        self.cuda.devices.iter().chain(self.hip.devices.iter())
    }
}

/// Detect with the default HIP search.
pub fn detect() -> Detection {
    detect_with(&HipSearch::default())
}

pub fn detect_with(hip: &HipSearch) -> Detection {
    Detection {
        cuda: detect_cuda(),
        hip: detect_hip(hip),
    }
}

/// The CUDA driver's devices; "no CUDA driver found" when libcuda does not load.
pub fn detect_cuda() -> RuntimeReport {
    let mut report = RuntimeReport {
        runtime: "cuda",
        found: false,
        library: None,
        version: None,
        generic_supported: None,
        message: String::new(),
        devices: Vec::new(),
        driver: None,
    };
    let lib = match cuda::probe() {
        Ok(lib) => lib,
        Err(why) => {
            report.message = format!("no CUDA driver found ({why})");
            return report;
        }
    };
    report.found = true;
    report.library = Some(lib.to_string());
    let driver = match cuda::driver_version() {
        Ok(v) => driver_version(v),
        Err(e) => {
            report.message = e.to_string();
            return report;
        }
    };
    report.driver = Some(driver);
    report.version = Some(driver.to_string());
    match cuda::devices() {
        Ok(devs) => {
            report.devices = devs
                .into_iter()
                .map(|d| {
                    let (major, minor) = d.compute_capability;
                    let processor = cuda_processor(major, minor);
                    DetectedDevice {
                        vendor: Vendor::Nvidia,
                        index: d.index,
                        name: d.name,
                        arch: format!("sm_{major}{minor}"),
                        memory_bytes: d.total_mem,
                        multiprocessors: d.multiprocessors,
                        target: processor.map(|p| p.name.to_string()),
                        device: processor.map(|processor| Device::Cuda { processor, driver }),
                        note: processor.is_none().then(|| {
                            format!("compute capability {major}.{minor} is not in this kbuild's catalogue")
                        }),
                    }
                })
                .collect();
            report.message = count_text(report.devices.len());
        }
        Err(e) => report.message = e.to_string(),
    }
    report
}

/// The HIP runtime's devices; "HIP runtime not found" when libamdhip64 does not load.
pub fn detect_hip(search: &HipSearch) -> RuntimeReport {
    let mut report = RuntimeReport {
        runtime: "hip",
        found: false,
        library: None,
        version: None,
        generic_supported: None,
        message: String::new(),
        devices: Vec::new(),
        driver: None,
    };
    let rt = match HipRuntime::open(search) {
        Ok(rt) => rt,
        Err(e) => {
            report.message = e.to_string();
            return report;
        }
    };
    report.found = true;
    report.library = Some(rt.path().display().to_string());
    let version = match rt.runtime_version() {
        Ok(v) => v,
        Err(e) => {
            report.message = e.to_string();
            return report;
        }
    };
    // The compat table decides on major.minor; the build number is only shown.
    let runtime = Version(version.0, version.1);
    report.version = Some(format!("{}.{}.{}", version.0, version.1, version.2));
    report.generic_supported = Some(runtime_loads_generic(Some(runtime)));
    let count = match rt.device_count() {
        Ok(n) => n,
        Err(e) => {
            report.message = e.to_string();
            return report;
        }
    };
    for i in 0..count {
        match rt.properties(i) {
            Ok(p) => {
                let device = Device::parse(&p.gcn_arch_name, None, Some(runtime));
                report.devices.push(DetectedDevice {
                    vendor: Vendor::Amd,
                    index: i,
                    name: p.name,
                    arch: p.gcn_arch_name.clone(),
                    memory_bytes: p.total_global_mem,
                    multiprocessors: p.multi_processor_count,
                    target: device.as_ref().ok().map(Device::name),
                    note: device
                        .as_ref()
                        .err()
                        .map(|e| format!("{e} (not in this kbuild's catalogue)")),
                    device: device.ok(),
                });
            }
            Err(e) => {
                report.message = e.to_string();
                return report;
            }
        }
    }
    report.message = count_text(report.devices.len());
    report
}

fn count_text(n: usize) -> String {
    match n {
        0 => "0 devices".into(),
        1 => "1 device".into(),
        n => format!("{n} devices"),
    }
}

/// How the device to select for is chosen.
#[derive(Debug, Clone, Default)]
pub struct DeviceOptions {
    /// `None` or `auto`: detect; else a target to simulate (`sm_90`, `9.0`, `gfx1151`).
    pub device: Option<String>,
    /// Simulated CUDA driver version (default: the newest the catalogue knows).
    pub driver: Option<Version>,
    /// A simulated AMD device's runtime does not load generic code objects.
    pub no_generic: bool,
    /// Which detected device when several (default 0, CUDA first).
    pub index: Option<usize>,
    /// Where detection looks for the HIP runtime.
    pub hip: HipSearch,
}

impl DeviceOptions {
    /// Options from `KBUILD_DEVICE` and the HIP search variables of `env` (the CLI gives
    /// flags precedence over them).
    pub fn from_env(env: &Env) -> DeviceOptions {
        DeviceOptions {
            device: env.str(names::KBUILD_DEVICE).map(String::from),
            hip: HipSearch::from_env(env),
            ..DeviceOptions::default()
        }
    }

    pub fn is_auto(&self) -> bool {
        self.device.as_deref().is_none_or(|d| d == "auto")
    }
}

/// A device to select for, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedDevice {
    pub device: Device,
    /// `None` when simulated.
    pub detected: Option<DetectedDevice>,
}

impl ResolvedDevice {
    pub fn simulated(&self) -> bool {
        self.detected.is_none()
    }

    /// `sm_90 (NVIDIA H200, CUDA driver 13.0 → PTX ISA ≤ 9.0)` or `gfx1151 (simulated …)`.
    pub fn describe(&self) -> String {
        let runtime = match self.device {
            Device::Cuda { driver, .. } => format!(
                "CUDA driver {driver} → PTX ISA ≤ {}",
                kbuild_manifest::compat::max_ptx_isa(driver)
            ),
            Device::Amd { runtime, .. } => {
                if runtime_loads_generic(runtime) {
                    "runtime loads generic code objects".into()
                } else {
                    "runtime does not load generic code objects".into()
                }
            }
        };
        match &self.detected {
            Some(d) => format!("{} ({}, {runtime})", self.device.name(), d.name),
            None => format!("{} (simulated, {runtime})", self.device.name()),
        }
    }
}

/// Resolve options to one device: simulate the given target, or detect and take the first
/// device (or `index`). No GPU and no `--device` is [`LoaderError::NoDevice`].
pub fn resolve(opts: &DeviceOptions) -> Result<ResolvedDevice> {
    if !opts.is_auto() {
        let spec = opts.device.clone().unwrap_or_default();
        // A simulated runtime is unknown (the table takes it as loading generic objects)
        // unless `no_generic` asks for one that does not.
        let runtime = opts.no_generic.then_some(NO_GENERIC_RUNTIME);
        let device = Device::parse(&spec, Some(opts.driver.unwrap_or(NEWEST_DRIVER)), runtime)
            .map_err(|source| LoaderError::Device { spec, source })?;
        return Ok(ResolvedDevice {
            device,
            detected: None,
        });
    }
    resolve_detected(&detect_with(&opts.hip), opts)
}

/// Pick from an existing detection (so `kbuild devices` and explain agree).
pub fn resolve_detected(detection: &Detection, opts: &DeviceOptions) -> Result<ResolvedDevice> {
    let all: Vec<&DetectedDevice> = detection.devices().collect();
    if all.is_empty() {
        return Err(LoaderError::NoDevice {
            cuda: detection.cuda.message.clone(),
            hip: detection.hip.message.clone(),
        });
    }
    let i = opts.index.unwrap_or(0);
    let d = all.get(i).ok_or(LoaderError::DeviceIndex {
        index: i,
        found: all.len(),
    })?;
    let mut device = d.device.ok_or_else(|| LoaderError::UnsupportedDevice {
        arch: d.arch.clone(),
        name: d.name.clone(),
        note: d.note.clone().unwrap_or_default(),
    })?;
    // `no_generic` on a real device: judge as on a runtime without generic support.
    if let Device::Amd { runtime, .. } = &mut device {
        if opts.no_generic && runtime_loads_generic(*runtime) {
            *runtime = Some(NO_GENERIC_RUNTIME);
        }
    }
    Ok(ResolvedDevice {
        device,
        detected: Some((*d).clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's libamdhip64-5 on a machine without an AMD GPU (scripts/test installs it):
    /// found, and zero devices is a normal answer.
    #[test]
    fn debian_libamdhip64_5_is_detected_with_no_devices() {
        assert!(
            std::path::Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5").exists(),
            "this test needs Debian's libamdhip64-5 (scripts/test installs it)"
        );
        let r = detect_hip(&HipSearch {
            dirs: vec![],
            system: true,
        });
        assert!(r.found && r.devices.is_empty(), "{r:?}");
        assert_eq!(r.generic_supported, Some(false));
        assert_eq!(r.message, "0 devices");
    }

    #[test]
    fn absent_cuda_driver_is_a_normal_answer() {
        assert!(
            cuda::probe().is_err(),
            "this test needs a machine without an NVIDIA driver"
        );
        let r = detect_cuda();
        assert!(!r.found);
        assert!(
            r.message.starts_with("no CUDA driver found"),
            "{}",
            r.message
        );
        assert!(r.devices.is_empty());
    }

    #[test]
    fn simulated_devices_resolve_without_detection() {
        let r = resolve(&DeviceOptions {
            device: Some("sm_90".into()),
            driver: Some(Version(13, 0)),
            ..DeviceOptions::default()
        })
        .unwrap();
        assert!(r.simulated());
        assert_eq!(
            r.describe(),
            "sm_90 (simulated, CUDA driver 13.0 → PTX ISA ≤ 9.0)"
        );
        let r = resolve(&DeviceOptions {
            device: Some("gfx1151".into()),
            no_generic: true,
            ..DeviceOptions::default()
        })
        .unwrap();
        assert!(matches!(
            r.device,
            Device::Amd {
                runtime: Some(NO_GENERIC_RUNTIME),
                ..
            }
        ));
        assert_eq!(
            r.describe(),
            "gfx1151 (simulated, runtime does not load generic code objects)"
        );
        let r = resolve(&DeviceOptions {
            device: Some("gfx1151".into()),
            ..DeviceOptions::default()
        })
        .unwrap();
        assert!(matches!(r.device, Device::Amd { runtime: None, .. }));
        assert_eq!(
            r.describe(),
            "gfx1151 (simulated, runtime loads generic code objects)"
        );
        let e = resolve(&DeviceOptions {
            device: Some("gfx9999".into()),
            ..DeviceOptions::default()
        })
        .unwrap_err();
        assert!(e.to_string().starts_with("device `gfx9999`"), "{e}");
    }

    #[test]
    fn nothing_detected_is_no_device_with_a_hint() {
        let empty = RuntimeReport {
            runtime: "cuda",
            found: false,
            library: None,
            version: None,
            generic_supported: None,
            message: "no CUDA driver found".into(),
            devices: vec![],
            driver: None,
        };
        let d = Detection {
            cuda: empty.clone(),
            hip: RuntimeReport {
                runtime: "hip",
                message: "HIP runtime not found".into(),
                ..empty
            },
        };
        let e = resolve_detected(&d, &DeviceOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no GPU found (no CUDA driver found; HIP runtime not found)"),
            "{e}"
        );
        assert!(e.contains("--device TARGET"), "{e}");
    }
}
