//! A kernel's `entries`: exact symbol names, globs over the exported symbol (`fast_*`, `?`,
//! `[a-z]`, `[!x]`, `\*` for a literal `*`), and demangled C++ patterns (`softmax<*>`,
//! `ns::kern<float, 4>`, `scale<*>(float*, int)`): an entry holding `<`, `::` or `(` is
//! matched against the demangled name, whitespace normalised (`kern<float,4>` matches
//! `kern<float, 4>`), without parameters unless the pattern has `(`. `*` alone is every
//! exported kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kbuild_manifest::demangle;
use kbuild_manifest::target::{Target, Vendor};

/// Which targets one list of a kernel's `entries` applies to: every target (the plain list,
/// or the key `all`), one vendor's (`nvidia`, `amd`) or one target's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryScope {
    All,
    Vendor(Vendor),
    Target(Target),
}

/// A key of a kernel's `entries` table that names no scope.
#[derive(Debug, thiserror::Error)]
#[error("`{key}` is not `all`, `nvidia`, `amd` or a target ({why})")]
pub struct ScopeError {
    pub key: String,
    pub why: kbuild_manifest::target::TargetError,
}

impl EntryScope {
    /// A key of the `entries` table: `all`, `nvidia`, `amd` or a target name.
    pub fn parse(key: &str) -> Result<EntryScope, ScopeError> {
        match key {
            "all" => Ok(EntryScope::All),
            "nvidia" => Ok(EntryScope::Vendor(Vendor::Nvidia)),
            "amd" => Ok(EntryScope::Vendor(Vendor::Amd)),
            other => other
                .parse::<Target>()
                .map(EntryScope::Target)
                .map_err(|why| ScopeError {
                    key: other.into(),
                    why,
                }),
        }
    }

    pub fn applies(&self, target: &Target) -> bool {
        match self {
            EntryScope::All => true,
            EntryScope::Vendor(v) => target.vendor() == *v,
            EntryScope::Target(t) => t == target,
        }
    }

    /// How narrow it is: a narrower list's symbols are its own, not the wider one's.
    fn rank(&self) -> u8 {
        match self {
            EntryScope::All => 0,
            EntryScope::Vendor(_) => 1,
            EntryScope::Target(_) => 2,
        }
    }
}

impl fmt::Display for EntryScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryScope::All => f.write_str("all"),
            EntryScope::Vendor(Vendor::Nvidia) => f.write_str("nvidia"),
            EntryScope::Vendor(Vendor::Amd) => f.write_str("amd"),
            EntryScope::Target(t) => write!(f, "{t}"),
        }
    }
}

/// A kernel's `entries`: the plain list (scope `all`), or lists per vendor or target. An
/// object for a target must export what every list that applies to it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelEntries {
    pub lists: Vec<(EntryScope, Vec<EntryPattern>)>,
}

impl KernelEntries {
    /// The plain list form: the same entries for every target.
    pub fn plain(entries: Vec<EntryPattern>) -> KernelEntries {
        KernelEntries {
            lists: vec![(EntryScope::All, entries)],
        }
    }

    /// What an object for `target` must export: every list that applies, widest first.
    pub fn for_target(&self, target: &Target) -> Vec<EntryPattern> {
        let mut out: Vec<EntryPattern> = Vec::new();
        for (_, list) in self.applying(target) {
            for p in list {
                if !out.contains(p) {
                    out.push(p.clone());
                }
            }
        }
        out
    }

    /// The lists that apply to `target`, widest first.
    pub fn applying(&self, target: &Target) -> Vec<&(EntryScope, Vec<EntryPattern>)> {
        let mut v: Vec<_> = self
            .lists
            .iter()
            .filter(|(s, _)| s.applies(target))
            .collect();
        v.sort_by_key(|(s, _)| s.rank());
        v
    }

