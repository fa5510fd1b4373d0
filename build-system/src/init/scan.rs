//! The tree scan: the translation units (`*.cu`, `*.hip`) under the project directory, each
//! with a unique kernel name, and whether a unit's own text defines a kernel.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::config::Language;

use super::strip::strip_comments;
use super::{slash, InitError, Unit};

/// Directories the scan never enters (besides hidden ones).
pub(super) const SKIPPED_DIRS: &[&str] = &[
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

/// The translation units under `dir`, sorted by path, each with a unique kernel name. All of
/// them: a template-instance file defines no `__global__` of its own, yet its object holds
/// the kernels it instantiates, which only the discovery build shows. Also the notes on files
/// left out: a path a shell would act on (`k$(sh x.sh).cu`: nvcc runs its steps through
/// `sh`) or one that is not UTF-8 is never compiled nor written to Kbuild.toml.
/// The largest source file init reads: real kernel sources are well under a MiB, generated
/// ones a few; a 256 MiB one cost 1.5 GB to scan.
const MAX_SOURCE_BYTES: u64 = 16 << 20;

pub(super) fn scan(dir: &Path) -> Result<(Vec<Unit>, Vec<String>), InitError> {
    let mut files = Vec::new();
    walk(dir, dir, &mut files, 0)?;
    files.sort();
    let mut units = Vec::new();
    let mut skipped = Vec::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for rel in files {
        let Some(text) = rel.to_str() else {
            skipped.push(format!(
                "source file {}: its name is not UTF-8; skipped",
                rel.to_string_lossy().escape_debug()
            ));
            continue;
        };
        if let Err(e) = kbuild_base::ident::check_compiler_arg("source file", text) {
            skipped.push(format!("{e}; skipped"));
            continue;
        }
        let path = dir.join(&rel);
        let text = match kbuild_base::read::read_capped(&path, MAX_SOURCE_BYTES, "a kernel source")
        {
            Ok(t) => t,
            Err(kbuild_base::read::ReadError::Io { source, .. }) => {
                return Err(InitError::Read {
                    path: path.display().to_string(),
                    err: source,
                })
            }
            // Over the cap or not a regular file (a FIFO would block the scan): left out.
            Err(e) => {
                skipped.push(format!("{e}; skipped"));
                continue;
            }
        };
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
    Ok((units, skipped))
}

pub(super) fn walk(
    root: &Path,
    dir: &Path,
    out: &mut Vec<PathBuf>,
    depth: usize,
) -> Result<(), InitError> {
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
pub(super) fn unique_name(rel: &Path, taken: &mut BTreeSet<String>) -> String {
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
