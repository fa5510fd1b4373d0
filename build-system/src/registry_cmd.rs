//! `kbuild package | publish | pull | ls | keygen | sign`: thin commands over
//! `kbuild-registry` (bundle format, stores, cache, lockfile, signatures live there). This
//! module parses nothing itself beyond its flags and draws the progress bars.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use clap::Args;
use kbuild_loader::detect::{self, DeviceOptions};
use kbuild_manifest::compat::{parse_version, Device};
use kbuild_manifest::manifest::Manifest;
use kbuild_manifest::target::{parse_target_list, Version};
use kbuild_registry::cache::Cache;
use kbuild_registry::lock::{self, Lockfile};
use kbuild_registry::oci::{OciOptions, PublishOutcome};
use kbuild_registry::progress::Progress;
use kbuild_registry::pull::{self, Locked, PullRequest};
use kbuild_registry::sign::{Payload, Policy, SecretKey, SignatureFile, Trust, Verdict};
use kbuild_registry::store::Registry;
use kbuild_registry::Bundle;

use crate::build::{build, BuildOptions};
use crate::{config, fsutil};

/// Progress bars on stderr (hidden when it is not a terminal or output is JSON); notes as
/// plain lines.
struct Bars {
    show_bars: bool,
    quiet: bool,
    bar: Mutex<Option<indicatif::ProgressBar>>,
}

impl Bars {
    fn new(json: bool) -> Bars {
        Bars {
            show_bars: !json && std::io::stderr().is_terminal(),
            quiet: json,
            bar: Mutex::new(None),
        }
    }
}

impl Progress for Bars {
    fn begin(&self, label: &str, total: u64) {
        if !self.show_bars {
            return;
        }
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:>16} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_string());
        if let Ok(mut b) = self.bar.lock() {
            *b = Some(bar);
        }
    }
    fn advance(&self, bytes: u64) {
        if let Ok(b) = self.bar.lock() {
            if let Some(b) = b.as_ref() {
                b.inc(bytes);
            }
        }
    }
    fn end(&self) {
        if let Ok(mut b) = self.bar.lock() {
            if let Some(b) = b.take() {
                b.finish_and_clear();
            }
        }
    }
    fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("note: {text}");
        }
    }
}

/// Registry flags shared by publish, pull, ls and sign.
#[derive(Args, Debug, Default, Clone)]
pub struct RegistryArgs {
    /// DIR, file://DIR or oci://HOST[:PORT]/REPO (default: kbuild's local registry in the XDG
    /// data dir).
    #[arg(long, value_name = "REG", env = "KBUILD_REGISTRY")]
    pub registry: Option<String>,
    /// Talk plain HTTP to an OCI registry (no TLS), as ORAS's --plain-http.
    #[arg(long)]
    pub plain_http: bool,
    /// Upload chunk size in bytes (OCI).
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20, hide = true)]
    pub chunk_size: usize,
    /// Retries on 5xx/429/timeouts (OCI), with exponential backoff.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub retries: u32,
}

impl RegistryArgs {
    fn open(&self) -> Result<Registry> {
        let spec = match &self.registry {
            Some(r) => r.clone(),
            None => fsutil::data_dir().join("registry").display().to_string(),
        };
        let opts = OciOptions {
            plain_http: self.plain_http,
            chunk_size: self.chunk_size.max(1),
            retries: self.retries,
            ..OciOptions::default()
        };
        Ok(Registry::parse(&spec, opts)?)
    }
}

/// Signature flags shared by pull and publish.
#[derive(Args, Debug, Default, Clone)]
pub struct TrustArgs {
    /// require | warn | off (default: [signatures] policy in the kbuild config, else warn).
    #[arg(long, value_name = "POLICY", env = "KBUILD_SIGNATURE_POLICY", value_parser = parse_policy)]
    pub signature_policy: Option<Policy>,
    /// A trusted public key file (.pub), besides those in the kbuild config. Repeatable.
    #[arg(long = "trusted-key", value_name = "PATH")]
    pub trusted_keys: Vec<PathBuf>,
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse()
}

impl TrustArgs {
    fn trust(&self) -> Result<Trust> {
        let mut t = Trust::load()?;
        if let Some(p) = self.signature_policy {
            t.policy = p;
        }
        for k in &self.trusted_keys {
            t.add_key(&k.display().to_string(), Path::new("."))?;
        }
        Ok(t)
    }
}

