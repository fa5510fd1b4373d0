//! PTX text: ISA version, target, address size, `.entry` names and their parameter lists.
//!
//! The answer must match what `ptxas` accepts: `.version X.Y`, `.target sm_XY[a|f][, opts]`,
//! and kernels defined by `.entry NAME` (declarations `.extern .entry` are not kernels of
//! this module). Comments (`//`, `/* */`) and string literals are skipped.

use std::collections::BTreeMap;

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
    /// Per `.entry` name, its `.param` list in order; an entry whose list this reader does not
    /// understand (a type it does not know, a malformed declaration) has none.
    pub params: BTreeMap<String, Vec<PtxParam>>,
}

/// One `.param` of a kernel's parameter list, laid out as the PTX ISA says ptxas lays out the
/// kernel parameter block: each at the next multiple of its alignment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PtxParam {
    /// As written (`k_param_0`).
    pub name: String,
    /// The fundamental type without its dot: `u64`, `f32`, `b8`.
    pub ty: String,
    /// Bytes: the type's size times the array length (`.b8 name[16]`).
    pub size: u64,
    /// `.align N` when written before the name (not the pointee alignment after `.ptr`), else
    /// the type's size.
    pub align: u64,
    /// Byte offset in the parameter block.
    pub offset: u64,
    /// Declared `.ptr` (with or without a state space). nvcc 13 does not write it: its
    /// pointers are plain `.u64`.
    pub ptr: bool,
    /// Declared as an array (`name[K]`): an aggregate passed by value.
    pub array: bool,
}

/// Bytes of a PTX fundamental type (PTX ISA "Fundamental Types"); `None` for others.
fn type_size(ty: &[u8]) -> Option<u64> {
    Some(match ty {
        b".b8" | b".s8" | b".u8" => 1,
        b".b16" | b".s16" | b".u16" | b".f16" | b".bf16" => 2,
        b".b32" | b".s32" | b".u32" | b".f32" | b".f16x2" | b".bf16x2" => 4,
        b".b64" | b".s64" | b".u64" | b".f64" => 8,
        b".b128" => 16,
        _ => return None,
    })
}

/// The tokens of one declaration (up to `,` or `)`), as a parameter; `None` if not one.
fn param_of(decl: &[&[u8]], offset: u64) -> Option<PtxParam> {
    let mut it = decl.iter().copied().peekable();
    if it.next()? != b".param" {
        return None;
    }
    let (mut ty, mut size, mut align, mut ptr, mut name) = (None, None, None, false, None);
    let mut count: u64 = 1;
    let mut array = false;
    while let Some(t) = it.next() {
        if t.starts_with(b".ptr") {
            ptr = true;
        } else if t == b".align" {
            let n: u64 = std::str::from_utf8(it.next()?).ok()?.parse().ok()?;
            // After `.ptr` the alignment is the pointee's (PTX ISA, kernel parameter
            // attribute `.ptr`), not the parameter's.
            if !ptr {
                align = Some(n);
            }
        } else if let Some(n) = type_size(t) {
            ty = Some(word(&t[1..]));
            size = Some(n);
        } else if matches!(t, b".global" | b".const" | b".shared" | b".local") {
            // The state space of a `.ptr`.
        } else if t == b"[" {
            let n: u64 = std::str::from_utf8(it.next()?).ok()?.parse().ok()?;
            if it.next()? != b"]" {
                return None;
            }
            count = count.checked_mul(n)?;
            array = true;
        } else if !t.starts_with(b".") && name.is_none() {
            name = Some(word(t));
        } else {
            return None;
        }
    }
    let size = size?.checked_mul(count)?;
    let elem = size / count.max(1);
    let align = align.unwrap_or(elem).max(1);
    if !align.is_power_of_two() {
        return None;
    }
    let offset = offset.checked_add(align - 1)? & !(align - 1);
    Some(PtxParam {
        name: name?,
        ty: ty?,
        size,
        align,
        offset,
        ptr,
        array,
    })
}

/// Reads `( .param ..., .param ... )` after an entry's name; `None` when it is not a list
/// this reader understands (the tokens up to its `)` are consumed either way).
fn param_list<'a>(toks: &mut std::iter::Peekable<Tokens<'a>>) -> Option<Vec<PtxParam>> {
    if toks.peek().map(|(_, t)| *t) != Some(b"(") {
        return Some(Vec::new());
    }
    toks.next();
    let mut out = Vec::new();
    let mut ok = true;
    let mut decl: Vec<&[u8]> = Vec::new();
    let mut end = 0u64;
    loop {
        let (_, t) = toks.next()?;
        if t == b"," || t == b")" {
            if !decl.is_empty() {
                match param_of(&decl, end) {
                    Some(p) if ok => {
                        end = p.offset.saturating_add(p.size);
                        out.push(p);
                    }
                    _ => ok = false,
                }
            } else if t == b"," {
                ok = false;
            }
            decl.clear();
            if t == b")" {
                break;
            }
        } else if matches!(t, b"{" | b"}" | b";" | b"(") {
            return None;
        } else {
            decl.push(t);
        }
    }
    ok.then_some(out)
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
    let mut params = BTreeMap::new();
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
                    let name = word(name);
                    if let Some(list) = param_list(&mut toks) {
                        params.insert(name.clone(), list);
                    }
                    entries.push(name);
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
        params,
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
        assert_eq!(m.params["k1"], vec![]);
        assert_eq!(m.params["k2"][0].size, 8);
    }

    #[test]
    fn lays_out_parameters_as_ptxas_does() {
        let ptx = b".version 9.5\n.target sm_90\n.address_size 64\n\
            .visible .entry k(\n\t.param .u64 k_param_0,\n\t.param .u32 k_param_1,\n\
            \t.param .align 8 .b8 k_param_2[24],\n\t.param .u8 k_param_3,\n\
            \t.param .u64 .ptr .global .align 16 k_param_4,\n\t.param .f16 k_param_5\n)\n{ ret; }\n\
            .entry odd(.param .texref t) { ret; }\n.entry broken(.param .u32 a,, .param .u32 b) { ret; }";
        let m = read_ptx(ptx).unwrap();
        let got: Vec<(u64, u64, u64, bool, bool)> = m.params["k"]
            .iter()
            .map(|p| (p.offset, p.size, p.align, p.ptr, p.array))
            .collect();
        assert_eq!(
            got,
            [
                (0, 8, 8, false, false),
                (8, 4, 4, false, false),
                (16, 24, 8, false, true),
                (40, 1, 1, false, false),
                (48, 8, 8, true, false),
                (56, 2, 2, false, false),
            ]
        );
        assert_eq!(m.params["k"][2].ty, "b8");
        assert_eq!(m.params["k"][4].name, "k_param_4");
        assert!(!m.params.contains_key("odd") && !m.params.contains_key("broken"));
        assert_eq!(m.entries, ["broken", "k", "odd"]);
        // A list that never closes is no list; the module still reads.
        let m = read_ptx(b".version 9.5\n.target sm_90\n.entry k(.param .u32 a").unwrap();
        assert!(m.params.is_empty());
    }
}
