//! `Kbuild.toml`: the project file. Parsing is strict (unknown keys, wrong types, missing
//! files and unknown targets are errors) and every error names `file:line:column`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use kbuild_manifest::target::{parse_target_spec, Target, Vendor};

use crate::entries::{EntryPattern, EntryScope, KernelEntries};
use serde::Deserialize;
use toml::Spanned;

pub const FILE_NAME: &str = "Kbuild.toml";

/// A `Kbuild.toml` error, located in the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}:{line}:{column}: {message}")]
    At {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    File { path: String, message: String },
    /// Every problem of one file at once (a file with 13 missing sources is fixed in one
    /// round), each on its own line, in file order.
    #[error("{} problems in {path}:\n{}", .errors.len(), .errors.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Many {
        path: String,
        errors: Vec<ConfigError>,
    },
    #[error("no {FILE_NAME} found in {start} or its parents (looked for {FILE_NAME} and kernels/{FILE_NAME}); pass --manifest-path")]
    NotFound { start: String },
}

/// Source language of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Single-source CUDA: nvcc for `sm_*`/`compute_*`, hip-clang (with kbuild's kcompat.h
    /// force-included) for `gfx*`.
    Cuda,
    /// HIP only: hip-clang, AMD targets only.
    Hip,
}

/// Flags per vendor toolchain.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct VendorFlags {
    #[serde(default)]
    pub cuda: Vec<String>,
    #[serde(default)]
    pub hip: Vec<String>,
}

impl VendorFlags {
    pub fn for_vendor(&self, v: Vendor) -> &[String] {
        match v {
            Vendor::Nvidia => &self.cuda,
            Vendor::Amd => &self.hip,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    package: RawPackage,
    #[serde(default)]
    build: RawBuild,
    #[serde(default)]
    toolchain: ToolchainConfig,
    #[serde(default)]
    kernels: BTreeMap<String, Spanned<RawKernel>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPackage {
    name: Spanned<String>,
    version: Spanned<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawBuild {
    #[serde(default)]
    targets: Option<Spanned<Vec<Spanned<String>>>>,
    out_dir: Option<String>,
    #[serde(default)]
    include_dirs: Vec<Spanned<String>>,
    #[serde(default)]
    defines: BTreeMap<String, Spanned<DefineValue>>,
    #[serde(default)]
    flags: VendorFlags,
    launcher: Option<String>,
    /// Per-compile timeout, seconds.
    job_timeout: Option<u64>,
    /// `oci://HOST[:PORT]/REPO` of a shared remote build cache.
    remote_cache: Option<String>,
    /// `read` (default) or `read-write`.
    remote_cache_mode: Option<String>,
    /// Write kbuild's compat header and put it on every kernel's include path (default true).
    compat_header: Option<bool>,
}

/// Explicit toolchain locations: the first place discovery looks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ToolchainConfig {
    /// CUDA root (holds `bin/nvcc`).
    pub cuda: Option<PathBuf>,
    /// hip-clang driver (`clang++`).
    pub hip_clang: Option<PathBuf>,
    /// ROCm device-library bitcode directory.
    pub hip_device_libs: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawKernel {
    source: Spanned<String>,
    #[serde(default = "default_language")]
    language: Language,
    #[serde(default)]
    include_dirs: Vec<Spanned<String>>,
    #[serde(default)]
    defines: BTreeMap<String, Spanned<DefineValue>>,
    #[serde(default)]
    variants: BTreeMap<String, Spanned<Vec<DefineValue>>>,
    #[serde(default)]
    flags: VendorFlags,
    entries: Spanned<RawEntries>,
    block_size: Option<Spanned<RawBlockSize>>,
    targets: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `entries`: a list for every target, or lists keyed by `all`, a vendor or a target.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawEntries {
    List(Vec<String>),
    Scoped(BTreeMap<String, Vec<String>>),
}

/// `block-size`: one for every entry, or a table keyed by entry pattern.
#[derive(Debug)]
enum RawBlockSize {
    All(u32),
    PerEntry(BTreeMap<String, u32>),
}

impl<'de> Deserialize<'de> for RawBlockSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawBlockSize;
            // Errors read as the integer form's (`expected an integer, found a string`).
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("u32")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawBlockSize, E> {
                u32::try_from(v)
                    .map(RawBlockSize::All)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawBlockSize, E> {
                u32::try_from(v)
                    .map(RawBlockSize::All)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<RawBlockSize, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, u32>()? {
                    out.insert(k, v);
                }
                Ok(RawBlockSize::PerEntry(out))
            }
        }
        d.deserialize_any(V)
    }
}

fn default_language() -> Language {
    Language::Cuda
}

/// A define value: string, integer, float or bool in TOML; always passed as text.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum DefineValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

impl DefineValue {
    fn text(&self) -> String {
        match self {
            DefineValue::Int(i) => i.to_string(),
            DefineValue::Float(f) => f.to_string(),
            DefineValue::Bool(b) => u8::from(*b).to_string(),
            DefineValue::Str(s) => s.clone(),
        }
    }
}

/// One value combination of a kernel's variant matrix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Variant {
    /// `rows_per_block4` (axes in key order, joined by `-`).
    pub name: String,
    pub defines: BTreeMap<String, String>,
}

/// A kernel of the project, validated.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub name: String,
    /// Path relative to the project root.
    pub source: PathBuf,
    pub language: Language,
    /// Relative to the project root, global ones first.
    pub include_dirs: Vec<PathBuf>,
    pub defines: BTreeMap<String, String>,
    /// Empty when the kernel has no variant matrix.
    pub variants: Vec<Variant>,
    pub flags: VendorFlags,
    /// Exact names, globs and demangled C++ patterns (see [`crate::entries`]), for every
    /// target or per vendor or target.
    pub entries: KernelEntries,
    pub block_size: KernelBlockSize,
    /// Optional restriction: only these targets are built. A plain entry (`sm_90`, `gfx90a`,
    /// what a group such as `nvidia` expands to) admits its processor's PTX and feature
    /// settings too (`compute_90`, `gfx90a:xnack+`); a specific one only itself.
    pub targets: Option<Vec<Target>>,
}

impl Kernel {
    /// Whether any entry is a glob or demangled pattern (not an exact name).
    pub fn has_patterns(&self) -> bool {
        self.entries.has_patterns()
    }

