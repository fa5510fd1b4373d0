//! CI gates over a diff: `--fail-on` rules and the allowlist (`kbuild-allow.toml`) that
//! suppresses a known case until its expiry date.
//!
//! Rules (comma-separated in `--fail-on`):
//! - `spills`: a spill appears or grows (AMD VGPR/SGPR spills, CUDA spill stores/loads), or
//!   an added kernel spills;
//! - `occupancy`: occupancy drops;
//! - `registers:+N` / `registers:+N%`: registers grow by N or more (N% of base or more);
//!   CUDA registers, AMD VGPRs and AGPRs (SGPRs rarely bind);
//! - `lds:+N` / `lds:+N%`: static shared memory / LDS grows by N bytes (N%) or more;
//! - `scratch`: scratch (AMD) / stack frame (CUDA) grows, or an added kernel uses some;
//! - `removed`: a kernel entry (or a whole target) is gone, renamed ones included (a rename
//!   is a removal for every caller of the old name);
//! - `abi`: a kernel's launch parameters changed (one added, removed, resized, moved, or
//!   pointer ↔ value), where both sides record them, or a kernel was removed or renamed.

use std::fmt;

use super::fields::{self, Column, Value};
use super::{Class, Diff, Entry, Row, TargetStatus};

/// How much growth trips a threshold rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// By this many units or more (`+0`: any growth).
    Abs(u64),
    /// By this percentage of the base or more (any growth from 0).
    Pct(f64),
}

/// One `--fail-on` rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    Spills,
    Occupancy,
    Registers(Threshold),
    Lds(Threshold),
    Scratch,
    /// Object, target or whole-package bytes grew by the threshold or more.
    Size(Threshold),
    /// A kernel entry or a target is gone (renamed ones included).
    Removed,
    /// Launch parameters changed, or a kernel is gone (what `Removed` trips on).
    Abi,
}

/// The rule names an allowlist entry can name.
pub const RULE_NAMES: &[&str] = &[
    "spills",
    "occupancy",
    "registers",
    "lds",
    "scratch",
    "size",
    "removed",
    "abi",
];

const EXPECTED: &str =
    "expected spills, occupancy, registers:+N, registers:+N%, lds:+N, lds:+N%, scratch, size:+N (bytes), size:+N%, removed or abi";

/// Why a `--fail-on` rule does not parse; `rule` is the rule as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateRuleError {
    #[error("gate rule `{name}` needs a threshold: `{name}:+N` or `{name}:+N%`")]
    MissingThreshold { name: String },
    #[error("gate rule `{rule}`: the threshold must be `+N` or `+N%` (N a number ≥ 0)")]
    BadThreshold { rule: String },
    #[error("gate rule `{name}` takes no threshold (got `{rule}`)")]
    UnexpectedThreshold { name: String, rule: String },
    #[error("empty gate rule; {EXPECTED}")]
    Empty,
    #[error("unknown gate rule `{name}`; {EXPECTED}")]
    Unknown { name: String },
}

impl Rule {
    /// `spills`, `registers`, ...: what an allowlist entry's `rule` names.
    pub fn family(&self) -> &'static str {
        match self {
            Rule::Spills => "spills",
            Rule::Occupancy => "occupancy",
            Rule::Registers(_) => "registers",
            Rule::Lds(_) => "lds",
            Rule::Scratch => "scratch",
            Rule::Size(_) => "size",
            Rule::Removed => "removed",
            Rule::Abi => "abi",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let th = |t: &Threshold| match t {
            Threshold::Abs(n) => format!("+{n}"),
            Threshold::Pct(p) => format!("+{p}%"),
        };
        match self {
            Rule::Registers(t) | Rule::Lds(t) | Rule::Size(t) => {
                write!(f, "{}:{}", self.family(), th(t))
            }
            _ => f.write_str(self.family()),
        }
    }
}

impl std::str::FromStr for Rule {
    type Err = GateRuleError;

