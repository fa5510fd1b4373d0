//! The diff for people: GitHub-flavoured markdown (a PR comment) and terminal text.
//!
//! Both show the same things in the same order: the sides, one summary line per target, the
//! gates, then per target its ABI changes (launch parameters added, removed, resized, moved:
//! breaking, so first), a table of changed kernels (most significant first, base → head
//! with signed deltas in the vendor's columns), the unchanged count, added and removed
//! kernels, and object size changes.

use std::fmt::Write;

use super::fields;
use super::gate::GateReport;
use super::{Class, Diff, Entry, FieldChange, Row, TargetDiff, TargetStatus};
use kbuild_manifest::resources::Resources;

/// How a cell moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tone {
    Same,
    Worse,
    Better,
    Neutral,
}

struct Cell {
    text: String,
    tone: Tone,
}

/// The report columns of a record kind: header and the fields shown in it.
fn columns(kind: &str) -> &'static [(&'static str, &'static [&'static str])] {
    match kind {
        "amd" => &[
            ("VGPR", &["vgprs"]),
            ("SGPR", &["sgprs"]),
            ("AGPR", &["agprs"]),
            ("LDS B", &["lds_bytes"]),
            ("scratch B", &["scratch_bytes"]),
            ("spills v/s", &["vgpr_spills", "sgpr_spills"]),
            ("occupancy", &["occupancy"]),
        ],
        "cuda" => &[
            ("registers", &["registers"]),
            ("shared B", &["lds_bytes"]),
            ("stack B", &["scratch_bytes"]),
            ("spills st/ld B", &["spill_store_bytes", "spill_load_bytes"]),
            ("occupancy", &["occupancy"]),
        ],
        _ => &[("PTX ISA", &["ptx_isa"]), ("target", &["target"])],
    }
}

fn vendor_name(kind: &str) -> &'static str {
    match kind {
        "amd" => "AMD",
        "cuda" => "CUDA",
        _ => "PTX",
    }
}

/// One side's values of a column: `12/0`, occupancy as `12/16 [vgprs]`.
fn side_values(r: &Resources, names: &[&str]) -> String {
    if names == ["occupancy"] {
        return match fields::occupancy(r) {
            Some(o) if o.value < o.max => format!("{}/{} [{}]", o.value, o.max, o.limiter),
            Some(o) => format!("{}/{}", o.value, o.max),
            None => "?".into(),
        };
    }
    names
        .iter()
        .map(|n| fields::value(r, n).show())
        .collect::<Vec<_>>()
        .join("/")
}

fn change_cell(row: &Row, names: &[&str]) -> Cell {
    let changed: Vec<&FieldChange> = names.iter().filter_map(|n| row.change(n)).collect();
    let head = side_values(&row.entry.resources, names);
    if changed.is_empty() {
        return Cell {
            text: head,
            tone: Tone::Same,
        };
    }
    let deltas: Vec<String> = changed
        .iter()
        .filter_map(|c| {
            c.delta
                .filter(|d| *d != 0)
                .map(|d| fields::delta_text(&c.field, d, &row.entry.resources))
        })
        .collect();
    let mut text = format!("{} → {head}", side_values(&row.base, names));
    if !deltas.is_empty() {
        let _ = write!(text, " ({})", deltas.join(", "));
    }
    let tone = if changed.iter().any(|c| c.better == Some(false)) {
        Tone::Worse
    } else if changed.iter().any(|c| c.better == Some(true)) {
        Tone::Better
    } else {
        Tone::Neutral
    };
    Cell { text, tone }
}

fn plain_cell(e: &Entry, names: &[&str]) -> Cell {
    Cell {
        text: side_values(&e.resources, names),
        tone: Tone::Same,
    }
}

/// Record kinds present among `rs`, in a fixed order.
fn kinds<'a>(rs: impl Iterator<Item = &'a Resources>) -> Vec<&'static str> {
    let present: Vec<&str> = rs.map(fields::kind).collect();
    ["amd", "cuda", "ptx"]
        .into_iter()
        .filter(|k| present.contains(k))
        .collect()
}

