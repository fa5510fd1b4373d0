//! The discovery build: every unit once per discovery target with `entries = ["*"]`, into a
//! scratch directory, to learn what each exports (and why a unit does not compile).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kbuild_manifest::manifest::Manifest;
use kbuild_manifest::target::{Target, Vendor};

use crate::build::{build, BuildOptions, Failure};
use crate::config::{Kernel, Language, Project, ToolchainConfig, VendorFlags, FILE_NAME};
use crate::entries::EntryPattern;
use crate::events::{Event, JobStatus, Observer};
use crate::toolchain::Toolchains;

use super::{package_name, CompileSettings, InitError, InitOptions, Unit};

/// The default targets per vendor, when `--targets` is not given (each kept only when the
/// found toolchain builds it).
pub(super) const DEFAULT_NVIDIA: &[&str] = &["sm_80", "sm_86", "sm_89", "sm_90"];
pub(super) const DEFAULT_AMD: &[&str] = &["gfx90a", "gfx942", "gfx1100"];

/// What the discovery build found for one unit.
#[derive(Debug, Clone, Default)]
pub(super) struct Discovered {
    /// By target name.
    pub(super) exported: BTreeMap<String, Vec<String>>,
    pub(super) errors: BTreeMap<String, String>,
}

pub(super) fn vendor_of(target: &str) -> Option<Vendor> {
    target.parse::<Target>().ok().map(|t| t.vendor())
}

/// One target per vendor: sm_89 / gfx1100 when the list has them (or no list was given),
/// else the list's first target of that vendor; only those the found toolchains build.
pub(super) fn discovery_targets(given: Option<&[Target]>, tcs: &Toolchains) -> Vec<Target> {
    let mut out = Vec::new();
    for (vendor, preferred) in [(Vendor::Nvidia, "sm_89"), (Vendor::Amd, "gfx1100")] {
        let Ok(pref) = preferred.parse::<Target>() else {
            continue;
        };
        let pick = match given {
            None => Some(pref),
            Some(list) if list.contains(&pref) => Some(pref),
            Some(list) => list
                .iter()
                .find(|t| t.vendor() == vendor && tcs.check(t).is_ok())
                .copied(),
        };
        if let Some(t) = pick.filter(|t| tcs.check(t).is_ok()) {
            out.push(t);
        }
    }
    out
}

/// Build every unit once per discovery target (each (unit, target) its own kernel, so the
/// targets are read apart) with `entries = ["*"]`, into a scratch directory.
#[allow(clippy::too_many_arguments)]
pub(super) fn discover(
    dir: &Path,
    units: &[Unit],
    settings: &CompileSettings,
    flags: &VendorFlags,
    discovery: &[Target],
    cache_dir: &Path,
    opts: &InitOptions,
    observer: &dyn Observer,
) -> Result<BTreeMap<String, Discovered>, InitError> {
    let all = EntryPattern::parse("*").map_err(|e| InitError::Manifest {
        path: String::new(),
        message: e.to_string(),
    })?;
    let mut kernels = Vec::new();
    let mut owner: BTreeMap<String, (String, Target)> = BTreeMap::new();
    for u in units {
        for t in discovery {
            if u.language == Language::Hip && t.vendor() != Vendor::Amd {
                continue;
            }
            let name = format!("{}__{}", u.kernel, t.to_string().replace(':', "_"));
            owner.insert(name.clone(), (u.kernel.clone(), *t));
            kernels.push(Kernel {
                name,
                source: u.rel.clone(),
                language: u.language,
                include_dirs: settings.include_dirs.iter().map(PathBuf::from).collect(),
                defines: settings.defines.clone(),
                variants: Vec::new(),
                flags: flags.clone(),
                entries: crate::entries::KernelEntries::plain(vec![all.clone()]),
                block_size: crate::config::KernelBlockSize::None,
                targets: Some(vec![*t]),
                target_vendors: Vec::new(),
                triton: None,
            });
        }
    }
    let scratch = cache_dir.join("tmp");
    let out_dir =
        kbuild_base::fs::tempdir_in(&scratch, "init").map_err(|err| InitError::Write {
            path: scratch.display().to_string(),
            err,
        })?;
    let project = Project {
        file: dir.join(FILE_NAME),
        root: dir.to_path_buf(),
        name: package_name(dir),
        version: "0.1.0".into(),
        default_targets: discovery.to_vec(),
        default_targets_all: false,
        out_dir: out_dir.clone(),
        flags: VendorFlags::default(),
        launcher: None,
        job_timeout: None,
        remote_cache: None,
        remote_cache_mode: None,
        toolchain: ToolchainConfig::default(),
        remote: Default::default(),
        // Discovery builds what `kbuild build` of the written file will: with kbuild's header.
        compat_header: true,
        kernels,
    };
    let build_opts = BuildOptions {
        targets: Some(discovery.to_vec()),
        out_dir: Some(out_dir.clone()),
        keep_going: true,
        cache_dir: Some(cache_dir.to_path_buf()),
        env: opts.env.clone(),
        ..BuildOptions::default()
    };
    let silent = Silent::new(observer, units, &owner);
    let result = build(&project, &build_opts, &silent);
    let manifest_path = out_dir.join("manifest.json");
    let manifest = std::fs::read(&manifest_path);
    let _ = std::fs::remove_dir_all(&out_dir);
    let report = result?;
    let manifest = manifest
        .map_err(|e| e.to_string())
        .and_then(|b| Manifest::from_json(&b).map_err(|e| e.to_string()))
        .map_err(|message| InitError::Manifest {
            path: manifest_path.display().to_string(),
            message,
        })?;
    let mut found: BTreeMap<String, Discovered> = BTreeMap::new();
    for o in &manifest.objects {
        if let Some((kernel, t)) = owner.get(&o.kernel) {
            let mut e = o.entries.clone();
            e.sort();
            found
                .entry(kernel.clone())
                .or_default()
                .exported
                .insert(t.to_string(), e);
        }
    }
    for f in &report.failures {
        for (name, (kernel, t)) in &owner {
            if f.label == format!("{name} for {t}") {
                found
                    .entry(kernel.clone())
                    .or_default()
                    .errors
                    .insert(t.to_string(), first_error(f));
            }
        }
    }
    Ok(found)
}