    /// Whether this kernel is built for `target`.
    pub fn builds_for(&self, target: &Target) -> bool {
        if self.language == Language::Hip && target.vendor() != Vendor::Amd {
            return false;
        }
        match &self.targets {
            None => true,
            Some(list) => list.iter().any(|t| {
                t == target || (t.is_plain() && t.processor.name == target.processor.name)
            }),
        }
    }
}

/// A kernel's `block-size`: threads per block it is launched with, for occupancy; one for
/// every entry, or per entry pattern (a library launching one file's entries differently).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum KernelBlockSize {
    #[default]
    None,
    All(u32),
    /// An exact name beats patterns; an entry two patterns give different sizes is an error.
    PerEntry(Vec<(EntryPattern, u32)>),
}

/// An entry that two `block-size` patterns give different sizes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("block-size: entry `{entry}` matches `{a}` ({sa}) and `{b}` ({sb}); give it by name")]
pub struct BlockSizeConflict {
    pub entry: String,
    pub a: String,
    pub sa: u32,
    pub b: String,
    pub sb: u32,
}

impl KernelBlockSize {
    /// The block size of the exported `symbol`, if `block-size` gives one.
    pub fn for_entry(&self, symbol: &str) -> Result<Option<u32>, BlockSizeConflict> {
        let table = match self {
            KernelBlockSize::None => return Ok(None),
            KernelBlockSize::All(n) => return Ok(Some(*n)),
            KernelBlockSize::PerEntry(t) => t,
        };
        let exported = crate::entries::Exported::new(symbol);
        let hits: Vec<&(EntryPattern, u32)> =
            table.iter().filter(|(p, _)| p.matches(&exported)).collect();
        if let Some((_, n)) = hits.iter().find(|(p, _)| p.is_exact()) {
            return Ok(Some(*n));
        }
        let Some((first, n)) = hits.first() else {
            return Ok(None);
        };
        if let Some((other, m)) = hits.iter().find(|(_, m)| m != n) {
            return Err(BlockSizeConflict {
                entry: symbol.to_string(),
                a: first.to_string(),
                sa: *n,
                b: other.to_string(),
                sb: *m,
            });
        }
        Ok(Some(*n))
    }
}

/// The parsed project.
#[derive(Debug, Clone)]
pub struct Project {
    /// The `Kbuild.toml` path.
    pub file: PathBuf,
    /// Directory of `Kbuild.toml`: every relative path is from here; compilers run here.
    pub root: PathBuf,
    pub name: String,
    pub version: String,
    pub default_targets: Vec<Target>,
    /// `[build] targets` names `all`: a build of the default targets skips those the found
    /// toolchains cannot build (with a warning), as `--targets all` does.
    pub default_targets_all: bool,
    pub out_dir: PathBuf,
    pub flags: VendorFlags,
    pub launcher: Option<String>,
    pub job_timeout: Option<u64>,
    /// `[build] remote-cache` and `remote-cache-mode` (see `remote_cache`).
    pub remote_cache: Option<String>,
    pub remote_cache_mode: Option<String>,
    /// `[build] compat-header` (default true): kbuild's `kcompat.h` and the cuda_*.h shims
    /// are written to `<out-dir>/include` and put on every kernel's include path
    /// ([`crate::compat_header`]).
    pub compat_header: bool,
    pub toolchain: ToolchainConfig,
    pub kernels: Vec<Kernel>,
}

/// Find `Kbuild.toml` from `start` upwards: `Kbuild.toml`, then `kernels/Kbuild.toml`, in
/// each directory.
/// The project file: `manifest_path` when given, else [`find`] from the current directory.
pub fn locate(manifest_path: Option<&Path>) -> Result<PathBuf, ConfigError> {
    match manifest_path {
        Some(p) => Ok(p.to_path_buf()),
        None => {
            let cwd = std::env::current_dir().map_err(|e| ConfigError::File {
                path: ".".into(),
                message: format!("cannot read the current directory: {e}"),
            })?;
            find(&cwd)
        }
    }
}

/// [`locate`] then [`load`]: what every command that works on "the project" opens.
pub fn open(manifest_path: Option<&Path>) -> Result<Project, ConfigError> {
    load(&locate(manifest_path)?)
}

pub fn find(start: &Path) -> Result<PathBuf, ConfigError> {
    for dir in start.ancestors() {
        for candidate in [dir.join(FILE_NAME), dir.join("kernels").join(FILE_NAME)] {
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(ConfigError::NotFound {
        start: start.display().to_string(),
    })
}

/// Read and validate a project file.
pub fn load(file: &Path) -> Result<Project, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError::File {
        path: file.display().to_string(),
        message: format!("cannot read: {e}"),
    })?;
    parse(file, &text)
}

