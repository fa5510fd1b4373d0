//! The build-script API: build a project's kernels from a Rust crate's `build.rs` and embed
//! them.
//!
//! ```no_run
//! // build.rs
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     kbuild_build::Build::from_manifest("kernels/Kbuild.toml")
//!         .targets(["sm_89", "gfx1100"])
//!         .run()?;
//!     Ok(())
//! }
//! // src/lib.rs
//! // mod kernels { include!(concat!(env!("OUT_DIR"), "/kbuild_kernels.rs")); }
//! // let package = kbuild_loader::Package::from_bundle_bytes(kernels::BUNDLE, kernels::ORIGIN)?;
//! ```
//!
//! [`Build::run`] runs the normal pipeline (plan, compile through the content-addressed cache,
//! audit, manifest; cargo's jobserver is honoured through `CARGO_MAKEFLAGS`), packages the
//! build into a deterministic bundle in `$OUT_DIR`, prints `cargo:rerun-if-changed=` for
//! Kbuild.toml, every kernel source and every header the compilers read (from the cache's
//! dependency records) and `cargo:rerun-if-env-changed=` for the variables that steer kbuild,
//! and writes `$OUT_DIR/kbuild_kernels.rs`: `BUNDLE` (the bundle, `include_bytes!`), the
//! package name, version and targets, and one module per kernel with constants for its name
//! and its entry symbols.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use kbuild_base::dirs::Dirs;
use kbuild_base::env::{names, Env};
use kbuild_bundle::Bundle;
use kbuild_manifest::target::TargetError;
use kbuild_manifest::target::{parse_target_list, Target};

use crate::build::{build, BuildOptions};
use crate::cache::Cache;
use crate::config::{self, Project};
use crate::events::{Event, Observer};

/// Name of the generated module in `$OUT_DIR`.
pub const MODULE_FILE: &str = "kbuild_kernels.rs";

/// Environment variables that change what a build produces or where it looks.
const ENV_INPUTS: &[&str] = &[
    names::KBUILD_CACHE_DIR,
    names::KBUILD_LAUNCHER,
    names::KBUILD_DATA_DIR,
    names::CUDA_HOME,
    names::CUDA_PATH,
    names::ROCM_PATH,
    names::HIP_PATH,
    names::SOURCE_DATE_EPOCH,
];

