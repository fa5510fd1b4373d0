//! `kbuild package | publish | pull | ls | keygen | sign`: thin commands over
//! `kbuild-registry` (bundle format, stores, cache, lockfile, signatures live there). This
//! module parses nothing itself beyond its flags and draws the progress bars.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_base::fs as fsutil;
use kbuild_build::build::{build, BuildOptions};
use kbuild_build::config;
use kbuild_bundle::archive::Limits;
use kbuild_bundle::cache::Cache;
use kbuild_bundle::sign::{Payload, SecretKey, SignatureFile, Trust, Verdict};
use kbuild_bundle::{Bundle, Pruned};
use kbuild_loader::detect::{self, DeviceOptions};
use kbuild_manifest::compat::Device;
use kbuild_manifest::manifest::Manifest;
use kbuild_manifest::target::Target;
use kbuild_registry::lock::{LockMode, Lockfile};
use kbuild_registry::oci::{OciOptions, PublishOutcome};
use kbuild_registry::pull::{self, Locked, PullRequest};
use kbuild_registry::store::Registry;

use super::assets;
use crate::cli::{
    KeygenArgs, LsArgs, PackageArgs, PublishArgs, PullArgs, RegistryArgs, SignArgs, TrustArgs,
};
use crate::progress::Bars;

impl RegistryArgs {
    pub(crate) fn open(&self, env: &Env) -> Result<Registry> {
        let spec = match &self.registry {
            Some(r) => r.clone(),
            None => Dirs::from_env(env)?
                .data
                .join("registry")
                .display()
                .to_string(),
        };
        let opts = OciOptions {
            plain_http: self.plain_http,
            chunk_size: self.chunk_size.max(1),
            retries: self.retries,
            ..OciOptions::from_env(env)
        };
        Ok(Registry::parse(&spec, opts)?)
    }
}

impl TrustArgs {
    /// The user's trust settings (kbuild config, environment), then these flags.
    pub(crate) fn trust(&self, env: &Env) -> Result<Trust> {
        let mut t = Trust::load(env)?;
        if let Some(p) = self.signature_policy {
            t.policy = p;
        }
        for k in &self.trusted_keys {
            t.add_key(&k.display().to_string(), Path::new("."))?;
        }
        Ok(t)
    }
}

fn build_into(
    project: &config::Project,
    (targets, targets_all): (Option<Vec<Target>>, bool),
    out_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    allow_partial: bool,
    env: &Env,
) -> Result<PathBuf> {
    let opts = BuildOptions {
        targets,
        targets_all,
        out_dir,
        cache_dir,
        env: env.clone(),
        ..BuildOptions::default()
    };
    let report = build(
        project,
        &opts,
        &crate::progress::BuildProgress::new(false, env),
    )?;
    if !report.failures.is_empty() && !allow_partial {
        bail!(
            "{} job(s) failed; nothing was packaged (run `kbuild build` to see them)",
            report.failures.len()
        );
    }
    Ok(report.out_dir)
}

