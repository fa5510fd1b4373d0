//! A kbuild bundle `NAME-VERSION.kbundle`: the build manifest plus its objects, verified.
//!
//! Layout (tar+zstd, see [`crate::archive`]): `manifest.json` first (the build manifest,
//! re-serialised canonically), then `targets.json` only in a subset bundle (one written by
//! `package --split`, a part of a split release (`package --max-asset-size`, see
//! [`crate::assets`]), or assembled by `pull --device`: `{"targets": [...]}` names the targets
//! whose objects are inside), then every object once as `objects/sha256/<hex>`: grouped by
//! target in manifest order, sorted by sha256 within a target, each target's group its own
//! zstd frame (so a bundle costs the sum of its per-target OCI layers, see `oci.rs`). A subset
//! bundle keeps the whole manifest so a signature over its digest still verifies.
//!
//! Opening checks everything: each object hashes to its name, every object of every present
//! target is there with the recorded size, nothing unreferenced is there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kbuild_manifest::manifest::{Manifest, ManifestError};

use crate::archive::{self, ArchiveError, ArchiveLimits, Entry};
use crate::digest;

/// The largest manifest.json kbuild reads: the manifest crate's limit.
pub const MAX_MANIFEST_BYTES: u64 = kbuild_manifest::manifest::MAX_JSON_BYTES;

/// Why a bundle was refused.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("not a kbuild bundle: {0}")]
    NotABundle(String),
    #[error("bundle manifest: {0}")]
    Manifest(#[from] ManifestError),
    #[error("object {name} does not match its sha256 (it hashes to {actual}); the bundle is corrupt or was tampered with")]
    ObjectDigest { name: String, actual: String },
    #[error("manifest lists {kernel} for {target} as object {sha256}, which the bundle does not contain")]
    MissingObject {
        kernel: String,
        target: String,
        sha256: String,
    },
    #[error(
        "object {sha256} ({kernel} for {target}) is {actual} bytes, the manifest says {expected}"
    )]
    SizeMismatch {
        kernel: String,
        target: String,
        sha256: String,
        expected: u64,
        actual: u64,
    },
    #[error("bundle holds object {0}, which no record of its manifest references")]
    Unreferenced(String),
    #[error("target `{target}` is not in the manifest (it has: {have})")]
    UnknownTarget { target: String, have: String },
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{0}")]
    Build(String),
    /// The manifest's bytes were refused before they were parsed (its signature).
    #[error(transparent)]
    Refused(Box<dyn std::error::Error + Send + Sync>),
    #[error("its manifest.json is {0} bytes, over kbuild's limit of {MAX_MANIFEST_BYTES} bytes; refusing an oversize manifest")]
    ManifestTooLarge(u64),
    /// A shard bundle (`kbuild build --shard`) at publish, without `--allow-partial`.
    #[error("{what} is shard {index}/{count} of {package} (targets {targets}), not a release; merge the shards first with `kbuild package --merge SHARD.kbundle...` (or pass --allow-partial to {action} this shard anyway)")]
    Shard {
        what: String,
        package: String,
        index: u32,
        count: u32,
        targets: String,
        action: &'static str,
    },
    /// A build with failed or missing objects, or a bundle marked partial, without
    /// `--allow-partial`.
    #[error("{what} is a partial build of {package}: {summary}; refusing to {action} it (pass --allow-partial to {action} it anyway, marked partial)")]
    Partial {
        what: String,
        package: String,
        summary: String,
        action: &'static str,
    },
}

/// A bundle's manifest as parsed to admit its entries, with its objects by sha256.
struct Declared {
    manifest: Manifest,
    by_sha256: std::collections::HashMap<String, usize>,
}

/// A judgement of a manifest's bytes before they are parsed.
pub type ManifestCheck<'a> = dyn FnMut(&[u8]) -> Result<(), BundleError> + 'a;