/// Validate `text` as the contents of `file` (paths resolve against its directory).
pub fn parse(file: &Path, text: &str) -> Result<Project, ConfigError> {
    let root = file
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let at = |span: Range<usize>, message: String| {
        let (line, column) = line_col(text, span.start);
        ConfigError::At {
            path: file.display().to_string(),
            line,
            column,
            message,
        }
    };
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let message = user_message(text, e.span(), e.message());
        match e.span() {
            Some(span) => at(span, message),
            None => ConfigError::File {
                path: file.display().to_string(),
                message,
            },
        }
    })?;

    let nonempty = |s: &Spanned<String>, what: &str| {
        if s.get_ref().trim().is_empty() {
            Err(at(s.span(), format!("{what} must not be empty")))
        } else {
            Ok(s.get_ref().clone())
        }
    };
    // Every problem below is collected, not returned at the first: the file is reported whole.
    let mut errors: Vec<ConfigError> = Vec::new();
    let name = nonempty(&raw.package.name, "package.name").and_then(|name| {
        // The same rules every manifest is read back with: the name and version become file
        // names (`dist/NAME-VERSION.kbundle`) and registry paths.
        kbuild_base::ident::check_package_name("package.name", &name)
            .map_err(|e| at(raw.package.name.span(), e.to_string()))?;
        Ok(name)
    });
    let name = keep(&mut errors, name);
    let version = nonempty(&raw.package.version, "package.version").and_then(|version| {
        kbuild_base::ident::check_version("package.version", &version)
            .map_err(|e| at(raw.package.version.span(), e.to_string()))?;
        Ok(version)
    });
    let version = keep(&mut errors, version);

    let targets = |list: &Spanned<Vec<Spanned<String>>>| -> Result<Vec<Target>, ConfigError> {
        // Each item is checked on its own (an error points at it); `-ITEM` exclusions apply
        // across items (`["all", "-gfx950"]`), so the list is parsed as one.
        let mut items = Vec::new();
        for item in list.get_ref() {
            parse_target_spec(item.get_ref()).map_err(|e| at(item.span(), e.to_string()))?;
            items.push(item.get_ref().as_str());
        }
        let out = parse_target_spec(&items.join(","))
            .map_err(|e| at(list.span(), e.to_string()))?
            .targets;
        if out.is_empty() {
            return Err(at(list.span(), "target list is empty".into()));
        }
        Ok(out)
    };
    let default_targets = match &raw.build.targets {
        Some(list) => keep(&mut errors, targets(list)).unwrap_or_default(),
        None => Vec::new(),
    };
    let default_targets_all = raw.build.targets.as_ref().is_some_and(|list| {
        list.get_ref()
            .iter()
            .any(|item| parse_target_spec(item.get_ref()).is_ok_and(|s| s.all))
    });

    // Everything below that reaches a compiler's command line (sources, include dirs,
    // defines, variant values, flags, the out-dir holding the compat header) must be plain
    // text: nvcc runs its sub-steps through `sh`.
    let plain = |field: &str, value: &str, span: Range<usize>| -> Result<(), ConfigError> {
        kbuild_base::ident::check_compiler_arg(field, value).map_err(|e| at(span, e.to_string()))
    };
    let plain_flags = |field: &str, flags: &VendorFlags, span: Option<Range<usize>>| {
        for (vendor, list) in [("cuda", &flags.cuda), ("hip", &flags.hip)] {
            for f in list {
                let field = format!("{field}.{vendor}");
                if let Err(e) = kbuild_base::ident::check_compiler_arg(&field, f) {
                    return Err(match &span {
                        Some(span) => at(span.clone(), e.to_string()),
                        None => ConfigError::File {
                            path: file.display().to_string(),
                            message: e.to_string(),
                        },
                    });
                }
            }
        }
        Ok(())
    };
    keep(
        &mut errors,
        plain_flags("build.flags", &raw.build.flags, None),
    );
    if let Some(out) = &raw.build.out_dir {
        let checked = kbuild_base::ident::check_compiler_arg("build.out-dir", out).map_err(|e| {
            ConfigError::File {
                path: file.display().to_string(),
                message: e.to_string(),
            }
        });
        keep(&mut errors, checked);
    }
    let dir = |s: &Spanned<String>, field: &str| -> Result<PathBuf, ConfigError> {
        plain(field, s.get_ref(), s.span())?;
        let p = PathBuf::from(s.get_ref());
        if !root.join(&p).is_dir() {
            return Err(at(
                s.span(),
                format!("include directory `{}` does not exist", s.get_ref()),
            ));
        }
        Ok(p)
    };
    let global_includes: Vec<PathBuf> = raw
        .build
        .include_dirs
        .iter()
        .filter_map(|d| keep(&mut errors, dir(d, "build.include-dirs")))
        .collect();
    // Each bad define is its own error; the good ones are kept.
    let defines = |map: &BTreeMap<String, Spanned<DefineValue>>,
                   table: &str,
                   errors: &mut Vec<ConfigError>|
     -> BTreeMap<String, String> {
        let one = |k: &String, v: &Spanned<DefineValue>| -> Result<(String, String), ConfigError> {
            if !is_identifier(k) {
                return Err(at(
                    v.span(),
                    format!("define name `{k}` is not a C identifier"),
                ));
            }
            let text = v.get_ref().text();
            plain(&format!("{table}.defines.{k}"), &text, v.span())?;
            Ok((k.clone(), text))
        };
        map.iter()
            .filter_map(|(k, v)| keep(errors, one(k, v)))
            .collect()
    };
    let global_defines = defines(&raw.build.defines, "build", &mut errors);

    let mut kernels = Vec::new();
    for (kname, spanned) in &raw.kernels {
        let k = spanned.get_ref();
        let before = errors.len();
        if !is_identifier(kname) {
            errors.push(at(
                spanned.span(),
                format!("kernel name `{kname}` must be letters, digits and `_`"),
            ));
        }
        let table = format!("kernels.{kname}");
        let source = plain(
            &format!("{table}.source"),
            k.source.get_ref(),
            k.source.span(),
        )
        .and_then(|()| {
            let source = PathBuf::from(k.source.get_ref());
            if !root.join(&source).is_file() {
                return Err(at(
                    k.source.span(),
                    format!(
                        "kernel `{kname}`: source file `{}` does not exist",
                        k.source.get_ref()
                    ),
                ));
            }
            Ok(source)
        });
        let source = keep(&mut errors, source);
        let mut include_dirs = global_includes.clone();
        for d in &k.include_dirs {
            if let Some(d) = keep(&mut errors, dir(d, &format!("{table}.include-dirs"))) {
                include_dirs.push(d);
            }
        }
        let mut kdefines = global_defines.clone();
        kdefines.extend(defines(&k.defines, &table, &mut errors));
        for (axis, values) in &k.variants {
            for v in values.get_ref() {
                let checked = plain(
                    &format!("{table}.variants.{axis}"),
                    &v.text(),
                    values.span(),
                );
                keep(&mut errors, checked);
            }
        }
        keep(
            &mut errors,
            plain_flags(&format!("{table}.flags"), &k.flags, Some(spanned.span())),
        );
        let variants = keep(&mut errors, variant_matrix(kname, &k.variants, &at));
        let entries = keep(
            &mut errors,
            (|| {
                let lists: Vec<(Option<&String>, &Vec<String>)> = match k.entries.get_ref() {
                    RawEntries::List(l) => vec![(None, l)],
                    RawEntries::Scoped(m) => m.iter().map(|(key, l)| (Some(key), l)).collect(),
                };
                let missing = || {
                    at(
                        k.entries.span(),
                        format!(
                            "kernel `{kname}`: `entries` must list the entry symbols it exports"
                        ),
                    )
                };
                if lists.is_empty() || lists.iter().all(|(_, l)| l.is_empty()) {
                    return Err(missing());
                }
                let mut entries = KernelEntries { lists: Vec::new() };
                for (key, list) in lists {
                    let scope = match key {
                        None => EntryScope::All,
                        Some(key) => EntryScope::parse(key).map_err(|e| {
                            at(k.entries.span(), format!("kernel `{kname}`: entries: {e}"))
                        })?,
                    };
                    if list.iter().any(|e| e.is_empty()) {
                        return Err(missing());
                    }
                    let mut parsed = Vec::new();
                    for e in list {
                        parsed.push(EntryPattern::parse(e).map_err(|err| {
                            at(k.entries.span(), format!("kernel `{kname}`: {err}"))
                        })?);
                    }
                    entries.lists.push((scope, parsed));
                }
                Ok(entries)
            })(),
        );
        let in_range = |n: u32, span: std::ops::Range<usize>| {
            if n == 0 || n > 1024 {
                return Err(at(
                    span,
                    format!("kernel `{kname}`: block-size must be 1..=1024"),
                ));
            }
            Ok(n)
        };
        let block_size = keep(
            &mut errors,
            match &k.block_size {
                None => Ok(KernelBlockSize::None),
                Some(b) => match b.get_ref() {
                    RawBlockSize::All(n) => in_range(*n, b.span()).map(KernelBlockSize::All),
                    RawBlockSize::PerEntry(table) => (|| {
                        let mut out = Vec::new();
                        for (pattern, n) in table {
                            let p = EntryPattern::parse(pattern).map_err(|e| {
                                at(b.span(), format!("kernel `{kname}`: block-size: {e}"))
                            })?;
                            out.push((p, in_range(*n, b.span())?));
                        }
                        Ok(KernelBlockSize::PerEntry(out))
                    })(),
                },
            },
        );
        let restriction = match &k.targets {
            Some(list) => keep(&mut errors, targets(list)),
            None => None,
        };
        let (Some(source), Some(variants), Some(entries), Some(block_size)) =
            (source, variants, entries, block_size)
        else {
            continue;
        };
        if errors.len() > before {
            continue;
        }
        let mut flags = raw.build.flags.clone();
        flags.cuda.extend(k.flags.cuda.iter().cloned());
        flags.hip.extend(k.flags.hip.iter().cloned());
        kernels.push(Kernel {
            name: kname.clone(),
            source,
            language: k.language,
            include_dirs,
            defines: kdefines,
            variants,
            flags,
            entries,
            block_size,
            targets: restriction,
        });
    }
    if raw.kernels.is_empty() {
        errors.push(ConfigError::File {
            path: file.display().to_string(),
            message: "no [kernels.NAME] tables: nothing to build".into(),
        });
    }
    let (Some(name), Some(version), true) = (name, version, errors.is_empty()) else {
        return Err(one_or_many(file, errors));
    };
    let out_dir =
        lexical_clean(&root.join(raw.build.out_dir.as_deref().unwrap_or("target/kbuild")));
    Ok(Project {
        file: file.to_path_buf(),
        root,
        name,
        version,
        default_targets,
        default_targets_all,
        out_dir,
        flags: raw.build.flags,
        launcher: raw.build.launcher,
        job_timeout: raw.build.job_timeout,
        remote_cache: raw.build.remote_cache,
        remote_cache_mode: raw.build.remote_cache_mode,
        compat_header: raw.build.compat_header.unwrap_or(true),
        toolchain: raw.toolchain,
        kernels,
    })
}