#[derive(Args, Debug)]
pub struct PackageArgs {
    /// A build output directory (holding manifest.json). Default: build the project (through
    /// the cache) first, then package its out-dir.
    #[arg(value_name = "BUILD_DIR")]
    pub build_dir: Option<PathBuf>,
    /// Only these targets (names, groups, TORCH_CUDA_ARCH_LIST syntax).
    #[arg(long, value_name = "LIST")]
    pub targets: Option<String>,
    /// Where bundles go.
    #[arg(long, value_name = "DIR", default_value = "dist")]
    pub out: PathBuf,
    /// Also write one bundle per target.
    #[arg(long)]
    pub split: bool,
    /// Rebuild from scratch (fresh cache, fresh out-dir), package again, and compare bytes.
    #[arg(long)]
    pub verify_reproducible: bool,
    /// Path to Kbuild.toml (default: found from the current directory).
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

fn load_project(manifest_path: Option<&Path>) -> Result<config::Project> {
    let file = match manifest_path {
        Some(p) => p.to_path_buf(),
        None => config::find(&std::env::current_dir().context("reading the current directory")?)?,
    };
    Ok(config::load(&file)?)
}

fn canonical_targets(list: &str) -> Result<Vec<String>> {
    Ok(parse_target_list(list)?
        .iter()
        .map(|t| t.to_string())
        .collect())
}

fn build_into(
    project: &config::Project,
    targets: Option<&str>,
    out_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
) -> Result<PathBuf> {
    let targets = match targets {
        Some(l) => Some(parse_target_list(l)?),
        None => None,
    };
    let opts = BuildOptions {
        targets,
        out_dir,
        cache_dir,
        ..BuildOptions::default()
    };
    let report = build(project, &opts)?;
    if !report.failures.is_empty() {
        bail!(
            "{} job(s) failed; nothing was packaged (run `kbuild build` to see them)",
            report.failures.len()
        );
    }
    Ok(report.out_dir)
}

/// `kbuild package`.
pub fn run_package(args: PackageArgs) -> Result<ExitCode> {
    let filter = match &args.targets {
        Some(l) => Some(canonical_targets(l)?),
        None => None,
    };
    let build_dir = match &args.build_dir {
        Some(d) => d.clone(),
        None => {
            let project = load_project(args.manifest_path.as_deref())?;
            build_into(&project, args.targets.as_deref(), None, None)?
        }
    };
    let bundle = Bundle::from_build_dir(&build_dir, filter.as_deref())?;
    let bytes = bundle.to_bytes()?;
    let mut written = vec![write_bundle(&args.out, &bundle.file_name(), &bytes)?];
    if args.split {
        for t in bundle.targets() {
            let part = bundle.restrict(std::slice::from_ref(&t))?;
            let b = part.to_bytes()?;
            written.push(write_bundle(&args.out, &part.file_name(), &b)?);
        }
    }
    let mut reproducible = None;
    if args.verify_reproducible {
        let project = load_project(args.manifest_path.as_deref())?;
        let scratch = fsutil::tempdir_in(&std::env::temp_dir(), "kbuild-reproduce")
            .context("creating a scratch directory")?;
        let list = bundle.manifest().targets.join(",");
        let again = build_into(
            &project,
            Some(&list),
            Some(scratch.join("out")),
            Some(scratch.join("cache")),
        );
        let second = again.and_then(|d| Ok(Bundle::from_build_dir(&d, filter.as_deref())?));
        let _ = std::fs::remove_dir_all(&scratch);
        let second = second?;
        let second_bytes = second.to_bytes()?;
        if second_bytes != bytes {
            let diffs = differing_objects(bundle.manifest(), second.manifest());
            eprintln!(
                "error: not reproducible: a clean rebuild packages to different bytes ({} vs {})",
                kbuild_registry::digest::oci_digest(&bytes),
                kbuild_registry::digest::oci_digest(&second_bytes)
            );
            for d in diffs {
                eprintln!("  {d}");
            }
            return Ok(ExitCode::from(1));
        }
        reproducible = Some(true);
    }
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
                "objects": bundle.objects().len(), "bundles": files, "reproducible": reproducible,
            })
        );
    } else {
        for (p, size, d) in &written {
            println!("packaged {} ({size} bytes, {d})", p.display());
        }
        if reproducible == Some(true) {
            println!("reproducible: a clean rebuild gave byte-identical bundles");
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

fn write_bundle(dir: &Path, name: &str, bytes: &[u8]) -> Result<(PathBuf, usize, String)> {
    let p = dir.join(name);
    fsutil::write_if_changed(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
    Ok((p, bytes.len(), kbuild_registry::digest::oci_digest(bytes)))
}

#[derive(Args, Debug)]
pub struct PublishArgs {
    /// The bundle (default: dist/NAME-VERSION.kbundle of the project here). Its `.sig` file,
    /// when present, is published too.
    #[arg(value_name = "BUNDLE")]
    pub bundle: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

/// `kbuild publish`.
pub fn run_publish(args: PublishArgs) -> Result<ExitCode> {
    let path = match &args.bundle {
        Some(p) => p.clone(),
        None => {
            let project = load_project(args.manifest_path.as_deref())?;
            PathBuf::from("dist").join(format!("{}-{}.kbundle", project.name, project.version))
        }
    };
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let bundle = Bundle::from_bytes(&bytes, kbuild_registry::archive::Limits::from_env())
        .with_context(|| path.display().to_string())?;
    let sig_path = kbuild_registry::signature_path(&path);
    let sigs = match std::fs::read(&sig_path) {
        Ok(b) => {
            Some(SignatureFile::from_json(&b).with_context(|| sig_path.display().to_string())?)
        }
        Err(_) => None,
    };
    let registry = args.registry.open()?;
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

#[derive(Args, Debug)]
pub struct PullArgs {
    /// NAME, NAME@1.2.3 (exact), NAME@^1.2 (semver requirement) or NAME@sha256:... (digest).
    #[arg(value_name = "NAME[@REQ]")]
    pub spec: String,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Fetch only what this device would load: `auto` (detect) or a target to simulate
    /// (sm_90, 9.0, gfx1151, gfx90a:xnack-). Default: every target.
    #[arg(long, value_name = "auto|TARGET")]
    pub device: Option<String>,
    /// CUDA driver version of a simulated NVIDIA device (default: the newest kbuild knows).
    #[arg(long, value_name = "VERSION", value_parser = parse_driver)]
    pub driver: Option<Version>,
    /// A simulated AMD device's runtime does not load generic (code object v6) objects.
    #[arg(long)]
    pub no_generic: bool,
    /// Refuse anything that differs from Kbuild.lock.
    #[arg(long)]
    pub locked: bool,
    /// Serve from the local cache only.
    #[arg(long)]
    pub offline: bool,
    /// The lockfile (default: ./Kbuild.lock).
    #[arg(long, value_name = "PATH", default_value = lock::FILE_NAME)]
    pub lockfile: PathBuf,
    /// Also write the pulled (subset) bundle and its signatures here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[arg(long)]
    pub json: bool,
}

fn parse_driver(s: &str) -> Result<Version, String> {
    parse_version(s).ok_or_else(|| format!("`{s}` is not a CUDA version like 13.0"))
}

/// The targets a device selects, per kernel, through the loader's selection (the one compat
/// table); an error naming each kernel that nothing runs on.
fn device_targets(
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
pub fn run_pull(args: PullArgs) -> Result<ExitCode> {
    let (name, want) = pull::parse_spec(&args.spec).map_err(anyhow::Error::msg)?;
    let registry = args.registry.open()?;
    let cache = Cache::new(&fsutil::cache_dir().join("registry"));
    let trust = args.trust.trust()?;
    let progress = Bars::new(args.json);
    let device = match &args.device {
        None => None,
        Some(d) => {
            let opts = DeviceOptions {
                device: Some(d.clone()),
                driver: args.driver,
                no_generic: args.no_generic,
                index: None,
            };
            let r = detect::resolve(&opts)?;
            Some((r.device, r.describe()))
        }
    };
    let lock_now = Lockfile::read(&args.lockfile)?;
    let locked = args.locked.then(|| Locked {
        entry: lock_now.as_ref().and_then(|l| l.find(&name)),
        path: &args.lockfile,
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
    let select = |m: &Manifest| -> Result<Vec<String>, String> {
        match &device {
            None => Ok(m.targets.clone()),
            Some((d, label)) => device_targets(m, d, label),
        }
    };
    let pulled = pull::pull(&req, &select)?;
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
    let mut out_file = None;
    if let Some(dir) = &args.out {
        let p = dir.join(pulled.bundle.file_name());
        fsutil::write_if_changed(&p, &pulled.bundle.to_bytes()?)
            .with_context(|| format!("writing {}", p.display()))?;
        if let Some(s) = &pulled.signatures {
            let sp = kbuild_registry::signature_path(&p);
            fsutil::write_if_changed(&sp, &s.to_json())
                .with_context(|| format!("writing {}", sp.display()))?;
        }
        out_file = Some(p);
    }
    let b = &pulled.bundle;
    let signature = match &pulled.verdict {
        Verdict::Verified { key_id } => serde_json::json!({"status": "verified", "key": key_id}),
        Verdict::Warning(w) => serde_json::json!({"status": "unverified", "warning": w}),
        Verdict::NotChecked => serde_json::json!({"status": "not-checked"}),
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "schema": "kbuild.pull/v1", "name": name, "version": b.version(),
                "registry": registry.describe(), "artifact": pulled.artifact,
                "manifest": b.manifest_digest(), "targets": b.targets(), "layers": pulled.lock.layers,
                "objects": b.objects().len(), "layer_bytes": pulled.layer_bytes,
                "from_cache": pulled.from_cache, "device": device.as_ref().map(|d| d.1.clone()),
                "signature": signature, "bundle": out_file,
            })
        );
    } else {
        let sig = match &pulled.verdict {
            Verdict::Verified { key_id } => format!("signature verified (key {key_id})"),
            Verdict::Warning(_) => "signature NOT verified".into(),
            Verdict::NotChecked => "signature not checked (policy off)".into(),
        };
        println!(
            "pulled {name} {} ({}) {}: {} ({} objects, {}); {sig}",
            b.version(),
            pulled.artifact,
            match &device {
                Some((_, label)) => format!("for {label}"),
                None => "for every target".into(),
            },
            b.targets().join(", "),
            b.objects().len(),
            if pulled.from_cache {
                "from the cache".to_string()
            } else {
                format!("{} layer bytes fetched", pulled.layer_bytes)
            },
        );
        if let Some(p) = out_file {
            println!("wrote {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct LsArgs {
    /// A package name (default: every cached package; for a directory registry, all).
    pub name: Option<String>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Only what is cached locally.
    #[arg(long)]
    pub offline: bool,
    #[arg(long)]
    pub json: bool,
}

/// `kbuild ls`: cached versions, and the registry's.
pub fn run_ls(args: LsArgs) -> Result<ExitCode> {
    let registry = args.registry.open()?;
    let cache = Cache::new(&fsutil::cache_dir().join("registry"));
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

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Directory for NAME.key (secret, mode 0600) and NAME.pub (default: the kbuild config
    /// dir's keys/).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[arg(long, default_value = "kbuild")]
    pub name: String,
    /// Replace existing key files.
    #[arg(long)]
    pub force: bool,
}

fn default_key_dir() -> PathBuf {
    Trust::config_path()
        .parent()
        .map(|p| p.join("keys"))
        .unwrap_or_else(|| PathBuf::from("keys"))
}

/// `kbuild keygen`.
pub fn run_keygen(args: KeygenArgs) -> Result<ExitCode> {
    let dir = args.out.clone().unwrap_or_else(default_key_dir);
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
        Trust::config_path().display()
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct SignArgs {
    /// A bundle file (writes BUNDLE.sig), or NAME@VERSION in --registry.
    #[arg(value_name = "BUNDLE|REF")]
    pub target: String,
    /// The secret key (default: KBUILD_SIGNING_KEY, else the key `kbuild keygen` made).
    #[arg(long, value_name = "PATH", env = "KBUILD_SIGNING_KEY")]
    pub key: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

/// `kbuild sign`.
pub fn run_sign(args: SignArgs) -> Result<ExitCode> {
    let key_path = args
        .key
        .clone()
        .unwrap_or_else(|| default_key_dir().join("kbuild.key"));
    let key = SecretKey::load(&key_path)
        .with_context(|| "hint: make a key with `kbuild keygen`, or pass --key".to_string())?;
    let file = Path::new(&args.target);
    if file.is_file() {
        let bundle = Bundle::open(file)?;
        let sig_path = kbuild_registry::signature_path(file);
        let mut sigs = match std::fs::read(&sig_path) {
            Ok(b) => SignatureFile::from_json(&b)?,
            Err(_) => SignatureFile::new(),
        };
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
    let registry = args.registry.open()?;
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
