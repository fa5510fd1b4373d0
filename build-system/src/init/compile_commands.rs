//! Include dirs, defines and `-std` from a `compile_commands.json`.

use std::path::{Component, Path, PathBuf};

use super::shell::split_command;
use super::{slash, CompileSettings, InitError};

/// The largest compile_commands.json init reads (a large C++ project's is tens of MiB).
const MAX_COMPILE_COMMANDS_BYTES: u64 = 64 << 20;

/// The most its parse may cost, as [`kbuild_base::json_cost::estimate`] counts it.
const MAX_PARSE_COST: u64 = 160 << 20;

/// Include dirs, defines and `-std` from `DIR/compile_commands.json` or
/// `DIR/build/compile_commands.json` (the union over its entries; paths relative to DIR).
pub(super) fn compile_settings(dir: &Path) -> Result<CompileSettings, InitError> {
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
    let bytes = match kbuild_base::read::read_capped(
        &file,
        MAX_COMPILE_COMMANDS_BYTES,
        "a compile_commands.json",
    ) {
        Ok(b) => b,
        Err(kbuild_base::read::ReadError::Io { source, .. }) => {
            return Err(InitError::Read {
                path: file.display().to_string(),
                err: source,
            })
        }
        Err(e) => return Err(bad(e.to_string())),
    };
    // A document of tiny values costs many times its size once parsed (96 MiB cost 1.6 GB).
    let cost = kbuild_base::json_cost::estimate(&bytes);
    if cost > MAX_PARSE_COST {
        return Err(bad(format!(
            "would cost about {cost} bytes of memory to parse, over kbuild's limit of {MAX_PARSE_COST}; refusing it before parsing"
        )));
    }
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
    let shown_file = super::rel_display(dir, &file).unwrap_or_else(|| file.display().to_string());
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
            // Nothing from the tree may reach a shell (nvcc's sub-steps) or, unescaped, the
            // written file: a value with a shell or control character is left out, named.
            let refused = |flag: &str, v: &str| {
                kbuild_base::ident::check_compiler_arg(
                    &format!("{shown_file} entry {i}: {flag}"),
                    v,
                )
                .err()
                .map(|e| e.to_string())
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
                // What Kbuild.toml and the compiler would get (`directory` included).
                if let Some(note) = refused("-I", &shown) {
                    skip(&mut s.skipped, note);
                    continue;
                }
                if !abs.is_dir() {
                    let note = format!("include directory {shown} (does not exist)");
                    skip(&mut s.skipped, note);
                } else if !s.include_dirs.contains(&shown) {
                    s.include_dirs.push(shown);
                }
            } else if let Some(d) = value("-D") {
                if let Some(note) = refused("-D", &d) {
                    skip(&mut s.skipped, note);
                    continue;
                }
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
                    skip(&mut s.skipped, note);
                    continue;
                }
                s.defines.entry(k).or_insert(v);
            } else if let Some(std) = a.strip_prefix("-std=") {
                if let Some(note) = refused("-std=", std) {
                    skip(&mut s.skipped, note);
                } else if s.std.is_none() {
                    s.std = Some(format!("-std={std}"));
                }
            }
        }
    }
    Ok(s)
}

pub(super) fn lexical(p: &Path) -> PathBuf {
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

/// Note what was left out, once.
fn skip(skipped: &mut Vec<String>, note: String) {
    if !skipped.contains(&note) {
        skipped.push(note);
    }
}