    /// Every entry of every list, each once (the build.rs API's constants).
    pub fn every(&self) -> Vec<EntryPattern> {
        let mut out: Vec<EntryPattern> = Vec::new();
        for p in self.lists.iter().flat_map(|(_, l)| l) {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }

    /// Whether any entry is a glob or demangled pattern (not an exact name).
    pub fn has_patterns(&self) -> bool {
        self.lists
            .iter()
            .flat_map(|(_, l)| l)
            .any(|e| !e.is_exact())
    }

    /// For the cross-target audit of one object for `target`: per applying scope with
    /// patterns, the symbols of `exports` that scope's patterns match, less those a narrower
    /// applying list names (a symbol listed for `nvidia` is NVIDIA's own, so `all`'s `*` on
    /// NVIDIA does not count it against AMD).
    pub fn matched_by_scope<'a>(
        &self,
        target: &Target,
        exports: impl IntoIterator<Item = &'a String> + Clone,
    ) -> Vec<(EntryScope, BTreeSet<String>)> {
        let lists = self.applying(target);
        let mut out = Vec::new();
        for (scope, list) in &lists {
            let patterns: Vec<EntryPattern> =
                list.iter().filter(|e| !e.is_exact()).cloned().collect();
            if patterns.is_empty() {
                continue;
            }
            let narrower: BTreeSet<String> = lists
                .iter()
                .filter(|(s, _)| s.rank() > scope.rank())
                .flat_map(|(_, l)| concrete(l, exports.clone()))
                .collect();
            let matched = concrete(&patterns, exports.clone())
                .into_iter()
                .filter(|s| !narrower.contains(s))
                .collect();
            out.push((*scope, matched));
        }
        out
    }
}

/// Why an `entries` item is not a pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("entry `{0}`: empty")]
    Empty(String),
    #[error("entry pattern `{0}`: `[` without a closing `]`")]
    UnclosedClass(String),
    #[error("entry pattern `{0}`: ends in a lone `\\`")]
    TrailingEscape(String),
}

/// How an entry is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternKind {
    /// A symbol name, as exported: the object must export it.
    Exact,
    /// A glob over the exported symbol name.
    Glob,
    /// A glob over the demangled name (no parameters) or signature (pattern with `(`).
    Demangled,
}

/// One `entries` item, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPattern {
    text: String,
    kind: PatternKind,
    tokens: Vec<Token>,
    /// A demangled pattern with a parameter list: matched against the signature.
    with_params: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    Any,
    AnyRun,
    Class {
        negated: bool,
        items: Vec<(char, char)>,
    },
}

impl fmt::Display for EntryPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl EntryPattern {
    pub fn parse(text: &str) -> Result<EntryPattern, PatternError> {
        if text.trim().is_empty() {
            return Err(PatternError::Empty(text.to_string()));
        }
        let demangled = text.contains('<') || text.contains("::") || text.contains('(');
        let globby = text.contains(['*', '?', '[', '\\']);
        let kind = match (demangled, globby) {
            (true, _) => PatternKind::Demangled,
            (false, true) => PatternKind::Glob,
            (false, false) => PatternKind::Exact,
        };
        let source = match kind {
            PatternKind::Demangled => normalize(text),
            _ => text.to_string(),
        };
        Ok(EntryPattern {
            text: text.to_string(),
            kind,
            tokens: tokens(text, &source)?,
            with_params: text.contains('('),
        })
    }

    /// The entry as written in Kbuild.toml.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn kind(&self) -> PatternKind {
        self.kind
    }

    /// An exact name (today's meaning: the object must export exactly this symbol).
    pub fn is_exact(&self) -> bool {
        self.kind == PatternKind::Exact
    }

    /// Whether the exported `symbol` matches.
    pub fn matches(&self, symbol: &Exported) -> bool {
        match self.kind {
            PatternKind::Exact => symbol.name == self.text,
            PatternKind::Glob => glob(&self.tokens, &symbol.name.chars().collect::<Vec<_>>()),
            PatternKind::Demangled => {
                let plain = normalize(&symbol.name);
                let candidates: Vec<&str> = match (&symbol.name_only, self.with_params) {
                    // Not mangled (extern "C"): the name is its own demangled form.
                    (None, _) => vec![plain.as_str()],
                    (Some(name), false) => vec![name.as_str()],
                    // With parameters: the signature, or the whole thing with its return type.
                    (Some(_), true) => [&symbol.signature, &symbol.full]
                        .into_iter()
                        .filter_map(|f| f.as_deref())
                        .collect(),
                };
                candidates
                    .iter()
                    .any(|c| glob(&self.tokens, &c.chars().collect::<Vec<_>>()))
            }
        }
    }
}

