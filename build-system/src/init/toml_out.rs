//! The `Kbuild.toml` that init writes, through `toml_edit` so a person would keep it: the
//! header, the package, one `[kernels.NAME]` per unit (entries by name, demangled patterns),
//! commented-out units that do not compile. Every value is a TOML value the library quotes;
//! every comment goes through [`comment`], so no scanned text (a file name, a define, a
//! symbol, a compiler's error line) can end a comment line and start a key.

use std::collections::BTreeSet;
use std::path::Path;

use kbuild_manifest::target::{Target, Vendor};
use toml_edit::{Array, DocumentMut, Item, Table, Value};

use crate::config::Language;
use crate::entries::{EntryPattern, Exported};

use super::discover::{vendor_of, Discovered};
use super::name::PackageName;
use super::{slash, Unit, UnitReport, MAX_LISTED};

/// `# TEXT` and a newline, with every control character of `text` escaped (`\n`, `\r`,
/// `\u{1b}`): scanned text in a comment stays on its comment line.
pub(super) fn comment(text: &str) -> String {
    let mut out = String::from("# ");
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    out
}

/// The document being written, and comment lines waiting for what comes next (a table's
/// header, or the end of the file).
pub(super) struct Out {
    pub(super) doc: DocumentMut,
    pending: String,
}

impl Out {
    pub(super) fn new() -> Out {
        Out {
            doc: DocumentMut::new(),
            pending: String::new(),
        }
    }

    /// A comment line before whatever is added next.
    pub(super) fn comment(&mut self, text: &str) {
        self.pending.push_str(&comment(text));
    }

    /// Comment lines (already [`comment`]s) that had no key to precede, before whatever is
    /// added next.
    pub(super) fn carry(&mut self, comments: String) {
        self.pending.push_str(&comments);
    }

    /// A blank line before whatever is added next.
    pub(super) fn blank(&mut self) {
        self.pending.push('\n');
    }

    /// `[NAME]` at the top level, after the waiting comments.
    pub(super) fn table(&mut self, name: &str, mut t: Table) {
        t.decor_mut().set_prefix(self.take_prefix());
        self.doc.insert(name, Item::Table(t));
    }

    /// `[PARENT.NAME]`, after the waiting comments.
    pub(super) fn subtable(&mut self, parent: &str, name: &str, mut t: Table) {
        t.decor_mut().set_prefix(self.take_prefix());
        let parent = self.doc.entry(parent).or_insert_with(|| {
            let mut p = Table::new();
            p.set_implicit(true);
            Item::Table(p)
        });
        if let Some(p) = parent.as_table_mut() {
            p.insert(name, Item::Table(t));
        }
    }

    /// The text, the waiting comments at its end.
    pub(super) fn finish(mut self) -> DocumentMut {
        let tail = std::mem::take(&mut self.pending);
        self.doc.set_trailing(tail);
        self.doc
    }

    fn take_prefix(&mut self) -> String {
        let p = std::mem::take(&mut self.pending);
        // A blank line between tables, as a person would write them.
        if p.starts_with('\n') || self.doc.is_empty() {
            p
        } else {
            format!("\n{p}")
        }
    }
}

/// `key = value` in `t`, with `comments` (already [`comment`] lines) above it.
pub(super) fn put(t: &mut Table, key: &str, v: impl Into<Value>, comments: &mut String) {
    t.insert(key, Item::Value(v.into()));
    if !comments.is_empty() {
        if let Some(mut k) = t.key_mut(key) {
            k.leaf_decor_mut().set_prefix(std::mem::take(comments));
        }
    }
}

/// A TOML array of strings.
pub(super) fn array(items: &[String]) -> Array {
    items.iter().map(String::as_str).collect()
}

