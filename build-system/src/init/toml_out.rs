//! The `Kbuild.toml` that init writes, by hand so a person would keep it: the header, the
//! package, one `[kernels.NAME]` per unit (entries by name, demangled patterns), commented-out
//! units that do not compile.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::Path;

use kbuild_manifest::target::{Target, Vendor};

use crate::config::Language;
use crate::entries::{EntryPattern, Exported};

use super::discover::{vendor_of, Discovered};
use super::{package_name, slash, Unit, UnitReport, MAX_LISTED};

/// Write one `[kernels.NAME]` (or its commented-out form) and say what it is.
pub(super) fn kernel_section(
    text: &mut String,
    u: &Unit,
    d: &Discovered,
    targets: &[Target],
) -> UnitReport {
    // CUB's and Thrust's kernels are launched by their host code, and named after the target
    // (`cub::_V_300500_SM_890`): not the file's entries.
    let library: BTreeSet<&String> = d
        .exported
        .values()
        .flatten()
        .filter(|s| crate::entries::is_cccl_kernel(s))
        .collect();
    let own = Discovered {
        exported: d
            .exported
            .iter()
            .map(|(t, e)| {
                let e = e.iter().filter(|s| !library.contains(s)).cloned().collect();
                (t.clone(), e)
            })
            .collect(),
        errors: d.errors.clone(),
    };
    let library_only =
        !library.is_empty() && own.exported.values().all(|e: &Vec<String>| e.is_empty());
    let d = &own;
    let source = slash(&u.rel);
    let language = match u.language {
        Language::Cuda => "cuda",
        Language::Hip => "hip",
    };
    let mut report = UnitReport {
        source: source.clone(),
        kernel: u.kernel.clone(),
        language,
        status: "ok",
        entries: Vec::new(),
        exported: d.exported.clone(),
        errors: d.errors.clone(),
    };
    // A unit whose text has no kernel, that compiled and exported none: host code.
    let host_only = !u.defines_kernel
        && !d.errors.is_empty()
        && d.errors
            .values()
            .all(|e| e.contains("match no exported symbol"));
    if library_only {
        report.status = "host-only";
        let _ = write!(
            text,
            "\n# kbuild init: {source} exports only CUB/Thrust kernels, which their host code launches; not listed\n"
        );
        return report;
    }
    if d.exported.is_empty() && host_only {
        report.status = "host-only";
        report.errors.clear();
        let _ = write!(
            text,
            "\n# kbuild init: {source} compiles but exports no kernel (host code only); not listed\n"
        );
        return report;
    }
    if d.exported.is_empty() {
        report.status = "failed";
        let _ = writeln!(text);
        for (t, e) in &d.errors {
            let _ = writeln!(text, "# kbuild init: does not compile for {t}: {e}");
        }
        if d.errors.is_empty() {
            let _ = writeln!(
                text,
                "# kbuild init: was not built (no toolchain for its language)"
            );
        }
        let _ = writeln!(text, "# [kernels.{}]", u.kernel);
        let _ = writeln!(text, "# source = {}", toml_str(&source));
        if u.language == Language::Hip {
            let _ = writeln!(text, "# language = \"hip\"");
        }
        let _ = writeln!(text, "# entries = [\"*\"]");
        return report;
    }
    let _ = write!(
        text,
        "\n[kernels.{}]\nsource = {}\n",
        u.kernel,
        toml_str(&source)
    );
    if u.language == Language::Hip {
        let _ = writeln!(text, "language = \"hip\"");
    }
    if !library.is_empty() {
        let _ = writeln!(
            text,
            "# also instantiates {} CUB/Thrust kernel(s), which their host code launches; not listed",
            library.len()
        );
    }
    // Built for some vendors only: restrict it to the targets of those.
    let built: BTreeSet<Vendor> = d.exported.keys().filter_map(|t| vendor_of(t)).collect();
    if !d.errors.is_empty() {
        report.status = "partial";
        for (t, e) in &d.errors {
            let _ = writeln!(text, "# kbuild init: does not compile for {t}: {e}");
        }
        let keep: Vec<String> = targets
            .iter()
            .filter(|t| built.contains(&t.vendor()))
            .map(Target::to_string)
            .collect();
        // Only when the list also holds targets of the vendor it failed for.
        if !keep.is_empty() && keep.len() < targets.len() {
            let _ = writeln!(text, "targets = {}", toml_array(&keep));
        }
    }
    // The symbols every discovery target exports; the rest are named in a comment.
    let sets: Vec<BTreeSet<&String>> = d.exported.values().map(|e| e.iter().collect()).collect();
    let union: BTreeSet<&String> = sets.iter().flatten().copied().collect();
    let common: Vec<&String> = union
        .iter()
        .copied()
        .filter(|s| sets.iter().all(|set| set.contains(s)))
        .collect();
    for (t, e) in &d.exported {
        let only: Vec<&str> = e
            .iter()
            .filter(|s| !common.contains(s))
            .map(String::as_str)
            .collect();
        if !only.is_empty() {
            let _ = writeln!(
                text,
                "# exported only for {t}, so not listed (every target must export a listed entry): {}",
                only.join(", ")
            );
        }
    }
    let same_everywhere = common.len() == union.len();
    if same_everywhere && common.len() > MAX_LISTED {
        let preview: Vec<String> = common.iter().take(4).map(|s| display_entry(s).0).collect();
        let _ = writeln!(
            text,
            "# {} entries found ({}, ...): `*` is every exported kernel",
            common.len(),
            preview.join(", ")
        );
        let _ = writeln!(text, "entries = [\"*\"]");
        report.entries = vec!["*".into()];
        return report;
    }
    let mut written: Vec<(String, Option<String>)> = Vec::new();
    for s in &common {
        let (entry, comment) = display_entry(s);
        if !written.iter().any(|(e, _)| *e == entry) {
            written.push((entry, comment));
        }
    }
    report.entries = written.iter().map(|(e, _)| e.clone()).collect();
    if written.iter().all(|(_, c)| c.is_none()) {
        let _ = writeln!(text, "entries = {}", toml_array(&report.entries));
    } else {
        let _ = writeln!(
            text,
            "# C++ entries are written demangled (matched against the demangled name; the mangled symbol is in the comment)."
        );
        let _ = writeln!(text, "entries = [");
        for (e, c) in &written {
            match c {
                Some(c) => {
                    let _ = writeln!(text, "    {}, # {c}", toml_str(e));
                }
                None => {
                    let _ = writeln!(text, "    {},", toml_str(e));
                }
            }
        }
        let _ = writeln!(text, "]");
    }
    report
}

