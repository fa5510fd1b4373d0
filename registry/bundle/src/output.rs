//! Where `kbuild package` and `kbuild pull --out` put bundles: the file names inside an
//! output directory, the writes (atomic, unchanged files left alone), the signatures beside
//! them kept in step, a split release for release-asset limits ([`write_release`]), and the
//! `kbuild.package/v1` document of what was written.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::assets::{self, Packed, Part};
use crate::merge::MergeReport;
use crate::sign::{self, SigFileError, SignatureFile};
use crate::{prune_stale_signatures, Bundle, BundleError, PruneError, Pruned};

pub const PACKAGE_SCHEMA: &str = "kbuild.package/v1";

/// Where `kbuild package` writes by default.
pub const DEFAULT_OUT_DIR: &str = "dist";

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("writing {path}: {err}")]
    Write { path: String, err: std::io::Error },
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Asset(#[from] assets::AssetError),
    #[error(transparent)]
    Prune(#[from] PruneError),
    #[error(transparent)]
    Signatures(#[from] SigFileError),
    /// A shard's bundle is not a release to split.
    #[error("{name} {version} here is shard {index}/{count} of a sharded build, not a release; merge the shards and split the release in one step: `kbuild package --merge SHARD.kbundle... --max-asset-size SIZE`")]
    Shard {
        name: String,
        version: String,
        index: u32,
        count: u32,
    },
    #[error("{path} is the index of a split release (`package --max-asset-size`), not a bundle; {PUBLISH_WHOLE}")]
    IndexNotBundle { path: String },
    #[error("reading {path}: {err}")]
    Read { path: String, err: std::io::Error },
    /// The file is not a bundle (or not a good one).
    #[error("{path}: {err}")]
    NotABundle { path: String, err: BundleError },
    /// The `.sig` beside the bundle is another bundle's.
    #[error("{sig} does not match {path}: {problem}; nothing was published (sign the bundle again with `kbuild sign {path}`, or remove the .sig to publish it unsigned)")]
    ForeignSignature {
        sig: String,
        path: String,
        problem: Box<sign::SignatureProblem>,
    },
    #[error("{path} is not there: {index} says the release was split (`package --max-asset-size`); {PUBLISH_WHOLE}")]
    WasSplit { path: String, index: String },
}

const PUBLISH_WHOLE: &str = "a registry takes the whole bundle and stores one layer per target, so a device pulls only its own anyway: run `kbuild package --out DIR` without --max-asset-size and publish DIR/NAME-VERSION.kbundle";

/// A file written: its path, size and `sha256:` digest, and what happened to the signatures
/// beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    pub path: PathBuf,
    pub size: usize,
    pub sha256: String,
    #[serde(skip)]
    pub pruned: Pruned,
}

impl Written {
    /// `PATH (SIZE bytes, sha256:...)`.
    pub fn line(&self) -> String {
        format!(
            "{} ({} bytes, {})",
            self.path.display(),
            self.size,
            self.sha256
        )
    }

    /// The note for signatures dropped beside it, if any were.
    pub fn note(&self) -> Option<String> {
        let p = self.path.display();
        match &self.pruned {
            Pruned::Nothing => None,
            Pruned::Removed { path, why } => Some(format!(
                "note: removed {}: it no longer matches {p} ({}); sign the new bundle with `kbuild sign {p}`",
                path.display(),
                why.join("; "),
            )),
            Pruned::Rewrote { path, removed } => Some(format!(
                "note: {}: dropped {} signature(s) that no longer match {p} ({})",
                path.display(),
                removed.len(),
                removed.join("; ")
            )),
        }
    }
}

/// Write `bundle` (its archive `bytes`) into `dir` under its file name, and drop the
/// signatures beside it that are not for these bytes' manifest (a `.sig` of an earlier build
/// of the same version).
pub fn write_bundle(dir: &Path, bundle: &Bundle, bytes: &[u8]) -> Result<Written, OutputError> {
    write_named(dir, &bundle.file_name(), bundle, bytes)
}

/// [`write_bundle`] under the name `file` (a part of a split release, or its index: their
/// signatures are those of `bundle`'s manifest).
pub fn write_named(
    dir: &Path,
    file: &str,
    bundle: &Bundle,
    bytes: &[u8],
) -> Result<Written, OutputError> {
    let path = dir.join(file);
    kbuild_base::fs::write_if_changed(&path, bytes).map_err(|err| OutputError::Write {
        path: path.display().to_string(),
        err,
    })?;
    let pruned = prune_stale_signatures(&path, bundle)?;
    Ok(Written {
        sha256: kbuild_base::digest::oci_digest(bytes),
        size: bytes.len(),
        path,
        pruned,
    })
}

/// One bundle per target of `bundle` (`package --split`), each written as [`write_bundle`].
pub fn write_per_target(
    dir: &Path,
    bundle: &Bundle,
    mtime: u64,
) -> Result<Vec<Written>, OutputError> {
    let mut out = Vec::new();
    for t in bundle.targets() {
        let part = bundle.restrict(std::slice::from_ref(&t))?;
        out.push(write_bundle(dir, &part, &part.to_bytes(mtime)?)?);
    }
    Ok(out)
}

/// Write a pulled `bundle` into `dir` (`--out`) with the signatures it came with; the path.
pub fn write_pulled(
    dir: &Path,
    bundle: &Bundle,
    mtime: u64,
    signatures: Option<&SignatureFile>,
) -> Result<PathBuf, OutputError> {
    let path = dir.join(bundle.file_name());
    kbuild_base::fs::write_if_changed(&path, &bundle.to_bytes(mtime)?).map_err(|err| {
        OutputError::Write {
            path: path.display().to_string(),
            err,
        }
    })?;
    if let Some(s) = signatures {
        sign::write_signatures(&path, s)?;
    }
    Ok(path)
}

/// The bundle `kbuild publish` takes when none is named: `dist/NAME-VERSION.kbundle`.
pub fn default_bundle_path(name: &str, version: &str) -> PathBuf {
    Path::new(DEFAULT_OUT_DIR).join(format!("{name}-{version}.kbundle"))
}

/// Refuse to publish a split release's index, or to guess the default bundle of a release
/// that was split (`explicit`: the user named `path`).
pub fn check_publish_path(path: &Path, explicit: bool) -> Result<(), OutputError> {
    if assets::is_index_path(path) {
        return Err(OutputError::IndexNotBundle {
            path: path.display().to_string(),
        });
    }
    let index = path.with_extension(assets::INDEX_EXTENSION);
    if !explicit && !path.exists() && index.exists() {
        return Err(OutputError::WasSplit {
            path: path.display().to_string(),
            index: index.display().to_string(),
        });
    }
    Ok(())
}

/// The lines `kbuild package` prints after the files it wrote: objects stored once, the
/// reproducibility verdict (`reproducible`: checked and equal), and that a shard is no release.
pub fn package_notes(bundle: &Bundle, reproducible: bool) -> String {
    let mut out = Vec::new();
    let storage = bundle.storage();
    if storage.duplicates() > 0 {
        out.push(format!(
            "  {} objects, {} stored: {} identical to another (across variants or targets) stored once, {} bytes saved",
            storage.objects,
            storage.stored,
            storage.duplicates(),
            storage.bytes_saved()
        ));
    }
    if reproducible {
        out.push("reproducible: a clean rebuild gave byte-identical bundles".into());
    }
    if let Some(s) = &bundle.manifest().shard {
        let targets = match bundle.targets() {
            t if t.is_empty() => "no targets".to_string(),
            t => t.join(", "),
        };
        out.push(format!(
            "  shard {}/{} ({targets}): not a release; join the shards with `kbuild package --merge`",
            s.index, s.count,
        ));
    }
    out.iter().map(|l| format!("{l}\n")).collect()
}

/// A bundle file read for publishing, with the signatures beside it.
#[derive(Debug)]
pub struct ToPublish {
    pub bundle: Bundle,
    /// The file's bytes, as they are uploaded.
    pub bytes: Vec<u8>,
    /// The `.sig` beside it, when there is one; every signature in it is this bundle's.
    pub signatures: Option<SignatureFile>,
}

/// Read the bundle `path` for `kbuild publish` (`explicit`: the user named it; see
/// [`check_publish_path`]): a publishable bundle (a partial one only with `allow_partial`)
/// whose `.sig`, if any, is its own, checked before anything is uploaded.
pub fn read_for_publish(
    path: &Path,
    explicit: bool,
    allow_partial: bool,
    limits: crate::archive::ArchiveLimits,
) -> Result<ToPublish, OutputError> {
    check_publish_path(path, explicit)?;
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|err| OutputError::Read {
        path: shown.clone(),
        err,
    })?;
    let bundle = Bundle::from_bytes(&bytes, limits).map_err(|err| OutputError::NotABundle {
        path: shown.clone(),
        err,
    })?;
    bundle.check_publishable(&shown, allow_partial)?;
    let signatures = sign::read_signatures(path)?;
    if let Some(s) = &signatures {
        let (name, version) = (bundle.name(), bundle.version());
        if let Err(problem) = s.check_belongs(name, version, bundle.manifest_digest()) {
            return Err(OutputError::ForeignSignature {
                sig: crate::signature_path(path).display().to_string(),
                path: shown,
                problem: Box::new(problem),
            });
        }
    }
    Ok(ToPublish {
        bundle,
        bytes,
        signatures,
    })
}

