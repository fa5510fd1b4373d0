//! Split releases for release-asset limits: `kbuild package --max-asset-size SIZE` (parts per
//! target family plus an index, written here) and `kbuild pull DIR/NAME-VERSION.kbindex`
//! (only the parts a device needs). The format and the split live in
//! `kbuild_bundle::assets`, the pull in `kbuild_registry::release`; this module writes
//! files and renders.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_base::fs as fsutil;
use kbuild_bundle::archive::Limits;
use kbuild_bundle::assets::{self, human_size, Packed};
use kbuild_bundle::cache::Cache;
use kbuild_bundle::sign::{Payload, SecretKey, SignatureFile};
use kbuild_bundle::Bundle;
use kbuild_manifest::manifest::Manifest;
use kbuild_registry::lock::{self, Lockfile};
use kbuild_registry::pull;
use kbuild_registry::release::{self, ReleaseRequest};

use super::registry::{
    device_targets, finish_pull, pull_device, write_bundle, write_named, PulledShown, Written,
};
use crate::cli::PullArgs;

/// What `package --max-asset-size` wrote.
pub struct SplitReport {
    limit: u64,
    /// The whole bundle's size.
    full: u64,
    /// Each part (or the one whole bundle) as written, with its family and targets (none for
    /// the whole bundle).
    files: Vec<(Written, Option<assets::Part>)>,
    /// The index, when split.
    index: Option<Written>,
}

/// Write `bundle` (whose whole archive is `bytes`) into `out` within `limit`: whole when it
/// fits, else its parts and then the index. Notes other bundles or indexes of this version
/// in `out` (an earlier run's) that are not part of this release.
pub fn package_split(
    out: &Path,
    bundle: &Bundle,
    bytes: &[u8],
    limit: u64,
    mtime: u64,
) -> Result<SplitReport> {
    if let Some(s) = &bundle.manifest().shard {
        bail!(
            "{} {} here is shard {}/{} of a sharded build, not a release; merge the shards and split the release in one step: `kbuild package --merge SHARD.kbundle... --max-asset-size SIZE`",
            bundle.name(),
            bundle.version(),
            s.index,
            s.count
        );
    }
    let packed = assets::pack(bundle, bytes.len() as u64, limit, mtime)?;
    let index_name = assets::index_file_name(bundle.name(), bundle.version());
    let mut report = SplitReport {
        limit,
        full: bytes.len() as u64,
        files: Vec::new(),
        index: None,
    };
    match packed {
        Packed::Whole => {
            report.files.push((write_bundle(out, bundle, bytes)?, None));
            note_leftovers(out, bundle, &[bundle.file_name()]);
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
            note_leftovers(out, bundle, &mine);
        }
    }
    Ok(report)
}

impl SplitReport {
    /// The bundle files written (parts, or the whole bundle).
    pub fn written(&self) -> Vec<Written> {
        self.files.iter().map(|(w, _)| w.clone()).collect()
    }

    /// The `split` object of `kbuild.package/v1`: `null` when the bundle fit whole.
    pub fn json(&self) -> serde_json::Value {
        let Some((path, size, digest)) = &self.index else {
            return serde_json::Value::Null;
        };
        let parts: Vec<serde_json::Value> = self
            .files
            .iter()
            .filter_map(|((p, _, _), part)| {
                part.as_ref().map(|part| {
                    serde_json::json!({"path": p, "file": part.file, "size": part.size,
                        "sha256": part.sha256, "family": part.family, "targets": part.targets})
                })
            })
            .collect();
        serde_json::json!({
            "max_asset_size": self.limit, "bundle_size": self.full,
            "index": {"path": path, "size": size, "sha256": digest}, "parts": parts,
        })
    }

    pub fn print_text(&self) {
        let Some((ip, isize, idigest)) = &self.index else {
            for ((p, size, d), _) in &self.files {
                println!("packaged {} ({size} bytes, {d})", p.display());
            }
            println!(
                "  fits in one asset ({} ≤ --max-asset-size {}): not split",
                human_size(self.full),
                human_size(self.limit)
            );
            return;
        };
        println!(
            "the bundle is {}, over --max-asset-size {}: split into {} part(s) by target family",
            human_size(self.full),
            human_size(self.limit),
            self.files.len()
        );
        for ((p, size, d), part) in &self.files {
            let (family, targets) = part
                .as_ref()
                .map(|x| (x.family.as_str(), x.targets.join(", ")))
                .unwrap_or_default();
            println!(
                "packaged {} ({size} bytes, {d}): {family} [{targets}]",
                p.display()
            );
        }
        println!(
            "index {} ({isize} bytes, {idigest}): `kbuild pull {} --device auto` reads only the part the device needs",
            ip.display(),
            ip.display()
        );
    }
}

/// A note for each `NAME-VERSION.*` bundle or index in `dir` this run did not write (`mine`):
/// left from an earlier run, and not to be uploaded with this release.
fn note_leftovers(dir: &Path, bundle: &Bundle, mine: &[String]) {
    let prefix = format!("{}-{}.", bundle.name(), bundle.version());
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
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
    for n in stale {
        eprintln!(
            "note: {} is not part of this release (left from an earlier run); do not upload it with it",
            dir.join(n).display()
        );
    }
}

