//! How `manifest.json` is laid out: serde_json's pretty form, except that each launch
//! parameter (an element of an `objects[].params.<entry>` list) is written on one line.
//!
//! A parameter has up to eight short fields; pretty-printed one per line, a kernel with a dozen
//! parameters (or an AMDGPU one with its fifteen hidden arguments) would take more lines than
//! the rest of its record, in manifests of ten thousand entries and more.

use std::io;

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter};

/// One open array or object, and the object key it was opened under.
struct Frame {
    array: bool,
    key: Option<Vec<u8>>,
}

/// Pretty, with the objects of arrays that sit under a `params` key's map on one line.
struct ParamLines {
    pretty: PrettyFormatter<'static>,
    stack: Vec<Frame>,
    key: Vec<u8>,
    in_key: bool,
    /// Open containers written on one line (the innermost ones).
    compact: usize,
}

impl ParamLines {
    fn new() -> Self {
        ParamLines {
            pretty: PrettyFormatter::new(),
            stack: Vec::new(),
            key: Vec::new(),
            in_key: false,
            compact: 0,
        }
    }

    /// Opens a container; true when it is written on one line.
    fn open(&mut self, array: bool) -> bool {
        let under = match self.stack.last() {
            Some(f) if !f.array => Some(self.key.clone()),
            _ => None,
        };
        let n = self.stack.len();
        let param = !array
            && n >= 2
            && self.stack[n - 1].array
            && !self.stack[n - 2].array
            && self.stack[n - 2].key.as_deref() == Some(b"params".as_slice());
        self.stack.push(Frame { array, key: under });
        if self.compact > 0 || param {
            self.compact += 1;
            true
        } else {
            false
        }
    }

    /// Closes a container; true when it was written on one line.
    fn close(&mut self) -> bool {
        self.stack.pop();
        if self.compact > 0 {
            self.compact -= 1;
            true
        } else {
            false
        }
    }
}

impl Formatter for ParamLines {
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.open(true) {
            w.write_all(b"[")
        } else {
            self.pretty.begin_array(w)
        }
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.close() {
            w.write_all(b"]")
        } else {
            self.pretty.end_array(w)
        }
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if self.compact > 0 {
            if first {
                Ok(())
            } else {
                w.write_all(b", ")
            }
        } else {
            self.pretty.begin_array_value(w, first)
        }
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 {
            Ok(())
        } else {
            self.pretty.end_array_value(w)
        }
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.open(false) {
            w.write_all(b"{")
        } else {
            self.pretty.begin_object(w)
        }
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.close() {
            w.write_all(b"}")
        } else {
            self.pretty.end_object(w)
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.in_key = true;
        self.key.clear();
        if self.compact > 0 {
            if first {
                Ok(())
            } else {
                w.write_all(b", ")
            }
        } else {
            self.pretty.begin_object_key(w, first)
        }
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.in_key = false;
        Ok(())
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        if self.in_key {
            self.key.extend_from_slice(fragment.as_bytes());
        }
        w.write_all(fragment.as_bytes())
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 {
            w.write_all(b": ")
        } else {
            self.pretty.begin_object_value(w)
        }
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        if self.compact > 0 {
            Ok(())
        } else {
            self.pretty.end_object_value(w)
        }
    }
}

/// `value` as the manifest writes it; `None` only if serde fails (it does not on a manifest:
/// every map key is a string).
pub(crate) fn to_string<T: Serialize>(value: &T) -> Option<String> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, ParamLines::new());
    value.serialize(&mut ser).ok()?;
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_one_per_line_and_the_rest_is_pretty() {
        let v = serde_json::json!({
            "objects": [{
                "entries": ["k"],
                "params": {"k": [{"index": 0, "size": 8}, {"index": 1, "size": 4}]},
                "resources": {"k": {"occupancy": {"value": 1}}}
            }],
            "params": [{"not": "a manifest parameter"}]
        });
        let s = to_string(&v).unwrap();
        assert!(
            s.contains(
                "\"k\": [\n          {\"index\": 0, \"size\": 8},\n          {\"index\": 1, \"size\": 4}\n        ]"
            ),
            "{s}"
        );
        assert!(s.contains("\"occupancy\": {\n"), "{s}");
        assert!(s.contains("\"params\": [\n    {\n      \"not\""), "{s}");
        let back: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v);
        // Without parameters it is serde_json's pretty form, byte for byte.
        let plain = serde_json::json!({"a": [1, {"b": [2]}], "c": {}});
        assert_eq!(
            to_string(&plain).unwrap(),
            serde_json::to_string_pretty(&plain).unwrap()
        );
    }
}
