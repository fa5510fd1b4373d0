//! The one check of a launch's arguments against the entry's parameters as the build
//! recorded them (manifest `params`, carried by the load index): a pure function of the
//! parameters and what the caller passes, run by every checked launch before the driver.

use kbuild_manifest::params::{Param, ParamKind};

use super::args::{ArgKind, ArgLayout};
use crate::error::LaunchError;

/// How a message names a parameter: its C++ type then its name when both are known (`int n`),
/// the type alone (`int`), else its kind (`value`, `pointer`, `pointer or value` for an
/// unknown one), with the name after it when the object has one.
pub fn describe_param(p: &Param) -> String {
    let kind = match p.kind {
        ParamKind::Unknown => "pointer or value",
        k => k.as_str(),
    };
    match (&p.type_name, &p.name) {
        (Some(t), Some(n)) => format!("{t} {n}"),
        (Some(t), None) => t.clone(),
        (None, Some(n)) => format!("{kind} {n}"),
        (None, None) => kind.to_string(),
    }
}

/// The count of a launch's arguments against the entry's caller-visible parameters (hidden
/// ones, which the runtime passes, are not counted).
pub fn check_count(kernel: &str, params: &[Param], given: usize) -> Result<(), LaunchError> {
    let expected = params.iter().filter(|p| !p.hidden).count();
    if expected != given {
        return Err(LaunchError::Count {
            kernel: kernel.to_string(),
            expected,
            given,
            hidden: u32::try_from(params.len() - expected).unwrap_or(u32::MAX),
        });
    }
    Ok(())
}

/// Check a launch's argument sizes against the entry's parameters (hidden ones, which the
/// runtime passes, are skipped): the count, then each size, first difference first. `kernel`
/// names the entry in the error. What every checked launch runs before the driver is called.
pub fn check_args(
    kernel: &str,
    params: &[Param],
    sizes: &[usize],
) -> std::result::Result<(), LaunchError> {
    check_count(kernel, params, sizes.len())?;
    let visible = params.iter().filter(|p| !p.hidden);
    for (index, (p, &given)) in visible.zip(sizes).enumerate() {
        if given as u64 != p.size {
            return Err(LaunchError::Size {
                kernel: kernel.to_string(),
                index,
                given,
                expected: p.size,
                param: describe_param(p),
            });
        }
    }
    Ok(())
}

