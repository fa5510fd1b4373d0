//! Split releases: one bundle per target family plus a small index, so that each release
//! asset fits a host's per-file limit (GitHub releases take 2 GiB per asset, PyPI less per
//! file) and a device downloads only its family's part.
//!
//! [`pack`] cuts a verified [`Bundle`] into parts: the targets grouped by
//! [`kbuild_manifest::target::Target::family`] (`sm_8x`, `sm_9x`, `gfx11`, ...), one subset
//! bundle per family (`NAME-VERSION.FAMILY.kbundle`: the whole manifest, a `targets.json`, the
//! family's objects: a normal bundle that verifies on its own), and a family still over the
//! limit cut by target into `NAME-VERSION.FAMILY-1.kbundle`, `-2`, ... The index
//! `NAME-VERSION.kbindex` ([`AssetIndex`]) is a small archive in the bundle format (tar+zstd,
//! deterministic, see [`crate::archive`]) of two entries: `manifest.json`, the build manifest
//! byte for byte as every part carries it (compressed, so the index is never larger than a
//! part), and `assets.json` (schema `kbuild.assets/v1`):
//!
//! ```json
//! {
//!   "schema": "kbuild.assets/v1",
//!   "name": "pkg", "version": "1.2.3",
//!   "manifest": "sha256:<hex of manifest.json, the same in every part>",
//!   "max_asset_size": 2147483648,
//!   "parts": [
//!     {"file": "pkg-1.2.3.sm_9x.kbundle", "sha256": "<hex of the file>", "size": 1234,
//!      "family": "sm_9x", "targets": ["sm_90", "compute_90"]}
//!   ]
//! }
//! ```
//!
//! (`zstd -dc pkg-1.2.3.kbindex | tar -xO assets.json` shows it.) `sha256` is the plain hex
//! `sha256sum` prints. The index carries the manifest so a reader selects what a device runs
//! (the loader's selection over the one compat table) before it downloads any part; the
//! manifest must hash to `manifest`, and each part's own manifest must too, so parts of two
//! builds never mix. Every target is in exactly one part. Same bundle and limit, same bytes.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use kbuild_manifest::manifest::Manifest;
use kbuild_manifest::target::family_of;

use crate::archive::{self, ArchiveLimits, Entry};
use crate::bundle::{Bundle, BundleError, MAX_MANIFEST_BYTES};
use crate::digest;

/// `schema` of an asset index.
pub const INDEX_SCHEMA: &str = "kbuild.assets/v1";

/// The file extension of an asset index (`NAME-VERSION.kbindex`).
pub const INDEX_EXTENSION: &str = "kbindex";

/// The largest index kbuild reads (unpacked): the manifest it carries plus its part list.
pub const MAX_INDEX_BYTES: u64 = MAX_MANIFEST_BYTES + (4 << 20);

/// The largest `assets.json`: thousands of parts are far below this.
const MAX_ASSETS_JSON: u64 = 4 << 20;

/// `NAME-VERSION.kbindex`.
pub fn index_file_name(name: &str, version: &str) -> String {
    format!("{name}-{version}.{INDEX_EXTENSION}")
}

/// Whether `path` names an asset index (by its extension).
pub fn is_index_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == INDEX_EXTENSION)
}

/// Why a size (`--max-asset-size`) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a size: {why} (write bytes, or a number with a unit: 2GiB, 500MiB, 1.5GB, 750K)")]
pub struct SizeError {
    pub input: String,
    pub why: &'static str,
}

