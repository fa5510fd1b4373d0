//! Errors in the terms of the file: a TOML/serde message rewritten with the key it is about,
//! TOML type names and a "did you mean", and byte offsets as `line:column`.

use std::ops::Range;

/// A TOML/serde error message in the terms of the file: the key it is about, TOML type
/// names (`expected an integer, found a string`, not `expected u32`; no serde enum names),
/// and a "did you mean" for an unknown key.
pub(super) fn user_message(text: &str, span: Option<Range<usize>>, message: &str) -> String {
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
pub(super) fn did_you_mean<'a>(given: &str, candidates: &[&'a str]) -> Option<&'a str> {
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

/// 1-based line and column of byte `offset` in `text`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}