/// Changes outside the columns: `kernarg_bytes 40 → 48 (+8 B)`.
fn other_changes(row: &Row) -> Vec<String> {
    let cols = columns(fields::kind(&row.entry.resources));
    row.changes
        .iter()
        .filter(|c| !cols.iter().any(|(_, ns)| ns.contains(&c.field.name)))
        .map(|c| {
            let mut s = format!("{} {} → {}", c.field.name, c.base.show(), c.head.show());
            if let Some(d) = c.delta.filter(|d| *d != 0) {
                let _ = write!(
                    s,
                    " ({})",
                    fields::delta_text(&c.field, d, &row.entry.resources)
                );
            }
            s
        })
        .collect()
}

/// `+2.1 KiB (+6.3%)`, `-312 B`, `±0 B`.
pub(crate) fn size_delta(base: u64, head: u64) -> String {
    let d = head as i128 - base as i128;
    let sign = if d < 0 {
        "-"
    } else if d > 0 {
        "+"
    } else {
        "±"
    };
    let n = d.unsigned_abs() as f64;
    let mut s = if n < 1024.0 {
        format!("{sign}{n} B")
    } else if n < 1024.0 * 1024.0 {
        format!("{sign}{:.1} KiB", n / 1024.0)
    } else {
        format!("{sign}{:.1} MiB", n / (1024.0 * 1024.0))
    };
    if base > 0 && head > 0 && d != 0 {
        let _ = write!(s, " ({sign}{:.1}%)", n * 100.0 / base as f64);
    }
    s
}

fn bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |n| n.to_string())
}

/// A rendered table: header and rows of cells (first cell the kernel).
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

fn table_of_rows(kind: &str, rows: &[&Row]) -> Table {
    let cols = columns(kind);
    let mut header = vec!["kernel".to_string()];
    header.extend(cols.iter().map(|(h, _)| h.to_string()));
    let rows = rows
        .iter()
        .map(|r| {
            let mut cells = vec![Cell {
                text: r.entry.kernel.clone(),
                tone: match r.class {
                    Class::Abi | Class::Regression => Tone::Worse,
                    Class::Improvement => Tone::Better,
                    Class::Changed => Tone::Neutral,
                },
            }];
            cells.extend(cols.iter().map(|(_, ns)| change_cell(r, ns)));
            cells
        })
        .collect();
    Table { header, rows }
}

fn table_of_entries(kind: &str, entries: &[&Entry]) -> Table {
    let cols = columns(kind);
    let mut header = vec!["kernel".to_string()];
    header.extend(cols.iter().map(|(h, _)| h.to_string()));
    let rows = entries
        .iter()
        .map(|e| {
            let mut cells = vec![Cell {
                text: e.kernel.clone(),
                tone: Tone::Same,
            }];
            cells.extend(cols.iter().map(|(_, ns)| plain_cell(e, ns)));
            cells
        })
        .collect();
    Table { header, rows }
}

/// The tables of one target: changed rows per kind, then added entries per kind.
fn target_tables(t: &TargetDiff) -> (Vec<Table>, Vec<Table>) {
    let with_changes = || t.rows.iter().filter(|r| !r.changes.is_empty());
    let changed = kinds(with_changes().map(|r| &r.entry.resources))
        .into_iter()
        .map(|k| {
            let rows: Vec<&Row> = with_changes()
                .filter(|r| fields::kind(&r.entry.resources) == k)
                .collect();
            table_of_rows(k, &rows)
        })
        .collect();
    let added = kinds(t.added.iter().map(|e| &e.resources))
        .into_iter()
        .map(|k| {
            let es: Vec<&Entry> = t
                .added
                .iter()
                .filter(|e| fields::kind(&e.resources) == k)
                .collect();
            table_of_entries(k, &es)
        })
        .collect();
    (changed, added)
}

