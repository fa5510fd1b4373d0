//! `kbuild diff OLD NEW | --base GIT_REV`: read both sides (a manifest, a build output
//! directory, a bundle or a resource baseline), or build the base revision in a temporary git
//! worktree and the working tree, then render the resource diff and apply the gates.
//!
//! Exit codes: 0 ok, 1 a gate tripped or an input could not be read or built, 2 usage.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{anyhow, bail, Context, Result};
use kbuild_manifest::diff::gate::{self, AllowEntry, Date, GateReport, Rule, RULE_NAMES};
use kbuild_manifest::diff::{self, Diff, Snapshot};
use kbuild_manifest::target::Target;
use serde::Deserialize;

use crate::build::{build, BuildOptions};
use crate::config;

/// Report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Text,
    Json,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "md" | "markdown" => Ok(Format::Markdown),
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            other => Err(format!(
                "unknown format `{other}` (expected md, text or json)"
            )),
        }
    }
}

/// What `kbuild diff` was asked.
#[derive(Debug, Clone)]
pub struct DiffRequest {
    pub old: Option<PathBuf>,
    pub new: Option<PathBuf>,
    /// Build this git revision and the working tree instead of reading OLD and NEW.
    pub base: Option<String>,
    pub format: Format,
    pub rules: Vec<Rule>,
    pub allow: Option<PathBuf>,
    /// For `--base`: the targets of both builds (default: each side's project list).
    pub targets: Option<Vec<Target>>,
    /// For `--base`: the project file (default: found from the current directory).
    pub manifest_path: Option<PathBuf>,
    pub jobs: Option<usize>,
}

