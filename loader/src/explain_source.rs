//! What `kbuild explain` explains, opened ([`open`]) and selected ([`Opened::select`]): a build directory, a
//! manifest, a bundle (under the signature policy pull applies) or a split release's index
//! (its manifest, and the parts the device needs). Rendering stays in [`crate::explain`].

use std::path::Path;

use kbuild_bundle::assets::{is_index_path, AssetError, AssetIndex, Part};
use kbuild_bundle::sign::Trust;

use crate::detect::{self, DeviceOptions, ResolvedDevice};
use crate::error::LoaderError;
use crate::explain::{explain_json, explain_json_with_parts, explain_trace};
use crate::package::Package;
use crate::select::Selection;

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error(transparent)]
    Loader(#[from] LoaderError),
    #[error(transparent)]
    Index(#[from] AssetError),
    #[error("rendering explain JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// A selection made for `kbuild explain`, with what its report names.
pub struct Explained {
    pub selection: Selection,
    pub device: ResolvedDevice,
    /// What was explained (the package's origin, or the index file).
    pub source: String,
    pub partial: Option<String>,
    /// A split release's parts the device needs.
    pub parts: Option<Vec<Part>>,
}

/// What `kbuild explain` reads, opened: the package and, for a split release, its index.
pub struct Opened {
    package: Package,
    index: Option<AssetIndex>,
    source: String,
    /// The package's partial-build mark.
    pub partial: Option<String>,
    /// How the bundle's signature was judged, when it was not plainly trusted.
    pub trust_note: Option<String>,
}

/// Open `path`: a split release's index (its manifest), or a build, manifest or bundle (a
/// bundle under the signature policy pull applies; a build dir is local and unsigned).
pub fn open(path: &Path, trust: &Trust) -> Result<Opened, ExplainError> {
    let index = match is_index_path(path) {
        true => Some(AssetIndex::open(path)?),
        false => None,
    };
    let package = match &index {
        Some(i) => Package::from_manifest(i.manifest().clone())?,
        None => Package::open_trusted(path, trust)?,
    };
    let source = match &index {
        Some(_) => path.display().to_string(),
        None => package.origin().display().to_string(),
    };
    Ok(Opened {
        partial: package.manifest().ok().and_then(|m| m.partial_note()),
        trust_note: package.trust_note(),
        package,
        index,
        source,
    })
}

impl Opened {
    /// Resolve the device and select for it (`kernel`: only that one).
    pub fn select(
        self,
        device: &DeviceOptions,
        kernel: Option<&str>,
    ) -> Result<Explained, ExplainError> {
        let device = detect::resolve(device)?;
        let mut selection = self.package.select(&device.device);
        // The build's record of what it left out, for the hints (a manifest that cannot be
        // read leaves them to the bundle's objects alone).
        if let Ok(m) = self.package.manifest() {
            selection = selection.with_build_record(m);
        }
        if let Some(k) = kernel {
            selection = selection.only_kernel(k)?;
        }
        let parts = self.index.as_ref().map(|i| {
            let needed = i.parts_for(&selection.selected_targets());
            needed.into_iter().cloned().collect()
        });
        Ok(Explained {
            selection,
            device,
            source: self.source,
            partial: self.partial,
            parts,
        })
    }
}

impl Explained {
    /// `kbuild.explain/v1` on one line.
    pub fn json(&self) -> Result<String, ExplainError> {
        let (s, d, src, partial) = (&self.selection, &self.device, &self.source, &self.partial);
        Ok(match &self.parts {
            Some(p) => explain_json_with_parts(s, d, src, partial.as_deref(), p)?,
            None => explain_json(s, d, src, partial.as_deref()),
        })
    }

    /// The text report: the trace, then the parts of a split release the device needs.
    pub fn text(&self) -> String {
        let mut out = explain_trace(&self.selection, &self.device, &self.source);
        if let Some(parts) = &self.parts {
            out.push_str("\nparts of this split release the device needs:\n");
            for p in parts {
                out.push_str(&format!(
                    "  {} ({} bytes, sha256 {}): {}\n",
                    p.file,
                    p.size,
                    p.sha256,
                    p.targets.join(", ")
                ));
            }
        }
        out
    }
}
