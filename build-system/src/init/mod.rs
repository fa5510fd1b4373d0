//! `kbuild init`: write a first `Kbuild.toml` for an existing tree of kernels.
//!
//! It finds the translation units (`*.cu`, `*.hip`) that define or instantiate kernels, takes
//! include directories, defines and `-std` from a `compile_commands.json` (and the command
//! line's `-I`/`-D`/flags), builds every unit
//! once for one target per vendor (in-process, through the cache, into a scratch directory)
//! with `entries = ["*"]` to discover what each exports, and writes a file a person would
//! keep: kernels grouped by directory, entries by name (demangled C++ patterns for mangled
//! names), units that do not compile commented out with their first error line.

mod causes;
mod compile_commands;
mod discover;
mod name;
mod scan;
mod shell;
mod strip;
#[cfg(test)]
mod tests;
mod toml_out;

pub use causes::FailureCause;
pub use scan::defines_kernel;

use compile_commands::compile_settings;
use discover::{discover, discovery_targets, vendor_of, DEFAULT_AMD, DEFAULT_NVIDIA};
use scan::scan;
use toml_edit::{Item, Table};
use toml_out::{array, comment, define_value, header, kernel_section, package_section, put, Out};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use kbuild_base::dirs::Dirs;
use kbuild_base::env::Env;
use kbuild_manifest::target::{parse_target_spec, Target, TargetError, Vendor};
use serde::Serialize;

use crate::build::BuildError;
use crate::config::{self, Language, ToolchainConfig, VendorFlags, FILE_NAME};
use crate::events::Observer;
use crate::toolchain::Toolchains;

/// Entries listed by name up to this many; more become `"*"` with a comment.
pub const MAX_LISTED: usize = 8;

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

/// `-D NAME` / `-D NAME=VALUE` options as [`InitOptions::defines`] (a bare name is `1`).
pub fn parse_defines(list: &[String]) -> Result<BTreeMap<String, String>, InitError> {
    let mut defines = BTreeMap::new();
    for d in list {
        let (name, value) = d.split_once('=').unwrap_or((d.as_str(), "1"));
        if name.is_empty() || !name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()) {
            let (define, name) = (d.clone(), name.to_string());
            return Err(InitError::Define { define, name });
        }
        defines.insert(name.to_string(), value.to_string());
    }
    Ok(defines)
}

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{0} is not a directory")]
    NotADirectory(String),
    #[error("{0} already exists; pass --force to replace it")]
    Exists(String),
    #[error("no translation unit under {dir} (looked for *.cu and *.hip, skipping hidden and build directories){}", skipped.iter().map(|s| format!("\n  skipped: {s}")).collect::<String>())]
    NoUnits { dir: String, skipped: Vec<String> },
    #[error("reading {path}: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("{path}: {message}")]
    CompileCommands { path: String, message: String },
    #[error("--targets: {0}")]
    Targets(#[from] TargetError),
    #[error("-D {define}: `{name}` is not a macro name (NAME or NAME=VALUE)")]
    Define { define: String, name: String },
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
    /// The generated text does not read back as what init meant to write: not written.
    #[error("the generated {path} is not what kbuild init meant to write ({why}); not written")]
    NotAsMeant { path: String, why: String },
    /// A value given on init's command line that a compiler must not see.
    #[error(transparent)]
    ShellChars(#[from] kbuild_base::ident::ShellCharError),
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
    /// The `targets` restriction written (vendor groups: `["nvidia"]`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<String>>,
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
    /// Per `[build] targets` entry: how many of the written kernels build for it.
    pub per_target: Vec<TargetKernels>,
    /// The failures of every unit, grouped by cause, most units first.
    pub failure_causes: Vec<FailureCause>,
    /// Where the package name came from (`Cargo.toml`, `pyproject.toml`, `CMakeLists.txt`,
    /// or the directory, with a note to edit it).
    pub package_from: String,
    /// What was left out, each naming the file or compile_commands.json entry and the value:
    /// source files and values holding a character a shell acts on (never compiled, never
    /// written), function-like macros, include directories that do not exist.
    pub skipped: Vec<String>,
}
/// How many of the written kernels one target builds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetKernels {
    pub target: String,
    pub kernels: usize,
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
    // Values given on the command line reach the compiler as the tree's do: refused alike.
    for d in &opts.include_dirs {
        kbuild_base::ident::check_compiler_arg("-I", d)?;
    }
    for (k, v) in &opts.defines {
        kbuild_base::ident::check_compiler_arg(&format!("-D {k}"), v)?;
    }
    for f in &opts.cuda_flags {
        kbuild_base::ident::check_compiler_arg("--cuda-flags", f)?;
    }
    for f in &opts.hip_flags {
        kbuild_base::ident::check_compiler_arg("--hip-flags", f)?;
    }
    let (units, skipped_units) = scan(dir)?;
    if units.is_empty() {
        return Err(InitError::NoUnits {
            dir: dir.display().to_string(),
            skipped: skipped_units,
        });
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
    let mut out = Out::new();
    header(&mut out, dir, &discovery);
    let package = name::package_name(dir);
    package_section(&mut out, &package);
    let mut build = Table::new();
    let mut above = String::new();
    for s in &skipped_units {
        above.push_str(&comment(&format!("not scanned: {s}")));
    }
    for s in &settings.skipped {
        above.push_str(&comment(&format!("not carried over: {s}")));
    }
    above.push_str(&comment(
        "Every kernel is built for each of these (`kbuild build --targets` overrides).",
    ));
    put(&mut build, "targets", array(&target_items), &mut above);
    if let Some(cc) = &settings.file {
        above.push_str(&comment(&format!(
            "From {}:",
            rel_display(dir, cc).unwrap_or_else(|| cc.display().to_string())
        )));
    }
    if !settings.include_dirs.is_empty() {
        put(
            &mut build,
            "include-dirs",
            array(&settings.include_dirs),
            &mut above,
        );
    }
    // A few defines inline; many (ggml's 52) one per line, in their own table after the rest of
    // `[build]`, so the file stays readable.
    const INLINE_DEFINES: usize = 4;
    let many_defines = settings.defines.len() > INLINE_DEFINES;
    let mut defines = Table::new();
    for (k, v) in &settings.defines {
        defines.insert(k, Item::Value(define_value(v)));
    }
    if !settings.defines.is_empty() && !many_defines {
        put(
            &mut build,
            "defines",
            defines.clone().into_inline_table(),
            &mut above,
        );
    }
    let mut flag_table = Table::new();
    flag_table.set_dotted(true);
    for (vendor, list) in [("cuda", &flags.cuda), ("hip", &flags.hip)] {
        if !list.is_empty() {
            flag_table.insert(vendor, Item::Value(array(list).into()));
        }
    }
    if !flag_table.is_empty() {
        build.insert("flags", Item::Table(flag_table));
    }
    out.table("build", build);
    // "From compile_commands.json:" when only `[build.defines]` follows it.
    out.carry(above);
    if many_defines {
        out.subtable("build", "defines", defines);
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
        out.blank();
        out.comment(&format!(
            "── {group}/ ({} translation unit{}) ──",
            members.len(),
            if members.len() == 1 { "" } else { "s" }
        ));
        for u in members {
            let d = found.get(&u.kernel).cloned().unwrap_or_default();
            let r = kernel_section(&mut out, u, &d, &build_targets);
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
        out.blank();
        out.comment("No translation unit built: uncomment a kernel above once it compiles.");
    }
    let per_target = build_targets
        .iter()
        .map(|t| TargetKernels {
            target: t.to_string(),
            kernels: reports.iter().filter(|r| builds_for(r, t)).count(),
        })
        .collect();
    let failure_causes = causes::group(&reports);
    let doc = out.finish();
    let text = doc.to_string();
    check_written(&file, &doc, &text)?;

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
        package: package.name.clone(),
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
        per_target,
        failure_causes,
        package_from: package.from.clone(),
        skipped: skipped_units
            .into_iter()
            .chain(settings.skipped.iter().cloned())
            .collect(),
    })
}