/// Parse a size: plain bytes (`1048576`), or a number (decimals allowed) and a unit: `KB`,
/// `MB`, `GB`, `TB` are powers of 1000, `KiB`, `MiB`, `GiB`, `TiB` and the bare `K`, `M`, `G`,
/// `T` powers of 1024; `B` is bytes; units are case-insensitive, a space before one is allowed.
/// A fraction of a byte is rounded down.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |why| SizeError {
        input: input.to_string(),
        why,
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() {
        return Err(err("it does not start with a number"));
    }
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        _ => return Err(err("unknown unit")),
    };
    let (whole, frac) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if frac.contains('.') || (whole.is_empty() && frac.is_empty()) {
        return Err(err("malformed number"));
    }
    let too_large = || err("too large");
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large())?
    };
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_large)?;
    // The fraction exactly, digit by digit (no float rounding): at most 12 digits count.
    let mut scale = multiplier as u128;
    let mut frac_bytes: u128 = 0;
    let mut denom: u128 = 1;
    for d in frac.bytes().take(12) {
        frac_bytes = frac_bytes * 10 + u128::from(d - b'0');
        denom *= 10;
    }
    scale *= frac_bytes;
    bytes = bytes
        .checked_add(u64::try_from(scale / denom).map_err(|_| too_large())?)
        .ok_or_else(too_large)?;
    if bytes == 0 {
        return Err(err("it must be more than 0 bytes"));
    }
    Ok(bytes)
}

/// `2.00 GiB (2147483648 bytes)`-style text of a size, for messages.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.2} {unit} ({bytes} bytes)", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

/// Why a release could not be split, or an index or part was refused.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("target {target} alone packs to {}, over the asset limit of {}; no split can make it fit (raise --max-asset-size, or leave the target out with --targets)", human_size(*.size), human_size(*.limit))]
    TargetTooLarge {
        target: String,
        size: u64,
        limit: u64,
    },
    #[error("the index {file} would be {}, over the asset limit of {} (it carries the build manifest); raise --max-asset-size", human_size(*.size), human_size(*.limit))]
    IndexTooLarge { file: String, size: u64, limit: u64 },
    #[error("{path}: not a kbuild asset index ({what})")]
    NotAnIndex { path: String, what: String },
    #[error("{path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{file} is missing: the index {index} lists it as the part with {targets}; download it into {dir} beside the index")]
    MissingPart {
        file: String,
        index: String,
        dir: String,
        targets: String,
    },
    #[error("{file} does not match the index {index} (it is {actual_size} bytes with sha256 {actual}; the index says {expected_size} bytes, {expected}); the download is incomplete or was tampered with: fetch it again")]
    PartDigest {
        file: String,
        index: String,
        expected: String,
        expected_size: u64,
        actual: String,
        actual_size: u64,
    },
    #[error("{file}: {what}")]
    BadPart { file: String, what: String },
}

/// One part of a split release, as the index lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// File name, beside the index.
    pub file: String,
    /// Plain hex sha256 of the file.
    pub sha256: String,
    pub size: u64,
    pub family: String,
    /// The targets whose objects are inside, in manifest order.
    pub targets: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexFile {
    schema: String,
    name: String,
    version: String,
    manifest: String,
    max_asset_size: u64,
    parts: Vec<Part>,
}

/// The bytes of an index file, through the index's cap (a regular file of at most
/// [`MAX_INDEX_BYTES`]).
pub fn read_index(path: &Path) -> Result<Vec<u8>, AssetError> {
    kbuild_base::read::read_capped(path, MAX_INDEX_BYTES, "a split release's index").map_err(|e| {
        match e {
            kbuild_base::read::ReadError::Io { source, .. } => AssetError::Io {
                path: path.display().to_string(),
                err: source,
            },
            other => AssetError::NotAnIndex {
                path: path.display().to_string(),
                what: other.to_string(),
            },
        }
    })
}

/// The index of a split release, checked: the manifest it carries hashes to `manifest` and
/// names its package, every part name is a plain file name, every target of the manifest is
/// in exactly one part.
#[derive(Debug, Clone)]
pub struct AssetIndex {
    file: IndexFile,
    manifest_json: Vec<u8>,
    manifest: Manifest,
}

impl AssetIndex {
    /// Read and check an index held in memory; `origin` names it in errors.
    pub fn from_bytes(bytes: &[u8], origin: &str) -> Result<AssetIndex, AssetError> {
        AssetIndex::from_bytes_checked(bytes, origin, &mut |_| Ok(()))
    }