/// The discovery build's observer: its notes (one per failed job, with the compiler's whole
/// output) are init's to summarise, so only remote-cache and toolchain notes pass; its job
/// events become one [`Event::Unit`] per translation unit, when the unit's last job is done.
pub(super) struct Silent<'a> {
    inner: &'a dyn Observer,
    /// Discovery kernel name → the unit's source.
    source_of: BTreeMap<String, String>,
    /// Per unit source: what is still to come and what came.
    progress: Mutex<UnitsProgress>,
}

#[derive(Default)]
struct UnitsProgress {
    left: BTreeMap<String, usize>,
    built: BTreeMap<String, Vec<String>>,
    failed: BTreeMap<String, Vec<String>>,
    seconds: BTreeMap<String, f64>,
    done: usize,
    total: usize,
}

impl<'a> Silent<'a> {
    fn new(
        inner: &'a dyn Observer,
        units: &[Unit],
        owner: &BTreeMap<String, (String, Target)>,
    ) -> Silent<'a> {
        let source: BTreeMap<&str, String> = units
            .iter()
            .map(|u| (u.kernel.as_str(), super::slash(&u.rel)))
            .collect();
        let mut source_of = BTreeMap::new();
        let mut p = UnitsProgress::default();
        for (name, (kernel, _)) in owner {
            if let Some(s) = source.get(kernel.as_str()) {
                source_of.insert(name.clone(), s.clone());
                *p.left.entry(s.clone()).or_default() += 1;
            }
        }
        p.total = p.left.len();
        Silent {
            inner,
            source_of,
            progress: Mutex::new(p),
        }
    }
}

impl Observer for Silent<'_> {
    fn planned(&self, _: usize) {
        if let Ok(p) = self.progress.lock() {
            self.inner.planned(p.total);
        }
    }
    fn event(&self, e: &Event) {
        let Event::Job {
            kernel,
            target,
            status,
            seconds,
            ..
        } = e
        else {
            return;
        };
        let (Some(source), Ok(mut p)) = (self.source_of.get(kernel), self.progress.lock()) else {
            return;
        };
        let list = if *status == JobStatus::Failed {
            &mut p.failed
        } else {
            &mut p.built
        };
        list.entry(source.clone()).or_default().push(target.clone());
        *p.seconds.entry(source.clone()).or_default() += seconds;
        let Some(left) = p.left.get_mut(source) else {
            return;
        };
        *left = left.saturating_sub(1);
        if *left > 0 {
            return;
        }
        p.done += 1;
        let unit = Event::Unit {
            index: p.done,
            total: p.total,
            source: source.clone(),
            built: p.built.remove(source).unwrap_or_default(),
            failed: p.failed.remove(source).unwrap_or_default(),
            seconds: (p.seconds.remove(source).unwrap_or_default() * 100.0).round() / 100.0,
        };
        drop(p);
        self.inner.event(&unit);
    }
    fn note(&self, text: &str) {
        if !text.starts_with("error: ") {
            self.inner.note(text);
        }
    }
}

/// The first line of a failure that says what went wrong: the compiler's first `error` line,
/// else the cause.
pub(super) fn first_error(f: &Failure) -> String {
    f.log
        .lines()
        .map(str::trim)
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or_else(|| f.log.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or_else(|| f.cause.lines().next().unwrap_or_default())
        .chars()
        .take(300)
        .collect()
}