/// How a symbol is written in `entries`: a mangled C++ name as its demangled pattern (with
/// the mangled name for the comment), anything else as it is. A plain function's name alone
/// (`arange_f32`) would read as an exact symbol, so it gets its parameters, which make it a
/// demangled pattern: `arange_f32(float*, int, float, float)`.
pub(super) fn display_entry(symbol: &str) -> (String, Option<String>) {
    match Exported::new(symbol).demangled_name() {
        Some(name) => {
            // A `(` inside the template arguments makes a pattern one with parameters: then it
            // needs the function's own parameters too.
            let d = if name.contains('(') || EntryPattern::parse(&name).is_ok_and(|p| p.is_exact())
            {
                kbuild_manifest::demangle::demangle_signature(symbol).unwrap_or(name)
            } else {
                name
            };
            let d = without_compile_names(&d);
            // `[` and `\` would be pattern syntax; `*` and `?` match themselves too.
            let escaped = d.replace('\\', "\\\\").replace('[', "\\[");
            (escaped, Some(symbol.to_string()))
        }
        None => (symbol.to_string(), None),
    }
}

/// nvcc's names of internal-linkage entities (`_INTERNAL_867974e3_6_cpy_cu_f459b794_3316::`)
/// change from one compile to the next: in a written pattern they become `*`.
pub(super) fn without_compile_names(demangled: &str) -> String {
    let mut out = String::with_capacity(demangled.len());
    let mut rest = demangled;
    while let Some(at) = rest.find("_INTERNAL_") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail.find("::").unwrap_or(tail.len());
        out.push('*');
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

pub(super) fn header(dir: &Path, discovery: &[Target]) -> String {
    let names: Vec<String> = discovery.iter().map(Target::to_string).collect();
    let shown = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| ".".into());
    format!(
        "# Kbuild.toml: the kbuild project file (docs/kbuild-toml.md).\n\
         # Generated by `kbuild init` {} from the *.cu/*.hip files under {shown}/ and, when present,\n\
         # compile_commands.json; each kernel's entries were found by building it once for {}.\n\
         # Edit it freely. To regenerate: `kbuild init --force [DIR] [--targets LIST]` (that\n\
         # replaces this file).\n",
        env!("CARGO_PKG_VERSION"),
        names.join(", "),
    )
}

pub(super) fn package_section(dir: &Path) -> String {
    format!(
        "\n[package]\nname = {}\nversion = \"0.1.0\"\n",
        toml_str(&package_name(dir))
    )
}

pub(super) fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

pub(super) fn toml_array(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", parts.join(", "))
}

/// A define's value in TOML: an integer as an integer, anything else as a string.
pub(super) fn define_value(v: &str) -> String {
    match v.parse::<i64>() {
        Ok(i) if i.to_string() == v => v.to_string(),
        _ => toml_str(v),
    }
}
