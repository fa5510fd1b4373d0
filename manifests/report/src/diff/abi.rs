//! Launch-ABI changes: how a kernel's caller-visible parameters differ between two sides (one
//! added, removed, resized, moved, or turned from pointer to value), from the manifests'
//! `params`.

use kbuild_manifest::params::{Param, ParamKind};

/// How one launch parameter changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamChangeKind {
    Added,
    Removed,
    /// Another size (it may have moved too).
    Resized,
    /// Another offset, same size.
    Moved,
    /// Pointer on one side, value on the other (same offset and size).
    Rekinded,
}

impl ParamChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamChangeKind::Added => "added",
            ParamChangeKind::Removed => "removed",
            ParamChangeKind::Resized => "resized",
            ParamChangeKind::Moved => "moved",
            ParamChangeKind::Rekinded => "rekinded",
        }
    }
}

/// A launch parameter that differs between base and head: the `index`-th caller-visible one.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamChange {
    pub index: u32,
    pub kind: ParamChangeKind,
    pub base: Option<Param>,
    pub head: Option<Param>,
}

impl ParamChange {
    /// `param 2 resized 4 → 8 B`, `param 3 added (val@24:4)`, for people.
    pub fn describe(&self) -> String {
        let at = |p: &Param| format!("{}@{}:{}", kind_label(p.kind), p.offset, p.size);
        match (self.kind, &self.base, &self.head) {
            (ParamChangeKind::Added, _, Some(h)) => {
                format!("param {} added ({})", self.index, at(h))
            }
            (ParamChangeKind::Removed, Some(b), _) => {
                format!("param {} removed ({})", self.index, at(b))
            }
            (ParamChangeKind::Resized, Some(b), Some(h)) if b.offset != h.offset => format!(
                "param {} resized {} → {} B and moved {} → {}",
                self.index, b.size, h.size, b.offset, h.offset
            ),
            (ParamChangeKind::Resized, Some(b), Some(h)) => {
                format!("param {} resized {} → {} B", self.index, b.size, h.size)
            }
            (ParamChangeKind::Moved, Some(b), Some(h)) => {
                format!("param {} moved {} → {}", self.index, b.offset, h.offset)
            }
            (ParamChangeKind::Rekinded, Some(b), Some(h)) => format!(
                "param {} {} → {}",
                self.index,
                b.kind.as_str(),
                h.kind.as_str()
            ),
            (k, _, _) => format!("param {} {}", self.index, k.as_str()),
        }
    }
}

/// `ptr`, `val` or `?`.
pub fn kind_label(k: ParamKind) -> &'static str {
    match k {
        ParamKind::Pointer => "ptr",
        ParamKind::Value => "val",
        ParamKind::Unknown => "?",
    }
}

/// The launch-parameter changes between two lists: caller-visible parameters compared by
/// position; hidden ones (the runtime's), names, types and alignment are not compared, nor a
/// kind one side does not know.
pub fn param_changes(base: &[Param], head: &[Param]) -> Vec<ParamChange> {
    let b: Vec<&Param> = base.iter().filter(|p| !p.hidden).collect();
    let h: Vec<&Param> = head.iter().filter(|p| !p.hidden).collect();
    let mut out = Vec::new();
    for i in 0..b.len().max(h.len()) {
        let (x, y) = (b.get(i).copied(), h.get(i).copied());
        let kind = match (x, y) {
            (None, Some(_)) => ParamChangeKind::Added,
            (Some(_), None) => ParamChangeKind::Removed,
            (Some(x), Some(y)) if x.size != y.size => ParamChangeKind::Resized,
            (Some(x), Some(y)) if x.offset != y.offset => ParamChangeKind::Moved,
            (Some(x), Some(y))
                if x.kind != y.kind
                    && x.kind != ParamKind::Unknown
                    && y.kind != ParamKind::Unknown =>
            {
                ParamChangeKind::Rekinded
            }
            _ => continue,
        };
        out.push(ParamChange {
            index: u32::try_from(i).unwrap_or(u32::MAX),
            kind,
            base: x.cloned(),
            head: y.cloned(),
        });
    }
    out
}
