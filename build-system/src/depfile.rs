//! Make-style dependency files as nvcc (`-MD -MF`) and clang (`-MD -MF`) write them.

use std::path::PathBuf;

/// The prerequisites of a depfile (everything after the first unescaped `:`), in order,
/// without duplicates. Handles `\`-newline continuations, `\ ` escaped spaces and `$$`.
pub fn parse(text: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut cur = String::new();
    let mut seen_colon = false;
    let mut chars = text.chars().peekable();
    let flush = |cur: &mut String, seen_colon: bool, out: &mut Vec<PathBuf>| {
        if seen_colon && !cur.is_empty() {
            let p = PathBuf::from(cur.as_str());
            if !out.contains(&p) {
                out.push(p);
            }
        }
        cur.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.peek() {
                Some('\n') => {
                    chars.next();
                    flush(&mut cur, seen_colon, &mut out);
                }
                Some('\r') => {
                    chars.next();
                    if chars.peek() == Some(&'\n') {
                        chars.next();
                    }
                    flush(&mut cur, seen_colon, &mut out);
                }
                Some(' ') | Some('#') | Some('\\') => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                _ => cur.push('\\'),
            },
            '$' if chars.peek() == Some(&'$') => {
                chars.next();
                cur.push('$');
            }
            ':' if !seen_colon
                && matches!(chars.peek(), Some(' ') | Some('\n') | Some('\t') | None) =>
            {
                seen_colon = true;
                cur.clear();
            }
            ' ' | '\t' | '\n' | '\r' => flush(&mut cur, seen_colon, &mut out),
            _ => cur.push(c),
        }
    }
    flush(&mut cur, seen_colon, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvcc_and_clang_depfiles() {
        let nvcc =
            "a.cubin : a.cu \\\n    /usr/include/stdc-predef.h \\\n    include/kc\\ compat.h\n";
        assert_eq!(
            parse(nvcc),
            [
                PathBuf::from("a.cu"),
                PathBuf::from("/usr/include/stdc-predef.h"),
                PathBuf::from("include/kc compat.h")
            ]
        );
        let clang = "/tmp/x/obj: rms.cu include/kcompat.h \\\n  include/kcompat.h\n";
        assert_eq!(
            parse(clang),
            [PathBuf::from("rms.cu"), PathBuf::from("include/kcompat.h")]
        );
        assert!(parse("").is_empty());
    }
}
