//! Typed launch arguments: plain values ([`KernelArg`]) and tuples or slices of them
//! ([`KernelArgs`]), each knowing its size, alignment and kind for the launch check, turned into
//! the `void**` both drivers take.

use std::ffi::c_void;

/// A device pointer argument (`CUdeviceptr` / `hipDeviceptr_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub struct DevicePtr(pub u64);

/// Whether a launch argument is an address or a value (what a typed argument says of itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// A device address ([`DevicePtr`]).
    Pointer,
    /// A number (`i32`, `f32`, `f64`, ...).
    Value,
    /// Either: `u64` and `usize` carry device addresses as often as numbers (cudarc's
    /// `CUdeviceptr` is a `u64`), so they match a pointer or a value parameter.
    Either,
}

/// Size, alignment and kind of one launch argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgLayout {
    pub size: usize,
    pub align: usize,
    pub kind: ArgKind,
}

impl ArgLayout {
    /// The layout of a [`KernelArg`] type.
    pub fn of<T: KernelArg>() -> ArgLayout {
        ArgLayout {
            size: std::mem::size_of::<T>(),
            align: std::mem::align_of::<T>(),
            kind: T::KIND,
        }
    }
}

/// A value passed by value to a kernel parameter of the same C type.
///
/// # Safety
/// The type must have the size and layout of the C parameter type it stands for.
pub unsafe trait KernelArg {
    /// What a checked launch compares with the parameter's kind (`pointer` / `value`; an
    /// `unknown` parameter takes either). A `#[repr(C)]` struct passed by value is a value.
    const KIND: ArgKind = ArgKind::Value;
}

// SAFETY: each matches the C type of the same size (int, unsigned, long long, float, double,
// pointers as 64-bit integers).
unsafe impl KernelArg for i8 {}
// SAFETY: as above.
unsafe impl KernelArg for u8 {}
// SAFETY: as above.
unsafe impl KernelArg for i16 {}
// SAFETY: as above.
unsafe impl KernelArg for u16 {}
// SAFETY: as above.
unsafe impl KernelArg for i32 {}
// SAFETY: as above.
unsafe impl KernelArg for u32 {}
// SAFETY: as above.
unsafe impl KernelArg for i64 {}
// SAFETY: as above.
unsafe impl KernelArg for u64 {
    const KIND: ArgKind = ArgKind::Either;
}
// SAFETY: as above.
unsafe impl KernelArg for usize {
    const KIND: ArgKind = ArgKind::Either;
}
// SAFETY: as above.
unsafe impl KernelArg for f32 {}
// SAFETY: as above.
unsafe impl KernelArg for f64 {}
// SAFETY: a transparent u64.
unsafe impl KernelArg for DevicePtr {
    const KIND: ArgKind = ArgKind::Pointer;
}

/// A set of arguments: a tuple of [`KernelArg`]s (up to 12) or a slice of one type.
pub trait KernelArgs {
    /// Pointers to each value, valid while `self` is borrowed.
    fn params(&self) -> Vec<*mut c_void>;
    /// Size, alignment and kind of each value, in order (what a checked launch compares with
    /// the kernel's parameters).
    fn layouts(&self) -> Vec<ArgLayout>;
}

fn ptr<T: KernelArg>(v: &T) -> *mut c_void {
    (v as *const T).cast_mut().cast()
}

impl<T: KernelArg> KernelArgs for [T] {
    fn params(&self) -> Vec<*mut c_void> {
        self.iter().map(ptr).collect()
    }
    fn layouts(&self) -> Vec<ArgLayout> {
        vec![ArgLayout::of::<T>(); self.len()]
    }
}

impl KernelArgs for () {
    fn params(&self) -> Vec<*mut c_void> {
        Vec::new()
    }
    fn layouts(&self) -> Vec<ArgLayout> {
        Vec::new()
    }
}

macro_rules! tuple_args {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: KernelArg),+> KernelArgs for ($($name,)+) {
            fn params(&self) -> Vec<*mut c_void> {
                vec![$(ptr(&self.$idx)),+]
            }
            fn layouts(&self) -> Vec<ArgLayout> {
                vec![$(ArgLayout::of::<$name>()),+]
            }
        }
    };
}

tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
