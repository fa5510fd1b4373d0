//! Init's failures grouped by cause: the first error line of each (unit, target) reduced to
//! what went wrong (`` `cuda_fp8.h` not found ``, `` `__trap` undeclared ``), so a library
//! with 27 units reads "10 units: `cuda_fp8.h` not found" once, with the fix kbuild knows.

use std::collections::BTreeMap;

use serde::Serialize;

use super::UnitReport;

/// Units that failed for the same reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureCause {
    /// What went wrong, the file and line taken out: `` `cuda_fp8.h` not found ``.
    pub cause: String,
    /// The units' sources, `/`-separated.
    pub units: Vec<String>,
    /// The discovery targets it happened for.
    pub targets: Vec<String>,
    /// The kcompat feature or flag that would help, when kbuild knows one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Every error of `units`, grouped by [`cause`]: most units first, then by cause.
pub fn group(units: &[UnitReport]) -> Vec<FailureCause> {
    let mut by: BTreeMap<String, FailureCause> = BTreeMap::new();
    for u in units {
        for (target, line) in &u.errors {
            let c = cause(line);
            let entry = by.entry(c.clone()).or_insert_with(|| FailureCause {
                hint: hint(&c),
                cause: c,
                units: Vec::new(),
                targets: Vec::new(),
            });
            if !entry.units.contains(&u.source) {
                entry.units.push(u.source.clone());
            }
            if !entry.targets.contains(target) {
                entry.targets.push(target.clone());
            }
        }
    }
    let mut out: Vec<FailureCause> = by.into_values().collect();
    out.sort_by(|a, b| {
        b.units
            .len()
            .cmp(&a.units.len())
            .then(a.cause.cmp(&b.cause))
    });
    out
}

/// A compiler's error line without its location, reduced to the cause: a missing header and
/// an undeclared name, as clang and nvcc spell them, become one form each.
pub fn cause(line: &str) -> String {
    let msg = match line.find("error:") {
        Some(i) => line[i + "error:".len()..].trim(),
        None => line.trim(),
    };
    // clang: `'cuda_fp8.h' file not found`; nvcc (gcc's preprocessor): `cuda_fp8.h: No such
    // file or directory`.
    if let Some(name) = msg
        .strip_suffix(" file not found")
        .and_then(|m| quoted(m.trim()))
    {
        return format!("`{name}` not found");
    }
    if let Some(name) = msg.strip_suffix(": No such file or directory") {
        return format!("`{}` not found", name.trim());
    }
    // clang: `use of undeclared identifier '__trap'`; nvcc: `identifier "__trap" is undefined`.
    if let Some(name) = msg
        .strip_prefix("use of undeclared identifier ")
        .and_then(quoted)
    {
        return format!("`{name}` undeclared");
    }
    if let Some(name) = msg
        .strip_prefix("identifier ")
        .and_then(|m| m.strip_suffix(" is undefined"))
        .and_then(quoted)
    {
        return format!("`{name}` undeclared");
    }
    msg.chars().take(160).collect()
}

/// `'x'`, `"x"` or `` `x' `` → `x`.
fn quoted(s: &str) -> Option<&str> {
    let s = s.trim();
    let first = s.chars().next()?;
    let last = s.chars().last()?;
    (s.len() >= 2 && "'\"`".contains(first) && "'\"".contains(last)).then(|| &s[1..s.len() - 1])
}