/// The ABI changes of a target, one `(kernel, "param 2 resized 4 → 8 B, ...")` per row.
fn abi_lines(t: &TargetDiff) -> Vec<(&str, String)> {
    t.rows
        .iter()
        .filter(|r| !r.abi.is_empty())
        .map(|r| {
            let what: Vec<String> = r.abi.iter().map(|a| a.describe()).collect();
            (r.entry.kernel.as_str(), what.join(", "))
        })
        .collect()
}

fn target_vendor(t: &TargetDiff) -> String {
    let ks = kinds(
        t.rows
            .iter()
            .map(|r| &r.entry.resources)
            .chain(t.added.iter().map(|e| &e.resources))
            .chain(t.removed.iter().map(|e| &e.resources)),
    );
    ks.iter()
        .map(|k| vendor_name(k))
        .collect::<Vec<_>>()
        .join(", ")
}

fn target_heading(t: &TargetDiff) -> String {
    let vendor = target_vendor(t);
    let status = match t.status {
        TargetStatus::Both => "",
        TargetStatus::Added => "new target",
        TargetStatus::Removed => "target removed",
    };
    let tags: Vec<&str> = [vendor.as_str(), status]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    if tags.is_empty() {
        t.target.clone()
    } else {
        format!("{} ({})", t.target, tags.join(", "))
    }
}

// ---------------------------------------------------------------------------------- markdown

// Names (kernels, entries, objects, sides) come from the PR's sources and go into a comment
// the PR workflow posts: nothing in them may become markup, a link, HTML or a new table cell.

/// A character that cannot show literally in markdown text: shown as its Rust escape (`\n`,
/// `\u{1b}`), whose backslash is escaped in turn.
fn control(c: char, out: &mut String) {
    for e in c.escape_default() {
        if e == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(e);
        }
    }
}

/// Whether `s` shows literally in a code span, in a table cell too: no backtick (the fence),
/// no `|` (a cell), no control character (a line break), no `&` and no `<` that could start a
/// tag (`scale_by<4>(float*)` is fine; `x<img` is not).
fn plain_name(s: &str) -> bool {
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let tag = c == '<'
            && chars
                .peek()
                .is_some_and(|n| n.is_ascii_alphabetic() || matches!(n, '/' | '!' | '?'));
        if c.is_control() || matches!(c, '`' | '|' | '&') || tag {
            return false;
        }
    }
    true
}

/// `s` as markdown text that GitHub shows literally: HTML-escaped, every markdown
/// metacharacter backslash-escaped, control characters spelled out.
fn md_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '!' | '|' | '#' | '~' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => control(c, &mut out),
            c => out.push(c),
        }
    }
    out
}

/// A name: a code span when that shows it literally (every ordinary name), else the same
/// look as HTML `<code>` around [`md_literal`] (in which GitHub reads escapes and entities).
fn md_name(s: &str) -> String {
    if plain_name(s) {
        format!("`{s}`")
    } else {
        format!("<code>{}</code>", md_literal(s))
    }
}

/// Free text that may quote names (cells, gate messages, allowlist entries): escaped so that
/// it cannot open HTML, a link or an image, code, emphasis or a new cell, while the
/// brackets and parentheses of ordinary text (`[registers]`, `(+8 B)`) stay as they are.
fn md_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let mut prev = None;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            // A link's or image's opening: `](` and `![`.
            '(' if prev == Some(']') => out.push_str("\\("),
            '!' if chars.peek() == Some(&'[') => out.push_str("\\!"),
            c if c.is_control() => control(c, &mut out),
            c => out.push(c),
        }
        prev = Some(c);
    }
    out
}

fn md_table(out: &mut String, t: &Table) {
    let _ = writeln!(out, "| {} |", t.header.join(" | "));
    let align: Vec<&str> = (0..t.header.len())
        .map(|i| if i == 0 { ":--" } else { "--:" })
        .collect();
    let _ = writeln!(out, "|{}|", align.join("|"));
    for r in &t.rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let text = if i == 0 {
                    md_name(&c.text)
                } else {
                    md_escape(&c.text)
                };
                match c.tone {
                    Tone::Worse | Tone::Better if i > 0 => format!("**{text}**"),
                    _ => text,
                }
            })
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
}

