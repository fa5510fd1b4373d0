//! Arguments of a caller whose values carry no C type of their own (Python's `int` and
//! `float`, an address) packed for an entry's parameters: each value takes the size the
//! parameter has, range-checked, and one whose kind or C type cannot fit is refused with the
//! launch check's messages ([`LaunchError`]). The Python package packs through this.

use kbuild_manifest::params::{Param, ParamKind};

#[cfg(test)]
use super::check::check_count;
use super::check::describe_param;
use crate::error::LaunchError;

/// One launch argument as an untyped caller has it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LooseArg {
    /// An 8-byte device address (a tensor's `data_ptr()`, a `kbuild.Pointer`).
    Pointer(u64),
    /// An integer: it takes the size of its parameter (an address into a pointer).
    Int(i128),
    /// A floating-point number: an `f32` or `f64` by the size of its parameter.
    Float(f64),
    /// A value of an explicit C type (`ctype`, e.g. `int32_t`, `float`): `bits` in the low
    /// `size` bytes.
    Typed {
        bits: u64,
        size: u64,
        float: bool,
        ctype: &'static str,
    },
}

/// What a parameter's C type says: a floating-point type, an integer, or nothing known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TypeClass {
    Float,
    Integer,
    Unknown,
}

fn type_class(p: &Param) -> TypeClass {
    let Some(t) = p.type_name.as_deref() else {
        return TypeClass::Unknown;
    };
    if t.contains('*') || t.contains('&') {
        return TypeClass::Unknown;
    }
    let t = t.to_ascii_lowercase();
    if ["float", "double", "half", "bf16", "bfloat"]
        .iter()
        .any(|w| t.contains(w))
    {
        TypeClass::Float
    } else if [
        "int", "long", "short", "char", "size_t", "bool", "unsigned", "ptrdiff",
    ]
    .iter()
    .any(|w| t.contains(w))
    {
        TypeClass::Integer
    } else {
        TypeClass::Unknown
    }
}

fn unsigned(p: &Param) -> bool {
    p.type_name
        .as_deref()
        .is_some_and(|t| t.contains("unsigned") || t.starts_with('u') || t.contains("size_t"))
}

