//! `kbuild init`: write a first `Kbuild.toml` for an existing tree of kernels.
//!
//! It finds the translation units (`*.cu`, `*.hip`) that define or instantiate kernels, takes
//! include directories, defines and `-std` from a `compile_commands.json` (and the command
//! line's `-I`/`-D`/flags), builds every unit
//! once for one target per vendor (in-process, through the cache, into a scratch directory)
//! with `entries = ["*"]` to discover what each exports, and writes a file a person would
//! keep: kernels grouped by directory, entries by name (demangled C++ patterns for mangled
//! names), units that do not compile commented out with their first error line.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_manifest::manifest::Manifest;
use kbuild_manifest::target::{parse_target_spec, Target, TargetError, Vendor};
use serde::Serialize;

use crate::build::{build, BuildError, BuildOptions, Failure};
use crate::config::{self, Kernel, Language, Project, ToolchainConfig, VendorFlags, FILE_NAME};
use crate::entries::{EntryPattern, Exported};
use crate::events::Observer;
use crate::toolchain::Toolchains;

/// Entries listed by name up to this many; more become `"*"` with a comment.
pub const MAX_LISTED: usize = 8;

/// Directories the scan never enters (besides hidden ones).
const SKIPPED_DIRS: &[&str] = &[
    "target",
    "build",
    "builds",
    "out",
    "dist",
    "node_modules",
    "CMakeFiles",
    "_deps",
    "third_party",
    "__pycache__",
];

/// The default targets per vendor, when `--targets` is not given (each kept only when the
/// found toolchain builds it).
const DEFAULT_NVIDIA: &[&str] = &["sm_80", "sm_86", "sm_89", "sm_90"];
const DEFAULT_AMD: &[&str] = &["gfx90a", "gfx942", "gfx1100"];

/// What `kbuild init` was asked.
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// The directory to write `Kbuild.toml` into (and to scan).
    pub dir: PathBuf,
    /// `--targets` as given (a target list: names, groups, TORCH_CUDA_ARCH_LIST items,
    /// `-ITEM`), written to `[build] targets`. Default: the common targets of each vendor
    /// whose toolchain was found and builds the units.
    pub targets: Option<String>,
    /// Replace an existing `Kbuild.toml`.
    pub force: bool,
    /// Include dirs (relative to `dir`), after those of compile_commands.json: for a project
    /// without one, what its build system passes.
    pub include_dirs: Vec<String>,
    /// Defines (`NAME` → value, `1` when none was given), over those of compile_commands.json.
    pub defines: BTreeMap<String, String>,
    /// Extra nvcc flags (`[build.flags] cuda`), e.g. `-use_fast_math`.
    pub cuda_flags: Vec<String>,
    /// Extra hip-clang flags (`[build.flags] hip`).
    pub hip_flags: Vec<String>,
    /// The compile cache (default: kbuild's cache directory from `env`).
    pub cache_dir: Option<PathBuf>,
    /// Toolchain variables and kbuild's directories.
    pub env: Env,
}

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{0} is not a directory")]
    NotADirectory(String),
    #[error("{0} already exists; pass --force to replace it")]
    Exists(String),
    #[error("no translation unit under {0} (looked for *.cu and *.hip, skipping hidden and build directories)")]
    NoUnits(String),
    #[error("reading {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}: {message}")]
    CompileCommands { path: String, message: String },
    #[error("--targets: {0}")]
    Targets(#[from] TargetError),
    #[error(
        "no toolchain builds any of the units: {0} (install one with `kbuild toolchain install`)"
    )]
    NoToolchain(String),
    #[error(transparent)]
    Dirs(#[from] kbuild_base::dirs::DirsError),
    #[error("discovery build: {0}")]
    Build(#[from] BuildError),
    #[error("discovery build: reading {path}: {message}")]
    Manifest { path: String, message: String },
    /// The generated file does not parse: a bug of init, reported with the text's problem.
    #[error("the generated {path} does not parse ({err}); not written")]
    Generated {
        path: String,
        err: config::ConfigError,
    },
    #[error("writing {path}: {err}")]
    Write { path: String, err: std::io::Error },
}

/// One translation unit and what discovery found.
#[derive(Debug, Clone, Serialize)]
pub struct UnitReport {
    /// Relative to the directory, `/`-separated.
    pub source: String,
    /// The `[kernels.NAME]` it got.
    pub kernel: String,
    /// `cuda` or `hip`.
    pub language: &'static str,
    /// `ok`, `partial` (builds for some discovery targets only: the kernel gets a `targets`
    /// restriction), `failed` (commented out) or `host-only` (compiles, exports no kernel, and
    /// its text defines none: left out).
    pub status: &'static str,
    /// What `entries` says, as written.
    pub entries: Vec<String>,
    /// Per discovery target: the concrete symbols the object exports.
    pub exported: BTreeMap<String, Vec<String>>,
    /// Per discovery target that failed: the first error line.
    pub errors: BTreeMap<String, String>,
}

/// What `kbuild init` did (`kbuild.init/v1` with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct InitReport {
    pub schema: &'static str,
    /// The written file.
    pub file: String,
    pub package: String,
    /// `[build] targets`.
    pub targets: Vec<String>,
    /// The one target per vendor every unit was built for.
    pub discovery_targets: Vec<String>,
    /// The compile_commands.json read, if any.
    pub compile_commands: Option<String>,
    pub include_dirs: Vec<String>,
    pub defines: BTreeMap<String, String>,
    /// `[build.flags]` written (and used by discovery), by vendor.
    pub flags: VendorFlags,
    pub units: Vec<UnitReport>,
    /// Kernels written (not commented out).
    pub kernels: usize,
    /// Entry symbols found, over the written kernels.
    pub entries: usize,
    /// Units commented out because they built for no discovery target.
    pub failures: usize,
    /// Units that build but export no kernel (host code only), left out.
    pub host_only: usize,
}