/// End `out` with exactly one blank line (before a heading or a block).
fn blank_line(out: &mut String) {
    while out.ends_with('\n') {
        out.pop();
    }
    out.push_str("\n\n");
}

fn md_gates(out: &mut String, g: &GateReport) {
    blank_line(out);
    out.push_str("#### Gates\n\n");
    for r in &g.results {
        let (rule, message) = (md_name(&r.rule), md_escape(&r.message));
        let line = match (&r.allowed_by, r.tripped, r.rule.as_str()) {
            (_, true, "allowlist") => format!(":x: allowlist entry expired: {message}"),
            (_, true, _) => format!(":x: {rule} tripped: {message}"),
            (Some(a), false, _) => format!(
                ":heavy_minus_sign: {rule} allowed: {message} (by {} until {}: {})",
                md_escape(&a.origin),
                md_escape(&a.expires.to_string()),
                md_escape(&a.justification)
            ),
            (None, false, _) => format!(":white_check_mark: {rule} passed: {message}"),
        };
        let _ = writeln!(out, "- {line}");
    }
    for w in &g.warnings {
        let _ = writeln!(out, "- :warning: {}", md_escape(w));
    }
}

/// The most characters [`markdown`] writes: GitHub refuses a comment over 65,536, and the PR
/// workflow puts a marker line in front.
pub const COMMENT_MAX_CHARS: usize = 60_000;

/// How many rows each collapsed list of the comment shows, tried in turn until the comment
/// fits [`COMMENT_MAX_CHARS`].
const COMMENT_ROWS: &[usize] = &[25, 10, 3, 0];

/// GitHub-flavoured markdown for a PR comment. `gates`: the `--fail-on` outcome, if any.
///
/// It fits a comment however large the diff: per target, ABI changes and regressions in full;
/// improvements, other changes, added and removed kernels and object sizes as counts, with
/// their first rows inside `<details>`; and never more than [`COMMENT_MAX_CHARS`] characters
/// (what does not fit is cut at a line, and the comment says so). [`markdown_full`] has it all.
pub fn markdown(diff: &Diff, gates: Option<&GateReport>) -> String {
    let mut out = String::new();
    for &rows in COMMENT_ROWS {
        out = markdown_rows(diff, gates, rows);
        if out.chars().count() <= COMMENT_MAX_CHARS {
            return out;
        }
    }
    cut_to(&out, COMMENT_MAX_CHARS)
}

/// The whole report as markdown (every row of every list): what the PR workflow uploads
/// beside the comment.
pub fn markdown_full(diff: &Diff, gates: Option<&GateReport>) -> String {
    markdown_rows(diff, gates, usize::MAX)
}

/// `md` cut at a line so that it and the note saying so fit `max` characters, with every
/// `<details>` it opened closed.
fn cut_to(md: &str, max: usize) -> String {
    let total = md.chars().count();
    let note = |shown: usize| {
        format!(
            "\n\n**Cut here**: the comment shows {shown} of the report's {total} characters; \
             the full report (`kbuild diff --format md --full-report FILE`) has the rest.\n"
        )
    };
    // Room for the note and the closing tags, measured with the largest numbers.
    let reserve = note(total).chars().count() + "\n</details>".len() * 64;
    let budget = max.saturating_sub(reserve);
    let mut kept = String::new();
    let mut count = 0;
    for line in md.split_inclusive('\n') {
        let n = line.chars().count();
        if count + n > budget {
            break;
        }
        kept.push_str(line);
        count += n;
    }
    let open = kept.matches("<details>").count();
    let closed = kept.matches("</details>").count();
    for _ in 0..open.saturating_sub(closed).min(64) {
        kept.push_str("\n</details>");
    }
    let shown = kept.chars().count();
    kept.push_str(&note(shown));
    kept
}