/// Whether the kernel init wrote for `r` builds for `t`: written, of a language that builds
/// there, and not restricted away from its vendor.
fn builds_for(r: &UnitReport, t: &Target) -> bool {
    if !matches!(r.status, "ok" | "partial") || (r.language == "hip" && t.vendor() != Vendor::Amd) {
        return false;
    }
    r.targets.as_ref().is_none_or(|groups| {
        groups
            .iter()
            .any(|g| kbuild_manifest::target::vendor_group(g) == Some(t.vendor()))
    })
}

/// The keys init may write: never `launcher`, `[toolchain]`, `remote-cache` or `out-dir`,
/// which would make the next `kbuild build` run or write what the scanned tree chose.
const WRITTEN_KEYS: &[(&str, &[&str])] = &[
    ("package", &["name", "version"]),
    ("build", &["targets", "include-dirs", "defines", "flags"]),
];

/// The text parses back to exactly the document built (a comment that turned into a key, or
/// a value that ended its string, would change it), and holds only [`WRITTEN_KEYS`] and
/// kernels.
fn check_written(file: &Path, doc: &toml_edit::DocumentMut, text: &str) -> Result<(), InitError> {
    let bad = |why: String| InitError::NotAsMeant {
        path: file.display().to_string(),
        why,
    };
    let meant: toml::Table = toml_edit::de::from_document(doc.clone())
        .map_err(|e| bad(format!("the document built does not convert: {e}")))?;
    let read: toml::Table =
        toml::from_str(text).map_err(|e| bad(format!("its text does not parse: {e}")))?;
    if read != meant {
        return Err(bad(
            "its text parses to other keys or values than were meant".into(),
        ));
    }
    for (key, value) in &read {
        let allowed: Option<&[&str]> = match key.as_str() {
            "kernels" => None,
            k => Some(
                WRITTEN_KEYS
                    .iter()
                    .find(|(t, _)| *t == k)
                    .map(|(_, keys)| *keys)
                    .ok_or_else(|| bad(format!("it holds `{k}`, which init never writes")))?,
            ),
        };
        if let (Some(allowed), Some(table)) = (allowed, value.as_table()) {
            if let Some(k) = table.keys().find(|k| !allowed.contains(&k.as_str())) {
                return Err(bad(format!(
                    "it holds `{key}.{k}`, which init never writes"
                )));
            }
        }
    }
    Ok(())
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

/// The directory's name under the package-name rule (lowercase letters, digits, `._-`,
/// starting with a letter or digit, at most 128 characters); `kernels` if nothing is left.
pub fn package_name(dir: &Path) -> String {
    let base = std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    name::sanitize(&base).unwrap_or_else(|| "kernels".into())
}