    fn from_str(s: &str) -> Result<Rule, GateRuleError> {
        let s = s.trim();
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n.trim(), Some(a.trim())),
            None => (s, None),
        };
        let threshold = |arg: Option<&str>| -> Result<Threshold, GateRuleError> {
            let Some(a) = arg else {
                return Err(GateRuleError::MissingThreshold {
                    name: name.to_string(),
                });
            };
            let bad = || GateRuleError::BadThreshold {
                rule: s.to_string(),
            };
            let a = a.strip_prefix('+').ok_or_else(bad)?;
            match a.strip_suffix('%') {
                Some(p) => p
                    .parse::<f64>()
                    .ok()
                    .filter(|p| p.is_finite() && *p >= 0.0)
                    .map(Threshold::Pct)
                    .ok_or_else(bad),
                None => a.parse::<u64>().map(Threshold::Abs).map_err(|_| bad()),
            }
        };
        let no_arg = |r: Rule| match arg {
            None => Ok(r),
            Some(_) => Err(GateRuleError::UnexpectedThreshold {
                name: name.to_string(),
                rule: s.to_string(),
            }),
        };
        match name {
            "spills" => no_arg(Rule::Spills),
            "occupancy" => no_arg(Rule::Occupancy),
            "scratch" => no_arg(Rule::Scratch),
            "abi" => no_arg(Rule::Abi),
            "removed" => no_arg(Rule::Removed),
            "registers" => Ok(Rule::Registers(threshold(arg)?)),
            "lds" => Ok(Rule::Lds(threshold(arg)?)),
            "size" => Ok(Rule::Size(threshold(arg)?)),
            "" => Err(GateRuleError::Empty),
            other => Err(GateRuleError::Unknown {
                name: other.to_string(),
            }),
        }
    }
}

/// Parse a `--fail-on` list: `spills,occupancy,registers:+8`.
pub fn parse_rules(list: &str) -> Result<Vec<Rule>, GateRuleError> {
    list.split(',')
        .filter(|s| !s.trim().is_empty() || list.trim().is_empty())
        .map(str::parse)
        .collect()
}

/// A calendar date (UTC), as allowlist expiries are written.
pub use kbuild_base::time::Date;

/// One allowlist entry (validated by whoever read the file).
#[derive(Debug, Clone, PartialEq)]
pub struct AllowEntry {
    /// Glob (`*`, `?`) over the kernel: its display name, entry symbol or Kbuild.toml name.
    pub kernel: String,
    /// Glob over the canonical target name.
    pub target: String,
    /// A [`RULE_NAMES`] member.
    pub rule: String,
    pub justification: String,
    /// Last day the entry applies (inclusive).
    pub expires: Date,
    /// Where it is: `kbuild-allow.toml:12` (file and line of the entry).
    pub origin: String,
}

/// Which allowlist entry let a case pass.
#[derive(Debug, Clone, PartialEq)]
pub struct AllowedBy {
    pub origin: String,
    pub justification: String,
    pub expires: Date,
}

/// One gate outcome: a rule tripped (or was allowed) by a kernel on a target; a rule with no
/// case at all (passed); or an expired allowlist entry (rule `allowlist`, tripped).
#[derive(Debug, Clone, PartialEq)]
pub struct GateResult {
    /// The rule as given (`registers:+8`), or `allowlist` for an expired entry.
    pub rule: String,
    pub tripped: bool,
    pub kernel: Option<String>,
    pub target: Option<String>,
    pub allowed_by: Option<AllowedBy>,
    /// What happened, for people: `gfx1100 tile_spill: vgpr_spills 0 → 91 (+91 VGPR spills)`.
    pub message: String,
}

/// The outcome of all gates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateReport {
    pub results: Vec<GateResult>,
    /// Unused allowlist entries and the like: reported, never failing.
    pub warnings: Vec<String>,
}

impl GateReport {
    pub fn tripped(&self) -> bool {
        self.results.iter().any(|r| r.tripped)
    }

    /// The distinct rules that tripped, in order.
    pub fn tripped_rules(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in self.results.iter().filter(|r| r.tripped) {
            if !out.contains(&r.rule.as_str()) {
                out.push(&r.rule);
            }
        }
        out
    }
}