/// A collapsed list: `<details><summary>{summary}</summary>`, the body, then how many rows
/// it left out.
fn md_details(out: &mut String, summary: &str, body: &str, left_out: usize) {
    let _ = writeln!(out, "<details><summary>{summary}</summary>\n");
    out.push_str(body.trim_end_matches('\n'));
    out.push_str("\n\n");
    if left_out > 0 {
        let _ = writeln!(
            out,
            "… and {left_out} more (the full report lists them all).\n"
        );
    }
    out.push_str("</details>\n\n");
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Tables of `rows` (changed rows), one per record kind, at most `limit` rows in all; the
/// rows left out.
fn md_row_tables(out: &mut String, rows: &[&Row], limit: usize) -> usize {
    let shown: Vec<&Row> = rows.iter().take(limit).copied().collect();
    for k in kinds(shown.iter().map(|r| &r.entry.resources)) {
        let of_kind: Vec<&Row> = shown
            .iter()
            .filter(|r| fields::kind(&r.entry.resources) == k)
            .copied()
            .collect();
        md_table(out, &table_of_rows(k, &of_kind));
        out.push('\n');
    }
    rows.len() - shown.len()
}

/// Tables of `entries`, one per record kind, at most `limit` in all; the entries left out.
fn md_entry_tables(out: &mut String, entries: &[Entry], limit: usize) -> usize {
    let shown: Vec<&Entry> = entries.iter().take(limit).collect();
    for k in kinds(shown.iter().map(|e| &e.resources)) {
        let of_kind: Vec<&Entry> = shown
            .iter()
            .filter(|e| fields::kind(&e.resources) == k)
            .copied()
            .collect();
        md_table(out, &table_of_entries(k, &of_kind));
        out.push('\n');
    }
    entries.len() - shown.len()
}

/// The report with at most `limit` rows in each collapsed list.
fn markdown_rows(diff: &Diff, gates: Option<&GateReport>, limit: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Kernel resources: {} → {}\n",
        md_name(&diff.base_label),
        md_name(&diff.head_label)
    );
    if diff.targets.is_empty() {
        out.push_str("No targets on either side.\n");
    }
    for t in &diff.targets {
        let line = t.summary_line();
        let (name, rest) = line.split_once(": ").unwrap_or((&line, ""));
        let _ = writeln!(out, "- **{}**: {}", md_escape(name), md_escape(rest));
    }
    if let Some(g) = gates {
        md_gates(&mut out, g);
    }
    for t in diff.targets.iter().filter(|t| t.differs()) {
        blank_line(&mut out);
        let _ = writeln!(out, "#### {}\n", md_escape(&target_heading(t)));
        md_target(&mut out, t, limit);
    }
    if !diff.differs() && !diff.targets.is_empty() {
        blank_line(&mut out);
        out.push_str("No resource changes.\n");
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// One target's section: ABI changes and regressions in full, the rest collapsed.
fn md_target(out: &mut String, t: &TargetDiff, limit: usize) {
    let abi = abi_lines(t);
    if !abi.is_empty() {
        out.push_str(
            "**ABI changes** (launch parameters; callers built against the base break):\n\n",
        );
        for (kernel, what) in abi {
            let _ = writeln!(out, "- :x: {}: {}", md_name(kernel), md_escape(&what));
        }
        out.push('\n');
    }
    let with_changes = |classes: &[Class]| -> Vec<&Row> {
        t.rows
            .iter()
            .filter(|r| !r.changes.is_empty() && classes.contains(&r.class))
            .collect()
    };
    // ABI rows whose resources changed too sit with the regressions: both are breaking news.
    let worse = with_changes(&[Class::Abi, Class::Regression]);
    if !worse.is_empty() {
        let _ = writeln!(
            out,
            "{}:\n",
            plural(worse.len(), "regression", "regressions")
        );
        md_row_tables(out, &worse, usize::MAX);
    }
    for (rows, one, many) in [
        (
            with_changes(&[Class::Improvement]),
            "improvement",
            "improvements",
        ),
        (
            with_changes(&[Class::Changed]),
            "other change",
            "other changes",
        ),
    ] {
        if !rows.is_empty() {
            let mut body = String::new();
            let left = md_row_tables(&mut body, &rows, limit);
            md_details(out, &plural(rows.len(), one, many), &body, left);
        }
    }
    let others: Vec<String> = t
        .rows
        .iter()
        .flat_map(|r| {
            other_changes(r)
                .into_iter()
                .map(move |c| format!("- {}: {}", md_name(&r.entry.kernel), md_escape(&c)))
        })
        .collect();
    if !others.is_empty() {
        let mut body = String::new();
        for o in others.iter().take(limit) {
            let _ = writeln!(body, "{o}");
        }
        let summary = plural(
            others.len(),
            "change outside the columns",
            "changes outside the columns",
        );
        md_details(out, &summary, &body, others.len().saturating_sub(limit));
    }
    if t.unchanged > 0 {
        let _ = writeln!(out, "{} unchanged.\n", t.unchanged);
    }
    if !t.added.is_empty() {
        let (one, many) = if t.status == TargetStatus::Added {
            ("kernel", "kernels")
        } else {
            ("added", "added")
        };
        let mut body = String::new();
        let left = md_entry_tables(&mut body, &t.added, limit);
        md_details(out, &plural(t.added.len(), one, many), &body, left);
    }
    if !t.removed.is_empty() {
        let names: Vec<String> = t
            .removed
            .iter()
            .take(limit)
            .map(|e| format!("- {}\n", md_name(&e.kernel)))
            .collect();
        let left = t.removed.len() - names.len();
        md_details(
            out,
            &format!("{} removed", t.removed.len()),
            &names.concat(),
            left,
        );
    }
    if !t.ambiguous.is_empty() {
        out.push_str(
            "**Not matched** (names that differ only in a compiler-made hash, more than one \
             candidate; listed as removed and added):\n\n",
        );
        for a in &t.ambiguous {
            let names = |v: &[String]| v.iter().map(|e| md_name(e)).collect::<Vec<_>>().join(", ");
            let _ = writeln!(
                out,
                "- :warning: {}: base {}; head {}",
                md_name(&a.unhashed),
                names(&a.base),
                names(&a.head)
            );
        }
        out.push('\n');
    }
    let sizes: Vec<_> = t
        .sizes
        .iter()
        .filter(|s| s.base.is_some() && s.head.is_some())
        .collect();
    if !sizes.is_empty() {
        let mut body = String::from("| object | base B | head B | delta |\n|:--|--:|--:|--:|\n");
        for s in sizes.iter().take(limit) {
            let _ = writeln!(
                body,
                "| {} | {} | {} | {} |",
                md_name(&s.object),
                bytes(s.base),
                bytes(s.head),
                size_delta(s.base.unwrap_or(0), s.head.unwrap_or(0))
            );
        }
        let summary = format!("Object sizes: {}", size_delta(t.base_bytes, t.head_bytes));
        md_details(out, &summary, &body, sizes.len().saturating_sub(limit));
    }
}

// -------------------------------------------------------------------------------------- text

fn paint(s: &str, tone: Tone, color: bool) -> String {
    let code = match tone {
        Tone::Worse => "31",
        Tone::Better => "32",
        Tone::Neutral => "33",
        Tone::Same => return s.to_string(),
    };
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

fn text_table(out: &mut String, t: &Table, indent: &str, color: bool) {
    let n = t.header.len();
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            t.rows
                .iter()
                .map(|r| r.get(i).map_or(0, |c| width(&c.text)))
                .max()
                .unwrap_or(0)
                .max(width(&t.header[i]))
        })
        .collect();
    let pad = |s: &str, i: usize| {
        let fill = " ".repeat(widths[i].saturating_sub(width(s)));
        if i == 0 {
            format!("{s}{fill}")
        } else {
            format!("{fill}{s}")
        }
    };
    let head: Vec<String> = t
        .header
        .iter()
        .enumerate()
        .map(|(i, h)| pad(h, i))
        .collect();
    let _ = writeln!(out, "{indent}{}", head.join("  ").trim_end());
    for r in &t.rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| paint(&pad(&c.text, i), c.tone, color))
            .collect();
        let _ = writeln!(out, "{indent}{}", cells.join("  ").trim_end());
    }
}

