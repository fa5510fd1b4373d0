//! What parsing a JSON document into records will cost, estimated in one pass over its bytes
//! before it is parsed. Memory of a parse is not proportional to the text: `""` is 3 bytes
//! of text and a 24-byte `String` in a growing `Vec`; `{}` may become a record of hundreds of
//! bytes. A 6 KB compressed bundle whose manifest held 22 million empty strings cost 2.1 GB.
//! The estimate charges each value what it can cost once parsed, so a caller refuses a
//! document over its budget before any of it is allocated.

// What a value costs at the peak of the costliest reader (`kbuild explain`: the parse, the
// load index built from it, the selection), measured per element with the document's other
// values as small as the parser allows: an empty string in a list of entries 126 bytes, a map
// entry `"k": []` or `"k": ""` 140, a `failed` record 138.
/// Bytes charged per value string.
const STRING: u64 = 130;
/// Per array.
const ARRAY: u64 = 130;
/// Per object (a record, or a map's node).
const OBJECT: u64 = 160;
/// Per number, `true`, `false` or `null`.
const SCALAR: u64 = 16;

/// An upper estimate, in bytes, of the memory that parsing `data` into typed records needs:
/// its length plus a charge per value. Object keys are charged their length only: a record's
/// keys are matched against field names, not kept, and a map key comes with a value that is
/// charged. Linear, allocation-free; a
/// malformed document gets an estimate too (the parser refuses it afterwards).
pub fn estimate(data: &[u8]) -> u64 {
    let mut cost = data.len() as u64;
    let mut i = 0;
    while i < data.len() {
        match data[i] {
            b'"' => {
                // Skip the string; then a ':' after it makes it a key.
                i += 1;
                while i < data.len() && data[i] != b'"' {
                    i += if data[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                let mut j = i;
                while j < data.len() && data[j].is_ascii_whitespace() {
                    j += 1;
                }
                if data.get(j) != Some(&b':') {
                    cost += STRING;
                }
                continue;
            }
            b'[' => cost += ARRAY,
            b'{' => cost += OBJECT,
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                cost += SCALAR;
                while i < data.len() && !matches!(data[i], b',' | b']' | b'}' | b'"') {
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    cost
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_values_not_keys() {
        assert_eq!(estimate(b""), 0);
        assert_eq!(estimate(br#""""#), 2 + STRING);
        assert_eq!(estimate(br#"{"k": 1}"#), 8 + OBJECT + SCALAR);
        let empties = format!("[{}]", vec![r#""""#; 1000].join(","));
        assert_eq!(
            estimate(empties.as_bytes()),
            empties.len() as u64 + ARRAY + 1000 * STRING
        );
        // An escaped quote does not end a string.
        assert_eq!(estimate(br#"["a\"b"]"#), 8 + ARRAY + STRING);
        assert_eq!(
            estimate(br#"[true, null, -1.5e3]"#),
            20 + ARRAY + 3 * SCALAR
        );
    }
}