    /// [`AssetIndex::from_bytes`] with `check` judging the carried manifest's bytes (once
    /// they hash to what assets.json records) before they are parsed: the signature, under
    /// the `require` policy.
    pub fn from_bytes_checked(
        bytes: &[u8],
        origin: &str,
        check: &mut crate::bundle::ManifestCheck,
    ) -> Result<AssetIndex, AssetError> {
        let bad = |what: String| AssetError::NotAnIndex {
            path: origin.to_string(),
            what,
        };
        let limits = ArchiveLimits {
            max_unpacked: MAX_INDEX_BYTES,
            max_entries: 2,
        };
        let mut admit = |_: &[Entry], name: &str, size: u64| match name {
            "manifest.json" if size <= MAX_MANIFEST_BYTES => Ok(()),
            "assets.json" if size <= MAX_ASSETS_JSON => Ok(()),
            _ => Err(archive::ArchiveError::Refused {
                name: name.to_string(),
                why: format!(
                    "an asset index holds manifest.json and assets.json only ({size} bytes)"
                ),
            }),
        };
        let entries =
            archive::read_checked(bytes, limits, &mut admit).map_err(|e| bad(e.to_string()))?;
        let (mut manifest_json, mut assets) = (None, None);
        for e in entries {
            match e.name.as_str() {
                "manifest.json" => manifest_json = Some(e.data),
                _ => assets = Some(e.data),
            }
        }
        let (Some(manifest_json), Some(assets)) = (manifest_json, assets) else {
            return Err(bad("it lacks manifest.json or assets.json".into()));
        };
        let file: IndexFile =
            serde_json::from_slice(&assets).map_err(|e| bad(format!("assets.json: {e}")))?;
        if file.schema != INDEX_SCHEMA {
            return Err(bad(format!(
                "schema `{}`, expected `{INDEX_SCHEMA}`",
                file.schema
            )));
        }
        let actual = digest::oci_digest(&manifest_json);
        if actual != file.manifest {
            return Err(bad(format!(
                "its manifest.json hashes to {actual}, not the {} assets.json records; the index was edited or damaged",
                file.manifest
            )));
        }
        check(&manifest_json).map_err(|e| bad(e.to_string()))?;
        let manifest = Manifest::from_json(&manifest_json).map_err(|e| bad(e.to_string()))?;
        if manifest.package.name != file.name || manifest.package.version != file.version {
            return Err(bad(format!(
                "it names {} {} but carries the manifest of {} {}",
                file.name, file.version, manifest.package.name, manifest.package.version
            )));
        }
        let mut seen = BTreeSet::new();
        let listed: BTreeSet<&str> = manifest.targets.iter().map(String::as_str).collect();
        for p in &file.parts {
            kbuild_base::ident::check_component("part file", &p.file)
                .map_err(|e| bad(e.to_string()))?;
            if !digest::is_sha256_hex(&p.sha256) {
                return Err(bad(format!("part {}: `{}` is no sha256", p.file, p.sha256)));
            }
            for t in &p.targets {
                if !listed.contains(t.as_str()) {
                    return Err(bad(format!(
                        "part {} holds target {t}, which the manifest does not list",
                        p.file
                    )));
                }
                if !seen.insert(t.as_str()) {
                    return Err(bad(format!("target {t} is in two parts")));
                }
            }
        }
        if let Some(t) = manifest.targets.iter().find(|t| !seen.contains(t.as_str())) {
            return Err(bad(format!("no part holds target {t}")));
        }
        Ok(AssetIndex {
            file,
            manifest_json,
            manifest,
        })
    }

    /// Read and check an index file.
    pub fn open(path: &Path) -> Result<AssetIndex, AssetError> {
        AssetIndex::from_bytes(&read_index(path)?, &path.display().to_string())
    }

    /// `assets.json`: fields in the documented order, pretty-printed, newline-terminated.
    pub fn assets_json(&self) -> Result<Vec<u8>, AssetError> {
        let mut v = serde_json::to_vec_pretty(&self.file)
            .map_err(|e| BundleError::Build(format!("serialising the index: {e}")))?;
        v.push(b'\n');
        Ok(v)
    }

    /// The index file's bytes (deterministic; every header carries `mtime`).
    pub fn to_bytes(&self, mtime: u64) -> Result<Vec<u8>, AssetError> {
        let entries = [
            Entry {
                name: "manifest.json".into(),
                data: self.manifest_json.clone(),
            },
            Entry {
                name: "assets.json".into(),
                data: self.assets_json()?,
            },
        ];
        Ok(archive::write(&entries, mtime).map_err(BundleError::from)?)
    }

