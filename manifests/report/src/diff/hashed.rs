//! Entry names that carry a compiler-made hash. nvcc names an anonymous namespace
//! `_GLOBAL__N__e9d1dda2_8_kernel_cu_5b2fa6d1` and a TU-local symbol `_INTERNAL_<hash>_…`, the
//! hashes taken from the translation unit's contents: a comment-only edit renames every such
//! kernel. A diff matches them by [`unhashed`], the name with those hashes blanked.

/// Where a compiler-made identifier starts in a mangled (or plain) symbol.
const MARKERS: &[&str] = &["_GLOBAL__N_", "_INTERNAL_"];

/// The shortest run of hex digits taken for a hash (nvcc's are 8).
const MIN_HASH_DIGITS: usize = 8;

/// `symbol` with the hashes of its compiler-made identifiers replaced by `#` (and their
/// Itanium length prefixes dropped, since the length may change with the hash); `None` when
/// it has none. Two symbols with the same result differ in those hashes only.
pub fn unhashed(symbol: &str) -> Option<String> {
    let mut out = String::with_capacity(symbol.len());
    let mut rest = symbol;
    let mut changed = false;
    while let Some((at, marker)) = MARKERS
        .iter()
        .filter_map(|m| rest.find(m).map(|at| (at, *m)))
        .min_by_key(|(at, _)| *at)
    {
        // An Itanium `<source-name>` is `<length><identifier>`: the digits just before the
        // marker bound the identifier; without them it runs to the end.
        let digits = rest[..at]
            .bytes()
            .rev()
            .take_while(u8::is_ascii_digit)
            .count();
        let end = rest[at - digits..at]
            .parse::<usize>()
            .ok()
            .and_then(|len| at.checked_add(len))
            .filter(|end| *end <= rest.len() && rest.is_char_boundary(*end))
            .unwrap_or(rest.len());
        let ident = &rest[at..end];
        let blanked: Vec<&str> = ident
            .split('_')
            .map(|token| {
                if token.len() >= MIN_HASH_DIGITS && token.bytes().all(|b| b.is_ascii_hexdigit()) {
                    "#"
                } else {
                    token
                }
            })
            .collect();
        let blanked = blanked.join("_");
        if blanked != ident {
            changed = true;
            out.push_str(&rest[..at - digits]);
            out.push_str(&blanked);
        } else {
            out.push_str(&rest[..end.max(at + marker.len())]);
        }
        rest = &rest[end.max(at + marker.len())..];
    }
    out.push_str(rest);
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_of_anonymous_namespaces_and_internal_names_are_blanked() {
        let a = "_ZN41_GLOBAL__N__e9d1dda2_8_kernel_cu_5b2fa6d16reduceEPfi";
        let b = "_ZN41_GLOBAL__N__0c3a77f1_8_kernel_cu_91d2e0aa6reduceEPfi";
        assert_eq!(
            unhashed(a).as_deref(),
            Some("_ZN_GLOBAL__N__#_8_kernel_cu_#6reduceEPfi")
        );
        assert_eq!(unhashed(a), unhashed(b));
        // Another kernel of the same namespace stays apart.
        let c = "_ZN41_GLOBAL__N__0c3a77f1_8_kernel_cu_91d2e0aa6gatherEPfi";
        assert_ne!(unhashed(a), unhashed(c));
        let i = "_ZL41_INTERNAL_1e9e5db5_11_kernels_cu_b4e0f94f7scale_kPf";
        let j = "_ZL41_INTERNAL_77aa00ff_11_kernels_cu_00ff00ff7scale_kPf";
        assert_eq!(unhashed(i), unhashed(j));
        assert!(unhashed(i).is_some_and(|s| !s.contains("1e9e5db5")));
    }

    #[test]
    fn names_without_a_compiler_made_hash_are_left_alone() {
        for s in [
            "_Z8scale_byILi4EEvPf",
            "tile_spill",
            "_GLOBAL__N_",
            "_INTERNAL_short_1",
            "9_INTERNAL_",
            "",
            "é_GLOBAL__N_é",
        ] {
            assert_eq!(unhashed(s), None, "{s}");
        }
        // A length prefix past the end or mid-character is ignored, not a panic.
        assert!(unhashed("999_GLOBAL__N__e9d1dda2_x").is_some());
        assert!(unhashed("11_INTERNAL_é_deadbeef").is_some());
    }
}
