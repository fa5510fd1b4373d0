//! Target picking: which of a manifest's targets a device needs, one per kernel, through the
//! loader's selection (the one compat table). The one picking of `kbuild explain` (the parts
//! of a split release a device needs), `kbuild pull --device` (the targets fetched, through
//! the registry's `select` callback) and the Python package's `kbuild.pull(device=...)`.

use kbuild_manifest::compat::Device;
use kbuild_manifest::manifest::Manifest;

use crate::error::{LoaderError, PickError};
use crate::package::Package;

/// The targets `device` needs of `manifest`: of every kernel, the target of the object
/// selected for it, each once, in the manifest's `targets` order. [`PickError::NoMatch`]
/// lists every kernel that nothing runs on; [`PickError::Package`] a manifest that cannot be
/// indexed.
pub fn pick_targets(manifest: &Manifest, device: &Device) -> Result<Vec<String>, PickError> {
    let selection = Package::from_manifest(manifest.clone())?.select(device);
    let missing = selection.missing();
    if !missing.is_empty() {
        return Err(PickError::NoMatch(missing));
    }
    let mut picked = selection.selected_targets();
    let position: std::collections::HashMap<&str, usize> = manifest
        .targets
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    picked.sort_by_key(|t| position.get(t.as_str()).copied());
    Ok(picked)
}

/// Why [`pick_device_targets`] found nothing to fetch, in words that name the device.
#[derive(Debug, thiserror::Error)]
pub enum DevicePickError {
    #[error("{label}: {source}")]
    Package {
        label: String,
        #[source]
        source: LoaderError,
    },
    #[error("no object of {package} {version} runs on {label}: {} (targets: {}); see `kbuild explain --device {device}`", .kernels.join(", "), .targets.join(", "))]
    NoMatch {
        package: String,
        version: String,
        label: String,
        /// `kernel` or `kernel.variant`, each that nothing runs on.
        kernels: Vec<String>,
        targets: Vec<String>,
        device: String,
    },
}

/// [`pick_targets`] for a device the user named (`label` describes it): what `kbuild pull
/// --device` fetches.
pub fn pick_device_targets(
    manifest: &Manifest,
    device: &Device,
    label: &str,
) -> Result<Vec<String>, Box<DevicePickError>> {
    pick_targets(manifest, device).map_err(|e| {
        Box::new(match e {
            PickError::Package(source) => DevicePickError::Package {
                label: label.into(),
                source,
            },
            PickError::NoMatch(missing) => DevicePickError::NoMatch {
                package: manifest.package.name.clone(),
                version: manifest.package.version.clone(),
                label: label.into(),
                kernels: missing
                    .iter()
                    .map(|m| match &m.variant {
                        Some(v) => format!("{}.{v}", m.kernel),
                        None => m.kernel.clone(),
                    })
                    .collect(),
                targets: manifest.targets.clone(),
                device: device.name(),
            },
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{manifest, object};
    use kbuild_manifest::compat::NEWEST_DRIVER;

    fn device(target: &str) -> Device {
        Device::parse(target, Some(NEWEST_DRIVER), None).unwrap()
    }

    #[test]
    fn each_kernel_picks_one_target_in_manifest_order() {
        let mut m = manifest(vec![
            object("b", None, "sm_90", None),
            object("a", None, "sm_80", None),
            object("a", None, "sm_90", None),
        ]);
        m.targets = vec!["sm_80".into(), "sm_90".into()];
        m.kernels = vec!["b".into(), "a".into()];
        assert_eq!(pick_targets(&m, &device("sm_90")).unwrap(), ["sm_90"]);
        let m2 = {
            let mut m2 = manifest(vec![
                object("b", None, "sm_90", None),
                object("a", None, "compute_80", Some("7.0")),
            ]);
            m2.targets = vec!["compute_80".into(), "sm_90".into()];
            m2.kernels = vec!["b".into(), "a".into()];
            m2
        };
        // Kernel order says sm_90 first; the manifest's order wins.
        assert_eq!(
            pick_targets(&m2, &device("sm_90")).unwrap(),
            ["compute_80", "sm_90"]
        );
    }

    #[test]
    fn a_kernel_nothing_runs_on_is_named() {
        let mut m = manifest(vec![
            object("a", None, "sm_90", None),
            object("b", None, "gfx90a", None),
        ]);
        m.kernels = vec!["a".into(), "b".into()];
        let e = pick_targets(&m, &device("sm_90")).unwrap_err();
        let PickError::NoMatch(missing) = &e else {
            panic!("{e}")
        };
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].kernel, "b");
        assert_eq!(e.to_string(), missing[0].to_string());
    }
}
