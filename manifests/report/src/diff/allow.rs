//! The allowlist file (`kbuild-allow.toml`): `[[allow]]` tables of `kernel` (glob), `target`
//! (glob, default `*`), `rule`, `justification` and `expires` (a date `YYYY-MM-DD`).

use std::path::Path;

use kbuild_base::time::Date;
use serde::Deserialize;

use super::gate::{AllowEntry, RULE_NAMES};

/// Why an allowlist was refused; every message names `file:line`.
#[derive(Debug, thiserror::Error)]
pub enum AllowError {
    #[error("reading the allowlist {path}: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("{at}: {message}")]
    Syntax { at: String, message: String },
    #[error(
        "{at}: allow entry `rule = \"{rule}\"` is not a gate rule (expected one of {expected})"
    )]
    UnknownRule {
        at: String,
        rule: String,
        expected: String,
    },
    #[error("{at}: allow entry for `{kernel}` has an empty `justification`; say why the case is acceptable")]
    NoJustification { at: String, kernel: String },
    #[error("{at}: allow entry has an empty `kernel` pattern (use \"*\" for every kernel)")]
    NoKernel { at: String },
    #[error("{at}: allow entry for `{kernel}`: `expires` must be a date YYYY-MM-DD (got {got})")]
    BadExpiry {
        at: String,
        kernel: String,
        got: String,
    },
}

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

/// Read an allowlist file.
pub fn load_allowlist(path: &Path) -> Result<Vec<AllowEntry>, AllowError> {
    let text = std::fs::read_to_string(path).map_err(|err| AllowError::Io {
        path: path.display().to_string(),
        err,
    })?;
    parse_allowlist(&path.display().to_string(), &text)
}

/// [`load_allowlist`] on text; `file` names it in errors and origins.
pub fn parse_allowlist(file: &str, text: &str) -> Result<Vec<AllowEntry>, AllowError> {
    let raw: AllowFile = toml::from_str(text).map_err(|e| AllowError::Syntax {
        at: match e.span() {
            Some(s) => format!("{file}:{}", line_of(text, s.start)),
            None => file.to_string(),
        },
        message: e.message().to_string(),
    })?;
    let mut out = Vec::new();
    for spanned in raw.allow {
        let line = line_of(text, spanned.span().start);
        let a = spanned.into_inner();
        let at = format!("{file}:{line}");
        let family = a.rule.split(':').next().unwrap_or_default().trim();
        if !RULE_NAMES.contains(&family) {
            return Err(AllowError::UnknownRule {
                at,
                rule: a.rule,
                expected: RULE_NAMES.join(", "),
            });
        }
        if a.justification.trim().is_empty() {
            return Err(AllowError::NoJustification {
                at,
                kernel: a.kernel,
            });
        }
        if a.kernel.trim().is_empty() {
            return Err(AllowError::NoKernel { at });
        }
        let expires = match &a.expires {
            toml::Value::String(s) => Date::parse(s),
            toml::Value::Datetime(d) if d.time.is_none() && d.offset.is_none() => {
                Date::parse(&d.to_string())
            }
            _ => None,
        };
        let Some(expires) = expires else {
            return Err(AllowError::BadExpiry {
                at,
                kernel: a.kernel,
                got: a.expires.to_string(),
            });
        };
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
}