/// What [`write_release`] wrote.
#[derive(Debug)]
pub struct SplitReport {
    pub limit: u64,
    /// The whole bundle's size.
    pub full: u64,
    /// Each part (or the one whole bundle) as written, with its part (none for the whole
    /// bundle).
    pub files: Vec<(Written, Option<Part>)>,
    /// The index, when split.
    pub index: Option<Written>,
    /// Other bundles or indexes of this version in the directory (an earlier run's) that are
    /// not part of this release.
    pub leftovers: Vec<PathBuf>,
}

/// Write `bundle` (whose whole archive is `bytes`) into `out` within `limit`: whole when it
/// fits, else its parts and then the index.
pub fn write_release(
    out: &Path,
    bundle: &Bundle,
    bytes: &[u8],
    limit: u64,
    mtime: u64,
) -> Result<SplitReport, OutputError> {
    if let Some(s) = &bundle.manifest().shard {
        return Err(OutputError::Shard {
            name: bundle.name().into(),
            version: bundle.version().into(),
            index: s.index,
            count: s.count,
        });
    }
    let packed = assets::pack(bundle, bytes.len() as u64, limit, mtime)?;
    let index_name = assets::index_file_name(bundle.name(), bundle.version());
    let mut report = SplitReport {
        limit,
        full: bytes.len() as u64,
        files: Vec::new(),
        index: None,
        leftovers: Vec::new(),
    };
    let mine = match packed {
        Packed::Whole => {
            report.files.push((write_bundle(out, bundle, bytes)?, None));
            vec![bundle.file_name()]
        }
        Packed::Split {
            parts, index_bytes, ..
        } => {
            let mut mine = vec![index_name.clone()];
            for p in &parts {
                let w = write_named(out, &p.part.file, &p.bundle, &p.bytes)?;
                report.files.push((w, Some(p.part.clone())));
                mine.push(p.part.file.clone());
            }
            // The index last, so it never names a part that is not there yet. Its signatures
            // are those of the manifest every part carries.
            let first = parts.first().map_or(bundle, |p| &p.bundle);
            report.index = Some(write_named(out, &index_name, first, &index_bytes)?);
            mine
        }
    };
    report.leftovers = leftovers(out, bundle, &mine);
    Ok(report)
}