/// An exported symbol with its demangled forms (whitespace normalised), computed once.
#[derive(Debug, Clone)]
pub struct Exported {
    pub name: String,
    /// `void scale<float>(float*, int)`, as c++filt shows it (not normalised).
    pub demangled: Option<String>,
    full: Option<String>,
    signature: Option<String>,
    name_only: Option<String>,
}

impl Exported {
    pub fn new(name: &str) -> Exported {
        let demangled = demangle::demangle_symbol(name);
        Exported {
            name: name.to_string(),
            full: demangled.as_deref().map(normalize),
            signature: demangle::demangle_signature(name).as_deref().map(normalize),
            name_only: demangle::demangle_name(name).as_deref().map(normalize),
            demangled,
        }
    }

    /// `scale<float>` (the demangled name without return type and parameters), for
    /// `kbuild init`: None for a name that is not mangled.
    pub fn demangled_name(&self) -> Option<String> {
        demangle::demangle_name(&self.name)
    }
}

/// `name (demangled)` or `name`, for messages.
pub fn shown(e: &Exported) -> String {
    match &e.demangled {
        Some(d) => format!("{} ({d})", e.name),
        None => e.name.clone(),
    }
}

/// What a kernel's entries make of one object's exports.
#[derive(Debug, Clone, Default)]
pub struct Resolution {
    /// Exact entries the object does not export.
    pub missing: Vec<String>,
    /// Patterns that match no exported symbol.
    pub unmatched: Vec<String>,
    /// The exported symbols the non-exact patterns match (what the cross-target audit compares).
    pub matched: BTreeSet<String>,
}

/// Resolve `patterns` against the `exported` symbols of one object.
pub fn resolve(patterns: &[EntryPattern], exported: &[Exported]) -> Resolution {
    let mut r = Resolution::default();
    for p in patterns {
        let hits: Vec<&Exported> = exported.iter().filter(|e| p.matches(e)).collect();
        if hits.is_empty() {
            if p.is_exact() {
                r.missing.push(p.text.clone());
            } else {
                r.unmatched.push(p.text.clone());
            }
        } else if !p.is_exact() {
            r.matched.extend(hits.iter().map(|e| e.name.clone()));
        }
    }
    r
}

/// The concrete symbols `patterns` name among `exports`, in the entries' order (exact names
/// as given; each pattern's matches as exported, sorted), each once: what a kernel's entries
/// mean for built objects.
pub fn concrete<'a>(
    patterns: &[EntryPattern],
    exports: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    let names: BTreeSet<&String> = exports.into_iter().collect();
    let exported: Vec<Exported> = names.into_iter().map(|n| Exported::new(n)).collect();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for p in patterns {
        let hits: Vec<String> = if p.is_exact() {
            vec![p.text.clone()]
        } else {
            exported
                .iter()
                .filter(|e| p.matches(e))
                .map(|e| e.name.clone())
                .collect()
        };
        for h in hits {
            if seen.insert(h.clone()) {
                out.push(h);
            }
        }
    }
    out
}