/// `r`'s value, or `None` with its error added to `errors`.
fn keep<T>(errors: &mut Vec<ConfigError>, r: Result<T, ConfigError>) -> Option<T> {
    r.map_err(|e| errors.push(e)).ok()
}

/// The collected errors of one file as one error: itself when there is one, else
/// [`ConfigError::Many`] in file order.
fn one_or_many(file: &Path, mut errors: Vec<ConfigError>) -> ConfigError {
    if errors.len() == 1 {
        if let Some(e) = errors.pop() {
            return e;
        }
    }
    let at = |e: &ConfigError| match e {
        ConfigError::At { line, column, .. } => (*line, *column),
        _ => (usize::MAX, 0),
    };
    errors.sort_by_key(at);
    ConfigError::Many {
        path: file.display().to_string(),
        errors,
    }
}

/// The cartesian product of the variant axes, in key order.
fn variant_matrix(
    kernel: &str,
    axes: &BTreeMap<String, Spanned<Vec<DefineValue>>>,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<Vec<Variant>, ConfigError> {
    let mut out = vec![Variant {
        name: String::new(),
        defines: BTreeMap::new(),
    }];
    for (key, values) in axes {
        if !is_identifier(key) {
            return Err(at(
                values.span(),
                format!("kernel `{kernel}`: variant axis `{key}` is not a C identifier"),
            ));
        }
        if values.get_ref().is_empty() {
            return Err(at(
                values.span(),
                format!("kernel `{kernel}`: variant axis `{key}` has no values"),
            ));
        }
        let mut next = Vec::new();
        for v in &out {
            for value in values.get_ref() {
                let text = value.text();
                let part = format!("{}{}", key.to_ascii_lowercase(), sanitize(&text));
                let mut defines = v.defines.clone();
                defines.insert(key.clone(), text);
                next.push(Variant {
                    name: if v.name.is_empty() {
                        part
                    } else {
                        format!("{}-{part}", v.name)
                    },
                    defines,
                });
            }
        }
        out = next;
    }
    if axes.is_empty() {
        return Ok(Vec::new());
    }
    let mut seen = std::collections::HashSet::new();
    for v in &out {
        if !seen.insert(v.name.clone()) {
            return Err(ConfigError::File {
                path: String::new(),
                message: format!(
                    "kernel `{kernel}`: two variants are both named `{}`",
                    v.name
                ),
            });
        }
    }
    Ok(out)
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `a/b/../c` → `a/c` without touching the file system (the directory may not exist yet).
fn lexical_clean(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// 1-based line and column of byte `offset` in `text`.
/// A TOML/serde error message in the terms of the file: the key it is about, TOML type
/// names (`expected an integer, found a string`, not `expected u32`; no serde enum names),
/// and a "did you mean" for an unknown key.
fn user_message(text: &str, span: Option<Range<usize>>, message: &str) -> String {
    let key = span.as_ref().and_then(|s| key_before(text, s.start));
    let with_key = |m: String| match &key {
        Some(k) => format!("{k}: {m}"),
        None => m,
    };
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (given, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let hint = match did_you_mean(given, &candidates) {
            Some(c) => format!(" (did you mean `{c}`?)"),
            None => String::new(),
        };
        let list = if candidates.is_empty() {
            String::new()
        } else {
            format!("; expected one of {}", quoted(&candidates))
        };
        return format!("unknown key `{given}`{hint}{list}");
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        return format!("missing key `{}", rest);
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return with_key(format!(
                "expected {}, found {}",
                expected_name(expected),
                found_name(found)
            ));
        }
    }
    if let Some(rest) = message.strip_prefix("invalid value: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            let expected = match expected_name(expected) {
                "an integer" if found.contains('-') => "a non-negative integer",
                other => other,
            };
            let value = found.split('`').nth(1).unwrap_or(found);
            return with_key(format!("expected {expected}, found {value}"));
        }
    }
    if message.starts_with("data did not match any variant of untagged enum DefineValue") {
        let found = span
            .as_ref()
            .map(|s| value_type_at(text, s.start))
            .unwrap_or("another type");
        return with_key(format!(
            "expected a string, an integer, a float or a boolean, found {found}"
        ));
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (given, expected) = rest.split_once("`, expected ").unwrap_or((rest, ""));
        let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let hint = match did_you_mean(given, &candidates) {
            Some(c) => format!(" (did you mean `{c}`?)"),
            None => String::new(),
        };
        return with_key(format!(
            "unknown value `{given}`{hint}, expected {expected}"
        ));
    }
    message.to_string()
}