/// Whether a bundle's next archive entry `name` of `size` bytes may be inflated, given the
/// entries read so far (`manifest`: the first entry, parsed once it is read).
fn admit_entry(
    manifest: &mut Option<Declared>,
    so_far: &[archive::Entry],
    name: &str,
    size: u64,
    check: &mut ManifestCheck,
) -> Result<(), ArchiveError> {
    let refuse = |why: String| ArchiveError::Refused {
        name: name.to_string(),
        why,
    };
    let Some(first) = so_far.first() else {
        if name != "manifest.json" {
            return Err(ArchiveError::NotKbuild(name.to_string()));
        }
        if size > MAX_MANIFEST_BYTES {
            return Err(refuse(format!(
                "declares {size} bytes, over kbuild's limit of {MAX_MANIFEST_BYTES} bytes for a manifest; refusing an oversize manifest"
            )));
        }
        return Ok(());
    };
    if manifest.is_none() {
        check(&first.data)
            .map_err(|e| refuse(format!("comes after a manifest.json that was refused: {e}")))?;
        let m = Manifest::from_json(&first.data).map_err(|e| {
            refuse(format!(
                "comes after a manifest.json that is not valid: {e}"
            ))
        })?;
        let by_sha256 = m
            .objects
            .iter()
            .enumerate()
            .rev()
            .map(|(i, o)| (o.sha256.clone(), i))
            .collect();
        *manifest = Some(Declared {
            manifest: m,
            by_sha256,
        });
    }
    let Some(Declared {
        manifest: m,
        by_sha256,
    }) = manifest.as_ref()
    else {
        return Ok(());
    };
    if name == "targets.json" {
        // A list of the manifest's target names: far below this.
        if size > 1 << 20 {
            return Err(refuse(format!("declares {size} bytes for a target list")));
        }
        return Ok(());
    }
    if name == "assets.json" {
        return Err(refuse(
            "this is the index of a split release (NAME-VERSION.kbindex), not a bundle: `kbuild pull INDEX` reads the parts it lists, `kbuild explain INDEX` shows which a device needs".into(),
        ));
    }
    let hex = name.trim_start_matches("objects/sha256/");
    // Looked up, not searched: a bundle of 40,000 objects has as many entries.
    match by_sha256.get(hex).map(|&i| &m.objects[i]) {
        None => Err(refuse("no object of the manifest has this sha256".into())),
        Some(o) if o.size != size => Err(refuse(format!(
            "declares {size} bytes; the manifest records {} for {} on {}",
            o.size,
            record_label(o),
            o.target
        ))),
        Some(_) => Ok(()),
    }
}

/// A bundle's objects as its manifest lists them and as they are stored (one copy per
/// content).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Storage {
    /// Object records (of the targets inside).
    pub objects: usize,
    pub object_bytes: u64,
    /// Distinct contents stored.
    pub stored: usize,
    pub stored_bytes: u64,
}

impl Storage {
    /// Object records beyond the first of their content: stored once.
    pub fn duplicates(&self) -> usize {
        self.objects.saturating_sub(self.stored)
    }

    pub fn bytes_saved(&self) -> u64 {
        self.object_bytes.saturating_sub(self.stored_bytes)
    }
}

/// A verified bundle in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    manifest: Manifest,
    manifest_json: Vec<u8>,
    manifest_digest: String,
    /// sha256 hex → bytes.
    objects: BTreeMap<String, Vec<u8>>,
    /// `Some` in a subset bundle: the targets whose objects are inside.
    subset: Option<Vec<String>>,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetsFile {
    targets: Vec<String>,
}

impl Bundle {
    /// Read and verify a bundle file.
    /// Read and verify a bundle file, streaming: what is held in memory is what the archive
    /// unpacks to, within `limits`, never the compressed file as well.
    pub fn open(path: &Path, limits: ArchiveLimits) -> Result<Bundle, BundleError> {
        Bundle::open_checked(path, limits, &mut |_| Ok(()))
    }

    /// Verify a bundle held in memory.
    pub fn from_bytes(bytes: &[u8], limits: ArchiveLimits) -> Result<Bundle, BundleError> {
        Bundle::from_reader(bytes, limits)
    }