/// Each `NAME-VERSION.*` bundle or index in `dir` this run did not write (`mine`).
fn leftovers(dir: &Path, bundle: &Bundle, mine: &[String]) -> Vec<PathBuf> {
    let prefix = format!("{}-{}.", bundle.name(), bundle.version());
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut stale: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with(&prefix)
                && (n.ends_with(".kbundle")
                    || n.ends_with(&format!(".{}", assets::INDEX_EXTENSION)))
        })
        .filter(|n| !mine.contains(n))
        .collect();
    stale.sort();
    stale.into_iter().map(|n| dir.join(n)).collect()
}

impl SplitReport {
    /// The bundle files written (parts, or the whole bundle).
    pub fn written(&self) -> Vec<&Written> {
        self.files.iter().map(|(w, _)| w).collect()
    }

    /// The notes of what was written: signatures dropped, files left from an earlier run.
    pub fn notes(&self) -> Vec<String> {
        let pruned = self.written().into_iter().chain(&self.index);
        let mut notes: Vec<String> = pruned.filter_map(Written::note).collect();
        notes.extend(self.leftovers.iter().map(|p| {
            format!(
                "note: {} is not part of this release (left from an earlier run); do not upload it with it",
                p.display()
            )
        }));
        notes
    }

    /// What was written, as text (one line each).
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let (full, limit) = (
            assets::human_size(self.full),
            assets::human_size(self.limit),
        );
        let mut s = String::new();
        let Some(index) = &self.index else {
            for (w, _) in &self.files {
                let _ = writeln!(s, "packaged {}", w.line());
            }
            let _ = writeln!(
                s,
                "  fits in one asset ({full} ≤ --max-asset-size {limit}): not split"
            );
            return s;
        };
        let _ = writeln!(
            s,
            "the bundle is {full}, over --max-asset-size {limit}: split into {} part(s) by target family",
            self.files.len()
        );
        for (w, part) in &self.files {
            let (family, targets) = part
                .as_ref()
                .map(|x| (x.family.as_str(), x.targets.join(", ")))
                .unwrap_or_default();
            let _ = writeln!(s, "packaged {}: {family} [{targets}]", w.line());
        }
        let _ = writeln!(
            s,
            "index {}: `kbuild pull {} --device auto` reads only the part the device needs",
            index.line(),
            index.path.display()
        );
        s
    }

    /// The `split` object of `kbuild.package/v1`: `None` when the bundle fit whole.
    pub fn doc(&self) -> Option<SplitDoc<'_>> {
        let index = self.index.as_ref()?;
        Some(SplitDoc {
            max_asset_size: self.limit,
            bundle_size: self.full,
            index,
            parts: self
                .files
                .iter()
                .filter_map(|(w, part)| {
                    part.as_ref().map(|part| PartDoc {
                        path: &w.path,
                        file: &part.file,
                        size: part.size,
                        sha256: &part.sha256,
                        family: &part.family,
                        targets: &part.targets,
                    })
                })
                .collect(),
        })
    }
}