/// Refuse to publish a split release's index, or to guess the default bundle of a release
/// that was split (`explicit`: the user named `path`).
pub fn check_publish_path(path: &Path, explicit: bool) -> Result<()> {
    const HOW: &str = "a registry takes the whole bundle and stores one layer per target, so a device pulls only its own anyway: run `kbuild package --out DIR` without --max-asset-size and publish DIR/NAME-VERSION.kbundle";
    if assets::is_index_path(path) {
        bail!(
            "{} is the index of a split release (`package --max-asset-size`), not a bundle; {HOW}",
            path.display()
        );
    }
    let index = path.with_extension(assets::INDEX_EXTENSION);
    if !explicit && !path.exists() && index.exists() {
        bail!(
            "{} is not there: {} says the release was split (`package --max-asset-size`); {HOW}",
            path.display(),
            index.display()
        );
    }
    Ok(())
}

/// `kbuild sign NAME-VERSION.kbindex`: the signature covers the manifest the index and every
/// part carry (`NAME-VERSION.kbindex.sig`, which `pull` of the index checks); signatures of
/// another manifest already there are dropped.
pub fn sign_index(file: &Path, key: &SecretKey) -> Result<ExitCode> {
    let index = assets::AssetIndex::open(file)?;
    let (name, version, digest) = (index.name(), index.version(), index.manifest_digest());
    let sig_path = kbuild_bundle::signature_path(file);
    let sigs = match std::fs::read(&sig_path) {
        Ok(b) => SignatureFile::from_json(&b).with_context(|| sig_path.display().to_string())?,
        Err(_) => SignatureFile::new(),
    };
    let (mut sigs, stale) = sigs.split_belonging(name, version, digest);
    if !stale.is_empty() {
        eprintln!(
            "note: {}: dropped {} signature(s) that do not match {}",
            sig_path.display(),
            stale.len(),
            file.display()
        );
    }
    sigs.add(key.sign(Payload::new(name, version, digest)));
    fsutil::write_atomic(&sig_path, &sigs.to_json())
        .with_context(|| format!("writing {}", sig_path.display()))?;
    println!(
        "signed {name} {version} (manifest {digest}, the one every part carries) with key {}: {}",
        key.public().id(),
        sig_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `kbuild pull DIR/NAME-VERSION.kbindex [--device auto|TARGET]`: a split release, reading
/// only the parts that hold what the device runs (every part without --device).
pub fn run_pull_release(args: &PullArgs, env: &Env) -> Result<ExitCode> {
    let index = Path::new(&args.spec);
    if args.spec.starts_with("http://") || args.spec.starts_with("https://") {
        bail!(
            "`{}`: a split release is pulled from files, not URLs; download the index and the part(s) the device needs into one directory (the index lists them), then `kbuild pull DIR/{}`",
            args.spec,
            args.spec.rsplit('/').next().unwrap_or_default()
        );
    }
    if let Some(r) = &args.registry.registry {
        bail!(
            "{} is a split release's index: its parts are read from beside it, not from --registry {r}; drop --registry",
            index.display()
        );
    }
    let cache = Cache::new(&Dirs::from_env(env)?.registry_cache());
    let trust = args.trust.trust(env)?;
    let device = pull_device(args, env)?;
    let select = |m: &Manifest| -> Result<Vec<String>, pull::SelectError> {
        match &device {
            None => Ok(m.targets.clone()),
            Some((d, label)) => device_targets(m, d, label).map_err(Into::into),
        }
    };
    let req = ReleaseRequest {
        index,
        cache: &cache,
        trust: &trust,
        limits: Limits::from_env(env),
    };
    let got = release::pull_release(&req, &select)?;
    let pulled = &got.pulled;
    let b = &pulled.bundle;
    let name = b.name().to_string();
    let lock_now = Lockfile::read(&args.lockfile)?;
    match lock_now.as_ref().and_then(|l| l.find(&name)) {
        Some(e) if args.locked => lock::check(e, &pulled.lock, &args.lockfile)?,
        Some(e) if !args.update => lock::check_keep(e, &pulled.lock, &args.lockfile, None, true)?,
        None if args.locked => bail!(
            "--locked: {name} is not in {}; pull without --locked to add it",
            args.lockfile.display()
        ),
        _ => {}
    }
    let label = device.as_ref().map(|d| d.1.clone());
    let shown = PulledShown {
        source: release::describe(index),
        artifact: index.display().to_string(),
        device: label.clone(),
        bytes: "part bytes read",
    };
    let mut extra = serde_json::Map::new();
    extra.insert("index".into(), serde_json::json!(index));
    extra.insert("parts_read".into(), serde_json::json!(got.parts_read));
    extra.insert("parts_skipped".into(), serde_json::json!(got.parts_skipped));
    let out_file = finish_pull(args, env, pulled, lock_now, &shown, extra)?;
    if !args.json {
        for p in &got.parts_read {
            println!("  read {}", p.display());
        }
        if !got.parts_skipped.is_empty() {
            println!(
                "  not needed{}: {}",
                if label.is_some() {
                    " on this device"
                } else {
                    ""
                },
                got.parts_skipped.join(", ")
            );
        }
        if let Some(p) = out_file {
            println!("wrote {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