    /// Read and verify a bundle from a stream.
    pub fn from_reader(
        reader: impl std::io::Read,
        limits: ArchiveLimits,
    ) -> Result<Bundle, BundleError> {
        Bundle::from_reader_checked(reader, limits, &mut |_| Ok(()))
    }

    /// [`Bundle::open`] with `check` judging the manifest's bytes before they are parsed
    /// (the signature, under the `require` policy).
    pub fn open_checked(
        path: &Path,
        limits: ArchiveLimits,
        check: &mut ManifestCheck,
    ) -> Result<Bundle, BundleError> {
        let file = std::fs::File::open(path).map_err(|err| BundleError::Io {
            path: path.display().to_string(),
            err,
        })?;
        let reader = std::io::BufReader::with_capacity(256 << 10, file);
        Bundle::from_reader_checked(reader, limits, check)
    }

    /// [`Bundle::from_reader`] with `check` judging the manifest's bytes before they are
    /// parsed; its error refuses the bundle.
    pub fn from_reader_checked(
        reader: impl std::io::Read,
        limits: ArchiveLimits,
        check: &mut ManifestCheck,
    ) -> Result<Bundle, BundleError> {
        // Each entry is judged from its tar header before it is inflated: manifest.json first
        // and bounded, then only objects it declares, at the sizes it declares.
        let mut declared: Option<Declared> = None;
        let entries = archive::read_stream(reader, limits, &mut |so_far, name, size| {
            admit_entry(&mut declared, so_far, name, size, check)
        })?;
        let mut it = entries.into_iter();
        let first = it
            .next()
            .ok_or_else(|| BundleError::NotABundle("the archive is empty".into()))?;
        if first.name != "manifest.json" {
            return Err(BundleError::NotABundle(format!(
                "its first entry is `{}`; a kbuild bundle starts with manifest.json",
                first.name
            )));
        }
        let mut subset = None;
        let mut objects = BTreeMap::new();
        for e in it {
            if e.name == "targets.json" {
                if subset.is_some() || !objects.is_empty() {
                    return Err(BundleError::NotABundle(
                        "targets.json must come right after manifest.json".into(),
                    ));
                }
                let t: TargetsFile = serde_json::from_slice(&e.data)
                    .map_err(|err| BundleError::NotABundle(format!("targets.json: {err}")))?;
                subset = Some(t.targets);
            } else if e.name == "manifest.json" {
                return Err(BundleError::NotABundle("two manifests".into()));
            } else {
                let hex = e.name.trim_start_matches("objects/sha256/").to_string();
                objects.insert(hex, e.data);
            }
        }
        if declared.is_none() {
            // A bundle of a manifest alone: nothing came after it to have it checked.
            check(&first.data)?;
        }
        // The manifest parsed to admit the entries is the one verified (no second parse).
        Bundle::assemble(first.data, declared.map(|d| d.manifest), objects, subset)
    }

    /// Assemble and verify a bundle from a manifest's bytes and objects keyed by sha256 hex.
    /// `subset` names the targets present (`None`: all of the manifest's).
    pub fn from_parts(
        manifest_json: Vec<u8>,
        objects: BTreeMap<String, Vec<u8>>,
        subset: Option<Vec<String>>,
    ) -> Result<Bundle, BundleError> {
        Bundle::assemble(manifest_json, None, objects, subset)
    }