/// The key whose value starts at `offset` (`block-size` in `block-size = "64"`), if the text
/// before it on its line ends in `KEY =`.
fn key_before(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line = before.rsplit('\n').next()?;
    let line = line.trim_end().strip_suffix('=')?.trim_end();
    let start = line
        .rfind(|c: char| {
            !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '"' || c == '.')
        })
        .map_or(0, |i| i + 1);
    let key = line[start..].trim_matches('"');
    (!key.is_empty()).then(|| key.to_string())
}

/// The TOML type of the value that starts at `offset`.
fn value_type_at(text: &str, offset: usize) -> &'static str {
    let v = text.get(offset..).unwrap_or("").trim_start();
    match v.chars().next() {
        Some('[') => "an array",
        Some('{') => "a table",
        Some('"') | Some('\'') => "a string",
        Some('t') | Some('f') => "a boolean",
        Some(c) if c.is_ascii_digit() || c == '-' || c == '+' => "a number",
        _ => "another type",
    }
}

/// serde's name of what was found (`string "64"`, `integer `1``, `sequence`) in TOML terms.
fn found_name(found: &str) -> &'static str {
    let head = found.split([' ', '`']).next().unwrap_or(found);
    match head {
        "string" => "a string",
        "integer" => "an integer",
        "floating" => "a float",
        "boolean" => "a boolean",
        "sequence" => "an array",
        "map" => "a table",
        "character" => "a string",
        _ => "another type",
    }
}