/// The 8-byte slot of argument `index` of `kernel` for parameter `p` (a smaller value in its
/// low bytes, as the little-endian targets read it), or why it does not fit.
pub fn pack_arg(kernel: &str, index: usize, arg: LooseArg, p: &Param) -> Result<u64, LaunchError> {
    let size = p.size;
    let class = type_class(p);
    let kernel_s = || kernel.to_string();
    let param = || describe_param(p);
    let size_err = |given: usize| LaunchError::Size {
        kernel: kernel_s(),
        index,
        given,
        expected: size,
        param: param(),
    };
    let type_err = |given: String, expected: &'static str| LaunchError::Type {
        kernel: kernel_s(),
        index,
        given,
        expected,
        param: param(),
    };
    let width_err = |given: &'static str| LaunchError::Width {
        kernel: kernel_s(),
        index,
        given,
        size,
        param: param(),
    };
    match arg {
        LooseArg::Pointer(v) => {
            if size != 8 {
                return Err(size_err(8));
            }
            if p.kind == ParamKind::Value && class != TypeClass::Unknown {
                return Err(LaunchError::Kind {
                    kernel: kernel_s(),
                    index,
                    given: "pointer",
                    expected: "value",
                    param: param(),
                });
            }
            Ok(v)
        }
        LooseArg::Typed {
            bits,
            size: given,
            float,
            ctype,
        } => {
            if given != size {
                return Err(size_err(usize::try_from(given).unwrap_or(usize::MAX)));
            }
            if float && (p.kind == ParamKind::Pointer || class == TypeClass::Integer) {
                let expected = if p.kind == ParamKind::Pointer {
                    "a pointer"
                } else {
                    "an integer"
                };
                return Err(type_err(format!("a {ctype}"), expected));
            }
            if !float && class == TypeClass::Float {
                return Err(type_err(format!("an {ctype}"), "a floating-point value"));
            }
            Ok(bits)
        }
        LooseArg::Int(v) => {
            if p.kind == ParamKind::Pointer {
                if size != 8 || !(0..=i128::from(u64::MAX)).contains(&v) {
                    return Err(LaunchError::NotAnAddress {
                        kernel: kernel_s(),
                        index,
                        value: v,
                        size,
                        param: param(),
                    });
                }
                return Ok(v as u64);
            }
            if class == TypeClass::Float {
                return match size {
                    4 => Ok(u64::from((v as f32).to_bits())),
                    8 => Ok((v as f64).to_bits()),
                    _ => Err(width_err("an int")),
                };
            }
            let (lo, hi): (i128, i128) = match (size, unsigned(p)) {
                (1, false) => (i8::MIN.into(), i8::MAX.into()),
                (1, true) => (0, u8::MAX.into()),
                (2, false) => (i16::MIN.into(), i16::MAX.into()),
                (2, true) => (0, u16::MAX.into()),
                (4, false) => (i32::MIN.into(), i32::MAX.into()),
                (4, true) => (0, u32::MAX.into()),
                // 8 bytes: an int64, or an address/uint64 when it is larger.
                (8, _) => (i64::MIN.into(), u64::MAX.into()),
                _ => return Err(width_err("an int")),
            };
            if v < lo || v > hi {
                return Err(LaunchError::Range {
                    kernel: kernel_s(),
                    index,
                    value: v,
                    size,
                    param: param(),
                });
            }
            // Two's complement in the low `size` bytes.
            let bits = v as i64 as u64;
            Ok(match size {
                8 => {
                    if v > i128::from(i64::MAX) {
                        v as u64
                    } else {
                        bits
                    }
                }
                n => bits & ((1u64 << (n * 8)) - 1),
            })
        }
        LooseArg::Float(x) => {
            if p.kind == ParamKind::Pointer {
                return Err(type_err("a float".into(), "a pointer"));
            }
            if class == TypeClass::Integer {
                return Err(type_err("a float".into(), "an integer"));
            }
            match size {
                4 => Ok(u64::from((x as f32).to_bits())),
                8 => Ok(x.to_bits()),
                _ => Err(width_err("a float")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(size: u64, kind: ParamKind, type_name: Option<&str>, name: Option<&str>) -> Param {
        Param {
            index: 0,
            offset: 0,
            size,
            align: None,
            kind,
            name: name.map(Into::into),
            type_name: type_name.map(Into::into),
            hidden: false,
        }
    }

    #[test]
    fn numbers_take_the_size_of_their_parameter() {
        let int = param(4, ParamKind::Value, Some("int"), Some("n"));
        assert_eq!(
            pack_arg("k", 0, LooseArg::Int(-1), &int).unwrap(),
            0xffff_ffff
        );
        let long = param(8, ParamKind::Value, None, None);
        assert_eq!(
            pack_arg("k", 0, LooseArg::Int(-1), &long).unwrap(),
            u64::MAX
        );
        let f = param(4, ParamKind::Value, Some("float"), None);
        assert_eq!(
            pack_arg("k", 0, LooseArg::Int(1), &f).unwrap(),
            u64::from(1f32.to_bits())
        );
        assert_eq!(
            pack_arg("k", 0, LooseArg::Float(0.5), &f).unwrap(),
            u64::from(0.5f32.to_bits())
        );
        let ptr = param(8, ParamKind::Pointer, Some("float*"), Some("x"));
        assert_eq!(
            pack_arg("k", 0, LooseArg::Int(0x1000), &ptr).unwrap(),
            0x1000
        );
        assert_eq!(
            pack_arg("k", 0, LooseArg::Pointer(0x2000), &ptr).unwrap(),
            0x2000
        );
    }

    #[test]
    fn what_does_not_fit_is_refused_with_the_checks_messages() {
        let int = param(4, ParamKind::Value, Some("int"), Some("rows"));
        let e = |arg| pack_arg("k", 3, arg, &int).unwrap_err().to_string();
        assert_eq!(
            e(LooseArg::Pointer(1)),
            "k: argument 3 is 8 bytes, the kernel takes 4 (int rows)"
        );
        assert_eq!(
            e(LooseArg::Float(4.0)),
            "k: argument 3 is a float, the kernel takes an integer (int rows)"
        );
        assert_eq!(
            e(LooseArg::Int(1 << 31)),
            "k: argument 3 is 2147483648, which does not fit in the kernel's 4 bytes (int rows)"
        );
        let float = param(4, ParamKind::Value, Some("float"), Some("eps"));
        let typed = LooseArg::Typed {
            bits: 1,
            size: 4,
            float: false,
            ctype: "int32_t",
        };
        assert_eq!(
            pack_arg("k", 5, typed, &float).unwrap_err().to_string(),
            "k: argument 5 is an int32_t, the kernel takes a floating-point value (float eps)"
        );
        let ptr = param(8, ParamKind::Pointer, None, None);
        assert_eq!(
            pack_arg("k", 1, LooseArg::Float(1.5), &ptr)
                .unwrap_err()
                .to_string(),
            "k: argument 1 is a float, the kernel takes a pointer (pointer)"
        );
        assert_eq!(
            pack_arg("k", 1, LooseArg::Int(-1), &ptr)
                .unwrap_err()
                .to_string(),
            "k: argument 1 is -1, not an address for the kernel's 8-byte pointer (pointer)"
        );
        let odd = param(2, ParamKind::Value, Some("half"), None);
        assert_eq!(
            pack_arg("k", 0, LooseArg::Int(1), &odd)
                .unwrap_err()
                .to_string(),
            "k: argument 0 is an int, the kernel takes 2 bytes (half)"
        );
        let valued = param(8, ParamKind::Value, Some("long"), None);
        assert_eq!(
            pack_arg("k", 0, LooseArg::Pointer(8), &valued)
                .unwrap_err()
                .to_string(),
            "k: argument 0 is a pointer, the kernel takes a value (long)"
        );
    }

    #[test]
    fn the_count_is_of_the_visible_parameters() {
        let mut ps = vec![param(8, ParamKind::Pointer, None, None); 2];
        ps[1].hidden = true;
        check_count("k", &ps, 1).unwrap();
        assert_eq!(
            check_count("k", &ps, 2).unwrap_err().to_string(),
            "k: 2 arguments given, the kernel takes 1 (and 1 hidden the runtime passes)"
        );
    }
}
