//! Demangled names of C++ kernels (Itanium ABI, the one nvcc and clang use), in-process
//! through `cpp_demangle`: for reports, for the build's entry patterns and for `kbuild init`.
//! Pure (names in, names out), so every level above the manifest shares one demangler.
//! A name that is not mangled, or that does not demangle, has no demangled form.

use std::collections::{BTreeMap, BTreeSet};

use cpp_demangle::{DemangleOptions, ParseOptions, Symbol};

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

/// The parameter types of a mangled function's signature, in order, as the demangler writes
/// them (`_Z5scaleIfEvPfi` → `["float*", "int"]`); `None` when `name` is not mangled or the
/// signature has no parameter list. `()` gives no types.
pub fn parameter_types(name: &str) -> Option<Vec<String>> {
    split_parameters(&demangle_signature(name)?)
}

/// The top-level, comma-separated items of a signature's last parenthesised group.
fn split_parameters(signature: &str) -> Option<Vec<String>> {
    let bytes = signature.as_bytes();
    if bytes.last() != Some(&b')') {
        return None;
    }
    // The `(` that opens the last group: scan back, counting brackets of every kind.
    let mut depth = 0i32;
    let mut open = None;
    for (i, &b) in bytes.iter().enumerate().rev() {
        match b {
            b')' | b'>' | b']' => depth += 1,
            b'(' | b'<' | b'[' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = signature.get(open? + 1..signature.len() - 1)?;
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, b) in inner.bytes().enumerate() {
        match b {
            b'(' | b'<' | b'[' => depth += 1,
            b')' | b'>' | b']' => depth -= 1,
            b',' if depth == 0 => {
                out.push(inner.get(start..i)?.trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = inner.get(start..)?.trim();
    if !last.is_empty() || !out.is_empty() {
        out.push(last.to_string());
    }
    Some(out)
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
        assert_eq!(
            parameter_types("_Z5scaleIfEvPfi"),
            Some(vec!["float*".to_string(), "int".to_string()])
        );
        assert_eq!(parameter_types("_Z1kv"), Some(vec![]));
        assert_eq!(parameter_types("rmsnorm_f32"), None);
        assert_eq!(
            split_parameters("k<(char)1, 2>(foo<int, float>, void (*)(int, int), int [4])"),
            Some(vec![
                "foo<int, float>".to_string(),
                "void (*)(int, int)".to_string(),
                "int [4]".to_string()
            ])
        );
        let deep = format!("_Z{}", "PA".repeat(10_000));
        assert_eq!(demangle_symbol(&deep), None);
    }
}