/// `kbuild package --merge A.kbundle B.kbundle ...`.
fn run_merge(args: &PackageArgs, env: &Env) -> Result<ExitCode> {
    let mut inputs = Vec::new();
    for p in &args.merge {
        let b = Bundle::open(p, Limits::from_env(env)).with_context(|| p.display().to_string())?;
        inputs.push((p.display().to_string(), b));
    }
    let (bundle, report) = kbuild_bundle::merge::merge(&inputs, args.allow_partial)?;
    let bytes = bundle.to_bytes(env.source_date_epoch())?;
    if let Some(limit) = args.max_asset_size {
        // The merged release, split for release assets.
        let mtime = env.source_date_epoch();
        let split = assets::package_split(&args.out, &bundle, &bytes, limit, mtime)?;
        if args.json {
            let files: Vec<serde_json::Value> = split
                .written()
                .iter()
                .map(|(p, size, d)| serde_json::json!({"path": p, "size": size, "sha256": d}))
                .collect();
            println!(
                "{}",
                serde_json::json!({
                    "schema": "kbuild.package/v1", "name": bundle.name(), "version": bundle.version(),
                    "manifest": bundle.manifest_digest(), "targets": bundle.targets(),
                    "objects": bundle.storage().stored, "object_records": bundle.storage().objects,
                    "bundles": files, "merged": args.merge, "overlapping_records": report.overlapping,
                    "missing_targets": report.missing_targets, "partial": bundle.manifest().partial,
                    "split": split.json(),
                })
            );
        } else {
            println!("merged {} bundle(s)", inputs.len());
            split.print_text();
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (p, size, digest) = write_bundle(&args.out, &bundle, &bytes)?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "schema": "kbuild.package/v1", "name": bundle.name(), "version": bundle.version(),
                "manifest": bundle.manifest_digest(), "targets": bundle.targets(),
                "objects": bundle.storage().stored, "object_records": bundle.storage().objects,
                "bundles": [{"path": p, "size": size, "sha256": digest}],
                "merged": args.merge, "overlapping_records": report.overlapping,
                "missing_targets": report.missing_targets, "partial": bundle.manifest().partial,
            })
        );
    } else {
        println!(
            "merged {} bundle(s) into {} ({size} bytes, {digest})",
            inputs.len(),
            p.display()
        );
        if let Some(note) = bundle.manifest().partial_note() {
            println!("  {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `kbuild package`.
pub fn run_package(args: PackageArgs, env: &Env) -> Result<ExitCode> {
    if !args.merge.is_empty() {
        return run_merge(&args, env);
    }
    let (targets, targets_all) = crate::cli::build_targets(&args.targets)?;
    // `all` packages what the build holds: the targets its toolchains could build.
    let filter: Option<Vec<String>> = targets
        .as_ref()
        .filter(|_| !targets_all)
        .map(|ts| ts.iter().map(Target::to_string).collect());
    let mtime = env.source_date_epoch();
    let build_dir = match &args.build_dir {
        Some(d) => d.clone(),
        None => {
            let project = config::open(args.manifest_path.as_deref())?;
            build_into(
                &project,
                (targets.clone(), targets_all),
                None,
                None,
                args.allow_partial,
                env,
            )?
        }
    };
    let bundle = Bundle::from_build_dir(&build_dir, filter.as_deref(), args.allow_partial)?;
    let bytes = bundle.to_bytes(mtime)?;
    let split = match args.max_asset_size {
        Some(limit) => Some(assets::package_split(
            &args.out, &bundle, &bytes, limit, mtime,
        )?),
        None => None,
    };
    let mut written = match &split {
        Some(s) => s.written(),
        None => vec![write_bundle(&args.out, &bundle, &bytes)?],
    };
    if args.split {
        for t in bundle.targets() {
            let part = bundle.restrict(std::slice::from_ref(&t))?;
            let b = part.to_bytes(mtime)?;
            written.push(write_bundle(&args.out, &part, &b)?);
        }
    }
    let mut reproducible = None;
    if args.verify_reproducible {
        let project = config::open(args.manifest_path.as_deref())?;
        let scratch = fsutil::tempdir_in(&std::env::temp_dir(), "kbuild-reproduce")
            .context("creating a scratch directory")?;
        let list =
            kbuild_manifest::target::parse_target_list(&bundle.manifest().targets.join(","))?;
        let again = build_into(
            &project,
            (Some(list), false),
            Some(scratch.join("out")),
            Some(scratch.join("cache")),
            args.allow_partial,
            env,
        );
        let second = again.and_then(|d| {
            Ok(Bundle::from_build_dir(
                &d,
                filter.as_deref(),
                args.allow_partial,
            )?)
        });
        let _ = std::fs::remove_dir_all(&scratch);
        let second = second?;
        let second_bytes = second.to_bytes(mtime)?;
        if second_bytes != bytes {
            let diffs = differing_objects(bundle.manifest(), second.manifest());
            eprintln!(
                "error: not reproducible: a clean rebuild packages to different bytes ({} vs {})",
                kbuild_base::digest::oci_digest(&bytes),
                kbuild_base::digest::oci_digest(&second_bytes)
            );
            for d in diffs {
                eprintln!("  {d}");
            }
            return Ok(ExitCode::from(1));
        }
        reproducible = Some(true);
    }
    let storage = bundle.storage();
    if args.json {
        let files: Vec<serde_json::Value> = written
            .iter()
            .map(|(p, size, d)| serde_json::json!({"path": p, "size": size, "sha256": d}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "schema": "kbuild.package/v1", "name": bundle.name(), "version": bundle.version(),
                "manifest": bundle.manifest_digest(), "targets": bundle.targets(),
                "objects": storage.stored, "object_records": storage.objects,
                "bytes_saved": storage.bytes_saved(), "bundles": files, "reproducible": reproducible,
                "shard": bundle.manifest().shard.as_ref().map(|s| serde_json::json!({"index": s.index, "count": s.count})),
                "split": split.as_ref().map(|s| s.json()),
            })
        );
    } else if let Some(s) = &split {
        s.print_text();
    } else {
        for (p, size, d) in &written {
            println!("packaged {} ({size} bytes, {d})", p.display());
        }
    }
    if !args.json {
        if storage.duplicates() > 0 {
            println!(
                "  {} objects, {} stored: {} identical to another (across variants or targets) stored once, {} bytes saved",
                storage.objects,
                storage.stored,
                storage.duplicates(),
                storage.bytes_saved()
            );
        }
        if reproducible == Some(true) {
            println!("reproducible: a clean rebuild gave byte-identical bundles");
        }
        if let Some(s) = &bundle.manifest().shard {
            println!(
                "  shard {}/{} ({}): not a release; join the shards with `kbuild package --merge`",
                s.index,
                s.count,
                if bundle.targets().is_empty() {
                    "no targets".to_string()
                } else {
                    bundle.targets().join(", ")
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn differing_objects(a: &Manifest, b: &Manifest) -> Vec<String> {
    let key = |o: &kbuild_manifest::manifest::ObjectRecord| {
        (o.target.clone(), o.kernel.clone(), o.variant.clone())
    };
    let bm: BTreeMap<_, _> = b.objects.iter().map(|o| (key(o), &o.sha256)).collect();
    let mut out: Vec<String> = a
        .objects
        .iter()
        .filter(|o| bm.get(&key(o)) != Some(&&o.sha256))
        .map(|o| {
            format!(
                "{} for {}: {} then {}",
                o.kernel,
                o.target,
                o.sha256,
                bm.get(&key(o)).map(|s| s.as_str()).unwrap_or("missing")
            )
        })
        .collect();
    if out.is_empty() {
        out.push("objects are equal; the manifest differs (provenance?)".into());
    }
    out
}

/// A file written: its path, size and `sha256:` digest.
pub(crate) type Written = (PathBuf, usize, String);

/// Write `bundle` (its `bytes`) into `dir`, and drop the signatures beside it that are not
/// for these bytes' manifest (a `.sig` of an earlier build of the same version).
pub(crate) fn write_bundle(dir: &Path, bundle: &Bundle, bytes: &[u8]) -> Result<Written> {
    write_named(dir, &bundle.file_name(), bundle, bytes)
}

/// [`write_bundle`] under the name `file` (a part of a split release, or its index: their
/// signatures are those of `bundle`'s manifest).
pub(crate) fn write_named(
    dir: &Path,
    file: &str,
    bundle: &Bundle,
    bytes: &[u8],
) -> Result<Written> {
    let p = dir.join(file);
    fsutil::write_if_changed(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
    match kbuild_bundle::prune_stale_signatures(&p, bundle)? {
        Pruned::Nothing => {}
        Pruned::Removed { path, why } => eprintln!(
            "note: removed {}: it no longer matches {} ({}); sign the new bundle with `kbuild sign {}`",
            path.display(),
            p.display(),
            why.join("; "),
            p.display()
        ),
        Pruned::Rewrote { path, removed } => eprintln!(
            "note: {}: dropped {} signature(s) that no longer match {} ({})",
            path.display(),
            removed.len(),
            p.display(),
            removed.join("; ")
        ),
    }
    Ok((p, bytes.len(), kbuild_base::digest::oci_digest(bytes)))
}

/// `kbuild publish`.
pub fn run_publish(args: PublishArgs, env: &Env) -> Result<ExitCode> {
    let path = match &args.bundle {
        Some(p) => p.clone(),
        None => {
            let project = config::open(args.manifest_path.as_deref())?;
            PathBuf::from("dist").join(format!("{}-{}.kbundle", project.name, project.version))
        }
    };
    assets::check_publish_path(&path, args.bundle.is_some())?;
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let bundle = Bundle::from_bytes(&bytes, Limits::from_env(env))
        .with_context(|| path.display().to_string())?;
    bundle.check_publishable(&path.display().to_string(), args.allow_partial)?;
    let sig_path = kbuild_bundle::signature_path(&path);
    let sigs = match std::fs::read(&sig_path) {
        Ok(b) => {
            Some(SignatureFile::from_json(&b).with_context(|| sig_path.display().to_string())?)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", sig_path.display())),
    };
    // Before anything is uploaded: a signature beside the bundle must be for this bundle.
    if let Some(s) = &sigs {
        if let Err(problem) =
            s.check_belongs(bundle.name(), bundle.version(), bundle.manifest_digest())
        {
            bail!(
                "{} does not match {}: {problem}; nothing was published (sign the bundle again with `kbuild sign {}`, or remove the .sig to publish it unsigned)",
                sig_path.display(),
                path.display(),
                path.display()
            );
        }
    }
    let registry = args.registry.open(env)?;
    let progress = Bars::new(args.json);
    let outcome = registry.publish(&bundle, &bytes, sigs.as_ref(), &progress)?;
    let reg = registry.describe();
    let (name, version) = (bundle.name(), bundle.version());
    match &outcome {
        PublishOutcome::Published {
            digest,
            uploaded,
            skipped,
            bytes,
        } => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"schema": "kbuild.publish/v1", "name": name, "version": version, "registry": reg, "digest": digest, "published": true, "uploaded_blobs": uploaded, "skipped_blobs": skipped, "uploaded_bytes": bytes, "signed": sigs.is_some()})
                );
            } else {
                println!("published {name} {version} to {reg} ({digest}; {uploaded} blob(s) uploaded, {bytes} bytes, {skipped} already there)");
            }
        }
        PublishOutcome::AlreadyPublished { digest } => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"schema": "kbuild.publish/v1", "name": name, "version": version, "registry": reg, "digest": digest, "published": false, "signed": sigs.is_some()})
                );
            } else {
                println!("{name} {version} is already in {reg} with exactly these bytes ({digest}); nothing to do");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The targets a device selects, per kernel, through the loader's selection (the one compat
/// table); an error naming each kernel that nothing runs on.
pub(crate) fn device_targets(
    manifest: &Manifest,
    device: &Device,
    label: &str,
) -> Result<Vec<String>, String> {
    let sel = kbuild_loader::Package::from_manifest(manifest.clone())
        .map_err(|e| format!("{label}: {e}"))?
        .select(device);
    let mut picked: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    for k in &sel.kernels {
        match k.selected() {
            Some(c) => {
                if !picked.contains(&c.target) {
                    picked.push(c.target.clone());
                }
            }
            None => missing.push(match &k.variant {
                Some(v) => format!("{}.{v}", k.kernel),
                None => k.kernel.clone(),
            }),
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "no object of {} {} runs on {label}: {} (targets: {}); see `kbuild explain --device {}`",
            manifest.package.name,
            manifest.package.version,
            missing.join(", "),
            manifest.targets.join(", "),
            device.name()
        ));
    }
    picked.sort_by_key(|t| manifest.targets.iter().position(|m| m == t));
    Ok(picked)
}

/// `kbuild pull`.
/// The device `pull --device` names (detected for `auto`, else simulated), with its
/// description; `None` without `--device`.
pub fn pull_device(
    args: &PullArgs,
    env: &Env,
) -> Result<Option<(kbuild_manifest::compat::Device, String)>> {
    let Some(d) = &args.device else {
        return Ok(None);
    };
    let opts = DeviceOptions {
        device: Some(d.clone()),
        driver: args.driver,
        no_generic: args.no_generic,
        index: None,
        hip: kbuild_loader::hip::HipSearch::from_env(env),
    };
    let r = detect::resolve(&opts)?;
    Ok(Some((r.device, r.describe())))
}

pub fn run_pull(args: PullArgs, env: &Env) -> Result<ExitCode> {
    if kbuild_bundle::assets::is_index_path(Path::new(&args.spec)) {
        return assets::run_pull_release(&args, env);
    }
    let (name, want) = pull::parse_spec(&args.spec).map_err(anyhow::Error::msg)?;
    let registry = args.registry.open(env)?;
    let cache = Cache::new(&Dirs::from_env(env)?.registry_cache());
    let trust = args.trust.trust(env)?;
    let progress = Bars::new(args.json);
    let device = pull_device(&args, env)?;
    let lock_now = Lockfile::read(&args.lockfile)?;
    let mode = if args.locked {
        LockMode::Exact
    } else if args.update {
        LockMode::Update
    } else {
        LockMode::Keep
    };
    let locked = (args.locked || lock_now.is_some()).then(|| Locked {
        entry: lock_now.as_ref().and_then(|l| l.find(&name)),
        path: &args.lockfile,
        mode,
    });
    let req = PullRequest {
        registry: &registry,
        cache: &cache,
        name: &name,
        want: &want,
        offline: args.offline,
        locked,
        trust: &trust,
        progress: &progress,
    };
    let select = |m: &Manifest| -> Result<Vec<String>, pull::SelectError> {
        match &device {
            None => Ok(m.targets.clone()),
            Some((d, label)) => device_targets(m, d, label).map_err(Into::into),
        }
    };
    let pulled = pull::pull(&req, &select)?;
    let shown = PulledShown {
        source: registry.describe(),
        artifact: pulled.artifact.clone(),
        device: device.as_ref().map(|d| d.1.clone()),
        bytes: "layer bytes fetched",
    };
    let out_file = finish_pull(
        &args,
        env,
        &pulled,
        lock_now,
        &shown,
        serde_json::Map::new(),
    )?;
    if let (false, Some(p)) = (args.json, out_file) {
        println!("wrote {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// How a pull's report names what it pulled from.
pub struct PulledShown {
    /// The registry, or the index file of a split release (JSON `registry`).
    pub source: String,
    /// What the text line names in parentheses.
    pub artifact: String,
    /// The device pulled for, when `--device` was given.
    pub device: Option<String>,
    /// What `layer_bytes` counts, in the text line.
    pub bytes: &'static str,
}

/// After a pull (from a registry or a split release's index): the signature warning, the
/// lockfile, `--out` (its path returned; the caller prints it after its own lines), and the
/// report (`kbuild.pull/v1` JSON with `extra` keys, or the text line).
pub fn finish_pull(
    args: &PullArgs,
    env: &Env,
    pulled: &pull::Pulled,
    lock_now: Option<Lockfile>,
    shown: &PulledShown,
    extra: serde_json::Map<String, serde_json::Value>,
) -> Result<Option<PathBuf>> {
    if let Verdict::Warning(w) = &pulled.verdict {
        if !args.json {
            eprintln!("warning: {w}");
        }
    }
    if !args.locked {
        let mut l = lock_now.unwrap_or_default();
        l.upsert(pulled.lock.clone());
        l.write(&args.lockfile)?;
    }
    let b = &pulled.bundle;
    let name = b.name();
    let mut out_file = None;
    if let Some(dir) = &args.out {
        let p = dir.join(b.file_name());
        fsutil::write_if_changed(&p, &b.to_bytes(env.source_date_epoch())?)
            .with_context(|| format!("writing {}", p.display()))?;
        if let Some(s) = &pulled.signatures {
            let sp = kbuild_bundle::signature_path(&p);
            fsutil::write_if_changed(&sp, &s.to_json())
                .with_context(|| format!("writing {}", sp.display()))?;
        }
        out_file = Some(p);
    }
    if args.json {
        let signature = match &pulled.verdict {
            Verdict::Verified { key_id } => {
                serde_json::json!({"status": "verified", "key": key_id})
            }
            Verdict::Warning(w) => serde_json::json!({"status": "unverified", "warning": w}),
            Verdict::NotChecked => serde_json::json!({"status": "not-checked"}),
        };
        let mut report = serde_json::json!({
            "schema": "kbuild.pull/v1", "name": name, "version": b.version(),
            "registry": shown.source, "artifact": pulled.artifact,
            "manifest": b.manifest_digest(), "targets": b.targets(), "layers": pulled.lock.layers,
            "objects": b.objects().len(), "layer_bytes": pulled.layer_bytes,
            "from_cache": pulled.from_cache, "device": shown.device,
            "signature": signature, "bundle": out_file,
            "partial": b.manifest().partial_note(),
        });
        if let Some(map) = report.as_object_mut() {
            map.extend(extra);
        }
        println!("{report}");
    } else {
        let sig = match &pulled.verdict {
            Verdict::Verified { key_id } => format!("signature verified (key {key_id})"),
            Verdict::Warning(_) => "signature NOT verified".into(),
            Verdict::NotChecked => "signature not checked (policy off)".into(),
        };
        println!(
            "pulled {name} {} ({}) {}: {} ({} objects, {}); {sig}",
            b.version(),
            shown.artifact,
            match &shown.device {
                Some(label) => format!("for {label}"),
                None => "for every target".into(),
            },
            b.targets().join(", "),
            b.objects().len(),
            if pulled.from_cache {
                "from the cache".to_string()
            } else {
                format!("{} {}", pulled.layer_bytes, shown.bytes)
            },
        );
    }
    if let Some(note) = b.manifest().partial_note() {
        eprintln!("warning: {name} {}: {note}", b.version());
    }
    Ok(out_file)
}

/// `kbuild ls`: cached versions, and the registry's.
pub fn run_ls(args: LsArgs, env: &Env) -> Result<ExitCode> {
    let registry = args.registry.open(env)?;
    let cache = Cache::new(&Dirs::from_env(env)?.registry_cache());
    let cached = cache.refs(None, args.name.as_deref());
    let progress = Bars::new(args.json);
    let mut remote: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if !args.offline {
        let names: Vec<String> = match (&args.name, &registry) {
            (Some(n), _) => vec![n.clone()],
            (None, Registry::Dir(d)) => std::fs::read_dir(d.root())
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter(|e| e.path().is_dir())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| kbuild_registry::dir::check_name(n).is_ok())
                        .collect()
                })
                .unwrap_or_default(),
            (None, Registry::Oci { repo: Some(r), .. }) => {
                vec![r.rsplit('/').next().unwrap_or(r).to_string()]
            }
            (None, Registry::Oci { repo: None, .. }) => {
                bail!(
                    "name a package: `kbuild ls NAME --registry {}`",
                    registry.describe()
                )
            }
        };
        for n in names {
            remote.insert(n.clone(), registry.versions(&n, &progress)?);
        }
    }
    if args.json {
        let cached: Vec<serde_json::Value> = cached
            .iter()
            .map(|r| serde_json::json!({"registry": r.registry, "name": r.name, "version": r.version, "artifact": r.artifact, "targets": r.layers.keys().collect::<Vec<_>>()}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"schema": "kbuild.ls/v1", "registry": registry.describe(), "remote": remote, "cached": cached})
        );
        return Ok(ExitCode::SUCCESS);
    }
    for (n, versions) in &remote {
        println!(
            "{n} in {}: {}",
            registry.describe(),
            if versions.is_empty() {
                "no versions".to_string()
            } else {
                versions.join(", ")
            }
        );
    }
    if cached.is_empty() {
        println!("cache: nothing pulled yet");
    }
    for r in &cached {
        println!(
            "cached {} {} from {} ({}): {}",
            r.name,
            r.version,
            r.registry,
            r.artifact,
            r.layers.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn default_key_dir(env: &Env) -> Result<PathBuf> {
    Ok(Dirs::from_env(env)?
        .config_file
        .parent()
        .map(|p| p.join("keys"))
        .unwrap_or_else(|| PathBuf::from("keys")))
}

/// `kbuild keygen`.
pub fn run_keygen(args: KeygenArgs, env: &Env) -> Result<ExitCode> {
    let dir = match &args.out {
        Some(d) => d.clone(),
        None => default_key_dir(env)?,
    };
    let secret = dir.join(format!("{}.key", args.name));
    let public = dir.join(format!("{}.pub", args.name));
    if !args.force && (secret.exists() || public.exists()) {
        bail!(
            "{} already exists; pass --force to replace it (signatures by the old key will no longer verify against the new one)",
            secret.display()
        );
    }
    let key = SecretKey::generate()?;
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{}.key.tmp", args.name));
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(key.to_text().as_bytes())?;
    }
    std::fs::rename(&tmp, &secret).with_context(|| format!("writing {}", secret.display()))?;
    fsutil::write_atomic(&public, key.public().to_text().as_bytes())
        .with_context(|| format!("writing {}", public.display()))?;
    println!("secret key: {} (keep it private)", secret.display());
    println!(
        "public key: {} (id {})",
        public.display(),
        key.public().id()
    );
    println!(
        "hint: trust it with `trusted-keys = [\"{}\"]` under [signatures] in {}",
        public.display(),
        Dirs::from_env(env)?.config_file.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `kbuild sign`.
pub fn run_sign(args: SignArgs, env: &Env) -> Result<ExitCode> {
    let key_path = match &args.key {
        Some(k) => k.clone(),
        None => default_key_dir(env)?.join("kbuild.key"),
    };
    let key = SecretKey::load(&key_path)
        .with_context(|| "hint: make a key with `kbuild keygen`, or pass --key".to_string())?;
    let file = Path::new(&args.target);
    if file.is_file() && kbuild_bundle::assets::is_index_path(file) {
        return assets::sign_index(file, &key);
    }
    if file.is_file() {
        let bundle = Bundle::open(file, Limits::from_env(env))?;
        let sig_path = kbuild_bundle::signature_path(file);
        let sigs = match std::fs::read(&sig_path) {
            Ok(b) => {
                SignatureFile::from_json(&b).with_context(|| sig_path.display().to_string())?
            }
            Err(_) => SignatureFile::new(),
        };
        // Signatures of another bundle (an earlier build of this version) do not stay.
        let (mut sigs, stale) =
            sigs.split_belonging(bundle.name(), bundle.version(), bundle.manifest_digest());
        if !stale.is_empty() {
            eprintln!(
                "note: {}: dropped {} signature(s) that do not match {} ({})",
                sig_path.display(),
                stale.len(),
                file.display(),
                stale
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        sigs.add(key.sign(Payload::new(
            bundle.name(),
            bundle.version(),
            bundle.manifest_digest(),
        )));
        fsutil::write_atomic(&sig_path, &sigs.to_json())
            .with_context(|| format!("writing {}", sig_path.display()))?;
        println!(
            "signed {} {} (manifest {}) with key {}: {}",
            bundle.name(),
            bundle.version(),
            bundle.manifest_digest(),
            key.public().id(),
            sig_path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some((name, version)) = args.target.split_once('@') else {
        bail!(
            "`{}` is neither a bundle file nor NAME@VERSION",
            args.target
        );
    };
    if kbuild_registry::semver::Version::parse(version).is_err() {
        bail!("sign a published bundle by its exact version: NAME@1.2.3");
    }
    let registry = args.registry.open(env)?;
    let progress = Bars::new(false);
    let resolved = registry.resolve(name, version, &progress)?;
    let mut sigs = SignatureFile::new();
    sigs.add(key.sign(Payload::new(name, version, &resolved.manifest_digest)));
    registry.add_signatures(&resolved, &sigs, &progress)?;
    println!(
        "signed {name} {version} in {} (manifest {}) with key {}",
        registry.describe(),
        resolved.manifest_digest,
        key.public().id()
    );
    Ok(ExitCode::SUCCESS)
}