/// serde's name of what was expected (`u32`, `a sequence`, `struct RawKernel`) in TOML terms.
fn expected_name(expected: &str) -> &'static str {
    match expected.trim() {
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" => {
            "an integer"
        }
        "f32" | "f64" => "a float",
        "a string" | "string" | "a borrowed string" => "a string",
        "a boolean" | "bool" => "a boolean",
        "a sequence" => "an array",
        e if e.starts_with("struct ") || e == "a map" => "a table",
        _ => "a value of another type",
    }
}

fn quoted(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidate nearest to `given` by edit distance, when near enough to be a typo: of the
/// whole name (`entry` → `entries`), or of its first word (`blok` → `block-size`, `out` →
/// `out-dir`).
fn did_you_mean<'a>(given: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .filter(|c| **c != given)
        .filter_map(|c| {
            let whole = edit_distance(given, c);
            let head = c.split('-').next().unwrap_or(c);
            let first = edit_distance(given, head);
            if whole <= (given.len().max(c.len()) / 2).max(1) {
                Some((whole, *c))
            } else if head != *c && first <= (given.len().max(head.len()) / 3).max(1) {
                Some((first, *c))
            } else {
                None
            }
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(dir: &Path, toml: &str) -> Result<Project, ConfigError> {
        std::fs::create_dir_all(dir.join("include")).unwrap();
        std::fs::write(dir.join("k.cu"), "").unwrap();
        parse(&dir.join(FILE_NAME), toml)
    }

    const GOOD: &str = r#"
[package]
name = "demo"
version = "1.2.3"

[build]
targets = ["sm_89", "gfx1100"]
include-dirs = ["include"]

[kernels.gemv]
source = "k.cu"
entries = ["gemv"]
block-size = 256
defines = { EPS = 1e-6, FAST = true }
variants = { ROWS = [1, 2], VEC = [4, 8] }
"#;

    /// Issue 27, item 11: `block-size` per entry pattern beside the plain integer; an exact
    /// name beats patterns, two patterns disagreeing on one entry is an error naming both.
    #[test]
    fn block_size_per_entry_pattern() {
        let d = tempfile::tempdir().unwrap();
        let table = GOOD.replace(
            "block-size = 256",
            "block-size = { \"rmsnorm_*\" = 256, \"*_bf16\" = 128, \"softmax<*>\" = 64 }",
        );
        let p = project(d.path(), &table).unwrap();
        let b = &p.kernels[0].block_size;
        assert_eq!(b.for_entry("rmsnorm_f32"), Ok(Some(256)));
        assert_eq!(b.for_entry("gelu_bf16"), Ok(Some(128)));
        assert_eq!(b.for_entry("_Z7softmaxIfEvPfi"), Ok(Some(64)));
        assert_eq!(b.for_entry("other"), Ok(None));
        let e = b.for_entry("rmsnorm_bf16").unwrap_err().to_string();
        assert_eq!(
            e,
            "block-size: entry `rmsnorm_bf16` matches `*_bf16` (128) and `rmsnorm_*` (256); give it by name"
        );
        let exact = GOOD.replace(
            "block-size = 256",
            "block-size = { \"rmsnorm_*\" = 256, \"*_bf16\" = 128, rmsnorm_bf16 = 32 }",
        );
        let p = project(d.path(), &exact).unwrap();
        assert_eq!(
            p.kernels[0].block_size.for_entry("rmsnorm_bf16"),
            Ok(Some(32))
        );
        // The plain integer is every entry's.
        let p = project(d.path(), GOOD).unwrap();
        assert_eq!(p.kernels[0].block_size, KernelBlockSize::All(256));
        assert_eq!(p.kernels[0].block_size.for_entry("anything"), Ok(Some(256)));
        for (bad, want) in [
            (
                "block-size = { \"a_*\" = 0 }",
                "block-size must be 1..=1024",
            ),
            (
                "block-size = { \"a_*\" = 2048 }",
                "block-size must be 1..=1024",
            ),
            ("block-size = { \"a[\" = 64 }", "without a closing `]`"),
            (
                "block-size = \"64\"",
                "block-size: expected an integer, found a string",
            ),
        ] {
            let e = project(d.path(), &GOOD.replace("block-size = 256", bad))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    /// Issue 27, item 7: `entries` per vendor or target beside the plain list.
    #[test]
    fn entries_per_vendor_or_target() {
        let d = tempfile::tempdir().unwrap();
        let scoped = GOOD.replace(
            "entries = [\"gemv\"]",
            "entries = { all = [\"gemv\"], nvidia = [\"*_bf16\"], gfx1100 = [\"amd_only\"] }",
        );
        let p = project(d.path(), &scoped).unwrap();
        let k = &p.kernels[0];
        let names = |t: &str| -> Vec<String> {
            k.entries
                .for_target(&t.parse().unwrap())
                .iter()
                .map(|e| e.text().to_string())
                .collect()
        };
        assert_eq!(names("sm_89"), ["gemv", "*_bf16"]);
        assert_eq!(names("gfx1100"), ["gemv", "amd_only"]);
        assert_eq!(names("gfx1201"), ["gemv"]);
        assert!(k.has_patterns());
        // The plain list still means every target.
        let p = project(d.path(), GOOD).unwrap();
        assert_eq!(
            p.kernels[0]
                .entries
                .for_target(&"gfx1100".parse().unwrap())
                .len(),
            1
        );
        let bad = GOOD.replace("entries = [\"gemv\"]", "entries = { intel = [\"gemv\"] }");
        let e = project(d.path(), &bad).unwrap_err().to_string();
        assert!(
            e.contains("kernel `gemv`: entries: `intel` is not `all`, `nvidia`, `amd` or a target"),
            "{e}"
        );
        let empty = GOOD.replace("entries = [\"gemv\"]", "entries = { nvidia = [] }");
        let e = project(d.path(), &empty).unwrap_err().to_string();
        assert!(e.contains("`entries` must list"), "{e}");
    }

    #[test]
    fn parses_a_project_with_a_variant_matrix() {
        let d = tempfile::tempdir().unwrap();
        let p = project(d.path(), GOOD).unwrap();
        assert_eq!(p.name, "demo");
        assert_eq!(p.default_targets.len(), 2);
        let k = &p.kernels[0];
        let names: Vec<_> = k.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            ["rows1-vec4", "rows1-vec8", "rows2-vec4", "rows2-vec8"]
        );
        assert_eq!(k.defines["FAST"], "1");
        assert_eq!(k.variants[3].defines["VEC"], "8");
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let d = tempfile::tempdir().unwrap();
        let bad_key = GOOD.replace("block-size = 256", "block-size = 256\nblok = 1");
        let e = project(d.path(), &bad_key).unwrap_err().to_string();
        assert!(
            e.contains("Kbuild.toml:14:1: unknown key `blok` (did you mean `block-size`?)"),
            "{e}"
        );
        let typo = GOOD.replace("block-size = 256", "block-size = 256\nentry = []");
        let e = project(d.path(), &typo).unwrap_err().to_string();
        assert!(
            e.contains("unknown key `entry` (did you mean `entries`?)"),
            "{e}"
        );

        let wrong_type = GOOD.replace("block-size = 256", "block-size = \"big\"");
        let e = project(d.path(), &wrong_type).unwrap_err().to_string();
        assert!(
            e.contains("Kbuild.toml:13:14: block-size: expected an integer, found a string"),
            "{e}"
        );
        for (from, to, want) in [
            (
                "block-size = 256",
                "block-size = -1",
                "block-size: expected a non-negative integer, found -1",
            ),
            (
                "FAST = true",
                "FAST = [1]",
                "FAST: expected a string, an integer, a float or a boolean, found an array",
            ),
            (
                "block-size = 256",
                "block-size = 256\nlanguage = \"rust\"",
                "language: unknown value `rust`, expected `cuda` or `hip`",
            ),
        ] {
            let e = project(d.path(), &GOOD.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
            assert!(
                !e.contains("u32") && !e.contains("untagged") && !e.contains("variant"),
                "{e}"
            );
        }

        let missing = GOOD.replace("\"k.cu\"", "\"nope.cu\"");
        let e = project(d.path(), &missing).unwrap_err().to_string();
        assert!(
            e.contains("Kbuild.toml:11:10: kernel `gemv`: source file `nope.cu` does not exist"),
            "{e}"
        );

        let target = GOOD.replace("\"sm_89\"", "\"sm89\"");
        let e = project(d.path(), &target).unwrap_err().to_string();
        assert!(
            e.contains("Kbuild.toml:7:12: unknown target `sm89` (did you mean sm_89?)"),
            "{e}"
        );

        let syntax = GOOD.replace("[kernels.gemv]", "[kernels.gemv");
        let e = project(d.path(), &syntax).unwrap_err().to_string();
        assert!(e.contains("Kbuild.toml:10:"), "{e}");
    }

    #[test]
    fn values_that_reach_a_compiler_refuse_shell_characters() {
        let d = tempfile::tempdir().unwrap();
        for (from, to, want) in [
            (
                "FAST = true",
                "FAST = true, VERSION = \"$(sh tools/x.sh)\"",
                "Kbuild.toml:14:48: kernels.gemv.defines.VERSION `$(sh tools/x.sh)` holds `$`",
            ),
            (
                "include-dirs = [\"include\"]",
                "include-dirs = [\"include\"]\ndefines = { V = \"a;b\" }",
                "build.defines.V `a;b` holds `;`",
            ),
            (
                "include-dirs = [\"include\"]",
                "include-dirs = [\"include\"]\nflags.cuda = [\"-DX=`id`\"]",
                "build.flags.cuda `-DX=`id`` holds a backtick",
            ),
            (
                "block-size = 256",
                "block-size = 256\nflags.hip = [\"-O3\", \"-DV=a|b\"]",
                "kernels.gemv.flags.hip `-DV=a|b` holds `|`",
            ),
            (
                "VEC = [4, 8]",
                "VEC = [4, \"8)\"]",
                "kernels.gemv.variants.VEC `8)` holds `)`",
            ),
            (
                "include-dirs = [\"include\"]",
                "include-dirs = [\"include\\nlauncher = 1\"]",
                "build.include-dirs `include\\nlauncher = 1` holds the control character U+000A",
            ),
            (
                "include-dirs = [\"include\"]",
                "include-dirs = [\"include\"]\nout-dir = \"out$(x)\"",
                "build.out-dir `out$(x)` holds `$`",
            ),
        ] {
            let e = project(d.path(), &GOOD.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}\nwanted: {want}");
        }
        // A source file named to run a command.
        let name = "k$(sh tools$(printf \\057)x.sh).cu";
        std::fs::write(d.path().join(name), "").unwrap();
        let toml = GOOD.replace("\"k.cu\"", &format!("'{name}'"));
        let e = project(d.path(), &toml).unwrap_err().to_string();
        assert!(
            e.contains("Kbuild.toml:11:10: kernels.gemv.source `k$(sh tools$(printf \\\\057)x.sh).cu` holds `$`"),
            "{e}"
        );
        // What real projects pass stays allowed.
        let fine = GOOD.replace(
            "block-size = 256",
            "block-size = 256\nflags = { cuda = [\"--fmad=false\", \"-Xptxas=-O3,-v\", \"-maxrregcount=32\"], hip = [\"-ffp-contract=off\"] }",
        );
        project(d.path(), &fine).unwrap();
    }

    #[test]
    fn finds_the_project_file_from_root_and_inside() {
        let d = tempfile::tempdir().unwrap();
        let k = d.path().join("kernels");
        std::fs::create_dir_all(k.join("sub")).unwrap();
        std::fs::write(k.join(FILE_NAME), GOOD).unwrap();
        assert_eq!(find(d.path()).unwrap(), k.join(FILE_NAME));
        assert_eq!(find(&k.join("sub")).unwrap(), k.join(FILE_NAME));
    }

    #[test]
    fn every_error_of_the_file_is_reported_at_once() {
        let d = tempfile::tempdir().unwrap();
        let mut toml = String::from("[package]\nname = \"demo\"\nversion = \"1.0.0\"\n");
        for i in 0..13 {
            toml.push_str(&format!(
                "\n[kernels.k{i}]\nsource = \"missing{i}.cu\"\nentries = [\"k{i}\"]\n"
            ));
        }
        toml.push_str("\n[kernels.ok]\nsource = \"k.cu\"\nentries = [\"ok\"]\nblock-size = 0\ntargets = [\"sm_8\"]\n");
        let e = project(d.path(), &toml).unwrap_err();
        let ConfigError::Many { errors, .. } = &e else {
            panic!("expected every error at once, got {e}");
        };
        assert_eq!(errors.len(), 15, "{e}");
        let text = e.to_string();
        assert!(text.starts_with("15 problems in "), "{text}");
        for i in 0..13 {
            assert!(
                text.contains(&format!("source file `missing{i}.cu` does not exist")),
                "{text}"
            );
        }
        assert!(text.contains("block-size must be 1..=1024"), "{text}");
        assert!(text.contains("unknown target `sm_8`"), "{text}");
        // One line each, naming its line, in file order.
        let lines: Vec<usize> = text
            .lines()
            .skip(1)
            .map(|l| l.split(':').nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(lines.len(), 15);
        assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
        // One error alone stays itself.
        let one = GOOD.replace("source = \"k.cu\"", "source = \"gone.cu\"");
        assert!(matches!(
            project(d.path(), &one),
            Err(ConfigError::At { .. })
        ));
    }

    #[test]
    fn a_vendor_group_restricts_a_kernel_to_every_target_of_that_vendor() {
        let d = tempfile::tempdir().unwrap();
        for (group, yes, no) in [
            (
                "nvidia",
                ["sm_89", "sm_90", "compute_90"],
                ["gfx1100", "gfx90a:xnack+"],
            ),
            (
                "cuda",
                ["sm_80", "sm_120", "compute_89"],
                ["gfx942", "gfx1201"],
            ),
            (
                "amd",
                ["gfx1100", "gfx90a:xnack+", "gfx1201"],
                ["sm_89", "compute_90"],
            ),
            ("rocm", ["gfx942", "gfx1100", "gfx1101"], ["sm_90", "sm_80"]),
        ] {
            let toml = GOOD.replace(
                "block-size = 256",
                &format!("block-size = 256\ntargets = [\"{group}\"]"),
            );
            let p = project(d.path(), &toml).unwrap();
            let k = &p.kernels[0];
            for t in yes {
                assert!(k.builds_for(&t.parse().unwrap()), "{group} admits {t}");
            }
            for t in no {
                assert!(!k.builds_for(&t.parse().unwrap()), "{group} keeps {t} off");
            }
        }
        // A specific target admits only itself.
        let toml = GOOD.replace(
            "block-size = 256",
            "block-size = 256\ntargets = [\"compute_89\"]",
        );
        let k = &project(d.path(), &toml).unwrap().kernels[0];
        assert!(k.builds_for(&"compute_89".parse().unwrap()));
        assert!(!k.builds_for(&"sm_89".parse().unwrap()));
    }
}