/// A unit found by the scan.
#[derive(Debug, Clone)]
struct Unit {
    rel: PathBuf,
    language: Language,
    kernel: String,
    /// Whether its own text defines a kernel; one that does not may still instantiate
    /// kernels from headers (template instances), which only its object shows.
    defines_kernel: bool,
}

/// Settings taken from `compile_commands.json`.
#[derive(Debug, Default)]
struct CompileSettings {
    file: Option<PathBuf>,
    include_dirs: Vec<String>,
    defines: BTreeMap<String, String>,
    std: Option<String>,
    skipped: Vec<String>,
}

/// Scan, discover, write `DIR/Kbuild.toml`. `observer` sees the discovery build's notes.
pub fn init(opts: &InitOptions, observer: &dyn Observer) -> Result<InitReport, InitError> {
    let dir = &opts.dir;
    if !dir.is_dir() {
        return Err(InitError::NotADirectory(dir.display().to_string()));
    }
    let file = dir.join(FILE_NAME);
    if file.exists() && !opts.force {
        return Err(InitError::Exists(file.display().to_string()));
    }
    let units = scan(dir)?;
    if units.is_empty() {
        return Err(InitError::NoUnits(dir.display().to_string()));
    }
    let mut settings = compile_settings(dir)?;
    for d in &opts.include_dirs {
        if !settings.include_dirs.contains(d) {
            settings.include_dirs.push(d.clone());
        }
    }
    settings
        .defines
        .extend(opts.defines.iter().map(|(k, v)| (k.clone(), v.clone())));
    let cache_dir = match &opts.cache_dir {
        Some(c) => c.clone(),
        None => Dirs::from_env(&opts.env)?.cache,
    };
    let tcs = Toolchains::discover(&ToolchainConfig::default(), &cache_dir, &opts.env);
    let given = match &opts.targets {
        Some(t) => {
            let spec = parse_target_spec(t)?;
            if spec.targets.is_empty() {
                return Err(InitError::Targets(TargetError::Empty));
            }
            Some(spec)
        }
        None => None,
    };
    let discovery = discovery_targets(given.as_ref().map(|s| s.targets.as_slice()), &tcs);
    if discovery.is_empty() {
        let why: BTreeSet<String> = ["sm_89", "gfx1100"]
            .iter()
            .filter_map(|t| t.parse::<Target>().ok())
            .filter_map(|t| tcs.check(&t).err())
            .map(|e| e.to_string().lines().next().unwrap_or_default().to_string())
            .collect();
        return Err(InitError::NoToolchain(
            why.into_iter().collect::<Vec<_>>().join("; "),
        ));
    }

    let with_std = |extra: &[String]| -> Vec<String> {
        let mut f: Vec<String> = settings.std.iter().cloned().collect();
        f.extend(
            extra
                .iter()
                .filter(|x| !f.contains(x))
                .cloned()
                .collect::<Vec<_>>(),
        );
        f
    };
    let flags = VendorFlags {
        cuda: with_std(&opts.cuda_flags),
        hip: with_std(&opts.hip_flags),
    };
    let found = discover(
        dir, &units, &settings, &flags, &discovery, &cache_dir, opts, observer,
    )?;

    // [build] targets: as given, else the defaults of the vendors some unit built for.
    let built_vendors: BTreeSet<Vendor> = found
        .values()
        .flat_map(|d| d.exported.keys())
        .filter_map(|t| vendor_of(t))
        .collect();
    let (target_items, build_targets): (Vec<String>, Vec<Target>) = match (&opts.targets, &given) {
        (Some(text), Some(spec)) => (
            text.split(|c: char| c == ',' || c == ';' || c.is_whitespace())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            spec.targets.clone(),
        ),
        _ => {
            let mut items = Vec::new();
            for (vendor, names) in [(Vendor::Nvidia, DEFAULT_NVIDIA), (Vendor::Amd, DEFAULT_AMD)] {
                if !built_vendors.contains(&vendor) {
                    continue;
                }
                for n in names {
                    if let Ok(t) = n.parse::<Target>() {
                        if tcs.check(&t).is_ok() {
                            items.push(t);
                        }
                    }
                }
            }
            if items.is_empty() {
                items = discovery.clone();
            }
            (items.iter().map(Target::to_string).collect(), items)
        }
    };

    let mut reports = Vec::new();
    let mut text = header(dir, &discovery);
    text.push_str(&package_section(dir));
    let _ = write!(
        text,
        "\n[build]\n# Every kernel is built for each of these (`kbuild build --targets` overrides).\ntargets = {}\n",
        toml_array(&target_items)
    );
    if let Some(cc) = &settings.file {
        let _ = writeln!(
            text,
            "# From {}:",
            rel_display(dir, cc).unwrap_or_else(|| cc.display().to_string())
        );
    }
    if !settings.include_dirs.is_empty() {
        let _ = writeln!(
            text,
            "include-dirs = {}",
            toml_array(&settings.include_dirs)
        );
    }
    // A few defines inline; many (ggml's 52) one per line, in their own table after the rest of
    // `[build]`, so the file stays readable.
    const INLINE_DEFINES: usize = 4;
    let items: Vec<String> = settings
        .defines
        .iter()
        .map(|(k, v)| format!("{k} = {}", define_value(v)))
        .collect();
    if !items.is_empty() && items.len() <= INLINE_DEFINES {
        let _ = writeln!(text, "defines = {{ {} }}", items.join(", "));
    }
    if !flags.cuda.is_empty() {
        let _ = writeln!(text, "flags.cuda = {}", toml_array(&flags.cuda));
    }
    if !flags.hip.is_empty() {
        let _ = writeln!(text, "flags.hip = {}", toml_array(&flags.hip));
    }
    for s in &settings.skipped {
        let _ = writeln!(text, "# not carried over: {s}");
    }
    if items.len() > INLINE_DEFINES {
        let _ = writeln!(text, "\n[build.defines]");
        for i in &items {
            let _ = writeln!(text, "{i}");
        }
    }

    // Kernels, grouped by directory.
    let mut groups: BTreeMap<String, Vec<&Unit>> = BTreeMap::new();
    for u in &units {
        let parent = u
            .rel
            .parent()
            .map(slash)
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ".".into());
        groups.entry(parent).or_default().push(u);
    }
    let (mut kernels, mut entries, mut failures, mut host_only) = (0, 0, 0, 0);
    for (group, members) in &groups {
        let _ = write!(
            text,
            "\n# ── {group}/ ({} translation unit{}) ──\n",
            members.len(),
            if members.len() == 1 { "" } else { "s" }
        );
        for u in members {
            let d = found.get(&u.kernel).cloned().unwrap_or_default();
            let r = kernel_section(&mut text, u, &d, &build_targets);
            if r.status == "failed" {
                failures += 1;
            } else if r.status == "host-only" {
                host_only += 1;
            } else {
                kernels += 1;
                entries += d.exported.values().flatten().collect::<BTreeSet<_>>().len();
            }
            reports.push(r);
        }
    }
    if kernels == 0 {
        let _ = write!(
            text,
            "\n# No translation unit built: uncomment a kernel above once it compiles.\n"
        );
    }

    // What is written must be what kbuild reads (a unit that built nowhere leaves no kernel:
    // then the file is still written, for a person to fix, but cannot parse).
    if kernels > 0 {
        config::parse(&file, &text).map_err(|err| InitError::Generated {
            path: file.display().to_string(),
            err,
        })?;
    }
    kbuild_base::fs::write_atomic(&file, text.as_bytes()).map_err(|err| InitError::Write {
        path: file.display().to_string(),
        err,
    })?;
    Ok(InitReport {
        schema: "kbuild.init/v1",
        file: file.display().to_string(),
        package: package_name(dir),
        targets: target_items,
        discovery_targets: discovery.iter().map(Target::to_string).collect(),
        compile_commands: settings.file.as_ref().map(|p| p.display().to_string()),
        include_dirs: settings.include_dirs.clone(),
        defines: settings.defines.clone(),
        flags,
        units: reports,
        kernels,
        entries,
        failures,
        host_only,
    })
}

