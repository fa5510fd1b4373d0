//! Lists in messages: a few names and how many more, so one error stays one readable line
//! however many names it could list.

/// `a, b, c, 45 more`: the first `shown` items, then the count of the rest.
pub fn short_list<S: AsRef<str>>(items: &[S], shown: usize) -> String {
    let mut names: Vec<&str> = items.iter().take(shown).map(AsRef::as_ref).collect();
    let rest = items.len().saturating_sub(shown);
    let more = format!("{rest} more");
    if rest > 0 {
        names.push(&more);
    }
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_few_and_counts_the_rest() {
        let many: Vec<String> = (0..48).map(|i| format!("k{i}")).collect();
        assert_eq!(short_list(&many, 3), "k0, k1, k2, 45 more");
        assert_eq!(short_list(&["a", "b"], 3), "a, b");
        assert_eq!(short_list::<&str>(&[], 3), "");
    }
}