/// For one kernel (and variant): the symbols the patterns match on each target. Returns,
/// when the targets disagree, each symbol some target lacks with the targets that export it
/// and those that do not.
pub fn disagreements(
    per_target: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<(String, Vec<String>, Vec<String>)> {
    let all: BTreeSet<&String> = per_target.values().flatten().collect();
    let mut out = Vec::new();
    for sym in all {
        let (has, lacks): (Vec<&String>, Vec<&String>) = per_target
            .keys()
            .partition(|t| per_target[*t].contains(sym));
        if !lacks.is_empty() {
            out.push((
                sym.clone(),
                has.into_iter().cloned().collect(),
                lacks.into_iter().cloned().collect(),
            ));
        }
    }
    out
}

/// Whether a symbol is one of CUDA's own libraries' kernels (CUB, Thrust, libcu++), which a
/// file instantiates through their templates and their host code launches.
pub fn is_cccl_kernel(symbol: &str) -> bool {
    ["_ZN3cub", "_ZN6thrust", "_ZN4cuda"]
        .iter()
        .any(|p| symbol.starts_with(p))
}

/// A symbol as the cross-target audit compares it. Two parts of a symbol name the compile, not
/// the kernel, and are compared as one: CUB's and Thrust's inline namespace, named after the
/// CCCL version and the target (`cub::_V_300500_SM_890`), and nvcc's name for an internal-
/// linkage entity (`_INTERNAL_867974e3_6_cpy_cu_f459b794_3316`, whose last number differs
/// from one compile of a file to the next).
pub fn cross_target_key(symbol: &str) -> String {
    // Itanium mangling writes it `<len><name>`: `16_V_300500_SM_890`.
    let is_abi_namespace = |name: &str| {
        // CCCL 3.5 writes `_V_300500_SM_890`, CCCL 3.0 `CUB_300001_SM_890` / `THRUST_…`.
        let Some(rest) = ["_V_", "CUB_", "THRUST_"]
            .iter()
            .find_map(|p| name.strip_prefix(p))
        else {
            return false;
        };
        let mut parts = rest.split("_SM_");
        let version = parts.next().unwrap_or_default();
        let tags: Vec<&str> = parts.collect();
        let number = |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit());
        number(version) && !tags.is_empty() && tags.iter().all(|t| number(t))
    };
    let b = symbol.as_bytes();
    let mut out = String::with_capacity(symbol.len());
    let mut i = 0;
    while i < b.len() {
        let starts_number = b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_digit());
        if starts_number {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let len: Option<usize> = symbol[i..j].parse().ok();
            if let Some(name) = len.and_then(|n| symbol.get(j..j.checked_add(n)?)) {
                if name.starts_with("_INTERNAL_") {
                    out.push_str("_INTERNAL_*");
                    i = j + name.len();
                    continue;
                }
                if is_abi_namespace(name) {
                    let version = name.split("_SM_").next().unwrap_or_default();
                    out.push_str(version);
                    out.push_str("_SM_*");
                    i = j + name.len();
                    continue;
                }
            }
            out.push_str(&symbol[i..j]);
            i = j;
            continue;
        }
        // Symbols are ASCII; anything else is copied whole.
        let c = symbol[i..].chars().next().unwrap_or('?');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Whitespace normalised for matching: runs collapse, and a space survives only between two
/// identifier characters (`unsigned int`), so `kern<float,4>` and `kern<float, 4>` agree.
pub fn normalize(s: &str) -> String {
    let chars: Vec<char> = s.trim().chars().collect();
    let mut out = String::with_capacity(chars.len());
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let before = out.chars().next_back();
            let after = chars.get(j).copied();
            if before.is_some_and(word) && after.is_some_and(word) {
                out.push(' ');
            }
            i = j;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

fn tokens(original: &str, s: &str) -> Result<Vec<Token>, PatternError> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '*' => {
                if out.last() != Some(&Token::AnyRun) {
                    out.push(Token::AnyRun);
                }
            }
            '?' => out.push(Token::Any),
            '\\' => {
                i += 1;
                let c = *chars
                    .get(i)
                    .ok_or_else(|| PatternError::TrailingEscape(original.to_string()))?;
                out.push(Token::Char(c));
            }
            '[' => {
                let mut j = i + 1;
                let negated = matches!(chars.get(j), Some('!' | '^'));
                if negated {
                    j += 1;
                }
                let mut items = Vec::new();
                let mut first = true;
                loop {
                    let Some(&c) = chars.get(j) else {
                        return Err(PatternError::UnclosedClass(original.to_string()));
                    };
                    if c == ']' && !first {
                        break;
                    }
                    first = false;
                    if chars.get(j + 1) == Some(&'-') && chars.get(j + 2).is_some_and(|&e| e != ']')
                    {
                        items.push((c, chars[j + 2]));
                        j += 3;
                    } else {
                        items.push((c, c));
                        j += 1;
                    }
                }
                out.push(Token::Class { negated, items });
                i = j;
            }
            c => out.push(Token::Char(c)),
        }
        i += 1;
    }
    Ok(out)
}