    pub fn name(&self) -> &str {
        &self.file.name
    }

    pub fn version(&self) -> &str {
        &self.file.version
    }

    /// `sha256:` of the manifest every part carries.
    pub fn manifest_digest(&self) -> &str {
        &self.file.manifest
    }

    /// The manifest's exact bytes.
    pub fn manifest_json(&self) -> &[u8] {
        &self.manifest_json
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn max_asset_size(&self) -> u64 {
        self.file.max_asset_size
    }

    pub fn parts(&self) -> &[Part] {
        &self.file.parts
    }

    /// `NAME-VERSION.kbindex`.
    pub fn file_name(&self) -> String {
        index_file_name(self.name(), self.version())
    }

    /// The parts holding any of `targets`, in index order.
    pub fn parts_for(&self, targets: &[String]) -> Vec<&Part> {
        self.file
            .parts
            .iter()
            .filter(|p| p.targets.iter().any(|t| targets.contains(t)))
            .collect()
    }

    /// Read one part from `dir` (where the index lies), check it against the index (size and
    /// sha256 before anything is unpacked), then as a bundle (every object's digest) and
    /// against the index again (same manifest, the targets listed). `index` names the index
    /// file in errors.
    pub fn read_part(
        &self,
        dir: &Path,
        part: &Part,
        index: &str,
        budget: &mut crate::archive::UnpackBudget,
    ) -> Result<Bundle, AssetError> {
        let path = dir.join(&part.file);
        let io = |err: std::io::Error| {
            if err.kind() == std::io::ErrorKind::NotFound {
                AssetError::MissingPart {
                    file: path.display().to_string(),
                    index: index.to_string(),
                    dir: dir.display().to_string(),
                    targets: part.targets.join(", "),
                }
            } else {
                AssetError::Io {
                    path: path.display().to_string(),
                    err,
                }
            }
        };
        // A regular file of the recorded size, then its sha256 streamed from it, before
        // anything of it is unpacked (a symlink to /dev/zero was hashed forever); the bundle
        // is read streaming too (a part can be GiBs: it is never held compressed).
        let meta = std::fs::metadata(&path).map_err(io)?;
        if !meta.is_file() {
            return Err(AssetError::BadPart {
                file: path.display().to_string(),
                what: "not a regular file; refusing to read it".into(),
            });
        }
        let size = meta.len();
        let actual = if size == part.size {
            digest::sha256_file(&path).map_err(io)?
        } else {
            "(not hashed: the size differs)".to_string()
        };
        if actual != part.sha256 || size != part.size {
            return Err(AssetError::PartDigest {
                file: path.display().to_string(),
                index: index.to_string(),
                expected: part.sha256.clone(),
                expected_size: part.size,
                actual,
                actual_size: size,
            });
        }
        let bad = |what: String| AssetError::BadPart {
            file: path.display().to_string(),
            what,
        };
        // Whatever is read now is checked as a bundle and against the index's manifest, so a
        // file swapped after hashing still yields only objects that manifest names.
        // A part carries the index's manifest: anything else is refused before it is parsed.
        let mut same_manifest = |json: &[u8]| {
            let d = digest::oci_digest(json);
            if d == self.manifest_digest() {
                Ok(())
            } else {
                Err(BundleError::NotABundle(format!(
                    "its manifest is {d}, the index's is {}: a part of another build",
                    self.manifest_digest()
                )))
            }
        };
        let bundle =
            Bundle::open_checked(&path, budget.next(), &mut same_manifest).map_err(|e| {
                bad(match e {
                    BundleError::Archive(a) => budget.explain(a).to_string(),
                    other => other.to_string(),
                })
            })?;
        budget.spend(bundle.unpacked_bytes());
        if bundle.targets() != part.targets {
            return Err(bad(format!(
                "it holds {}, the index says {}",
                bundle.targets().join(", "),
                part.targets.join(", ")
            )));
        }
        Ok(bundle)
    }
}

/// A part ready to be written.
#[derive(Debug)]
pub struct PartFile {
    pub part: Part,
    pub bundle: Bundle,
    pub bytes: Vec<u8>,
}

/// What [`pack`] made of a bundle.
#[derive(Debug)]
pub enum Packed {
    /// The whole bundle fits the limit: one asset, as without a limit.
    Whole,
    /// Parts (write them first) and the index over them (write it last).
    Split {
        parts: Vec<PartFile>,
        index: Box<AssetIndex>,
        index_bytes: Vec<u8>,
    },
}

/// `targets` (a manifest's) grouped by family, families in the order their first target
/// appears in the manifest, targets in manifest order.
pub fn families(targets: &[String]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for t in targets {
        let f = family_of(t);
        match out.iter_mut().find(|(name, _)| *name == f) {
            Some((_, ts)) => ts.push(t.clone()),
            None => out.push((f, vec![t.clone()])),
        }
    }
    out
}

/// A subset of `bundle` and its bytes.
fn packed(
    bundle: &Bundle,
    targets: &[String],
    mtime: u64,
) -> Result<(Bundle, Vec<u8>), AssetError> {
    let b = bundle.restrict(targets)?;
    let bytes = b.to_bytes(mtime)?;
    Ok((b, bytes))
}

/// Cut `bundle` (whose whole archive is `full_len` bytes) into assets of at most `limit`
/// bytes: [`Packed::Whole`] when it fits, else one part per family, a family over the limit
/// cut by target (greedily, in manifest order), and the index. A target that alone is over
/// the limit is [`AssetError::TargetTooLarge`].
pub fn pack(bundle: &Bundle, full_len: u64, limit: u64, mtime: u64) -> Result<Packed, AssetError> {
    if full_len <= limit {
        return Ok(Packed::Whole);
    }
    let prefix = format!("{}-{}", bundle.name(), bundle.version());
    let mut parts: Vec<PartFile> = Vec::new();
    let mut push = |file: String, family: &str, (b, bytes): (Bundle, Vec<u8>)| {
        parts.push(PartFile {
            part: Part {
                file,
                sha256: digest::sha256_hex(&bytes),
                size: bytes.len() as u64,
                family: family.to_string(),
                targets: b.targets(),
            },
            bundle: b,
            bytes,
        });
    };
    // The empty subset: the head (manifest.json, targets.json) every part repeats.
    let base = bundle.restrict(&[])?.to_bytes(mtime)?.len() as u64;
    for (family, targets) in families(&bundle.targets()) {
        let whole = packed(bundle, &targets, mtime)?;
        if whole.1.len() as u64 <= limit {
            push(format!("{prefix}.{family}.kbundle"), &family, whole);
            continue;
        }
        // Each target's own share (its zstd frame, see `Bundle::to_bytes`), measured alone.
        let mut alone = Vec::new();
        for t in &targets {
            let (_, bytes) = packed(bundle, std::slice::from_ref(t), mtime)?;
            let size = bytes.len() as u64;
            if size > limit {
                return Err(AssetError::TargetTooLarge {
                    target: t.clone(),
                    size,
                    limit,
                });
            }
            // A longer targets.json costs a few bytes more than measured alone.
            alone.push(size.saturating_sub(base) + t.len() as u64 + 8);
        }
        // Greedy by the estimate (objects shared by targets of a chunk are stored once, so
        // the real size is at most it), then checked on the real bytes: over, and the last
        // target moves to the next chunk.
        let mut chunks: Vec<(Bundle, Vec<u8>)> = Vec::new();
        let mut i = 0;
        while i < targets.len() {
            let mut end = i + 1;
            let mut est = base + alone[i];
            while end < targets.len() && est + alone[end] <= limit {
                est += alone[end];
                end += 1;
            }
            loop {
                let got = packed(bundle, &targets[i..end], mtime)?;
                if got.1.len() as u64 <= limit || end == i + 1 {
                    chunks.push(got);
                    break;
                }
                end -= 1;
            }
            i = end;
        }
        let n = chunks.len();
        for (k, chunk) in chunks.into_iter().enumerate() {
            let file = if n == 1 {
                format!("{prefix}.{family}.kbundle")
            } else {
                format!("{prefix}.{family}-{}.kbundle", k + 1)
            };
            push(file, &family, chunk);
        }
    }
    let file = IndexFile {
        schema: INDEX_SCHEMA.to_string(),
        name: bundle.name().to_string(),
        version: bundle.version().to_string(),
        manifest: bundle.manifest_digest().to_string(),
        max_asset_size: limit,
        parts: parts.iter().map(|p| p.part.clone()).collect(),
    };
    let index = AssetIndex {
        file,
        manifest_json: bundle.manifest_json().to_vec(),
        manifest: bundle.manifest().clone(),
    };
    let index_bytes = index.to_bytes(mtime)?;
    if index_bytes.len() as u64 > limit {
        return Err(AssetError::IndexTooLarge {
            file: index.file_name(),
            size: index_bytes.len() as u64,
            limit,
        });
    }
    Ok(Packed::Split {
        parts,
        index: Box::new(index),
        index_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        for (s, n) in [
            ("1048576", 1 << 20),
            ("2GiB", 2 << 30),
            ("2 GiB", 2 << 30),
            ("2gib", 2 << 30),
            ("500MiB", 500 << 20),
            ("1.5GB", 1_500_000_000),
            ("1.5GiB", 3 << 29),
            ("750K", 750 << 10),
            ("2G", 2 << 30),
            ("10KB", 10_000),
            ("10 b", 10),
            ("0.5KiB", 512),
            (".5KiB", 512),
            ("1.0000001KB", 1000),
        ] {
            assert_eq!(parse_size(s), Ok(n), "{s}");
        }
        for (s, why) in [
            ("", "it does not start with a number"),
            ("GiB", "it does not start with a number"),
            ("2 parsecs", "unknown unit"),
            ("1.2.3MB", "malformed number"),
            (".", "malformed number"),
            ("0", "it must be more than 0 bytes"),
            ("0.1B", "it must be more than 0 bytes"),
            ("99999999999999999999", "too large"),
            ("20000000TiB", "too large"),
            ("-1", "it does not start with a number"),
        ] {
            let e = parse_size(s).unwrap_err();
            assert_eq!(e.why, why, "{s}");
            assert!(e.to_string().contains(&format!("`{s}`")), "{e}");
        }
    }

    /// Six targets of three families, each with 8 KiB of incompressible object bytes.
    fn sample() -> Bundle {
        use kbuild_manifest::fixtures::{manifest, object};
        let mut objects = std::collections::BTreeMap::new();
        let mut records = Vec::new();
        for t in [
            "sm_80",
            "sm_89",
            "sm_90",
            "gfx1100",
            "compute_90",
            "gfx11-generic",
        ] {
            // xorshift bytes seeded by the name: zstd cannot shrink them.
            let mut x = t.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |a, b| {
                a.rotate_left(7) ^ u64::from(b)
            });
            let data: Vec<u8> = (0..8192)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let mut o = object("k", t, "cubin", &data);
            o.path = format!("{t}/k.cubin");
            objects.insert(o.sha256.clone(), data);
            records.push(o);
        }
        let m = manifest("pkg", "1.2.3", records);
        Bundle::from_parts(m.to_json().into_bytes(), objects, None).unwrap()
    }

    #[test]
    fn families_keep_manifest_order() {
        let ts: Vec<String> = ["sm_80", "gfx1100", "sm_90", "compute_80", "gfx11-generic"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let f = families(&ts);
        let names: Vec<(&str, Vec<&str>)> = f
            .iter()
            .map(|(n, t)| (n.as_str(), t.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            names,
            [
                ("sm_8x", vec!["sm_80", "compute_80"]),
                ("gfx11", vec!["gfx1100", "gfx11-generic"]),
                ("sm_9x", vec!["sm_90"]),
            ]
        );
    }

    #[test]
    fn pack_splits_by_family_then_by_target_and_the_index_reads_back() {
        let b = sample();
        let full = b.to_bytes(0).unwrap();
        assert!(matches!(
            pack(&b, full.len() as u64, full.len() as u64, 0).unwrap(),
            Packed::Whole
        ));
        // The largest family part: a limit just at it splits by family only.
        let fam_sizes: Vec<u64> = families(&b.targets())
            .iter()
            .map(|(_, t)| b.restrict(t).unwrap().to_bytes(0).unwrap().len() as u64)
            .collect();
        let limit = fam_sizes.iter().copied().max().unwrap();
        let Packed::Split {
            parts,
            index,
            index_bytes,
        } = pack(&b, full.len() as u64, limit, 0).unwrap()
        else {
            panic!("expected a split")
        };
        let files: Vec<&str> = parts.iter().map(|p| p.part.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "pkg-1.2.3.sm_8x.kbundle",
                "pkg-1.2.3.sm_9x.kbundle",
                "pkg-1.2.3.gfx11.kbundle"
            ]
        );
        for p in &parts {
            assert!(p.part.size <= limit);
            assert_eq!(p.part.sha256, digest::sha256_hex(&p.bytes));
            let back = Bundle::from_bytes(&p.bytes, ArchiveLimits::default()).unwrap();
            assert_eq!(back.manifest_digest(), b.manifest_digest());
        }
        assert_eq!(parts[1].part.targets, ["sm_90", "compute_90"]);
        let again = AssetIndex::from_bytes(&index_bytes, "i").unwrap();
        assert_eq!(again.to_bytes(0).unwrap(), index_bytes);
        assert!(index_bytes.len() < parts.iter().map(|p| p.bytes.len()).min().unwrap());
        assert_eq!(again.manifest_json(), b.manifest_json());
        assert_eq!(index.parts_for(&["compute_90".into()])[0].family, "sm_9x");
        // Deterministic.
        let Packed::Split {
            index_bytes: i2, ..
        } = pack(&b, full.len() as u64, limit, 0).unwrap()
        else {
            panic!()
        };
        assert_eq!(i2, index_bytes);

        // Just above the largest single target: families cut by target.
        let one: u64 = b
            .targets()
            .iter()
            .map(|t| {
                b.restrict(std::slice::from_ref(t))
                    .unwrap()
                    .to_bytes(0)
                    .unwrap()
                    .len() as u64
            })
            .max()
            .unwrap();
        let Packed::Split { parts, .. } = pack(&b, full.len() as u64, one, 0).unwrap() else {
            panic!()
        };
        assert!(parts.len() >= 4, "{parts:?}");
        assert!(parts.iter().all(|p| p.part.size <= one));
        let all: Vec<String> = parts.iter().flat_map(|p| p.part.targets.clone()).collect();
        assert_eq!(all.len(), b.targets().len());

        // Below one target: refused, naming it.
        let e = pack(&b, full.len() as u64, one - 1, 0).unwrap_err();
        assert!(matches!(e, AssetError::TargetTooLarge { .. }), "{e}");
        assert!(e.to_string().contains("alone packs to"), "{e}");
    }

    #[test]
    fn an_edited_index_is_refused() {
        let b = sample();
        let full = b.to_bytes(0).unwrap().len() as u64;
        let Packed::Split { index, .. } = pack(&b, full, full - 1, 0).unwrap() else {
            panic!()
        };
        let text = String::from_utf8(index.assets_json().unwrap()).unwrap();
        let rebuilt = |assets: &str, manifest: &[u8]| {
            archive::write(
                &[
                    Entry {
                        name: "manifest.json".into(),
                        data: manifest.to_vec(),
                    },
                    Entry {
                        name: "assets.json".into(),
                        data: assets.as_bytes().to_vec(),
                    },
                ],
                0,
            )
            .unwrap()
        };
        let ok = rebuilt(&text, b.manifest_json());
        assert!(AssetIndex::from_bytes(&ok, "x.kbindex").is_ok());
        let cases = [
            rebuilt(
                &text.replacen("\"sm_80\"", "\"sm_86\"", 1),
                b.manifest_json(),
            ),
            rebuilt(&text, &[b.manifest_json(), b" "].concat()),
            rebuilt(
                &text.replace("kbuild.assets/v1", "kbuild.assets/v9"),
                b.manifest_json(),
            ),
            rebuilt(&text.replacen(".kbundle", "/../x", 1), b.manifest_json()),
            b"{}".to_vec(),
        ];
        for bytes in cases {
            let e = AssetIndex::from_bytes(&bytes, "x.kbindex").unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("x.kbindex: not a kbuild asset index"),
                "{e}"
            );
        }
    }
}
