//! A kernel's variant matrix: the cartesian product of its `[kernel.variants]` axes, each
//! variant named from its axis values.

use std::collections::BTreeMap;
use std::ops::Range;

use toml::Spanned;

use super::{ConfigError, DefineValue, Variant};

/// The cartesian product of the variant axes, in key order.
pub(super) fn variant_matrix(
    kernel: &str,
    axes: &BTreeMap<String, Spanned<Vec<DefineValue>>>,
    at: &dyn Fn(Range<usize>, String) -> ConfigError,
) -> Result<Vec<Variant>, ConfigError> {
    let mut out = vec![Variant {
        name: String::new(),
        defines: BTreeMap::new(),
        vendors: Vec::new(),
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
                    vendors: Vec::new(),
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

/// A value as a variant name part: letters, digits, `_` and `.` kept, anything else `_`.
pub(crate) fn sanitize(s: &str) -> String {
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

pub(super) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