/// Terminal text; ANSI colours when `color` (red worse, green better, yellow other).
pub fn text(diff: &Diff, gates: Option<&GateReport>, color: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kernel resources: {} → {}",
        diff.base_label, diff.head_label
    );
    for t in &diff.targets {
        let c = t.counts();
        let tone = if c.abi > 0 || c.regressions > 0 {
            Tone::Worse
        } else if c.improvements > 0 {
            Tone::Better
        } else {
            Tone::Same
        };
        let _ = writeln!(out, "  {}", paint(&t.summary_line(), tone, color));
    }
    if let Some(g) = gates {
        out.push_str("\ngates:\n");
        for r in &g.results {
            let line = match (&r.allowed_by, r.tripped, r.rule.as_str()) {
                (_, true, "allowlist") => paint(
                    &format!("FAIL    allowlist: {}", r.message),
                    Tone::Worse,
                    color,
                ),
                (_, true, _) => paint(
                    &format!("FAIL    {}: {}", r.rule, r.message),
                    Tone::Worse,
                    color,
                ),
                (Some(a), false, _) => format!(
                    "allowed {}: {} (by {} until {}: {})",
                    r.rule, r.message, a.origin, a.expires, a.justification
                ),
                (None, false, _) => format!("ok      {}: {}", r.rule, r.message),
            };
            let _ = writeln!(out, "  {line}");
        }
        for w in &g.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
    }
    for t in diff.targets.iter().filter(|t| t.differs()) {
        let _ = writeln!(out, "\n{}", target_heading(t));
        for (kernel, what) in abi_lines(t) {
            let _ = writeln!(
                out,
                "  {}",
                paint(&format!("ABI: {kernel}: {what}"), Tone::Worse, color)
            );
        }
        let (changed, added) = target_tables(t);
        for table in &changed {
            text_table(&mut out, table, "  ", color);
        }
        for r in &t.rows {
            for o in other_changes(r) {
                let _ = writeln!(out, "  other: {}: {o}", r.entry.kernel);
            }
        }
        if t.unchanged > 0 {
            let _ = writeln!(out, "  {} unchanged", t.unchanged);
        }
        if !added.is_empty() {
            let what = if t.status == TargetStatus::Added {
                "kernels"
            } else {
                "added"
            };
            let _ = writeln!(out, "  {what}:");
            for table in &added {
                text_table(&mut out, table, "    ", color);
            }
        }
        if !t.removed.is_empty() {
            let names: Vec<&str> = t.removed.iter().map(|e| e.kernel.as_str()).collect();
            let _ = writeln!(out, "  removed: {}", names.join(", "));
        }
        for a in &t.ambiguous {
            let _ = writeln!(
                out,
                "  {}",
                paint(
                    &format!(
                        "not matched (names differ only in a compiler-made hash, more than one \
                         candidate): base {}; head {}",
                        a.base.join(", "),
                        a.head.join(", ")
                    ),
                    Tone::Neutral,
                    color
                )
            );
        }
        let sizes: Vec<String> = t
            .sizes
            .iter()
            .filter(|s| s.base.is_some() && s.head.is_some())
            .map(|s| {
                format!(
                    "{} {} → {} ({})",
                    s.object,
                    bytes(s.base),
                    bytes(s.head),
                    size_delta(s.base.unwrap_or(0), s.head.unwrap_or(0))
                )
            })
            .collect();
        if !sizes.is_empty() {
            let _ = writeln!(
                out,
                "  object sizes {}: {}",
                size_delta(t.base_bytes, t.head_bytes),
                sizes.join(", ")
            );
        }
    }
    if !diff.differs() && !diff.targets.is_empty() {
        out.push_str("\nno resource changes\n");
    }
    out
}
