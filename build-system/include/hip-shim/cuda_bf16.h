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

// Math on __nv_bfloat16 (CUDA's cuda_bf16.h names): computed in float, rounded to nearest even.
#define KC_BF16_UNARY(name, expr)                                                  \
  __device__ __forceinline__ __nv_bfloat16 name(__nv_bfloat16 a) {                \
    const float x = __bfloat162float(a);                                          \
    return __float2bfloat16_rn(expr);                                             \
  }
KC_BF16_UNARY(hsqrt, sqrtf(x))
KC_BF16_UNARY(hrsqrt, rsqrtf(x))
KC_BF16_UNARY(hrcp, 1.0f / x)
KC_BF16_UNARY(hexp, expf(x))
KC_BF16_UNARY(hexp2, exp2f(x))
KC_BF16_UNARY(hexp10, exp10f(x))
KC_BF16_UNARY(hlog, logf(x))
KC_BF16_UNARY(hlog2, log2f(x))
KC_BF16_UNARY(hlog10, log10f(x))
KC_BF16_UNARY(hsin, sinf(x))
KC_BF16_UNARY(hcos, cosf(x))
KC_BF16_UNARY(htanh, tanhf(x))
KC_BF16_UNARY(hfloor, floorf(x))
KC_BF16_UNARY(hceil, ceilf(x))
KC_BF16_UNARY(htrunc, truncf(x))
KC_BF16_UNARY(hrint, rintf(x))
#undef KC_BF16_UNARY
__device__ __forceinline__ bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7fffu) > 0x7f80u; }
__device__ __forceinline__ bool __hisinf(__nv_bfloat16 a) { return (a.__x & 0x7fffu) == 0x7f80u; }
__device__ __forceinline__ __nv_bfloat16 __hmax_nan(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __hisnan(a) ? a : (__hisnan(b) ? b : __hmax(a, b));
}
__device__ __forceinline__ __nv_bfloat16 __hmin_nan(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __hisnan(a) ? a : (__hisnan(b) ? b : __hmin(a, b));
}
#define KC_BF16_COMPARE(name, op) \
  __device__ __forceinline__ bool name(__nv_bfloat16 a, __nv_bfloat16 b) { return __bfloat162float(a) op __bfloat162float(b); }
KC_BF16_COMPARE(__heq, ==)
KC_BF16_COMPARE(__hne, !=)
KC_BF16_COMPARE(__hlt, <)
KC_BF16_COMPARE(__hle, <=)
KC_BF16_COMPARE(__hgt, >)
KC_BF16_COMPARE(__hge, >=)
#undef KC_BF16_COMPARE
// Compound assignment (a + b already works through float; += needs an lvalue of the type).
#define KC_BF16_ASSIGN(op)                                                                   \
  __device__ __forceinline__ __nv_bfloat16& operator op##=(__nv_bfloat16& a, __nv_bfloat16 b) { \
    a = __float2bfloat16_rn(__bfloat162float(a) op __bfloat162float(b));                     \
    return a;                                                                                \
  }
KC_BF16_ASSIGN(+)
KC_BF16_ASSIGN(-)
KC_BF16_ASSIGN(*)
KC_BF16_ASSIGN(/)
#undef KC_BF16_ASSIGN
// atomicAdd on bf16 (CUDA has it from sm_80): a CAS loop on the aligned 32-bit word.
__device__ __forceinline__ __nv_bfloat16 atomicAdd(__nv_bfloat16* address, __nv_bfloat16 val) {
  unsigned int* word = (unsigned int*)((unsigned long long)address & ~3ull);
  const unsigned int shift = ((unsigned long long)address & 2ull) ? 16u : 0u;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    const float sum = __bfloat162float(__ushort_as_bfloat16((unsigned short)(assumed >> shift))) + __bfloat162float(val);
    const unsigned int bits = __float2bfloat16_rn(sum).__x;
    old = atomicCAS(word, assumed, (assumed & ~(0xffffu << shift)) | (bits << shift));
  } while (assumed != old);
  return __ushort_as_bfloat16((unsigned short)(old >> shift));
}
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rd(float f) {
  __nv_bfloat16 h = __float2bfloat16_rz(f);
  return (f < 0.0f && __bfloat162float(h) != f) ? __ushort_as_bfloat16(h.__x + 1u) : h;
}
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_ru(float f) {
  __nv_bfloat16 h = __float2bfloat16_rz(f);
  return (f > 0.0f && __bfloat162float(h) != f) ? __ushort_as_bfloat16(h.__x + 1u) : h;
}
__device__ __forceinline__ __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16_rn((float)d); }
__device__ __forceinline__ __nv_bfloat16 __int2bfloat16_rn(int i) { return __float2bfloat16_rn((float)i); }
__device__ __forceinline__ int __bfloat162int_rz(__nv_bfloat16 h) { return (int)__bfloat162float(h); }
#endif
