//! PTX text: ISA version, target, address size and `.entry` names.
//!
//! The answer must match what `ptxas` accepts: `.version X.Y`, `.target sm_XY[a|f][, opts]`,
//! and kernels defined by `.entry NAME` (declarations `.extern .entry` are not kernels of
//! this module). Comments (`//`, `/* */`) and string literals are skipped.

use serde::Serialize;

use super::ReadError;

/// A PTX module's header and kernels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PtxModule {
    /// PTX ISA version as written, e.g. "9.5".
    pub version: String,
    pub version_major: u32,
    pub version_minor: u32,
    /// The first `.target` operand as written, e.g. "sm_90", "sm_90a".
    pub target: String,
    /// Further `.target` operands (e.g. "texmode_independent", "debug").
    pub target_options: Vec<String>,
    /// SM number of the target (90 for "sm_90a").
    pub sm: u32,
    pub address_size: Option<u32>,
    /// `.entry` names, sorted and deduplicated.
    pub entries: Vec<String>,
}

/// Bytes of the tokenizer's "word" class: directives, identifiers and numbers.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.')
}

/// A minimal PTX tokenizer: words and single punctuation bytes, comments and strings skipped.
struct Tokens<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = (usize, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let rest = self.data.get(self.pos..)?;
            let &b = rest.first()?;
            if b.is_ascii_whitespace() || b == 0 {
                self.pos += 1;
            } else if rest.starts_with(b"//") {
                let n = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
                self.pos += n;
            } else if rest.starts_with(b"/*") {
                let n = rest
                    .windows(2)
                    .skip(2)
                    .position(|w| w == b"*/")
                    .map_or(rest.len(), |p| p + 4);
                self.pos += n;
            } else if b == b'"' {
                let mut i = 1;
                while let Some(&c) = rest.get(i) {
                    i += if c == b'\\' { 2 } else { 1 };
                    if c == b'"' {
                        break;
                    }
                }
                self.pos += i.min(rest.len());
            } else if is_word(b) {
                let n = rest.iter().position(|&c| !is_word(c)).unwrap_or(rest.len());
                let start = self.pos;
                self.pos += n;
                return Some((start, &rest[..n]));
            } else {
                let start = self.pos;
                self.pos += 1;
                return Some((start, &rest[..1]));
            }
        }
    }
}

/// Does this look like PTX text? (The first token is `.version`.)
pub fn is_ptx(data: &[u8]) -> bool {
    let head = data.get(..data.len().min(64 * 1024)).unwrap_or(data);
    matches!(Tokens { data: head, pos: 0 }.next(), Some((_, b".version")))
}

fn word(t: &[u8]) -> String {
    String::from_utf8_lossy(t).into_owned()
}

/// SM number of a PTX target name: "sm_90a" -> 90, "sm_100f" -> 100.
pub fn sm_of_target(target: &str) -> Option<u32> {
    let digits: String = target
        .strip_prefix("sm_")?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Reads a PTX module.
pub fn read_ptx(data: &[u8]) -> Result<PtxModule, ReadError> {
    let mut toks = Tokens { data, pos: 0 }.peekable();
    let mut version = None;
    let mut targets: Vec<String> = Vec::new();
    let mut address_size = None;
    let mut entries = Vec::new();
    let mut extern_in_statement = false;
    let mut target_offset = 0;
    while let Some((off, t)) = toks.next() {
        match t {
            b";" | b"{" | b"}" => extern_in_statement = false,
            b".extern" => extern_in_statement = true,
            b".version" if version.is_none() => {
                let (voff, v) = toks.next().ok_or_else(|| {
                    ReadError::at("PTX .version", off as u64, "no version number")
                })?;
                version = Some((voff, word(v)));
            }
            b".target" if targets.is_empty() => {
                target_offset = off;
                while let Some((_, v)) = toks.next() {
                    targets.push(word(v));
                    if toks.peek().map(|(_, t)| *t) != Some(b",") {
                        break;
                    }
                    toks.next();
                }
            }
            b".address_size" => {
                address_size = toks
                    .next()
                    .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok());
            }
            b".entry" => {
                let (_, name) = toks
                    .next()
                    .ok_or_else(|| ReadError::at("PTX .entry", off as u64, "no kernel name"))?;
                if !extern_in_statement
                    && name
                        .first()
                        .is_some_and(|c| !c.is_ascii_digit() && *c != b'.')
                {
                    entries.push(word(name));
                }
            }
            _ => {}
        }
    }
    let (voff, version) =
        version.ok_or_else(|| ReadError::at("PTX module", 0, "no `.version` directive"))?;
    let (major, minor) = version
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| {
            ReadError::at(
                "PTX .version",
                voff as u64,
                format!("`{version}` is not MAJOR.MINOR"),
            )
        })?;
    let mut targets = targets.into_iter();
    let target = targets
        .next()
        .ok_or_else(|| ReadError::at("PTX module", 0, "no `.target` directive"))?;
    let sm = sm_of_target(&target).ok_or_else(|| {
        ReadError::at(
            "PTX .target",
            target_offset as u64,
            format!("`{target}` is not an sm_XY target"),
        )
    })?;
    entries.sort();
    entries.dedup();
    Ok(PtxModule {
        version,
        version_major: major,
        version_minor: minor,
        target,
        target_options: targets.collect(),
        sm,
        address_size,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_header_and_entries() {
        let ptx = b"// c\n/* block .entry fake( */\n.version 9.5\n.target sm_90a, debug\n.address_size 64\n\
            .extern .entry ext();\n.visible .entry k2(\n.param .u64 p)\n{ ret; }\n.entry k1() { ret; }\n\
            .global .b8 s[4] = {0}; // .entry commented(\n";
        assert!(is_ptx(ptx));
        let m = read_ptx(ptx).unwrap();
        assert_eq!(m.version, "9.5");
        assert_eq!((m.version_major, m.version_minor), (9, 5));
        assert_eq!(m.target, "sm_90a");
        assert_eq!(m.target_options, vec!["debug"]);
        assert_eq!(m.sm, 90);
        assert_eq!(m.address_size, Some(64));
        assert_eq!(m.entries, vec!["k1", "k2"]);
        assert!(read_ptx(b".target sm_90").is_err());
        assert!(read_ptx(b".version 9.5").is_err());
        assert!(read_ptx(b".version x\n.target sm_90").is_err());
        assert!(!is_ptx(b"\x7fELF"));
    }
}
