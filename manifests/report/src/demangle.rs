//! Demangled names of C++ kernels (Itanium ABI, the one nvcc and clang use), in-process
//! through `cpp_demangle`: for reports, for the build's entry patterns and for `kbuild init`.
//! A name that is not mangled, or that does not demangle, has no demangled form.

use std::collections::{BTreeMap, BTreeSet};

use cpp_demangle::{DemangleOptions, ParseOptions, Symbol};

use crate::diff::Snapshot;

/// Nesting bound for hostile names (readers never panic and bound their work by the input).
const RECURSION_LIMIT: u32 = 256;

fn symbol(name: &str) -> Option<Symbol<&[u8]>> {
    if !name.starts_with("_Z") {
        return None;
    }
    let options = ParseOptions::default().recursion_limit(RECURSION_LIMIT);
    Symbol::new_with_options(name.as_bytes(), &options).ok()
}

fn render(name: &str, options: &DemangleOptions) -> Option<String> {
    let text = symbol(name)?.demangle(options).ok()?;
    (text != name && !text.is_empty()).then_some(text)
}

/// The demangled form of an Itanium-mangled name as c++filt shows it
/// (`_Z5scaleIfEvPfi` → `void scale<float>(float*, int)`); None when `name` is not mangled.
pub fn demangle_symbol(name: &str) -> Option<String> {
    render(name, &DemangleOptions::new())
}

/// The demangled name without return type and parameters (`_Z5scaleIfEvPfi` →
/// `scale<float>`, `_ZN2ns4kernIfLi4EEEvPT_` → `ns::kern<float, 4>`).
pub fn demangle_name(name: &str) -> Option<String> {
    render(name, &DemangleOptions::new().no_params().no_return_type())
}

/// The demangled signature without return type (`scale<float>(float*, int)`).
pub fn demangle_signature(name: &str) -> Option<String> {
    render(name, &DemangleOptions::new().no_return_type())
}

/// Demangled forms of the Itanium-mangled (`_Z...`) names among `names`; names that are not
/// mangled, or do not demangle, are left out (they show as they are).
pub fn demangle<'a>(names: impl IntoIterator<Item = &'a String>) -> BTreeMap<String, String> {
    let mangled: BTreeSet<&String> = names.into_iter().filter(|n| n.starts_with("_Z")).collect();
    mangled
        .into_iter()
        .filter_map(|m| demangle_symbol(m).map(|d| (m.clone(), d)))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_templates_and_namespaces() {
        assert_eq!(
            demangle_symbol("_Z5scaleIfEvPfi").as_deref(),
            Some("void scale<float>(float*, int)")
        );
        assert_eq!(
            demangle_name("_Z5scaleIfEvPfi").as_deref(),
            Some("scale<float>")
        );
        assert_eq!(
            demangle_signature("_Z5scaleIfEvPfi").as_deref(),
            Some("scale<float>(float*, int)")
        );
        assert_eq!(
            demangle_name("_ZN2ns4kernIfLi4EEEvPT_").as_deref(),
            Some("ns::kern<float, 4>")
        );
        assert_eq!(demangle_symbol("rmsnorm_f32"), None);
        assert_eq!(demangle_symbol("_Z"), None);
        assert_eq!(demangle_symbol("_Zgarbage!!"), None);
        let deep = format!("_Z{}", "PA".repeat(10_000));
        assert_eq!(demangle_symbol(&deep), None);
    }
}
