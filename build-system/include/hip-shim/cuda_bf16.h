// cuda_bf16.h for hip-clang, shipped with kbuild (docs/compat-header.md).
//
// HIP 5.2 (Debian) has no <hip/hip_bf16.h> (it appeared in ROCm 6) and its <hip/hip_bfloat16.h>
// is the rocBLAS-style struct that drags in <ostream>, so this defines CUDA's storage type and
// conversions itself: bit-identical to __nv_bfloat16 (and kcompat.h's kc_bf16). Operators go
// through float (a + b is a float, rounded back on assignment); the scalar intrinsics __hadd,
// __hsub, __hmul, __hdiv, __hfma, __hneg, __habs, __hmax, __hmin have bf16 overloads (computed in
// float, rounded to nearest even: without them a bf16 argument would silently convert to __half).
// Only on hip-clang's include path.
#ifndef KBUILD_SHIM_CUDA_BF16_H
#define KBUILD_SHIM_CUDA_BF16_H
#include <hip/hip_runtime.h>

struct __nv_bfloat16;
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h);
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16(float f);

struct __nv_bfloat16 {
  unsigned short __x;
  // Trivial default: __shared__ arrays of it need no constructor.
  __nv_bfloat16() = default;
  __device__ __nv_bfloat16(float f);
  __device__ operator float() const;
};
typedef __nv_bfloat16 nv_bfloat16;

struct __nv_bfloat162 {
  __nv_bfloat16 x;
  __nv_bfloat16 y;
};
typedef __nv_bfloat162 nv_bfloat162;

__device__ __forceinline__ unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
__device__ __forceinline__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) {
  return __uint_as_float(((unsigned int)h.__x) << 16);
}
// Round to nearest, ties to even; NaN stays NaN (quiet, sign kept); overflow rounds to inf.
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16((unsigned short)((u >> 16) | 0x0040u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return __ushort_as_bfloat16((unsigned short)(u >> 16));
}
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
// Round toward zero: truncation (NaN kept quiet).
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rz(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16((unsigned short)((u >> 16) | 0x0040u));
  return __ushort_as_bfloat16((unsigned short)(u >> 16));
}
__device__ __forceinline__ __nv_bfloat16::__nv_bfloat16(float f) : __x(__float2bfloat16_rn(f).__x) {}
__device__ __forceinline__ __nv_bfloat16::operator float() const { return __bfloat162float(*this); }

__device__ __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  __nv_bfloat162 r;
  r.x = __float2bfloat16_rn(a);
  r.y = __float2bfloat16_rn(b);
  return r;
}
__device__ __forceinline__ __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
__device__ __forceinline__ float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
__device__ __forceinline__ float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
__device__ __forceinline__ float2 __bfloat1622float2(__nv_bfloat162 v) {
  return make_float2(__bfloat162float(v.x), __bfloat162float(v.y));
}

#define KC_BF16_BINARY(name, expr)                                                           \
  __device__ __forceinline__ __nv_bfloat16 name(__nv_bfloat16 a, __nv_bfloat16 b) {         \
    const float x = __bfloat162float(a), y = __bfloat162float(b);                             \
    return __float2bfloat16_rn(expr);                                                         \
  }
KC_BF16_BINARY(__hadd, x + y)
KC_BF16_BINARY(__hsub, x - y)
KC_BF16_BINARY(__hmul, x * y)
KC_BF16_BINARY(__hdiv, x / y)
KC_BF16_BINARY(__hmax, fmaxf(x, y))
KC_BF16_BINARY(__hmin, fminf(x, y))
#undef KC_BF16_BINARY
__device__ __forceinline__ __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __float2bfloat16_rn(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c)));
}
__device__ __forceinline__ __nv_bfloat16 __hneg(__nv_bfloat16 a) { return __ushort_as_bfloat16(a.__x ^ 0x8000u); }
__device__ __forceinline__ __nv_bfloat16 __habs(__nv_bfloat16 a) { return __ushort_as_bfloat16(a.__x & 0x7fffu); }
#endif