/// A usage error (exit 2) as opposed to a failure (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Run `kbuild diff`; prints the report on stdout, errors on stderr.
pub fn run(req: &DiffRequest) -> ExitCode {
    match diff_and_gate(req) {
        Ok(code) => code,
        Err(e) if e.is::<UsageError>() => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn diff_and_gate(req: &DiffRequest) -> Result<ExitCode> {
    // The allowlist first: a broken one should not cost two builds.
    let allow = match &req.allow {
        Some(p) => load_allowlist(p)?,
        None => Vec::new(),
    };
    let (base, head, base_label, head_label) = match (&req.base, &req.old, &req.new) {
        (Some(rev), None, None) => {
            let (b, h, label) = build_base_and_head(req, rev)?;
            (b, h, label, "working tree".to_string())
        }
        (None, Some(old), Some(new)) => (
            load_side(old, "OLD")?,
            load_side(new, "NEW")?,
            old.display().to_string(),
            new.display().to_string(),
        ),
        (Some(_), _, _) => {
            return Err(UsageError("pass either OLD NEW or --base GIT_REV, not both".into()).into())
        }
        _ => {
            return Err(UsageError(
                "pass two sides (kbuild diff OLD NEW) or a git revision (kbuild diff --base REV)"
                    .into(),
            )
            .into())
        }
    };
    let names = demangle_names(&[&base, &head]);
    let d = Diff::new(&base, &head, &base_label, &head_label, &names);
    let gates = (!req.rules.is_empty() || !allow.is_empty())
        .then(|| gate::evaluate(&d, &req.rules, &allow, today()));
    print_report(&d, gates.as_ref(), req.format);
    Ok(gate_exit(gates.as_ref()))
}

/// Print the report on stdout in `format` (text coloured on a terminal unless NO_COLOR).
pub fn print_report(d: &Diff, gates: Option<&GateReport>, format: Format) {
    let out = match format {
        Format::Markdown => diff::markdown(d, gates),
        Format::Json => diff::to_json(d, gates),
        Format::Text => diff::text(d, gates, color_for(std::io::stdout().is_terminal())),
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
}

/// Colour when writing to a terminal and NO_COLOR is unset or empty.
pub fn color_for(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn gate_exit(gates: Option<&GateReport>) -> ExitCode {
    match gates {
        Some(g) if g.tripped() => {
            eprintln!("error: gate tripped: {}", g.tripped_rules().join(", "));
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Today's date, UTC, from the system clock.
pub fn today() -> Date {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Date::from_unix_seconds(secs)
}

// ------------------------------------------------------------------------------------ sides

/// zstd frame magic: a bundle (`NAME-VERSION.kbundle`, tar+zstd).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// Read one side: a build output directory (its `manifest.json`), a manifest, a baseline, or
/// a bundle (its manifest, the bundle verified). `which` names the argument in errors.
pub fn load_side(path: &Path, which: &str) -> Result<Snapshot> {
    if !path.exists() {
        return Err(UsageError(format!("{which} `{}` does not exist", path.display())).into());
    }
    if path.is_dir() {
        let m = path.join("manifest.json");
        let data = std::fs::read(&m).with_context(|| {
            format!(
                "{}: a directory without manifest.json; pass a build output directory \
                 (`kbuild build --out DIR`), a manifest, a bundle or a baseline",
                path.display()
            )
        })?;
        return Snapshot::from_json(&data).with_context(|| m.display().to_string());
    }
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if data.starts_with(&ZSTD_MAGIC) {
        let bundle = kbuild_registry::Bundle::from_bytes(
            &data,
            kbuild_registry::archive::Limits::from_env(),
        )
        .with_context(|| format!("{}: not a readable kbuild bundle", path.display()))?;
        return Ok(Snapshot::from_manifest(bundle.manifest()));
    }
    Snapshot::from_json(&data).with_context(|| path.display().to_string())
}

/// Demangled names of the Itanium-mangled (`_Z...`) entries of `snaps`, through
/// `llvm-cxxfilt-19` / `llvm-cxxfilt` / `c++filt`; empty when none is mangled or no demangler
/// runs (names then show as they are).
pub fn demangle_names(snaps: &[&Snapshot]) -> BTreeMap<String, String> {
    let mangled: BTreeSet<&String> = snaps
        .iter()
        .flat_map(|s| s.objects.iter())
        .flat_map(|o| o.resources.keys())
        .filter(|n| n.starts_with("_Z"))
        .collect();
    if mangled.is_empty() {
        return BTreeMap::new();
    }
    let input: String = mangled.iter().map(|n| format!("{n}\n")).collect();
    for tool in ["llvm-cxxfilt-19", "llvm-cxxfilt", "c++filt"] {
        let Ok(mut child) = Command::new(tool)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        else {
            continue;
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        let Ok(out) = child.wait_with_output() else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        if !out.status.success() || lines.len() != mangled.len() {
            continue;
        }
        return mangled
            .iter()
            .zip(lines)
            .filter(|(m, d)| m.as_str() != *d)
            .map(|(m, d)| ((*m).clone(), d.to_string()))
            .collect();
    }
    BTreeMap::new()
}

// -------------------------------------------------------------------------------- allowlist

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowFile {
    #[serde(default)]
    allow: Vec<toml::Spanned<RawAllow>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllow {
    kernel: String,
    #[serde(default = "any_target")]
    target: String,
    rule: String,
    justification: String,
    expires: toml::Value,
}

fn any_target() -> String {
    "*".into()
}

fn line_of(text: &str, offset: usize) -> usize {
    let bytes = text.as_bytes();
    bytes[..offset.min(bytes.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Read `kbuild-allow.toml`: `[[allow]]` tables of `kernel` (glob), `target` (glob, default
/// `*`), `rule`, `justification`, `expires` (a date `YYYY-MM-DD`). Errors name file:line.
pub fn load_allowlist(path: &Path) -> Result<Vec<AllowEntry>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the allowlist {}", path.display()))?;
    parse_allowlist(&path.display().to_string(), &text)
}

/// [`load_allowlist`] on text; `file` names it in errors and origins.
pub fn parse_allowlist(file: &str, text: &str) -> Result<Vec<AllowEntry>> {
    let raw: AllowFile = toml::from_str(text).map_err(|e| match e.span() {
        Some(s) => anyhow!("{file}:{}: {}", line_of(text, s.start), e.message()),
        None => anyhow!("{file}: {}", e.message()),
    })?;
    let mut out = Vec::new();
    for spanned in raw.allow {
        let line = line_of(text, spanned.span().start);
        let a = spanned.into_inner();
        let at = format!("{file}:{line}");
        let family = a.rule.split(':').next().unwrap_or_default().trim();
        if !RULE_NAMES.contains(&family) {
            bail!(
                "{at}: allow entry `rule = \"{}\"` is not a gate rule (expected one of {})",
                a.rule,
                RULE_NAMES.join(", ")
            );
        }
        if a.justification.trim().is_empty() {
            bail!("{at}: allow entry for `{}` has an empty `justification`; say why the case is acceptable", a.kernel);
        }
        if a.kernel.trim().is_empty() {
            bail!("{at}: allow entry has an empty `kernel` pattern (use \"*\" for every kernel)");
        }
        let expires = match &a.expires {
            toml::Value::String(s) => Date::parse(s),
            toml::Value::Datetime(d) if d.time.is_none() && d.offset.is_none() => {
                Date::parse(&d.to_string())
            }
            _ => None,
        }
        .ok_or_else(|| {
            anyhow!(
                "{at}: allow entry for `{}`: `expires` must be a date YYYY-MM-DD (got {})",
                a.kernel,
                a.expires
            )
        })?;
        out.push(AllowEntry {
            kernel: a.kernel,
            target: a.target,
            rule: family.to_string(),
            justification: a.justification,
            expires,
            origin: at,
        });
    }
    Ok(out)
}

// ------------------------------------------------------------------------------ --base REV

/// A `git worktree` in a temporary directory, removed (worktree and directory) on drop.
struct Worktree {
    repo: PathBuf,
    dir: PathBuf,
    tree: PathBuf,
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let _ = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["worktree", "remove", "--force"])
            .arg(&self.tree)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["worktree", "prune"])
            .output();
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .context("running git")?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn project_file(manifest_path: Option<&Path>) -> Result<PathBuf> {
    let file = match manifest_path {
        Some(p) => p.to_path_buf(),
        None => config::find(&std::env::current_dir().context("reading the current directory")?)?,
    };
    std::fs::canonicalize(&file).with_context(|| format!("{}", file.display()))
}

/// Build `project` into `out` (or its own out-dir) and snapshot the manifest; `side` names
/// the build in errors.
fn build_snapshot(
    project: &config::Project,
    req: &DiffRequest,
    out: Option<PathBuf>,
    side: &str,
) -> Result<Snapshot> {
    let opts = BuildOptions {
        targets: req.targets.clone(),
        out_dir: out,
        jobs: req.jobs,
        ..BuildOptions::default()
    };
    let report = build(project, &opts).with_context(|| format!("building {side}"))?;
    if !report.failures.is_empty() {
        bail!(
            "building {side}: {} job(s) failed (see above)",
            report.failures.len()
        );
    }
    let data = std::fs::read(&report.manifest_path)
        .with_context(|| format!("reading {}", report.manifest_path.display()))?;
    Snapshot::from_json(&data).with_context(|| report.manifest_path.display().to_string())
}

/// Build the working tree, then `rev` in a temporary worktree with the same (shared) cache,
/// so kernels the two share compile once. Returns (base, head, base label).
fn build_base_and_head(req: &DiffRequest, rev: &str) -> Result<(Snapshot, Snapshot, String)> {
    let file = project_file(req.manifest_path.as_deref())?;
    let project_dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
    let top = git(&project_dir, &["rev-parse", "--show-toplevel"]).map_err(|e| {
        anyhow!(
            "--base needs the project in a git checkout ({}): {e}",
            project_dir.display()
        )
    })?;
    let top = std::fs::canonicalize(&top).unwrap_or_else(|_| PathBuf::from(&top));
    let commit = git(
        &top,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|_| {
        UsageError(format!(
            "unknown git revision `{rev}` in {} (a shallow clone may lack it: fetch \
                 more history, e.g. actions/checkout with `fetch-depth: 0`)",
            top.display()
        ))
    })?;
    let rel = file
        .strip_prefix(&top)
        .with_context(|| format!("{} is not inside {}", file.display(), top.display()))?
        .to_path_buf();

    let head_project = config::load(&file)?;
    let head = build_snapshot(&head_project, req, None, "the working tree")?;

    let dir = crate::fsutil::tempdir_in(&std::env::temp_dir(), "kbuild-base")
        .context("creating a temporary directory for the base worktree")?;
    let wt = Worktree {
        repo: top.clone(),
        tree: dir.join("tree"),
        dir,
    };
    let tree = wt.tree.display().to_string();
    git(
        &top,
        &["worktree", "add", "--detach", "--quiet", &tree, &commit],
    )
    .with_context(|| format!("creating a git worktree of {rev} in {tree}"))?;
    let base_file = wt.tree.join(&rel);
    if !base_file.is_file() {
        bail!("{rev} has no {} (the project file)", rel.display());
    }
    let base_project =
        config::load(&base_file).with_context(|| format!("the project file of {rev}"))?;
    let base = build_snapshot(&base_project, req, Some(wt.dir.join("out")), rev)?;
    drop(wt);
    let short = commit.get(..10).unwrap_or(&commit);
    Ok((base, head, format!("{rev} ({short})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_parses_and_errors_name_the_line() {
        let ok = parse_allowlist(
            "kbuild-allow.toml",
            "[[allow]]\nkernel = \"gemv*\"\nrule = \"registers:+8\"\njustification = \"split-K\"\nexpires = 2027-01-31\n\n[[allow]]\nkernel = \"x\"\ntarget = \"gfx11*\"\nrule = \"spills\"\njustification = \"y\"\nexpires = \"2026-02-01\"\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].rule, "registers");
        assert_eq!(ok[0].target, "*");
        assert_eq!(ok[0].expires.to_string(), "2027-01-31");
        assert_eq!(ok[1].origin, "kbuild-allow.toml:7");
        for (text, says) in [
            ("[[allow]]\nkernel = \"k\"\nrule = \"spils\"\njustification = \"j\"\nexpires = 2027-01-01\n", "kbuild-allow.toml:1: allow entry `rule = \"spils\"` is not a gate rule"),
            ("[[allow]]\nkernel = \"k\"\nrule = \"spills\"\njustification = \" \"\nexpires = 2027-01-01\n", "empty `justification`"),
            ("[[allow]]\nkernel = \"k\"\nrule = \"spills\"\njustification = \"j\"\nexpires = \"next year\"\n", "`expires` must be a date YYYY-MM-DD"),
            ("[[allow]]\nkernel = \"k\"\nrule = \"spills\"\njustification = \"j\"\nexpires = 2027-01-01T00:00:00Z\n", "`expires` must be a date"),
            ("[[allow]]\nkernel = \"k\"\nrule = \"spills\"\njustification = \"j\"\n", "missing field `expires`"),
            ("[[allow]]\nkernal = \"k\"\n", "kbuild-allow.toml:2: unknown field `kernal`"),
        ] {
            let e = parse_allowlist("kbuild-allow.toml", text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}\n→ {e}");
        }
    }

    #[test]
    fn colour_only_on_a_terminal() {
        assert!(!color_for(false));
    }
}