/// The `split` object of `kbuild.package/v1`.
#[derive(Debug, Serialize)]
pub struct SplitDoc<'a> {
    pub max_asset_size: u64,
    pub bundle_size: u64,
    pub index: &'a Written,
    pub parts: Vec<PartDoc<'a>>,
}

/// One part in [`SplitDoc`].
#[derive(Debug, Serialize)]
pub struct PartDoc<'a> {
    pub path: &'a Path,
    pub file: &'a str,
    pub size: u64,
    pub sha256: &'a str,
    pub family: &'a str,
    pub targets: &'a [String],
}

/// The `shard` object of `kbuild.package/v1`.
#[derive(Debug, Serialize)]
pub struct ShardDoc {
    pub index: u32,
    pub count: u32,
}

/// `kbuild.package/v1`. A package of a build has `bytes_saved`, `reproducible`, `shard` and
/// `split`; a merge of shard bundles has `merged`, `overlapping_records`, `missing_targets`
/// and `partial` (and `split` when it was split).
#[derive(Debug, Serialize)]
pub struct PackageReport<'a> {
    pub schema: &'static str,
    pub name: &'a str,
    pub version: &'a str,
    pub manifest: &'a str,
    pub targets: Vec<String>,
    pub objects: usize,
    pub object_records: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_saved: Option<u64>,
    pub bundles: Vec<&'a Written>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reproducible: Option<Option<bool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Option<ShardDoc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<Option<SplitDoc<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<&'a [PathBuf]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlapping_records: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_targets: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
}