#[derive(Debug, thiserror::Error)]
pub enum BuildRsError {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error("targets `{list}`: {err}")]
    Targets { list: String, err: TargetError },
    #[error(
        "no output directory: call .out_dir(...) or run from a build script (OUT_DIR is unset)"
    )]
    NoOutDir,
    #[error(transparent)]
    Build(#[from] crate::build::BuildError),
    #[error("{count} kernel job(s) failed:\n{details}")]
    Jobs { count: usize, details: String },
    #[error("packaging the kernels: {0}")]
    Bundle(#[from] kbuild_bundle::BundleError),
    #[error("writing {path}: {err}")]
    Write { path: String, err: std::io::Error },
}

/// A kernel build for a build script. See the module documentation.
#[derive(Debug, Clone)]
pub struct Build {
    manifest: PathBuf,
    targets: Vec<String>,
    out_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    jobs: Option<usize>,
    remote_cache: Option<String>,
    cargo: bool,
    env: Env,
}

/// What [`Build::run`] wrote.
#[derive(Debug, Clone)]
pub struct Built {
    /// `$OUT_DIR/kbuild_kernels.rs`.
    pub module: PathBuf,
    /// The bundle the module embeds.
    pub bundle: PathBuf,
    /// The build output (objects and manifest.json).
    pub build_dir: PathBuf,
    pub compiled: usize,
    pub cached: usize,
    /// Every file a change of which must rerun the build (what was printed to cargo).
    pub inputs: Vec<PathBuf>,
}

impl Build {
    /// A build of the project whose `Kbuild.toml` is at `path` (relative paths are from the
    /// crate's directory, where cargo runs build scripts).
    pub fn from_manifest(path: impl AsRef<Path>) -> Build {
        Build {
            manifest: path.as_ref().to_path_buf(),
            targets: Vec::new(),
            out_dir: None,
            cache_dir: None,
            jobs: None,
            remote_cache: None,
            cargo: true,
            // The build script's environment, read once (cargo sets OUT_DIR there).
            env: Env::from_process(),
        }
    }

    /// Targets instead of the project's list: names, groups or TORCH_CUDA_ARCH_LIST items,
    /// as `--targets` takes them.
    pub fn targets<I, S>(mut self, list: I) -> Build
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.targets = list.into_iter().map(|s| s.as_ref().to_string()).collect();
        self
    }

    /// Where the build output, bundle and module go (default `$OUT_DIR`).
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Build {
        self.out_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// The compile cache (default: kbuild's, `KBUILD_CACHE_DIR` or the user cache dir).
    pub fn cache_dir(mut self, dir: impl AsRef<Path>) -> Build {
        self.cache_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// At most this many compiles at once (cargo's jobserver limits them anyway).
    pub fn jobs(mut self, n: usize) -> Build {
        self.jobs = Some(n.max(1));
        self
    }

    /// A remote build cache to read from (`oci://HOST[:PORT]/REPO`, read mode).
    pub fn remote_cache(mut self, url: impl Into<String>) -> Build {
        self.remote_cache = Some(url.into());
        self
    }

    /// Whether to print `cargo:` directives (default true; off for use outside build scripts).
    /// The environment the build sees (default: the build script's own).
    pub fn env(mut self, env: Env) -> Build {
        self.env = env;
        self
    }

    pub fn cargo_directives(mut self, on: bool) -> Build {
        self.cargo = on;
        self
    }

    /// Build, package, write the module and tell cargo what to watch.
    pub fn run(self) -> Result<Built, BuildRsError> {
        let project = config::load(&self.manifest)?;
        let targets = self.parse_targets()?;
        let out = match self
            .out_dir
            .clone()
            .or_else(|| self.env.path(names::OUT_DIR))
        {
            Some(d) => d,
            None => return Err(BuildRsError::NoOutDir),
        };
        let build_dir = out.join("kbuild");
        let cache_dir = match &self.cache_dir {
            Some(d) => d.clone(),
            None => {
                Dirs::from_env(&self.env)
                    .map_err(crate::build::BuildError::from)?
                    .cache
            }
        };
        let opts = BuildOptions {
            targets,
            out_dir: Some(build_dir.clone()),
            jobs: self.jobs,
            cache_dir: Some(cache_dir.clone()),
            remote_cache: self.remote_cache.clone(),
            env: self.env.clone(),
            ..BuildOptions::default()
        };
        // Watch the inputs even when the build fails, so fixing a header reruns it.
        let early = project_inputs(&project, None, &[]);
        let report = match build(&project, &opts, &CargoLines) {
            Ok(r) => r,
            Err(e) => {
                self.print_inputs(&early);
                return Err(e.into());
            }
        };
        if !report.failures.is_empty() {
            self.print_inputs(&early);
            let details = report
                .failures
                .iter()
                .map(|f| format!("  {}: {}", f.label, f.cause))
                .collect::<Vec<_>>()
                .join("\n");
            return Err(BuildRsError::Jobs {
                count: report.failures.len(),
                details,
            });
        }
        let bundle = Bundle::from_build_dir(&build_dir, None, false)?;
        let bundle_path = out.join(bundle.file_name());
        write(
            &bundle_path,
            &bundle.to_bytes(self.env.source_date_epoch())?,
        )?;

        let cache = Cache::open(&cache_dir);
        let keys: Vec<String> = bundle
            .manifest()
            .objects
            .iter()
            .map(|o| o.cache_key.clone())
            .collect();
        let inputs = project_inputs(&project, Some(&cache), &keys);
        self.print_inputs(&inputs);

        let module = out.join(MODULE_FILE);
        write(
            &module,
            render_module(&project, &bundle, &bundle_path).as_bytes(),
        )?;
        Ok(Built {
            module,
            bundle: bundle_path,
            build_dir,
            compiled: report.compiled,
            cached: report.cached,
            inputs,
        })
    }

    fn parse_targets(&self) -> Result<Option<Vec<Target>>, BuildRsError> {
        if self.targets.is_empty() {
            return Ok(None);
        }
        let mut all: Vec<Target> = Vec::new();
        for item in &self.targets {
            let list = parse_target_list(item).map_err(|e| BuildRsError::Targets {
                list: item.clone(),
                err: e,
            })?;
            for t in list {
                if !all.contains(&t) {
                    all.push(t);
                }
            }
        }
        Ok(Some(all))
    }

    fn print_inputs(&self, inputs: &[PathBuf]) {
        if !self.cargo {
            return;
        }
        for p in inputs {
            println!("cargo:rerun-if-changed={}", p.display());
        }
        for v in ENV_INPUTS {
            println!("cargo:rerun-if-env-changed={v}");
        }
    }
}

/// A build script's progress: failures and notes as plain lines on stderr, which cargo shows
/// when the script fails.
struct CargoLines;

impl Observer for CargoLines {
    /// Nothing per job: a failure's error comes as a note.
    fn event(&self, _: &Event) {}

    fn note(&self, text: &str) {
        eprintln!("{text}");
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), BuildRsError> {
    kbuild_base::fs::write_if_changed(path, bytes)
        .map(|_| ())
        .map_err(|err| BuildRsError::Write {
            path: path.display().to_string(),
            err,
        })
}

/// Kbuild.toml, every kernel source, and every dependency the cache recorded for `keys`;
/// only files that exist (cargo reruns a script on every build for a missing one).
fn project_inputs(project: &Project, cache: Option<&Cache>, keys: &[String]) -> Vec<PathBuf> {
    let mut set: BTreeSet<PathBuf> = BTreeSet::new();
    set.insert(project.file.clone());
    for k in &project.kernels {
        set.insert(project.root.join(&k.source));
    }
    if let Some(cache) = cache {
        for key in keys {
            for (path, _) in cache.entry_deps(key).unwrap_or_default() {
                set.insert(project.root.join(path));
            }
        }
    }
    set.into_iter().filter(|p| p.is_file()).collect()
}

/// `$OUT_DIR/kbuild_kernels.rs`.
fn render_module(project: &Project, bundle: &Bundle, bundle_path: &Path) -> String {
    let m = bundle.manifest();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// @generated by kbuild from {}; do not edit.\n",
        project.file.display()
    );
    let _ = writeln!(
        s,
        "/// The kernels' bundle ({}), for `kbuild_loader::Package::from_bundle_bytes`.",
        bundle.file_name()
    );
    let _ = writeln!(
        s,
        "pub static BUNDLE: &[u8] = include_bytes!({:?});",
        bundle_path.display().to_string()
    );
    let _ = writeln!(s, "/// A name for the embedded bundle in messages.");
    let _ = writeln!(
        s,
        "pub const ORIGIN: &str = {:?};",
        format!("embedded {}", bundle.file_name())
    );
    let _ = writeln!(s, "pub const PACKAGE: &str = {:?};", m.package.name);
    let _ = writeln!(s, "pub const VERSION: &str = {:?};", m.package.version);
    let _ = writeln!(s, "pub const TARGETS: &[&str] = &{:?};", m.targets);
    let names: Vec<&str> = project.kernels.iter().map(|k| k.name.as_str()).collect();
    let _ = writeln!(s, "/// Every kernel's name.");
    let _ = writeln!(s, "pub const KERNELS: &[&str] = &{names:?};");
    for k in &project.kernels {
        let _ = writeln!(s, "\n/// Kernel `{}` ({}).", k.name, k.source.display());
        let _ = writeln!(s, "pub mod {} {{", module_ident(&k.name));
        let _ = writeln!(s, "    /// The kernel's name in the manifest.");
        let _ = writeln!(s, "    pub const NAME: &str = {:?};", k.name);
        // Patterns (`fast_*`, `scale<*>`) become the concrete symbols the objects export.
        let entries = crate::entries::concrete(
            &k.entries.every(),
            m.objects
                .iter()
                .filter(|o| o.kernel == k.name)
                .flat_map(|o| o.entries.iter()),
        );
        let _ = writeln!(s, "    /// Its entry symbols.");
        let _ = writeln!(s, "    pub const ENTRIES: &[&str] = &{entries:?};");
        let mut seen = BTreeSet::new();
        for e in &entries {
            let c = const_ident(e);
            if c == "NAME" || c == "ENTRIES" || !seen.insert(c.clone()) {
                continue;
            }
            let _ = writeln!(s, "    pub const {c}: &str = {e:?};");
        }
        let _ = writeln!(s, "}}");
    }
    s
}

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "do", "dyn", "else",
    "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop",
    "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return", "self",
    "static", "struct", "super", "trait", "true", "try", "type", "typeof", "unsafe", "unsized",
    "use", "virtual", "where", "while", "yield", "abstract", "become",
];

fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// `gemv-bf16` → `gemv_bf16`; a keyword gets a trailing `_`.
fn module_ident(name: &str) -> String {
    let mut s = ident(name).to_ascii_lowercase();
    if KEYWORDS.contains(&s.as_str()) || s == "_" {
        s.push('_');
    }
    s
}

/// `rmsnorm_f32` → `RMSNORM_F32`.
fn const_ident(name: &str) -> String {
    let s = ident(name).to_ascii_uppercase();
    if s == "_" {
        "_E".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_valid_rust() {
        assert_eq!(module_ident("gemv_bf16"), "gemv_bf16");
        assert_eq!(module_ident("Gemv-BF16"), "gemv_bf16");
        assert_eq!(module_ident("type"), "type_");
        assert_eq!(module_ident("8bit"), "_8bit");
        assert_eq!(const_ident("rmsnorm_f32"), "RMSNORM_F32");
        assert_eq!(const_ident("_Z3fooPf"), "_Z3FOOPF");
    }

    #[test]
    fn bad_targets_and_no_out_dir_are_errors() {
        let b = Build::from_manifest("x").targets(["sm_8"]);
        assert!(matches!(
            b.parse_targets(),
            Err(BuildRsError::Targets { .. })
        ));
        let b = Build::from_manifest("x").targets(["sm_89", "sm_89;gfx1100"]);
        assert_eq!(b.parse_targets().unwrap().map(|t| t.len()), Some(2));
    }
}
