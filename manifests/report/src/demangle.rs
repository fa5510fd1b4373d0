//! Demangled names for C++ kernels in reports, through the LLVM or GNU demangler.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};

use crate::diff::Snapshot;

/// Demangled forms of the Itanium-mangled (`_Z...`) names among `names`, through
/// `llvm-cxxfilt-19` / `llvm-cxxfilt` / `c++filt`; empty when none is mangled or no demangler
/// runs (names then show as they are).
pub fn demangle<'a>(names: impl IntoIterator<Item = &'a String>) -> BTreeMap<String, String> {
    let mangled: BTreeSet<&String> = names.into_iter().filter(|n| n.starts_with("_Z")).collect();
    if mangled.is_empty() {
        return BTreeMap::new();
    }
    let input: String = mangled.iter().map(|n| format!("{n}\n")).collect();
    for tool in ["llvm-cxxfilt-19", "llvm-cxxfilt", "c++filt"] {
        let Ok(mut child) = Command::new(tool)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        else {
            continue;
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        let Ok(out) = child.wait_with_output() else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        if !out.status.success() || lines.len() != mangled.len() {
            continue;
        }
        return mangled
            .iter()
            .zip(lines)
            .filter(|(m, d)| m.as_str() != *d)
            .map(|(m, d)| ((*m).clone(), d.to_string()))
            .collect();
    }
    BTreeMap::new()
}

/// [`demangle`] over every entry name of `snaps` (both sides of a diff).
pub fn demangle_snapshots(snaps: &[&Snapshot]) -> BTreeMap<String, String> {
    demangle(
        snaps
            .iter()
            .flat_map(|s| s.objects.iter())
            .flat_map(|o| o.resources.keys()),
    )
}