/// Glob match, iterative with one backtrack point per `*` (linear in practice, never
/// exponential).
fn glob(p: &[Token], s: &[char]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        let step = match p.get(pi) {
            Some(Token::AnyRun) => {
                star = Some((pi, si));
                pi += 1;
                continue;
            }
            Some(Token::Any) => true,
            Some(Token::Char(c)) => *c == s[si],
            Some(Token::Class { negated, items }) => {
                items.iter().any(|(a, b)| (*a..=*b).contains(&s[si])) != *negated
            }
            None => false,
        };
        if step {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|t| *t == Token::AnyRun)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27, item 7: a symbol a vendor's list names is that vendor's own, so the `all`
    /// list's pattern does not count it against the other vendor; without the vendor list
    /// the AMD object lacks it and fails alone.
    #[test]
    fn vendor_lists_take_their_symbols_out_of_the_wide_comparison() {
        use crate::audit::cross_target;
        let parse = |l: &[&str]| -> Vec<EntryPattern> {
            l.iter().map(|e| EntryPattern::parse(e).unwrap()).collect()
        };
        let sm89: Vec<String> = vec!["rms_f32".into(), "rms_bf16".into()];
        let gfx: Vec<String> = vec!["rms_f32".into()];
        let compare = |entries: &KernelEntries| -> Vec<(String, String)> {
            let mut per_scope: BTreeMap<String, (EntryScope, BTreeMap<String, BTreeSet<String>>)> =
                BTreeMap::new();
            for (t, exports) in [("sm_89", &sm89), ("gfx1100", &gfx)] {
                for (scope, m) in entries.matched_by_scope(&t.parse().unwrap(), exports) {
                    per_scope
                        .entry(scope.to_string())
                        .or_insert_with(|| (scope, BTreeMap::new()))
                        .1
                        .insert(t.to_string(), m);
                }
            }
            per_scope
                .values()
                .flat_map(|(scope, per_target)| {
                    cross_target("rms", None, scope, &parse(&["*"]), per_target)
                })
                .collect()
        };
        let split = KernelEntries {
            lists: vec![
                (EntryScope::All, parse(&["*"])),
                (EntryScope::Vendor(Vendor::Nvidia), parse(&["*_bf16"])),
            ],
        };
        assert!(compare(&split).is_empty());
        let lacking = compare(&KernelEntries::plain(parse(&["*"])));
        assert_eq!(lacking.len(), 1);
        assert_eq!(lacking[0].0, "gfx1100");
        assert!(
            lacking[0].1.contains(
                "gfx1100 does not export 1 entry that sm_89 exports for entries `*`: `rms_bf16`"
            ),
            "{}",
            lacking[0].1
        );
    }

    fn m(pattern: &str, symbol: &str) -> bool {
        EntryPattern::parse(pattern)
            .unwrap()
            .matches(&Exported::new(symbol))
    }

    #[test]
    fn cccl_kernels_compare_as_one_across_targets() {
        let sm89 = "_ZN3cub16_V_300500_SM_8906detail11EmptyKernelIvEEvv";
        let sm90 = "_ZN3cub16_V_300500_SM_9006detail11EmptyKernelIvEEvv";
        let both = "_ZN3cub23_V_300500_SM_890_SM_9006detail11EmptyKernelIvEEvv";
        assert!(is_cccl_kernel(sm89) && !is_cccl_kernel("_Z10arange_f32Pfiff"));
        assert_eq!(cross_target_key(sm89), cross_target_key(sm90));
        assert_eq!(cross_target_key(sm89), cross_target_key(both));
        // CUDA 13.0's CCCL names it otherwise.
        assert_eq!(
            cross_target_key("_ZN3cub17CUB_300001_SM_8906detail11EmptyKernelIvEEvv"),
            cross_target_key("_ZN3cub17CUB_300001_SM_9006detail11EmptyKernelIvEEvv")
        );
        assert_eq!(
            cross_target_key(sm89),
            "_ZN3cub_V_300500_SM_*6detail11EmptyKernelIvEEvv"
        );
        let internal = |n: u32| {
            format!("_Z10cpy_scalarIXadL_ZN41_INTERNAL_867974e3_6_cpy_cu_f459b794_{n}12cpy_1_scalarIffEEvPKcPcEEEvS3_S4_l")
        };
        assert_eq!(
            cross_target_key(&internal(3316)),
            cross_target_key(&internal(3317))
        );
        assert!(cross_target_key(&internal(3316)).contains("_INTERNAL_*12cpy_1_scalar"));
        // Other symbols are their own key.
        for s in ["_Z10arange_f32Pfiff", "k_V_1", "_Z3f_V_v", "plain"] {
            assert_eq!(cross_target_key(s), s);
        }
    }

    #[test]
    fn exact_glob_and_demangled() {
        assert!(m("fast_add", "fast_add"));
        assert!(!m("fast_add", "fast_addx"));
        assert!(m("fast_*", "fast_add"));
        assert!(!m("fast_*", "slow_add"));
        assert!(m("f?st_[a-c]dd", "fast_add"));
        assert!(!m("fast_[!a]dd", "fast_add"));
        assert!(m("*", "_Z5scaleIfEvPfi"));
        assert!(m("_Z5scale*", "_Z5scaleIfEvPfi"));
        assert!(m("scale<*>", "_Z5scaleIfEvPfi"));
        assert!(m("scale<float>", "_Z5scaleIfEvPfi"));
        assert!(!m("scale<int>", "_Z5scaleIfEvPfi"));
        assert!(m("scale<float>(float*, int)", "_Z5scaleIfEvPfi"));
        assert!(m("scale<float>(float *,int)", "_Z5scaleIfEvPfi"));
        assert!(m("void scale<*>(*)", "_Z5scaleIfEvPfi"));
        assert!(m("ns::kern<float,4>", "_ZN2ns4kernIfLi4EEEvPT_"));
        assert!(m("ns::*", "_ZN2ns4kernIfLi4EEEvPT_"));
        assert!(m("ns::kern<float, 4>", "_ZN2ns4kernIfLi4EEEvPT_"));
        // An extern "C" kernel is its own demangled name.
        assert!(!m("ns::*", "plain"));
        assert!(EntryPattern::parse("fast_*").unwrap().kind() == PatternKind::Glob);
        assert!(EntryPattern::parse("fast").unwrap().is_exact());
        assert_eq!(
            EntryPattern::parse("a[b").unwrap_err().to_string(),
            "entry pattern `a[b`: `[` without a closing `]`"
        );
        assert!(EntryPattern::parse(" ").is_err());
        assert!(m("a\\*", "a*") && !m("a\\*", "ab"));
    }

    #[test]
    fn normalises_whitespace() {
        assert_eq!(normalize(" kern< float , 4 > "), "kern<float,4>");
        assert_eq!(normalize("f(unsigned  int)"), "f(unsigned int)");
    }

    #[test]
    fn glob_is_not_exponential() {
        let p = EntryPattern::parse(&"*a".repeat(30)).unwrap();
        assert!(!p.matches(&Exported::new(&"a".repeat(29))));
    }

    #[test]
    fn resolve_and_disagree() {
        let exported: Vec<Exported> = ["fast_a", "fast_b", "slow"]
            .iter()
            .map(|n| Exported::new(n))
            .collect();
        let pats: Vec<EntryPattern> = ["fast_*", "slow", "none_*", "gone"]
            .iter()
            .map(|p| EntryPattern::parse(p).unwrap())
            .collect();
        let r = resolve(&pats, &exported);
        assert_eq!(r.missing, ["gone"]);
        assert_eq!(r.unmatched, ["none_*"]);
        assert_eq!(r.matched.iter().collect::<Vec<_>>(), ["fast_a", "fast_b"]);
        let mut per = BTreeMap::new();
        per.insert(
            "sm_89".to_string(),
            BTreeSet::from(["a".to_string(), "b".to_string()]),
        );
        per.insert("gfx1100".to_string(), BTreeSet::from(["a".to_string()]));
        assert_eq!(
            disagreements(&per),
            [(
                "b".to_string(),
                vec!["sm_89".to_string()],
                vec!["gfx1100".to_string()]
            )]
        );
    }
}