    /// [`Bundle::from_parts`], with `parsed` the manifest already parsed from `manifest_json`.
    fn assemble(
        manifest_json: Vec<u8>,
        parsed: Option<Manifest>,
        objects: BTreeMap<String, Vec<u8>>,
        subset: Option<Vec<String>>,
    ) -> Result<Bundle, BundleError> {
        if manifest_json.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(BundleError::ManifestTooLarge(manifest_json.len() as u64));
        }
        let manifest = match parsed {
            Some(m) => m,
            None => Manifest::from_json(&manifest_json)?,
        };
        let subset = match subset {
            Some(s) => {
                let mut seen = BTreeSet::new();
                for t in &s {
                    if !manifest.targets.contains(t) {
                        return Err(unknown_target(&manifest, t));
                    }
                    if !seen.insert(t) {
                        return Err(BundleError::NotABundle(format!(
                            "targets.json names {t} twice"
                        )));
                    }
                }
                // A subset naming every target is the full bundle.
                (s.len() < manifest.targets.len()).then_some(s)
            }
            None => None,
        };
        let present: BTreeSet<&str> = match &subset {
            Some(s) => s.iter().map(String::as_str).collect(),
            None => manifest.targets.iter().map(String::as_str).collect(),
        };
        for (hex, data) in &objects {
            let actual = digest::sha256_hex(data);
            if &actual != hex {
                return Err(BundleError::ObjectDigest {
                    name: format!("objects/sha256/{hex}"),
                    actual,
                });
            }
        }
        let mut referenced = BTreeSet::new();
        for o in &manifest.objects {
            if !present.contains(o.target.as_str()) {
                continue;
            }
            let Some(data) = objects.get(&o.sha256) else {
                return Err(BundleError::MissingObject {
                    kernel: record_label(o),
                    target: o.target.clone(),
                    sha256: o.sha256.clone(),
                });
            };
            if data.len() as u64 != o.size {
                return Err(BundleError::SizeMismatch {
                    kernel: record_label(o),
                    target: o.target.clone(),
                    sha256: o.sha256.clone(),
                    expected: o.size,
                    actual: data.len() as u64,
                });
            }
            referenced.insert(o.sha256.as_str());
        }
        if let Some(extra) = objects.keys().find(|k| !referenced.contains(k.as_str())) {
            return Err(BundleError::Unreferenced(extra.clone()));
        }
        let manifest_digest = digest::oci_digest(&manifest_json);
        Ok(Bundle {
            manifest,
            manifest_json,
            manifest_digest,
            objects,
            subset,
        })
    }

    /// Package a build directory (`kbuild build --out DIR`): its manifest.json and objects,
    /// optionally only some targets. Each object's bytes are checked against the manifest.
    ///
    /// A build whose manifest lists failed or missing objects is refused unless
    /// `allow_partial`; then the bundle's manifest is marked `partial`.
    pub fn from_build_dir(
        dir: &Path,
        targets: Option<&[String]>,
        allow_partial: bool,
    ) -> Result<Bundle, BundleError> {
        let mpath = dir.join("manifest.json");
        let raw = std::fs::read(&mpath).map_err(|err| BundleError::Io {
            path: mpath.display().to_string(),
            err,
        })?;
        let mut manifest = Manifest::from_json(&raw)?;
        if let Some(keep) = targets {
            for t in keep {
                if !manifest.targets.contains(t) {
                    return Err(BundleError::Build(format!(
                        "target `{t}` is not in {} (it has: {}); build it first",
                        mpath.display(),
                        manifest.targets.join(", ")
                    )));
                }
            }
            manifest.targets.retain(|t| keep.contains(t));
            manifest.objects.retain(|o| keep.contains(&o.target));
            manifest.failed.retain(|o| keep.contains(&o.target));
            manifest.missing.retain(|o| keep.contains(&o.target));
            manifest.restricted.retain(|t, _| keep.contains(t));
        }
        if let Some(summary) = manifest.incomplete_summary() {
            if !allow_partial {
                return Err(BundleError::Partial {
                    what: mpath.display().to_string(),
                    package: format!("{} {}", manifest.package.name, manifest.package.version),
                    summary,
                    action: "package",
                });
            }
            manifest.partial = true;
        }
        // Multi-target containers (`--fat`) are build outputs, not per-target objects.
        manifest.containers.clear();
        let mut objects = BTreeMap::new();
        for o in &manifest.objects {
            let p = kbuild_base::ident::confined(dir, "object path", &o.path)
                .map_err(|e| BundleError::Build(format!("{}: {e}", mpath.display())))?;
            let data = std::fs::read(&p).map_err(|err| BundleError::Io {
                path: p.display().to_string(),
                err,
            })?;
            if digest::sha256_hex(&data) != o.sha256 {
                return Err(BundleError::Build(format!(
                    "{} changed since the build wrote manifest.json (sha256 differs); rebuild",
                    p.display()
                )));
            }
            objects.insert(o.sha256.clone(), data);
        }
        Bundle::from_parts(manifest.to_json().into_bytes(), objects, None)
    }

    /// The deterministic archive bytes: a first zstd frame with manifest.json (and
    /// targets.json), then one frame per target (manifest order) with its objects sorted by
    /// sha256; an object two targets share is stored once, with the first. Every header
    /// carries `mtime` (the builder's `SOURCE_DATE_EPOCH`, 0 when unset).
    pub fn to_bytes(&self, mtime: u64) -> Result<Vec<u8>, BundleError> {
        let mut head = vec![Entry {
            name: "manifest.json".into(),
            data: self.manifest_json.clone(),
        }];
        if let Some(s) = &self.subset {
            let data = serde_json::to_vec(&TargetsFile { targets: s.clone() })
                .map_err(|e| BundleError::Build(e.to_string()))?;
            head.push(Entry {
                name: "targets.json".into(),
                data,
            });
        }
        let mut groups: Vec<Vec<Entry>> = vec![head];
        let mut placed = BTreeSet::new();
        for t in self.targets() {
            let mut g = Vec::new();
            for (hex, data) in self.target_objects(&t) {
                if placed.insert(hex.clone()) {
                    g.push(Entry {
                        name: format!("objects/sha256/{hex}"),
                        data,
                    });
                }
            }
            groups.push(g);
        }
        let refs: Vec<&[Entry]> = groups.iter().map(Vec::as_slice).collect();
        Ok(archive::write_groups(&refs, mtime)?)
    }

    /// The same bundle with only `targets`' objects (a subset bundle, unless that is all).
    pub fn restrict(&self, targets: &[String]) -> Result<Bundle, BundleError> {
        for t in targets {
            if !self.targets().contains(t) {
                return Err(unknown_target(&self.manifest, t));
            }
        }
        let keep: BTreeSet<&str> = self
            .manifest
            .objects
            .iter()
            .filter(|o| targets.contains(&o.target))
            .map(|o| o.sha256.as_str())
            .collect();
        let objects = self
            .objects
            .iter()
            .filter(|(k, _)| keep.contains(k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // Keep the manifest's target order.
        let ordered: Vec<String> = self
            .manifest
            .targets
            .iter()
            .filter(|t| targets.contains(t))
            .cloned()
            .collect();
        Bundle::from_parts(self.manifest_json.clone(), objects, Some(ordered))
    }

    /// Refuse to publish a partial bundle (one whose manifest is marked partial or lists
    /// failed or missing objects) unless `allow_partial`. `what` names it in the error.
    pub fn check_publishable(&self, what: &str, allow_partial: bool) -> Result<(), BundleError> {
        let m = &self.manifest;
        if let (Some(shard), false) = (&m.shard, allow_partial) {
            return Err(BundleError::Shard {
                what: what.to_string(),
                package: format!("{} {}", m.package.name, m.package.version),
                index: shard.index,
                count: shard.count,
                targets: if m.targets.is_empty() {
                    "none".to_string()
                } else {
                    m.targets.join(", ")
                },
                action: "publish",
            });
        }
        if allow_partial || !(m.partial || m.is_incomplete()) {
            return Ok(());
        }
        Err(BundleError::Partial {
            what: what.to_string(),
            package: format!("{} {}", m.package.name, m.package.version),
            summary: m
                .incomplete_summary()
                .unwrap_or_else(|| "it is marked partial".to_string()),
            action: "publish",
        })
    }

    /// What the bundle unpacked to: its manifest and its objects' bytes.
    pub fn unpacked_bytes(&self) -> u64 {
        self.manifest_json.len() as u64 + self.objects.values().map(|o| o.len() as u64).sum::<u64>()
    }

    /// The parsed manifest and the objects (sha256 hex → bytes), for a reader that keeps
    /// them apart (the loader indexes the manifest; no second parse, no second copy).
    pub fn into_parts(self) -> (Manifest, BTreeMap<String, Vec<u8>>) {
        (self.manifest, self.objects)
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The manifest's exact bytes (what signatures and the OCI config digest cover).
    pub fn manifest_json(&self) -> &[u8] {
        &self.manifest_json
    }

    /// `sha256:<hex>` of [`Bundle::manifest_json`].
    pub fn manifest_digest(&self) -> &str {
        &self.manifest_digest
    }

    pub fn name(&self) -> &str {
        &self.manifest.package.name
    }

    pub fn version(&self) -> &str {
        &self.manifest.package.version
    }

    /// An object's bytes by sha256 hex (as in `ObjectRecord::sha256`), already verified.
    pub fn object(&self, sha256: &str) -> Option<&[u8]> {
        self.objects.get(sha256).map(Vec::as_slice)
    }

    /// All objects, sha256 hex → bytes.
    pub fn objects(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.objects
    }

    /// How its objects are stored: by content, so an object identical to another (across
    /// variants or targets) is stored once.
    pub fn storage(&self) -> Storage {
        let held =
            |o: &&kbuild_manifest::manifest::ObjectRecord| self.objects.contains_key(&o.sha256);
        let records: Vec<_> = self.manifest.objects.iter().filter(held).collect();
        Storage {
            objects: records.len(),
            object_bytes: records.iter().map(|o| o.size).sum(),
            stored: self.objects.len(),
            stored_bytes: self.objects.values().map(|b| b.len() as u64).sum(),
        }
    }

    /// The targets whose objects are inside, in manifest order.
    pub fn targets(&self) -> Vec<String> {
        match &self.subset {
            Some(s) => s.clone(),
            None => self.manifest.targets.clone(),
        }
    }

    /// Whether this is a subset bundle.
    pub fn is_subset(&self) -> bool {
        self.subset.is_some()
    }

    /// The objects of one target, sha256 hex → bytes.
    pub fn target_objects(&self, target: &str) -> BTreeMap<String, Vec<u8>> {
        self.manifest
            .objects
            .iter()
            .filter(|o| o.target == target)
            .filter_map(|o| {
                self.objects
                    .get(&o.sha256)
                    .map(|d| (o.sha256.clone(), d.clone()))
            })
            .collect()
    }

    /// `NAME-VERSION.kbundle`, `NAME-VERSION.T1+T2.kbundle` for a subset, and
    /// `NAME-VERSION.shard-I-of-N[.T1+T2].kbundle` for a shard (never a release's name).
    pub fn file_name(&self) -> String {
        let shard = match &self.manifest.shard {
            Some(s) => format!(".shard-{}-of-{}", s.index, s.count),
            None => String::new(),
        };
        match &self.subset {
            None => format!("{}-{}{shard}.kbundle", self.name(), self.version()),
            Some(s) => format!(
                "{}-{}{shard}.{}.kbundle",
                self.name(),
                self.version(),
                s.join("+")
            ),
        }
    }

    /// Whether this is a shard bundle (of a `kbuild build --shard` build).
    pub fn is_shard(&self) -> bool {
        self.manifest.shard.is_some()
    }
}

fn unknown_target(m: &Manifest, t: &str) -> BundleError {
    BundleError::UnknownTarget {
        target: t.to_string(),
        have: m.targets.join(", "),
    }
}

fn record_label(o: &kbuild_manifest::manifest::ObjectRecord) -> String {
    match &o.variant {
        Some(v) => format!("{}.{v}", o.kernel),
        None => o.kernel.clone(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use kbuild_manifest::fixtures::bundle_parts as sample;

    #[test]
    fn round_trip_subset_and_names() {
        let (m, o) = sample(&["sm_89", "gfx1100"]);
        let b = Bundle::from_parts(m, o, None).unwrap();
        let bytes = b.to_bytes(0).unwrap();
        let back = Bundle::from_bytes(&bytes, ArchiveLimits::default()).unwrap();
        assert_eq!(back, b);
        assert_eq!(b.file_name(), "pkg-1.2.3.kbundle");
        let s = b.restrict(&["gfx1100".to_string()]).unwrap();
        assert_eq!(s.file_name(), "pkg-1.2.3.gfx1100.kbundle");
        assert_eq!(s.objects().len(), 1);
        assert_eq!(s.manifest_digest(), b.manifest_digest());
        let sb = Bundle::from_bytes(&s.to_bytes(0).unwrap(), ArchiveLimits::default()).unwrap();
        assert_eq!(sb.targets(), vec!["gfx1100".to_string()]);
        assert!(b.restrict(&["sm_90".to_string()]).is_err());
    }

    #[test]
    fn refuses_missing_unreferenced_and_wrong_objects() {
        let (m, mut o) = sample(&["sm_89", "gfx1100"]);
        let first = o.keys().next().unwrap().clone();
        let mut missing = o.clone();
        missing.remove(&first);
        let e = Bundle::from_parts(m.clone(), missing, None).unwrap_err();
        assert!(matches!(e, BundleError::MissingObject { .. }), "{e}");
        let mut extra = o.clone();
        let junk = b"junk".to_vec();
        extra.insert(digest::sha256_hex(&junk), junk);
        let e = Bundle::from_parts(m.clone(), extra, None).unwrap_err();
        assert!(matches!(e, BundleError::Unreferenced(_)), "{e}");
        if let Some(v) = o.get_mut(&first) {
            v[0] ^= 1;
        }
        let e = Bundle::from_parts(m, o, None).unwrap_err();
        assert!(matches!(e, BundleError::ObjectDigest { .. }), "{e}");
    }

    #[test]
    fn refuses_an_archive_that_is_not_a_bundle() {
        let bytes = archive::write(
            &[Entry {
                name: "targets.json".into(),
                data: b"{\"targets\":[]}".to_vec(),
            }],
            0,
        )
        .unwrap();
        let e = Bundle::from_bytes(&bytes, ArchiveLimits::default()).unwrap_err();
        assert!(e.to_string().contains("starts with manifest.json"), "{e}");
    }

    /// A build whose gfx1100 holds no object (Kbuild.toml kept its one kernel off it) is
    /// refused by package as failures are, or packaged marked partial, which publish refuses
    /// without --allow-partial; packaging only the targets with objects is complete.
    #[test]
    fn a_target_without_objects_makes_package_refuse_or_mark_partial() {
        let dir = tempfile::tempdir().unwrap();
        let data = b"sm_89 object".to_vec();
        let o = kbuild_manifest::fixtures::object("k", "sm_89", "cubin", &data);
        std::fs::create_dir_all(dir.path().join("sm_89")).unwrap();
        std::fs::write(dir.path().join(&o.path), &data).unwrap();
        let mut m = kbuild_manifest::fixtures::manifest("pkg", "1.2.3", vec![o]);
        m.targets.push("gfx1100".into());
        m.restricted = [("gfx1100".to_string(), vec!["k".to_string()])].into();
        std::fs::write(dir.path().join("manifest.json"), m.to_json()).unwrap();

        let e = Bundle::from_build_dir(dir.path(), None, false).unwrap_err();
        assert!(matches!(e, BundleError::Partial { .. }), "{e}");
        assert!(
            e.to_string().contains(
                "1 target without objects (gfx1100: 0 of 1 kernel (1 restricted by Kbuild.toml))"
            ),
            "{e}"
        );
        let b = Bundle::from_build_dir(dir.path(), None, true).unwrap();
        assert!(b.manifest().partial);
        assert!(b.check_publishable("b", false).is_err());
        assert!(b.check_publishable("b", true).is_ok());
        let only = ["sm_89".to_string()];
        let b = Bundle::from_build_dir(dir.path(), Some(&only), false).unwrap();
        assert!(!b.manifest().partial && b.manifest().restricted.is_empty());
    }
}
