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
    /// A `@triton.jit` function, compiled by kbuild's Triton workers for NVIDIA (cubin) and
    /// AMD (hsaco) targets; its keys are in [`TritonKernel`].
    Triton,
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
    remote: RemoteSettings,
    #[serde(default)]
    kernels: BTreeMap<String, Spanned<RawKernel>>,
}

/// `[remote]`: remote execution of the compile jobs (the CLI's `--remote-execution` and the
/// `KBUILD_REMOTE_*` variables take precedence; docs/scale.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RemoteSettings {
    /// `grpc://HOST:PORT` or `grpcs://HOST:PORT` of a REAPI v2 service.
    pub execution: Option<String>,
    /// The REAPI instance name.
    pub instance: Option<String>,
    /// Platform properties every action carries (`OSFamily`, `container-image`, a pool).
    #[serde(default)]
    pub platform: BTreeMap<String, String>,
    /// Actions in flight at once.
    pub jobs: Option<usize>,
    /// Of those, how many are watched over an open stream; the others poll the operation
    /// (default 16: a service with a thread per call keeps threads for its workers).
    pub streams: Option<usize>,
    /// Seconds an action may wait for a worker and its result beyond its own timeout before
    /// the job compiles here instead (default 300).
    pub queue_timeout: Option<u64>,
    /// A PEM file of CA certificates trusted besides the web roots (a private service).
    pub ca_file: Option<PathBuf>,
    /// Actions carry the compiler's installation (input directories) instead of naming it
    /// for a worker that has it (docs/scale.md: what that costs).
    #[serde(default)]
    pub hermetic: bool,
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
    /// Required for CUDA and HIP; a Triton kernel's one entry is its function.
    entries: Option<Spanned<RawEntries>>,
    block_size: Option<Spanned<RawBlockSize>>,
    targets: Option<Spanned<Vec<Spanned<String>>>>,
    // The Triton keys (`language = "triton"`): see `triton::RawTriton`.
    function: Option<String>,
    signature: Option<BTreeMap<String, String>>,
    constexprs: Option<BTreeMap<String, toml::Value>>,
    divisible_16: Option<Vec<String>>,
    equal_to_1: Option<Vec<String>>,
    num_warps: Option<u32>,
    num_stages: Option<u32>,
    num_ctas: Option<u32>,
    maxnreg: Option<u32>,
    import: Option<toml::Table>,
    autotune: Option<bool>,
    heuristics: Option<bool>,
    launch_cooperative_grid: Option<bool>,
    launch_pdl: Option<bool>,
}

impl RawKernel {
    fn triton(&self) -> RawTriton {
        RawTriton {
            function: self.function.clone(),
            signature: self.signature.clone(),
            constexprs: self.constexprs.clone(),
            divisible_16: self.divisible_16.clone(),
            equal_to_1: self.equal_to_1.clone(),
            num_warps: self.num_warps,
            num_stages: self.num_stages,
            num_ctas: self.num_ctas,
            maxnreg: self.maxnreg,
            import: self.import.clone(),
            autotune: self.autotune,
            heuristics: self.heuristics,
            launch_cooperative_grid: self.launch_cooperative_grid,
            launch_pdl: self.launch_pdl,
        }
    }
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
    /// The target vendors it is built for; empty: all. An autotune config list may differ per
    /// family (a module reading the device at import), so a config only one family's list
    /// holds is built for that family's targets only.
    pub vendors: Vec<Vendor>,
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
    /// Vendor groups in that restriction (`nvidia`, `amd`): every target of the vendor, also
    /// the arch-specific, PTX and generic ones the group's expansion leaves out.
    pub target_vendors: Vec<Vendor>,
    /// `language = "triton"`: what the Triton worker compiles.
    pub triton: Option<TritonKernel>,
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
        if self.language == Language::Triton && triton_arch(target).is_err() {
            return false;
        }
        match &self.targets {
            None => true,
            Some(_) if self.target_vendors.contains(&target.vendor()) => true,
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
    /// `[remote]`.
    pub remote: RemoteSettings,
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
        let entries =
            keep(
                &mut errors,
                (|| {
                    let triton_entry;
                    let (lists, span): (Vec<(Option<&String>, &Vec<String>)>, _) =
                        match (&k.entries, &k.function) {
                            (Some(e), _) => match e.get_ref() {
                                RawEntries::List(l) => (vec![(None, l)], e.span()),
                                RawEntries::Scoped(m) => {
                                    (m.iter().map(|(key, l)| (Some(key), l)).collect(), e.span())
                                }
                            },
                            // A Triton kernel's entry is its function's name.
                            (None, Some(f)) if k.language == Language::Triton => {
                                triton_entry = vec![f.clone()];
                                (vec![(None, &triton_entry)], spanned.span())
                            }
                            (None, _) => (Vec::new(), spanned.span()),
                        };
                    let missing = || {
                        at(
                            span.clone(),
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
                                at(span.clone(), format!("kernel `{kname}`: entries: {e}"))
                            })?,
                        };
                        if list.iter().any(|e| e.is_empty()) {
                            return Err(missing());
                        }
                        let mut parsed = Vec::new();
                        for e in list {
                            parsed.push(EntryPattern::parse(e).map_err(|err| {
                                at(span.clone(), format!("kernel `{kname}`: {err}"))
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
        let target_vendors: Vec<Vendor> = k
            .targets
            .iter()
            .flat_map(|l| l.get_ref())
            .filter_map(|item| kbuild_manifest::target::vendor_group(item.get_ref()))
            .collect();
        let raw_triton = k.triton();
        let triton = match k.language {
            Language::Triton => {
                let axes: Vec<&String> = k.variants.keys().collect();
                match raw_triton.validate(&axes) {
                    Ok(t) => Some(t),
                    Err(problems) => {
                        for p in problems {
                            errors.push(at(spanned.span(), format!("kernel `{kname}`: {p}")));
                        }
                        None
                    }
                }
            }
            Language::Cuda | Language::Hip => {
                let given = raw_triton.given();
                if !given.is_empty() {
                    errors.push(at(
                        spanned.span(),
                        format!(
                            "kernel `{kname}`: {} (keys of language = \"triton\" kernels only)",
                            given.join(", ")
                        ),
                    ));
                }
                None
            }
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
            target_vendors,
            triton,
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
    let ca_root = root.clone();
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
        // A CA file named in Kbuild.toml is the project's, relative to it.
        remote: RemoteSettings {
            ca_file: raw.remote.ca_file.as_ref().map(|p| ca_root.join(p)),
            ..raw.remote
        },
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

mod messages;
#[cfg(test)]
mod tests;
mod triton;
mod variants;

use triton::RawTriton;
pub use triton::{
    triton_arch, NotForTriton, TritonKernel, LAUNCH_AXES, TRITON_PTXAS, TRITON_PTXAS_BLACKWELL,
    TRITON_VERSION,
};
pub(crate) use variants::sanitize as variant_part;

use messages::{line_col, user_message};
use variants::{is_identifier, variant_matrix};