/// `*` any run of characters, `?` one character, all else literal; the whole string.
pub fn glob_match(pattern: &str, s: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn matches_entry(a: &AllowEntry, e: &Entry, target: &str) -> bool {
    // The display name with and without its ` [variant]`, the symbol, the Kbuild.toml name.
    let without_variant = match &e.variant {
        Some(v) => e
            .kernel
            .strip_suffix(&format!(" [{v}]"))
            .unwrap_or(&e.kernel),
        None => &e.kernel,
    };
    glob_match(&a.target, target)
        && [e.kernel.as_str(), without_variant, &e.entry, &e.object]
            .iter()
            .any(|n| glob_match(&a.kernel, n))
}

/// The changes of a row that trip `rule`, as `field base → head (delta)` texts.
fn row_trips(rule: &Rule, row: &Row) -> Vec<String> {
    let hits = row.changes.iter().filter(|c| {
        let Some(d) = c.delta else { return false };
        let base = c.base.num().unwrap_or(0);
        let grew = |t: &Threshold| {
            d > 0
                && match t {
                    Threshold::Abs(n) => d.unsigned_abs() >= *n,
                    Threshold::Pct(p) => {
                        base == 0 || (d.unsigned_abs() as f64) * 100.0 >= p * base as f64
                    }
                }
        };
        match rule {
            Rule::Spills => c.field.column == Column::Spills && d > 0,
            Rule::Occupancy => c.field.column == Column::Occupancy && d < 0,
            Rule::Registers(t) => {
                matches!(c.field.name, "vgprs" | "agprs" | "registers") && grew(t)
            }
            Rule::Lds(t) => c.field.name == "lds_bytes" && grew(t),
            Rule::Scratch => c.field.name == "scratch_bytes" && d > 0,
            Rule::Size(_) | Rule::Abi | Rule::Removed => false,
        }
    });
    let mut why: Vec<String> = hits
        .map(|c| {
            format!(
                "{} {} → {} ({})",
                c.field.name,
                c.base.show(),
                c.head.show(),
                fields::delta_text(&c.field, c.delta.unwrap_or(0), &row.entry.resources)
            )
        })
        .collect();
    if *rule == Rule::Abi {
        why.extend(row.abi.iter().map(|a| a.describe()));
    }
    why
}

/// The fields of an added entry that trip `rule` (spills or scratch used at all).
fn added_trips(rule: &Rule, e: &Entry) -> Vec<String> {
    let r = &e.resources;
    fields::fields_of(r)
        .iter()
        .filter(|f| match rule {
            Rule::Spills => f.column == Column::Spills,
            Rule::Scratch => f.name == "scratch_bytes",
            _ => false,
        })
        .filter_map(|f| match fields::value(r, f.name) {
            Value::Num(n) if n > 0 => Some(format!("{} {n} (new kernel)", f.name)),
            _ => None,
        })
        .collect()
}

/// Whether `base` → `head` bytes grew by threshold `t` or more.
fn size_grew(t: &Threshold, base: u64, head: u64) -> bool {
    head > base
        && match t {
            Threshold::Abs(n) => head - base >= *n,
            Threshold::Pct(p) => base == 0 || ((head - base) as f64) * 100.0 >= p * base as f64,
        }
}

fn size_text(base: u64, head: u64) -> String {
    let pct = if base == 0 {
        String::new()
    } else {
        format!(
            ", {:+.1}%",
            (head as f64 - base as f64) * 100.0 / base as f64
        )
    };
    format!(
        "{base} → {head} bytes (+{}{pct})",
        head.saturating_sub(base)
    )
}

/// `size:+T` on the whole package and on each target present on both sides: one result per
/// growth past the threshold, `kernel` naming no kernel. (Objects are judged with the
/// allowlist, in [`evaluate`].)
fn size_totals(diff: &Diff, t: &Threshold, rule: &Rule, report: &mut GateReport) -> bool {
    let mut any = false;
    let both: Vec<&super::TargetDiff> = diff
        .targets
        .iter()
        .filter(|d| d.status == TargetStatus::Both)
        .collect();
    for d in &both {
        if size_grew(t, d.base_bytes, d.head_bytes) {
            any = true;
            report.results.push(GateResult {
                rule: rule.to_string(),
                tripped: true,
                kernel: None,
                target: Some(d.target.clone()),
                allowed_by: None,
                message: format!(
                    "{}: all objects {}",
                    d.target,
                    size_text(d.base_bytes, d.head_bytes)
                ),
            });
        }
    }
    let base: u64 = diff.targets.iter().map(|d| d.base_bytes).sum();
    let head: u64 = diff.targets.iter().map(|d| d.head_bytes).sum();
    if size_grew(t, base, head) {
        any = true;
        report.results.push(GateResult {
            rule: rule.to_string(),
            tripped: true,
            kernel: None,
            target: None,
            allowed_by: None,
            message: format!("the package: {}", size_text(base, head)),
        });
    }
    any
}

/// The first unexpired allowlist entry of rule `family` that `matches` a case, marked used.
fn first_allowing(
    allow: &[AllowEntry],
    used: &mut [bool],
    family: &str,
    today: Date,
    matches: impl Fn(&AllowEntry) -> bool,
) -> Option<AllowedBy> {
    let (i, a) = allow
        .iter()
        .enumerate()
        .find(|(_, a)| a.rule == family && a.expires >= today && matches(a))?;
    used[i] = true;
    Some(AllowedBy {
        origin: a.origin.clone(),
        justification: a.justification.clone(),
        expires: a.expires,
    })
}

/// `size:+T` on each object present on both sides; an allowlist entry names it by its
/// kernel (`kernel` or `kernel.variant`, as the object files are named) and target.
fn size_objects(
    diff: &Diff,
    t: &Threshold,
    rule: &Rule,
    allow: &[AllowEntry],
    today: Date,
    used: &mut [bool],
    report: &mut GateReport,
) -> bool {
    let mut any = false;
    for d in &diff.targets {
        for s in &d.sizes {
            let (Some(base), Some(head)) = (s.base, s.head) else {
                continue;
            };
            if !size_grew(t, base, head) {
                continue;
            }
            any = true;
            let kernel = s.object.split('.').next().unwrap_or(&s.object);
            let allowed_by = first_allowing(allow, used, "size", today, |a| {
                glob_match(&a.target, &d.target)
                    && (glob_match(&a.kernel, &s.object) || glob_match(&a.kernel, kernel))
            });
            report.results.push(GateResult {
                rule: rule.to_string(),
                tripped: allowed_by.is_none(),
                kernel: Some(s.object.clone()),
                target: Some(d.target.clone()),
                message: format!(
                    "{} {}: object {}",
                    d.target,
                    s.object,
                    size_text(base, head)
                ),
                allowed_by,
            });
        }
    }
    any
}

/// `removed`, or `removed (renamed to NEW?)` when its object lost this one entry and gained
/// one other (a renamed kernel: every caller of the old name breaks).
fn removal(t: &super::TargetDiff, e: &Entry) -> String {
    let same_object = |x: &&Entry| x.object == e.object && x.variant == e.variant;
    let gone: Vec<&Entry> = t.removed.iter().filter(same_object).collect();
    let new: Vec<&Entry> = t.added.iter().filter(same_object).collect();
    match (gone.as_slice(), new.as_slice()) {
        ([_], [n]) => format!("removed (renamed to {}?)", n.kernel),
        _ => "removed".into(),
    }
}

/// A target only base has: one case for all its kernels; an allowlist entry names it by
/// target with kernel `*`.
fn removed_target(
    t: &super::TargetDiff,
    rule: &Rule,
    allow: &[AllowEntry],
    today: Date,
    used: &mut [bool],
    report: &mut GateReport,
) {
    let allowed_by = first_allowing(allow, used, rule.family(), today, |a| {
        a.kernel == "*" && glob_match(&a.target, &t.target)
    });
    report.results.push(GateResult {
        rule: rule.to_string(),
        tripped: allowed_by.is_none(),
        kernel: None,
        target: Some(t.target.clone()),
        message: format!(
            "{}: target removed ({} kernel entries)",
            t.target,
            t.removed.len()
        ),
        allowed_by,
    });
}

/// Evaluate `rules` on `diff`, letting non-expired `allow` entries suppress matching cases;
/// every expired entry is itself a tripped result.
pub fn evaluate(diff: &Diff, rules: &[Rule], allow: &[AllowEntry], today: Date) -> GateReport {
    let mut report = GateReport::default();
    let mut used = vec![false; allow.len()];
    for rule in rules {
        let mut any = false;
        if let Rule::Size(th) = rule {
            any |= size_objects(diff, th, rule, allow, today, &mut used, &mut report);
            any |= size_totals(diff, th, rule, &mut report);
        }
        for t in &diff.targets {
            let mut cases: Vec<(&Entry, Vec<String>)> = Vec::new();
            for row in &t.rows {
                if row.class == Class::Changed {
                    continue;
                }
                // Rows are in significance order: ABI rows first.
                let why = row_trips(rule, row);
                if !why.is_empty() {
                    cases.push((&row.entry, why));
                }
            }
            if t.status != TargetStatus::Removed {
                for e in &t.added {
                    let why = added_trips(rule, e);
                    if !why.is_empty() {
                        cases.push((e, why));
                    }
                }
            }
            if matches!(rule, Rule::Removed | Rule::Abi) {
                if t.status == TargetStatus::Removed {
                    any = true;
                    removed_target(t, rule, allow, today, &mut used, &mut report);
                } else {
                    cases.extend(t.removed.iter().map(|e| (e, vec![removal(t, e)])));
                }
            }
            for (e, why) in cases {
                any = true;
                let allowed_by = first_allowing(allow, &mut used, rule.family(), today, |a| {
                    matches_entry(a, e, &t.target)
                });
                report.results.push(GateResult {
                    rule: rule.to_string(),
                    tripped: allowed_by.is_none(),
                    kernel: Some(e.kernel.clone()),
                    target: Some(t.target.clone()),
                    message: format!("{} {}: {}", t.target, e.kernel, why.join(", ")),
                    allowed_by,
                });
            }
        }
        if !any {
            report.results.push(GateResult {
                rule: rule.to_string(),
                tripped: false,
                kernel: None,
                target: None,
                allowed_by: None,
                message: "no kernel trips it".into(),
            });
        }
    }
    for (i, a) in allow.iter().enumerate() {
        if a.expires < today {
            report.results.push(GateResult {
                rule: "allowlist".into(),
                tripped: true,
                kernel: Some(a.kernel.clone()),
                target: Some(a.target.clone()),
                allowed_by: None,
                message: format!(
                    "{}: the entry for kernel `{}`, target `{}`, rule `{}` expired on {} \
                     (today is {today}); fix the kernel, or renew the entry with a new \
                     justification, or remove it",
                    a.origin, a.kernel, a.target, a.rule, a.expires
                ),
            });
        } else if !used[i] && rules.iter().any(|r| r.family() == a.rule) {
            report.warnings.push(format!(
                "{}: the entry for kernel `{}`, target `{}`, rule `{}` matches nothing; remove it",
                a.origin, a.kernel, a.target, a.rule
            ));
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print_back() {
        let r = parse_rules(
            "spills, occupancy,registers:+8,registers:+10%,lds:+1024,scratch,removed,abi",
        )
        .unwrap();
        let shown: Vec<String> = r.iter().map(|r| r.to_string()).collect();
        assert_eq!(
            shown,
            [
                "spills",
                "occupancy",
                "registers:+8",
                "registers:+10%",
                "lds:+1024",
                "scratch",
                "removed",
                "abi"
            ]
        );
        for (bad, says) in [
            ("spils", "unknown gate rule `spils`"),
            ("registers", "needs a threshold"),
            ("registers:8", "must be `+N` or `+N%`"),
            ("lds:+x", "must be `+N`"),
            ("spills:+1", "takes no threshold"),
            ("abi:+1", "takes no threshold"),
            ("removed:+1", "takes no threshold"),
            ("", "empty gate rule"),
        ] {
            let e = parse_rules(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(
            parse_rules("lds:8"),
            Err(GateRuleError::BadThreshold {
                rule: "lds:8".into()
            })
        );
        assert_eq!(
            parse_rules("occupancy,spills:+1"),
            Err(GateRuleError::UnexpectedThreshold {
                name: "spills".into(),
                rule: "spills:+1".into()
            })
        );
    }

    #[test]
    fn dates_parse_strictly_and_come_from_unix_time() {
        assert_eq!(
            Date::parse("2026-02-28").map(|d| d.to_string()),
            Some("2026-02-28".into())
        );
        for bad in [
            "2026-02-29",
            "2026-13-01",
            "26-01-01",
            "2026-1-01",
            "x",
            "2026-01-01-1",
        ] {
            assert_eq!(Date::parse(bad), None, "{bad}");
        }
        assert_eq!(Date::from_unix_seconds(0).to_string(), "1970-01-01");
        assert_eq!(
            Date::from_unix_seconds(951_782_400).to_string(),
            "2000-02-29"
        );
        assert_eq!(
            Date::from_unix_seconds(1_798_675_200).to_string(),
            "2026-12-31"
        );
        assert_eq!(Date::from_unix_seconds(-86_400).to_string(), "1969-12-31");
    }

    #[test]
    fn globs() {
        for (p, s, m) in [
            ("*", "", true),
            ("gemv*", "gemv_bf16 [rows1]", true),
            ("gfx11*", "gfx1100", true),
            ("gfx11*", "gfx1030", false),
            ("sm_?9", "sm_89", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("tile_spill", "tile_spill", true),
            ("tile", "tile_spill", false),
        ] {
            assert_eq!(glob_match(p, s), m, "{p} {s}");
        }
    }
}