/// Write one `[kernels.NAME]` (or its commented-out form) and say what it is.
pub(super) fn kernel_section(
    out: &mut Out,
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
        // init scans C++ sources only.
        Language::Triton => "triton",
    };
    let mut report = UnitReport {
        source: source.clone(),
        kernel: u.kernel.clone(),
        language,
        status: "ok",
        entries: Vec::new(),
        exported: d.exported.clone(),
        errors: d.errors.clone(),
        targets: None,
    };
    // A unit whose text has no kernel, that compiled and exported none: host code.
    let host_only = !u.defines_kernel
        && !d.errors.is_empty()
        && d.errors
            .values()
            .all(|e| e.contains("match no exported symbol"));
    if library_only {
        report.status = "host-only";
        out.blank();
        out.comment(&format!(
            "kbuild init: {source} exports only CUB/Thrust kernels, which their host code launches; not listed"
        ));
        return report;
    }
    if d.exported.is_empty() && host_only {
        report.status = "host-only";
        report.errors.clear();
        out.blank();
        out.comment(&format!(
            "kbuild init: {source} compiles but exports no kernel (host code only); not listed"
        ));
        return report;
    }
    if d.exported.is_empty() {
        report.status = "failed";
        out.blank();
        for (t, e) in &d.errors {
            out.comment(&format!("kbuild init: does not compile for {t}: {e}"));
        }
        if d.errors.is_empty() {
            out.comment("kbuild init: was not built (no toolchain for its language)");
        }
        out.comment(&format!("[kernels.{}]", u.kernel));
        out.comment(&format!("source = {}", Value::from(source.as_str())));
        if u.language == Language::Hip {
            out.comment("language = \"hip\"");
        }
        out.comment("entries = [\"*\"]");
        return report;
    }
    let mut t = Table::new();
    let mut above = String::new();
    put(&mut t, "source", source.as_str(), &mut above);
    if u.language == Language::Hip {
        put(&mut t, "language", "hip", &mut above);
    }
    if !library.is_empty() {
        above.push_str(&comment(&format!(
            "also instantiates {} CUB/Thrust kernel(s), which their host code launches; not listed",
            library.len()
        )));
    }
    // Built for some vendors only: restrict it to those vendors' groups (`nvidia`, `amd`), not
    // to the discovery target, so a target of that vendor added later builds it too.
    let built: BTreeSet<Vendor> = d.exported.keys().filter_map(|t| vendor_of(t)).collect();
    if !d.errors.is_empty() {
        report.status = "partial";
        for (t, e) in &d.errors {
            above.push_str(&comment(&format!(
                "kbuild init: does not compile for {t}: {e}"
            )));
        }
        // Only when the list also holds targets of the vendor it failed for.
        let failed_vendor_listed = targets.iter().any(|t| !built.contains(&t.vendor()));
        if !built.is_empty() && failed_vendor_listed {
            let groups: Vec<String> = built
                .iter()
                .map(|v| vendor_group_name(*v).to_string())
                .collect();
            put(&mut t, "targets", array(&groups), &mut above);
            report.targets = Some(groups);
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
    for (target, e) in &d.exported {
        let only: Vec<&str> = e
            .iter()
            .filter(|s| !common.contains(s))
            .map(String::as_str)
            .collect();
        if !only.is_empty() {
            above.push_str(&comment(&format!(
                "exported only for {target}, so not listed (every target must export a listed entry): {}",
                only.join(", ")
            )));
        }
    }
    let same_everywhere = common.len() == union.len();
    if same_everywhere && common.len() > MAX_LISTED {
        let preview: Vec<String> = common.iter().take(4).map(|s| display_entry(s).0).collect();
        above.push_str(&comment(&format!(
            "{} entries found ({}, ...): `*` is every exported kernel",
            common.len(),
            preview.join(", ")
        )));
        report.entries = vec!["*".into()];
        put(&mut t, "entries", array(&report.entries), &mut above);
        out.subtable("kernels", &u.kernel, t);
        return report;
    }
    let mut written: Vec<(String, Option<String>)> = Vec::new();
    for s in &common {
        let (entry, c) = display_entry(s);
        if !written.iter().any(|(e, _)| *e == entry) {
            written.push((entry, c));
        }
    }
    report.entries = written.iter().map(|(e, _)| e.clone()).collect();
    if written.iter().all(|(_, c)| c.is_none()) {
        put(&mut t, "entries", array(&report.entries), &mut above);
    } else {
        above.push_str(&comment(
            "C++ entries are written demangled (matched against the demangled name; the mangled symbol is in the comment).",
        ));
        // One entry a line, each followed by its mangled symbol: a comment after an item is
        // the next item's prefix (or the array's trailing text, after the last one).
        let mut a = array(&report.entries);
        let mut after_previous: Option<&String> = None;
        for (i, (_, c)) in written.iter().enumerate() {
            let prefix = match after_previous {
                Some(prev) => format!(" {}    ", comment(prev)),
                None => "\n    ".to_string(),
            };
            if let Some(v) = a.get_mut(i) {
                v.decor_mut().set_prefix(prefix);
                v.decor_mut().set_suffix("");
            }
            after_previous = c.as_ref();
        }
        a.set_trailing_comma(true);
        a.set_trailing(match after_previous {
            Some(prev) => format!(" {}", comment(prev)),
            None => "\n".to_string(),
        });
        put(&mut t, "entries", a, &mut above);
    }
    out.subtable("kernels", &u.kernel, t);
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

/// The vendor group init writes in a kernel's `targets` (`kbuild_manifest::target::VENDOR_GROUPS`).
pub(super) fn vendor_group_name(v: Vendor) -> &'static str {
    match v {
        Vendor::Nvidia => "nvidia",
        Vendor::Amd => "amd",
    }
}

/// The comment lines the file starts with.
pub(super) fn header(out: &mut Out, dir: &Path, discovery: &[Target]) {
    let names: Vec<String> = discovery.iter().map(Target::to_string).collect();
    let shown = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| ".".into());
    out.comment("Kbuild.toml: the kbuild project file (docs/kbuild-toml.md).");
    out.comment(&format!(
        "Generated by `kbuild init` {} from the *.cu/*.hip files under {shown}/ and, when present,",
        env!("CARGO_PKG_VERSION")
    ));
    out.comment(&format!(
        "compile_commands.json; each kernel's entries were found by building it once for {}.",
        names.join(", ")
    ));
    out.comment(
        "Edit it freely. To regenerate: `kbuild init --force [DIR] [--targets LIST]` (that",
    );
    out.comment("replaces this file).");
    out.blank();
}

pub(super) fn package_section(out: &mut Out, package: &PackageName) {
    let mut t = Table::new();
    let mut above = if package.from == "the directory" {
        comment("Named after the directory (no Cargo.toml, pyproject.toml or CMakeLists.txt here names the library): edit it.")
    } else {
        comment(&format!("Name and version from {}.", package.from))
    };
    put(&mut t, "name", package.name.as_str(), &mut above);
    put(&mut t, "version", package.version.as_str(), &mut above);
    out.table("package", t);
}

/// A define's value in TOML: an integer as an integer, anything else as a string.
pub(super) fn define_value(v: &str) -> Value {
    match v.parse::<i64>() {
        Ok(i) if i.to_string() == v => Value::from(i),
        _ => Value::from(v),
    }
}