/// [`check_args`] for typed arguments, which also know their alignment and kind: a `pointer`
/// parameter refuses a value and a `value` parameter a [`DevicePtr`](crate::launch::DevicePtr) (`unknown` ones take
/// either, and `u64`/`usize` fit both), and each argument must sit where the kernel has its
/// parameter: at the end of the previous parameter rounded up to the argument's alignment,
/// as a C compiler lays out the parameter list (an `i64` for an `int2` at offset 4 is
/// refused: its 8-byte alignment would put it at 8).
pub fn check_layout(
    kernel: &str,
    params: &[Param],
    args: &[ArgLayout],
) -> std::result::Result<(), LaunchError> {
    let sizes: Vec<usize> = args.iter().map(|a| a.size).collect();
    check_args(kernel, params, &sizes)?;
    let mut end = 0u64;
    for (index, (p, a)) in params.iter().filter(|p| !p.hidden).zip(args).enumerate() {
        let mismatch = match (p.kind, a.kind) {
            (ParamKind::Pointer, ArgKind::Value) => Some(("value", "pointer")),
            (ParamKind::Value, ArgKind::Pointer) => Some(("pointer", "value")),
            _ => None,
        };
        if let Some((given, expected)) = mismatch {
            return Err(LaunchError::Kind {
                kernel: kernel.to_string(),
                index,
                given,
                expected,
                param: describe_param(p),
            });
        }
        let align = a.align.max(1) as u64;
        let at = end.div_ceil(align) * align;
        if at != p.offset {
            return Err(LaunchError::Offset {
                kernel: kernel.to_string(),
                index,
                size: a.size,
                align: a.align,
                at,
                offset: p.offset,
                param: describe_param(p),
            });
        }
        end = p.end();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::args::{DevicePtr, KernelArg, KernelArgs};

    use kbuild_manifest::fixtures::param;

    /// rmsnorm_f32 (const float* x, const float* w, float* y, int rows, int n, float eps)
    /// as an AMDGPU object records it: types and names, then hidden arguments.
    fn rmsnorm() -> Vec<Param> {
        let named = |i, off, size, kind, ty: &str, name: &str| Param {
            type_name: Some(ty.into()),
            name: Some(name.into()),
            ..param(i, off, size, kind)
        };
        let mut p = vec![
            named(0, 0, 8, ParamKind::Pointer, "const float*", "x"),
            named(1, 8, 8, ParamKind::Pointer, "const float*", "w"),
            named(2, 16, 8, ParamKind::Pointer, "float*", "y"),
            named(3, 24, 4, ParamKind::Value, "int", "n"),
            named(4, 28, 4, ParamKind::Value, "int", "cols"),
            named(5, 32, 4, ParamKind::Value, "float", "eps"),
        ];
        for i in 6..9 {
            p.push(Param {
                hidden: true,
                ..param(i, 40 + 8 * u64::from(i - 6), 8, ParamKind::Value)
            });
        }
        p
    }

    #[test]
    fn check_args_names_the_argument_and_the_parameter() {
        let p = rmsnorm();
        check_args("rmsnorm_f32", &p, &[8, 8, 8, 4, 4, 4]).unwrap();
        let e = check_args("rmsnorm_f32", &p, &[8, 8, 8, 8, 4, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (int n)"
        );
        assert!(matches!(
            e,
            LaunchError::Size {
                index: 3,
                given: 8,
                expected: 4,
                ..
            }
        ));
        // The type alone, the kind alone, the kind and the name.
        let mut q = p.clone();
        q[3].name = None;
        let e = check_args("k", &q, &[8, 8, 8, 2, 4, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 3 is 2 bytes, the kernel takes 4 (int)"
        );
        q[3].type_name = None;
        let e = check_args("k", &q, &[8, 8, 8, 2, 4, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 3 is 2 bytes, the kernel takes 4 (value)"
        );
        q[3].name = Some("n".into());
        let e = check_args("k", &q, &[8, 8, 8, 2, 4, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 3 is 2 bytes, the kernel takes 4 (value n)"
        );
        let e = check_args("k", &q, &[8, 4, 8, 4, 4, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 1 is 4 bytes, the kernel takes 8 (const float* w)"
        );
    }

    #[test]
    fn check_args_counts_only_the_caller_visible_parameters() {
        let p = rmsnorm();
        // The three hidden ones are the runtime's: never counted, never compared.
        let e = check_args("rmsnorm_f32", &p, &[8, 8, 8, 4, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rmsnorm_f32: 5 arguments given, the kernel takes 6 (and 3 hidden the runtime passes)"
        );
        let e = check_args("rmsnorm_f32", &p, &[8; 9]).unwrap_err();
        assert!(
            matches!(
                e,
                LaunchError::Count {
                    expected: 6,
                    given: 9,
                    hidden: 3,
                    ..
                }
            ),
            "{e}"
        );
        let cuda: Vec<Param> = p.iter().filter(|p| !p.hidden).cloned().collect();
        let e = check_args("rmsnorm_f32", &cuda, &[8]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "rmsnorm_f32: 1 argument given, the kernel takes 6"
        );
        check_args("k", &[], &[]).unwrap();
        assert!(check_args("k", &[], &[4]).is_err());
    }

    #[test]
    fn unknown_parameters_check_the_size_only() {
        // An sm_89 cubin's 8-byte parameters: pointer or value.
        let p = vec![
            param(0, 0, 8, ParamKind::Unknown),
            param(1, 8, 4, ParamKind::Value),
        ];
        check_args("k", &p, &[8, 4]).unwrap();
        check_layout("k", &p, &(DevicePtr(1), 2i32).layouts()).unwrap();
        check_layout("k", &p, &(1i64, 2i32).layouts()).unwrap();
        let e = check_args("k", &p, &[4, 4]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 0 is 4 bytes, the kernel takes 8 (pointer or value)"
        );
    }

    #[test]
    fn typed_arguments_check_kind_and_place() {
        let p = rmsnorm();
        let (x, w, y) = (DevicePtr(1), DevicePtr(2), DevicePtr(3));
        check_layout(
            "rmsnorm_f32",
            &p,
            &(x, w, y, 4i32, 64i32, 1e-6f32).layouts(),
        )
        .unwrap();
        // u64 device addresses pass for pointers.
        check_layout(
            "rmsnorm_f32",
            &p,
            &(1u64, 2u64, 3u64, 4i32, 64i32, 1e-6f32).layouts(),
        )
        .unwrap();
        let e = check_layout(
            "rmsnorm_f32",
            &p,
            &(x, w, y, 4i64, 64i32, 1e-6f32).layouts(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "rmsnorm_f32: argument 3 is 8 bytes, the kernel takes 4 (int n)"
        );
        let e = check_layout(
            "rmsnorm_f32",
            &p,
            &(x, 2.0f64, y, 4i32, 64i32, 1e-6f32).layouts(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "rmsnorm_f32: argument 1 is a value, the kernel takes a pointer (const float* w)"
        );
        let long = vec![param(0, 0, 8, ParamKind::Value)];
        let e = check_layout("k", &long, &(x,).layouts()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 0 is a pointer, the kernel takes a value (value)"
        );
        // An int2 (8 bytes, 4-aligned) at offset 4: an i64 would sit at 8.
        let int2 = vec![
            param(0, 0, 4, ParamKind::Value),
            param(1, 4, 8, ParamKind::Value),
        ];
        let e = check_layout("k", &int2, &(1i32, 2i64).layouts()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k: argument 1 (8 bytes, 8-byte aligned) would be at offset 8, the kernel has it at 4 (value)"
        );
        #[derive(Clone, Copy)]
        #[repr(C)]
        struct Int2(i32, i32);
        // SAFETY: the layout of CUDA's int2.
        unsafe impl KernelArg for Int2 {}
        check_layout("k", &int2, &(1i32, Int2(2, 3)).layouts()).unwrap();
        // Slices report one layout per element.
        assert_eq!([1u32, 2][..].layouts(), vec![ArgLayout::of::<u32>(); 2]);
    }
}