/// What the discovery build found for one unit.
#[derive(Debug, Clone, Default)]
struct Discovered {
    /// By target name.
    exported: BTreeMap<String, Vec<String>>,
    errors: BTreeMap<String, String>,
}

fn vendor_of(target: &str) -> Option<Vendor> {
    target.parse::<Target>().ok().map(|t| t.vendor())
}

/// One target per vendor: sm_89 / gfx1100 when the list has them (or no list was given),
/// else the list's first target of that vendor; only those the found toolchains build.
fn discovery_targets(given: Option<&[Target]>, tcs: &Toolchains) -> Vec<Target> {
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
fn discover(
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
                entries: vec![all.clone()],
                block_size: None,
                targets: Some(vec![*t]),
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
    let result = build(&project, &build_opts, &Silent(observer));
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
/// output) are init's to summarise, so only remote-cache and toolchain notes pass.
struct Silent<'a>(&'a dyn Observer);

impl Observer for Silent<'_> {
    fn event(&self, _: &crate::events::Event) {}
    fn note(&self, text: &str) {
        if !text.starts_with("error: ") {
            self.0.note(text);
        }
    }
}

/// The first line of a failure that says what went wrong: the compiler's first `error` line,
/// else the cause.
fn first_error(f: &Failure) -> String {
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

/// Write one `[kernels.NAME]` (or its commented-out form) and say what it is.
fn kernel_section(text: &mut String, u: &Unit, d: &Discovered, targets: &[Target]) -> UnitReport {
    // CUB's and Thrust's kernels are launched by their host code, and named after the target
    // (`cub::_V_300500_SM_890`): not the file's entries.
    let library: BTreeSet<&String> = d
        .exported
        .values()
        .flatten()
        .filter(|s| crate::entries::is_cccl_kernel(s))
        .collect();
    let own = Discovered {
        exported: d
            .exported
            .iter()
            .map(|(t, e)| {
                let e = e.iter().filter(|s| !library.contains(s)).cloned().collect();
                (t.clone(), e)
            })
            .collect(),
        errors: d.errors.clone(),
    };
    let library_only =
        !library.is_empty() && own.exported.values().all(|e: &Vec<String>| e.is_empty());
    let d = &own;
    let source = slash(&u.rel);
    let language = match u.language {
        Language::Cuda => "cuda",
        Language::Hip => "hip",
    };
    let mut report = UnitReport {
        source: source.clone(),
        kernel: u.kernel.clone(),
        language,
        status: "ok",
        entries: Vec::new(),
        exported: d.exported.clone(),
        errors: d.errors.clone(),
    };
    // A unit whose text has no kernel, that compiled and exported none: host code.
    let host_only = !u.defines_kernel
        && !d.errors.is_empty()
        && d.errors
            .values()
            .all(|e| e.contains("match no exported symbol"));
    if library_only {
        report.status = "host-only";
        let _ = write!(
            text,
            "\n# kbuild init: {source} exports only CUB/Thrust kernels, which their host code launches; not listed\n"
        );
        return report;
    }
    if d.exported.is_empty() && host_only {
        report.status = "host-only";
        report.errors.clear();
        let _ = write!(
            text,
            "\n# kbuild init: {source} compiles but exports no kernel (host code only); not listed\n"
        );
        return report;
    }
    if d.exported.is_empty() {
        report.status = "failed";
        let _ = writeln!(text);
        for (t, e) in &d.errors {
            let _ = writeln!(text, "# kbuild init: does not compile for {t}: {e}");
        }
        if d.errors.is_empty() {
            let _ = writeln!(
                text,
                "# kbuild init: was not built (no toolchain for its language)"
            );
        }
        let _ = writeln!(text, "# [kernels.{}]", u.kernel);
        let _ = writeln!(text, "# source = {}", toml_str(&source));
        if u.language == Language::Hip {
            let _ = writeln!(text, "# language = \"hip\"");
        }
        let _ = writeln!(text, "# entries = [\"*\"]");
        return report;
    }
    let _ = write!(
        text,
        "\n[kernels.{}]\nsource = {}\n",
        u.kernel,
        toml_str(&source)
    );
    if u.language == Language::Hip {
        let _ = writeln!(text, "language = \"hip\"");
    }
    if !library.is_empty() {
        let _ = writeln!(
            text,
            "# also instantiates {} CUB/Thrust kernel(s), which their host code launches; not listed",
            library.len()
        );
    }
    // Built for some vendors only: restrict it to the targets of those.
    let built: BTreeSet<Vendor> = d.exported.keys().filter_map(|t| vendor_of(t)).collect();
    if !d.errors.is_empty() {
        report.status = "partial";
        for (t, e) in &d.errors {
            let _ = writeln!(text, "# kbuild init: does not compile for {t}: {e}");
        }
        let keep: Vec<String> = targets
            .iter()
            .filter(|t| built.contains(&t.vendor()))
            .map(Target::to_string)
            .collect();
        // Only when the list also holds targets of the vendor it failed for.
        if !keep.is_empty() && keep.len() < targets.len() {
            let _ = writeln!(text, "targets = {}", toml_array(&keep));
        }
    }
    // The symbols every discovery target exports; the rest are named in a comment.
    let sets: Vec<BTreeSet<&String>> = d.exported.values().map(|e| e.iter().collect()).collect();
    let union: BTreeSet<&String> = sets.iter().flatten().copied().collect();
    let common: Vec<&String> = union
        .iter()
        .copied()
        .filter(|s| sets.iter().all(|set| set.contains(s)))
        .collect();
    for (t, e) in &d.exported {
        let only: Vec<&str> = e
            .iter()
            .filter(|s| !common.contains(s))
            .map(String::as_str)
            .collect();
        if !only.is_empty() {
            let _ = writeln!(
                text,
                "# exported only for {t}, so not listed (every target must export a listed entry): {}",
                only.join(", ")
            );
        }
    }
    let same_everywhere = common.len() == union.len();
    if same_everywhere && common.len() > MAX_LISTED {
        let preview: Vec<String> = common.iter().take(4).map(|s| display_entry(s).0).collect();
        let _ = writeln!(
            text,
            "# {} entries found ({}, ...): `*` is every exported kernel",
            common.len(),
            preview.join(", ")
        );
        let _ = writeln!(text, "entries = [\"*\"]");
        report.entries = vec!["*".into()];
        return report;
    }
    let mut written: Vec<(String, Option<String>)> = Vec::new();
    for s in &common {
        let (entry, comment) = display_entry(s);
        if !written.iter().any(|(e, _)| *e == entry) {
            written.push((entry, comment));
        }
    }
    report.entries = written.iter().map(|(e, _)| e.clone()).collect();
    if written.iter().all(|(_, c)| c.is_none()) {
        let _ = writeln!(text, "entries = {}", toml_array(&report.entries));
    } else {
        let _ = writeln!(
            text,
            "# C++ entries are written demangled (matched against the demangled name; the mangled symbol is in the comment)."
        );
        let _ = writeln!(text, "entries = [");
        for (e, c) in &written {
            match c {
                Some(c) => {
                    let _ = writeln!(text, "    {}, # {c}", toml_str(e));
                }
                None => {
                    let _ = writeln!(text, "    {},", toml_str(e));
                }
            }
        }
        let _ = writeln!(text, "]");
    }
    report
}

/// How a symbol is written in `entries`: a mangled C++ name as its demangled pattern (with
/// the mangled name for the comment), anything else as it is. A plain function's name alone
/// (`arange_f32`) would read as an exact symbol, so it gets its parameters, which make it a
/// demangled pattern: `arange_f32(float*, int, float, float)`.
fn display_entry(symbol: &str) -> (String, Option<String>) {
    match Exported::new(symbol).demangled_name() {
        Some(name) => {
            // A `(` inside the template arguments makes a pattern one with parameters: then it
            // needs the function's own parameters too.
            let d = if name.contains('(') || EntryPattern::parse(&name).is_ok_and(|p| p.is_exact())
            {
                kbuild_manifest::demangle::demangle_signature(symbol).unwrap_or(name)
            } else {
                name
            };
            let d = without_compile_names(&d);
            // `[` and `\` would be pattern syntax; `*` and `?` match themselves too.
            let escaped = d.replace('\\', "\\\\").replace('[', "\\[");
            (escaped, Some(symbol.to_string()))
        }
        None => (symbol.to_string(), None),
    }
}

/// nvcc's names of internal-linkage entities (`_INTERNAL_867974e3_6_cpy_cu_f459b794_3316::`)
/// change from one compile to the next: in a written pattern they become `*`.
fn without_compile_names(demangled: &str) -> String {
    let mut out = String::with_capacity(demangled.len());
    let mut rest = demangled;
    while let Some(at) = rest.find("_INTERNAL_") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail.find("::").unwrap_or(tail.len());
        out.push('*');
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn header(dir: &Path, discovery: &[Target]) -> String {
    let names: Vec<String> = discovery.iter().map(Target::to_string).collect();
    let shown = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| ".".into());
    format!(
        "# Kbuild.toml: the kbuild project file (docs/kbuild-toml.md).\n\
         # Generated by `kbuild init` {} from the *.cu/*.hip files under {shown}/ and, when present,\n\
         # compile_commands.json; each kernel's entries were found by building it once for {}.\n\
         # Edit it freely. To regenerate: `kbuild init --force [DIR] [--targets LIST]` (that\n\
         # replaces this file).\n",
        env!("CARGO_PKG_VERSION"),
        names.join(", "),
    )
}

fn package_section(dir: &Path) -> String {
    format!(
        "\n[package]\nname = {}\nversion = \"0.1.0\"\n",
        toml_str(&package_name(dir))
    )
}

/// The directory's name under the package-name rule (lowercase letters, digits, `._-`,
/// starting with a letter or digit, at most 128 characters); `kernels` if nothing is left.
pub fn package_name(dir: &Path) -> String {
    let base = std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let mut out = String::new();
    for c in base.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c) {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out: String = out
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .trim_end_matches('-')
        .chars()
        .take(kbuild_base::ident::MAX_LEN)
        .collect();
    if kbuild_base::ident::check_package_name("name", &out).is_ok() {
        out
    } else {
        "kernels".into()
    }
}

/// The translation units under `dir`, sorted by path, each with a unique kernel name. All of
/// them: a template-instance file defines no `__global__` of its own, yet its object holds
/// the kernels it instantiates, which only the discovery build shows.
fn scan(dir: &Path) -> Result<Vec<Unit>, InitError> {
    let mut files = Vec::new();
    walk(dir, dir, &mut files, 0)?;
    files.sort();
    let mut units = Vec::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for rel in files {
        let path = dir.join(&rel);
        let text = std::fs::read(&path).map_err(|err| InitError::Read {
            path: path.display().to_string(),
            err,
        })?;
        let defines_kernel = defines_kernel(&String::from_utf8_lossy(&text));
        let language = match rel.extension().and_then(|e| e.to_str()) {
            Some("hip") => Language::Hip,
            _ => Language::Cuda,
        };
        let kernel = unique_name(&rel, &mut taken);
        units.push(Unit {
            rel,
            language,
            kernel,
            defines_kernel,
        });
    }
    Ok(units)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<(), InitError> {
    if depth > 32 {
        return Ok(());
    }
    let read = std::fs::read_dir(dir).map_err(|err| InitError::Read {
        path: dir.display().to_string(),
        err,
    })?;
    for e in read.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = e.file_type() else { continue };
        let path = e.path();
        if kind.is_dir() {
            if name.starts_with('.') || SKIPPED_DIRS.contains(&name.as_ref()) {
                continue;
            }
            walk(root, &path, out, depth + 1)?;
        } else if kind.is_file() && (name.ends_with(".cu") || name.ends_with(".hip")) {
            if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
    }
    Ok(())
}

/// A kernel name (letters, digits, `_`) from the file stem; the directory is prefixed when the
/// stem is taken, then a number.
fn unique_name(rel: &Path, taken: &mut BTreeSet<String>) -> String {
    let ident = |s: &str| -> String {
        let mut o: String = s
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if o.is_empty() || o.starts_with(|c: char| c.is_ascii_digit()) {
            o.insert(0, 'k');
        }
        o
    };
    let stem = ident(
        &rel.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    let mut candidates = vec![stem.clone()];
    if let Some(parent) = rel.parent().map(slash).filter(|p| !p.is_empty()) {
        candidates.push(ident(&format!("{parent}_{stem}")));
    }
    for c in &candidates {
        if taken.insert(c.clone()) {
            return c.clone();
        }
    }
    let base = candidates.last().cloned().unwrap_or(stem);
    let mut n = 2;
    loop {
        let c = format!("{base}_{n}");
        if taken.insert(c.clone()) {
            return c;
        }
        n += 1;
    }
}

/// Whether C/C++ source text defines a kernel: `__global__` (or kcompat's `KC_KERNEL`) outside
/// comments and string literals, followed by a body `{` before any `;` (a declaration or an
/// explicit instantiation alone does not count).
pub fn defines_kernel(text: &str) -> bool {
    let code = strip_comments(text);
    for marker in ["__global__", "KC_KERNEL"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(marker) {
            let at = from + i;
            let end = at + marker.len();
            let before_ok = code[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after_ok = code[end..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if before_ok && after_ok {
                let rest = &code[end..];
                let body = rest.find('{');
                let semi = rest.find(';');
                if let Some(b) = body {
                    if semi.is_none_or(|s| b < s) {
                        return true;
                    }
                }
            }
            from = end;
        }
    }
    false
}

/// The text with comments and string/char literals blanked (lines kept).
fn strip_comments(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if c == '"' || c == '\'' {
            i += 1;
            while i < b.len() && b[i] != c && b[i] != '\n' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(' ');
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Include dirs, defines and `-std` from `DIR/compile_commands.json` or
/// `DIR/build/compile_commands.json` (the union over its entries; paths relative to DIR).
fn compile_settings(dir: &Path) -> Result<CompileSettings, InitError> {
    let Some(file) = ["compile_commands.json", "build/compile_commands.json"]
        .iter()
        .map(|p| dir.join(p))
        .find(|p| p.is_file())
    else {
        return Ok(CompileSettings::default());
    };
    let bad = |message: String| InitError::CompileCommands {
        path: file.display().to_string(),
        message,
    };
    let bytes = std::fs::read(&file).map_err(|err| InitError::Read {
        path: file.display().to_string(),
        err,
    })?;
    let doc: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let list = doc
        .as_array()
        .ok_or_else(|| bad("expected an array of compile commands".into()))?;
    let mut s = CompileSettings {
        file: Some(file.clone()),
        ..CompileSettings::default()
    };
    let canon_dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    for (i, entry) in list.iter().enumerate() {
        let cwd = match entry.get("directory").and_then(|d| d.as_str()) {
            Some(d) => PathBuf::from(d),
            None => dir.to_path_buf(),
        };
        let cwd = if cwd.is_absolute() {
            cwd
        } else {
            dir.join(cwd)
        };
        let args: Vec<String> = match (entry.get("arguments"), entry.get("command")) {
            (Some(a), _) => a
                .as_array()
                .ok_or_else(|| bad(format!("entry {i}: `arguments` is not an array")))?
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            (None, Some(c)) => split_command(
                c.as_str()
                    .ok_or_else(|| bad(format!("entry {i}: `command` is not a string")))?,
            ),
            (None, None) => {
                return Err(bad(format!("entry {i}: neither `arguments` nor `command`")))
            }
        };
        let mut it = args.iter().skip(1).peekable();
        while let Some(a) = it.next() {
            let mut value = |flag: &str| -> Option<String> {
                match a.strip_prefix(flag) {
                    Some("") => it.next().cloned(),
                    Some(v) => Some(v.to_string()),
                    None => None,
                }
            };
            if let Some(d) = value("-isystem").or_else(|| value("-I")) {
                let p = Path::new(&d);
                let abs = if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    cwd.join(p)
                };
                let abs = lexical(&abs);
                let canon = std::fs::canonicalize(&abs).unwrap_or(abs.clone());
                let shown = match canon.strip_prefix(&canon_dir) {
                    Ok(r) if r.as_os_str().is_empty() => ".".to_string(),
                    Ok(r) => slash(r),
                    Err(_) => abs.display().to_string(),
                };
                if !abs.is_dir() {
                    let note = format!("include directory {shown} (does not exist)");
                    if !s.skipped.contains(&note) {
                        s.skipped.push(note);
                    }
                } else if !s.include_dirs.contains(&shown) {
                    s.include_dirs.push(shown);
                }
            } else if let Some(d) = value("-D") {
                let (k, v) = match d.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (d.clone(), "1".to_string()),
                };
                let is_ident = k
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !is_ident {
                    let note = format!("-D{d} (a function-like or unusual macro)");
                    if !s.skipped.contains(&note) {
                        s.skipped.push(note);
                    }
                    continue;
                }
                s.defines.entry(k).or_insert(v);
            } else if let Some(std) = a.strip_prefix("-std=") {
                if s.std.is_none() {
                    s.std = Some(format!("-std={std}"));
                }
            }
        }
    }
    Ok(s)
}

/// Split a shell command line into words (quotes and backslashes as sh does, no expansion).
fn split_command(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    cur.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                cur.push(e);
                            }
                        }
                        _ => cur.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(e) = chars.next() {
                    cur.push(e);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn slash(p: &Path) -> String {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn rel_display(dir: &Path, p: &Path) -> Option<String> {
    p.strip_prefix(dir).ok().map(slash)
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn toml_array(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", parts.join(", "))
}

/// A define's value in TOML: an integer as an integer, anything else as a string.
fn define_value(v: &str) -> String {
    match v.parse::<i64>() {
        Ok(i) if i.to_string() == v => v.to_string(),
        _ => toml_str(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cub_kernels_are_not_entries() {
        let targets: Vec<Target> = vec!["sm_89".parse().unwrap()];
        let cub = "_ZN3cub16_V_300500_SM_8906detail11EmptyKernelIvEEvv".to_string();
        let mut d = Discovered::default();
        d.exported.insert("sm_89".into(), vec![cub.clone()]);
        let mut text = String::new();
        let r = kernel_section(&mut text, &unit("sum"), &d, &targets);
        assert_eq!(r.status, "host-only");
        assert!(text.contains("exports only CUB/Thrust kernels"), "{text}");
        assert!(!text.contains("[kernels.sum]"), "{text}");

        d.exported
            .insert("sm_89".into(), vec![cub, "_Z10arange_f32Pfiff".into()]);
        let mut text = String::new();
        let r = kernel_section(&mut text, &unit("sum"), &d, &targets);
        assert_eq!(r.entries, ["arange_f32(float*, int, float, float)"]);
        assert!(
            text.contains("also instantiates 1 CUB/Thrust kernel(s)"),
            "{text}"
        );
    }

    #[test]
    fn a_plain_cxx_function_is_written_with_its_parameters_and_matches_itself() {
        for (symbol, want) in [
            (
                "_Z10arange_f32Pfiff",
                "arange_f32(float*, int, float, float)",
            ),
            ("_Z5scaleIfEvPT_i", "scale<float>"),
            ("extern_c_kernel", "extern_c_kernel"),
            (
                "_Z10cpy_scalarIXadL_ZN41_INTERNAL_867974e3_6_cpy_cu_f459b794_331712cpy_1_scalarIffEEvPKcPcEEEvS3_S4_lllllllllllllll",
                "cpy_scalar<&*::cpy_1_scalar<float, float>(char const*, char*)>(char const*, char*, long, long, long, long, long, long, long, long, long, long, long, long, long, long, long)",
            ),
        ] {
            let (entry, _) = display_entry(symbol);
            assert_eq!(entry, want);
            let p = EntryPattern::parse(&entry).unwrap();
            assert!(p.matches(&Exported::new(symbol)), "{entry} vs {symbol}");
        }
    }

    #[test]
    fn finds_definitions_not_declarations_or_comments() {
        assert!(defines_kernel("__global__ void k(float* x) { x[0] = 1; }"));
        assert!(defines_kernel(
            "template <typename T>\n__global__ void scale(T* x, int n) { }\ntemplate __global__ void scale<float>(float*, int);"
        ));
        assert!(!defines_kernel("__global__ void k(float* x);"));
        assert!(!defines_kernel(
            "// __global__ void k() {}\n/* __global__ void j() {} */"
        ));
        assert!(!defines_kernel(
            "const char* s = \"__global__ void k() {}\";"
        ));
        assert!(!defines_kernel("int my__global__x() { return 0; }"));
        assert!(defines_kernel("KC_KERNEL(64) void k(float* x) { }"));
    }

    #[test]
    fn package_names_follow_the_rule() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("My Kernels_2");
        std::fs::create_dir(&p).unwrap();
        assert_eq!(package_name(&p), "my-kernels_2");
        let p = d.path().join("__");
        std::fs::create_dir(&p).unwrap();
        assert_eq!(package_name(&p), "kernels");
    }

    #[test]
    fn splits_commands_and_names_kernels_uniquely() {
        assert_eq!(
            split_command(r#"nvcc -I"inc dir" -DX='a b' -std=c++17 a\ b.cu"#),
            ["nvcc", "-Iinc dir", "-DX=a b", "-std=c++17", "a b.cu"]
        );
        let mut taken = BTreeSet::new();
        assert_eq!(unique_name(Path::new("a/kern.cu"), &mut taken), "kern");
        assert_eq!(unique_name(Path::new("b/kern.cu"), &mut taken), "b_kern");
        assert_eq!(unique_name(Path::new("b/kern.hip"), &mut taken), "b_kern_2");
        assert_eq!(unique_name(Path::new("1x.cu"), &mut taken), "k1x");
    }

    fn unit(kernel: &str) -> Unit {
        Unit {
            rel: PathBuf::from(format!("ops/{kernel}.cu")),
            language: Language::Cuda,
            kernel: kernel.into(),
            defines_kernel: true,
        }
    }

    #[test]
    fn many_entries_become_star_and_vendor_differences_a_comment() {
        let targets: Vec<Target> = ["sm_89", "gfx1100"]
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        let many: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        let mut d = Discovered::default();
        d.exported.insert("sm_89".into(), many.clone());
        d.exported.insert("gfx1100".into(), many);
        let mut text = String::new();
        let r = kernel_section(&mut text, &unit("wide"), &d, &targets);
        assert_eq!(r.entries, ["*"]);
        assert!(
            text.contains("# 10 entries found (k0, k1, k2, k3, ...)"),
            "{text}"
        );

        let mut d = Discovered::default();
        d.exported.insert(
            "sm_89".into(),
            vec!["_Z5scaleIfEvPT_i".into(), "both".into(), "cuda_only".into()],
        );
        d.exported.insert(
            "gfx1100".into(),
            vec!["_Z5scaleIfEvPT_i".into(), "both".into()],
        );
        let mut text = String::new();
        let r = kernel_section(&mut text, &unit("guarded"), &d, &targets);
        assert_eq!(r.entries, ["scale<float>", "both"]);
        assert!(
            text.contains("# exported only for sm_89, so not listed"),
            "{text}"
        );
        assert!(
            text.contains("\"scale<float>\", # _Z5scaleIfEvPT_i"),
            "{text}"
        );

        let mut d = Discovered::default();
        d.exported.insert("sm_89".into(), vec!["k".into()]);
        d.errors
            .insert("gfx1100".into(), "k.cu:1:1: error: nope".into());
        let mut text = String::new();
        let r = kernel_section(&mut text, &unit("cuda"), &d, &targets);
        assert_eq!(r.status, "partial");
        assert!(
            text.contains("targets = [\"sm_89\"]") && text.contains("error: nope"),
            "{text}"
        );
        let d = Discovered {
            errors: [("sm_89".to_string(), "bad".to_string())]
                .into_iter()
                .collect(),
            ..Discovered::default()
        };
        let mut text = String::new();
        let r = kernel_section(&mut text, &unit("broken"), &d, &targets);
        assert_eq!(r.status, "failed");
        assert!(
            text.contains("# [kernels.broken]") && !text.contains("\n[kernels."),
            "{text}"
        );
    }

    #[test]
    fn reads_compile_commands() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("inc")).unwrap();
        std::fs::create_dir_all(d.path().join("build")).unwrap();
        let dir = d.path().display().to_string();
        let cc = serde_json::json!([
            {"directory": format!("{dir}/build"), "file": "../a.cu",
             "command": "nvcc -I../inc -DFOO=1 -DBAR -std=c++17 -c ../a.cu"},
            {"directory": dir, "file": "b.cu",
             "arguments": ["clang++", "-isystem", "inc", "-I", "missing", "-D", "F(x)=x", "-std=c++20", "b.cu"]}
        ]);
        std::fs::write(d.path().join("compile_commands.json"), cc.to_string()).unwrap();
        let s = compile_settings(d.path()).unwrap();
        assert_eq!(s.include_dirs, ["inc"]);
        assert_eq!(s.defines["FOO"], "1");
        assert_eq!(s.defines["BAR"], "1");
        assert_eq!(s.std.as_deref(), Some("-std=c++17"));
        assert_eq!(s.skipped.len(), 2, "{:?}", s.skipped);
        std::fs::write(d.path().join("compile_commands.json"), "{}").unwrap();
        let e = compile_settings(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("compile_commands.json: expected an array"),
            "{e}"
        );
    }
}