impl<'a> PackageReport<'a> {
    /// What a package of a build wrote (`split`: with `--max-asset-size`).
    pub fn package(
        bundle: &'a Bundle,
        bundles: Vec<&'a Written>,
        reproducible: Option<bool>,
        split: Option<&'a SplitReport>,
    ) -> PackageReport<'a> {
        let mut r = PackageReport::common(bundle, bundles);
        r.bytes_saved = Some(bundle.storage().bytes_saved());
        r.reproducible = Some(reproducible);
        r.shard = Some(bundle.manifest().shard.as_ref().map(|s| ShardDoc {
            index: s.index,
            count: s.count,
        }));
        r.split = Some(split.and_then(SplitReport::doc));
        r
    }

    /// What a merge of the bundles `merged` wrote (`split`: with `--max-asset-size`).
    pub fn merge(
        bundle: &'a Bundle,
        bundles: Vec<&'a Written>,
        merged: &'a [PathBuf],
        report: &'a MergeReport,
        split: Option<&'a SplitReport>,
    ) -> PackageReport<'a> {
        let mut r = PackageReport::common(bundle, bundles);
        r.merged = Some(merged);
        r.overlapping_records = Some(report.overlapping);
        r.missing_targets = Some(&report.missing_targets);
        r.partial = Some(bundle.manifest().partial);
        r.split = split.map(SplitReport::doc);
        r
    }

    fn common(bundle: &'a Bundle, bundles: Vec<&'a Written>) -> PackageReport<'a> {
        let storage = bundle.storage();
        PackageReport {
            schema: PACKAGE_SCHEMA,
            name: bundle.name(),
            version: bundle.version(),
            manifest: bundle.manifest_digest(),
            targets: bundle.targets(),
            objects: storage.stored,
            object_records: storage.objects,
            bytes_saved: None,
            bundles,
            reproducible: None,
            shard: None,
            split: None,
            merged: None,
            overlapping_records: None,
            missing_targets: None,
            partial: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bundle {
        use kbuild_manifest::fixtures::{manifest, object};
        let mut objects = std::collections::BTreeMap::new();
        let mut records = Vec::new();
        for t in ["sm_80", "gfx1100"] {
            let data = t.as_bytes().repeat(64);
            let mut o = object("k", t, "cubin", &data);
            o.path = format!("{t}/k.cubin");
            objects.insert(o.sha256.clone(), data);
            records.push(o);
        }
        let m = manifest("pkg", "1.2.3", records);
        Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap()
    }

    fn keys(v: &impl Serialize) -> Vec<String> {
        match serde_json::to_value(v).unwrap() {
            serde_json::Value::Object(m) => m.keys().cloned().collect(),
            other => panic!("not an object: {other}"),
        }
    }

    /// The keys `kbuild package` and `kbuild package --merge` have always emitted.
    #[test]
    fn package_documents_keep_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let b = sample();
        let bytes = b.to_bytes(0).unwrap();
        let w = write_bundle(dir.path(), &b, &bytes).unwrap();
        assert_eq!(w.path, dir.path().join("pkg-1.2.3.kbundle"));
        assert_eq!(w.pruned, Pruned::Nothing);
        assert_eq!(keys(&w), ["path", "sha256", "size"]);
        let doc = PackageReport::package(&b, vec![&w], None, None);
        let mut want = vec![
            "schema",
            "name",
            "version",
            "manifest",
            "targets",
            "objects",
            "object_records",
            "bytes_saved",
            "bundles",
            "reproducible",
            "shard",
            "split",
        ];
        want.sort();
        assert_eq!(keys(&doc), want);
        let v = serde_json::to_value(&doc).unwrap();
        assert!(v["reproducible"].is_null() && v["shard"].is_null() && v["split"].is_null());
        let merged = [PathBuf::from("a.kbundle")];
        let report = MergeReport {
            missing_targets: Vec::new(),
            overlapping: 0,
        };
        let doc = PackageReport::merge(&b, vec![&w], &merged, &report, None);
        let mut want = vec![
            "schema",
            "name",
            "version",
            "manifest",
            "targets",
            "objects",
            "object_records",
            "bundles",
            "merged",
            "overlapping_records",
            "missing_targets",
            "partial",
        ];
        want.sort();
        assert_eq!(keys(&doc), want);
    }

    #[test]
    fn a_release_that_fits_is_written_whole_and_leftovers_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let b = sample();
        let bytes = b.to_bytes(0).unwrap();
        std::fs::write(dir.path().join("pkg-1.2.3.sm_8x.kbundle"), b"old").unwrap();
        let r = write_release(dir.path(), &b, &bytes, 1 << 30, 0).unwrap();
        assert!(r.index.is_none() && r.doc().is_none());
        assert_eq!(r.written().len(), 1);
        assert_eq!(r.leftovers, [dir.path().join("pkg-1.2.3.sm_8x.kbundle")]);
    }

    #[test]
    fn publish_paths() {
        assert_eq!(
            default_bundle_path("p", "1.0.0"),
            Path::new("dist/p-1.0.0.kbundle")
        );
        assert!(matches!(
            check_publish_path(Path::new("p-1.0.0.kbindex"), true),
            Err(OutputError::IndexNotBundle { .. })
        ));
    }
}