/// What would help with `cause`, when kbuild knows.
fn hint(cause: &str) -> Option<String> {
    if let Some(header) = cause
        .strip_prefix('`')
        .and_then(|c| c.strip_suffix("` not found"))
    {
        let shim = format!("hip-shim/{header}");
        if crate::compat_header::FILES.iter().any(|(f, _)| *f == shim) {
            return Some(format!(
                "kbuild's compat header has a HIP shim for `{header}`: keep `[build] compat-header` on (the default)"
            ));
        }
        if header.starts_with("cuda") || header.starts_with("cub/") || header.starts_with("thrust/")
        {
            return Some(format!(
                "`{header}` is part of the CUDA toolkit and has no HIP shim in kbuild's compat header yet: the unit is kept to `nvidia`"
            ));
        }
        return Some(format!(
            "pass the directory holding `{header}` (`kbuild init -I DIR`, or `include-dirs` in Kbuild.toml)"
        ));
    }
    if let Some(name) = cause
        .strip_prefix('`')
        .and_then(|c| c.strip_suffix("` undeclared"))
    {
        if name.starts_with("__") {
            return Some(format!(
                "`{name}` is a CUDA device function kcompat.h does not provide for HIP (docs/compat-header.md): define it in a header force-included through `[build.flags] hip`, or keep the unit to `nvidia`"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(source: &str, errors: &[(&str, &str)]) -> UnitReport {
        UnitReport {
            source: source.into(),
            kernel: source.replace(['/', '.'], "_"),
            language: "cuda",
            status: "partial",
            entries: Vec::new(),
            exported: BTreeMap::new(),
            errors: errors
                .iter()
                .map(|(t, e)| (t.to_string(), e.to_string()))
                .collect(),
            targets: None,
        }
    }

    #[test]
    fn clang_and_nvcc_spellings_reduce_to_one_cause() {
        for (line, want) in [
            (
                "a.cu:3:10: fatal error: 'cuda_fp8.h' file not found",
                "`cuda_fp8.h` not found",
            ),
            (
                "a.cu:3:10: fatal error: cuda_fp8.h: No such file or directory",
                "`cuda_fp8.h` not found",
            ),
            (
                "b.cu:9:5: error: use of undeclared identifier '__trap'",
                "`__trap` undeclared",
            ),
            (
                "b.cu(9): error: identifier \"__trap\" is undefined",
                "`__trap` undeclared",
            ),
            (
                "c.cu:1:1: error: something else went wrong",
                "something else went wrong",
            ),
        ] {
            assert_eq!(cause(line), want, "{line}");
        }
    }

    #[test]
    fn failures_group_by_cause_with_the_known_fix() {
        let mut units: Vec<UnitReport> = (0..10)
            .map(|i| {
                unit(
                    &format!("src/f{i}.cu"),
                    &[(
                        "gfx1100",
                        &format!("src/f{i}.cu:{i}:1: fatal error: 'cuda/pipeline' file not found"),
                    )],
                )
            })
            .collect();
        units.push(unit(
            "src/t.cu",
            &[(
                "gfx1100",
                "src/t.cu:4:2: error: use of undeclared identifier '__trap'",
            )],
        ));
        units.push(unit(
            "src/h.cu",
            &[(
                "gfx1100",
                "src/h.cu:1:10: fatal error: 'cuda_fp16.h' file not found",
            )],
        ));
        units.push(unit(
            "src/e.cu",
            &[(
                "gfx1100",
                "src/e.cu:1:10: fatal error: 'cuda_fp8.h' file not found",
            )],
        ));
        units.push(unit(
            "src/m.cu",
            &[(
                "gfx1100",
                "src/m.cu:1:10: fatal error: 'mylib.h' file not found",
            )],
        ));
        let g = group(&units);
        assert_eq!(g[0].cause, "`cuda/pipeline` not found");
        assert_eq!(g[0].units.len(), 10);
        assert_eq!(g[0].targets, ["gfx1100"]);
        assert!(g[0].hint.as_deref().unwrap().contains("kept to `nvidia`"));
        let by = |c: &str| g.iter().find(|f| f.cause == c).unwrap();
        assert!(by("`__trap` undeclared")
            .hint
            .as_deref()
            .unwrap()
            .contains("[build.flags] hip"));
        assert!(by("`cuda_fp16.h` not found")
            .hint
            .as_deref()
            .unwrap()
            .contains("compat-header"));
        assert!(by("`mylib.h` not found")
            .hint
            .as_deref()
            .unwrap()
            .contains("-I DIR"));
        // A header the compat header shims is not a reason to keep a unit to NVIDIA.
        assert!(by("`cuda_fp8.h` not found")
            .hint
            .as_deref()
            .unwrap()
            .contains("has a HIP shim"));
        assert_eq!(g.len(), 5);
    }
}
