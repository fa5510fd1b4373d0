// cuda_fp8.h for hip-clang, shipped with kbuild (docs/compat-header.md): CUDA's 8-bit float
// types __nv_fp8_e4m3 (OCP E4M3FN: bias 7, max 448, no infinity, NaN 0x7f) and __nv_fp8_e5m2
// (bias 15, max 57344, infinities), their storage types and the __nv_cvt_* conversions, in
// plain integer and float arithmetic (round to nearest even; __NV_SATFINITE clamps to the
// largest finite value, __NV_NOSAT gives NaN for E4M3 and infinity for E5M2). Arithmetic goes
// through float. Only on hip-clang's include path.
//
// With KC_FP8_CORE_ONLY (a CPU-side test of the formulas) only the conversions are defined and
// no HIP header is read.
#ifndef KBUILD_SHIM_CUDA_FP8_H
#define KBUILD_SHIM_CUDA_FP8_H
#ifndef KC_FP8_CORE_ONLY
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include "cuda_bf16.h"
#define KC_FP8_HD __host__ __device__ __forceinline__
#else
#define KC_FP8_HD inline
#endif

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

namespace kc_fp8 {
KC_FP8_HD unsigned int bits(float f) {
  unsigned int u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
KC_FP8_HD float from_bits(unsigned int u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
KC_FP8_HD __nv_fp8_storage_t encode(float f, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
  const int man = fmt == __NV_E4M3 ? 3 : 2;
  const int bias = fmt == __NV_E4M3 ? 7 : 15;
  const unsigned int max_code = fmt == __NV_E4M3 ? 0x7eu : 0x7bu;
  const unsigned int overflow_code = sat == __NV_SATFINITE ? max_code : (fmt == __NV_E4M3 ? 0x7fu : 0x7cu);
  const unsigned int u = bits(f);
  const unsigned int sign = (u >> 24) & 0x80u;
  const unsigned int a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (__nv_fp8_storage_t)(sign | 0x7fu);  // NaN
  if (a == 0x7f800000u) return (__nv_fp8_storage_t)(sign | overflow_code);
  const int exp = (int)(a >> 23) - 127;
  unsigned int code;
  if (exp >= 1 - bias) {
    if (exp > bias + 1) return (__nv_fp8_storage_t)(sign | overflow_code);
    const int shift = 23 - man;
    unsigned int r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
    code = (r >> shift) - ((unsigned int)(127 - bias) << man);
  } else {
    // Subnormal (or zero): units of 2^(1 - bias - man).
    float scaled = from_bits(a) * from_bits((unsigned int)(127 + man + bias - 1) << 23);
    code = (unsigned int)__builtin_rintf(scaled);  // ties to even
  }
  if (code > max_code) code = overflow_code;
  return (__nv_fp8_storage_t)(sign | code);
}
KC_FP8_HD float decode(__nv_fp8_storage_t x, __nv_fp8_interpretation_t fmt) {
  const int man = fmt == __NV_E4M3 ? 3 : 2;
  const int bias = fmt == __NV_E4M3 ? 7 : 15;
  const unsigned int sign = ((unsigned int)x & 0x80u) << 24;
  const unsigned int e = ((unsigned int)x & 0x7fu) >> man;
  const unsigned int m = (unsigned int)x & ((1u << man) - 1u);
  if (fmt == __NV_E4M3 && (x & 0x7fu) == 0x7fu) return from_bits(sign | 0x7fc00000u);
  if (fmt == __NV_E5M2 && e == 31u) return from_bits(sign | (m ? 0x7fc00000u : 0x7f800000u));
  if (e == 0) {
    // m * 2^(1 - bias - man): exact in float.
    const float unit = from_bits((unsigned int)(127 + 1 - bias - man) << 23);
    return from_bits(sign | bits((float)m * unit));
  }
  return from_bits(sign | ((e + 127u - (unsigned int)bias) << 23) | (m << (23 - man)));
}
}  // namespace kc_fp8

KC_FP8_HD __nv_fp8_storage_t __nv_cvt_float_to_fp8(float f, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
  return kc_fp8::encode(f, sat, fmt);
}
KC_FP8_HD __nv_fp8_storage_t __nv_cvt_double_to_fp8(double d, __nv_saturation_t sat, __nv_fp8_interpretation_t fmt) {
  return kc_fp8::encode((float)d, sat, fmt);
}
KC_FP8_HD __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float lo, float hi, __nv_saturation_t sat,
                                                      __nv_fp8_interpretation_t fmt) {
  return (__nv_fp8x2_storage_t)(kc_fp8::encode(lo, sat, fmt) | (kc_fp8::encode(hi, sat, fmt) << 8));
}

#ifndef KC_FP8_CORE_ONLY
__device__ __forceinline__ __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x, __nv_fp8_interpretation_t fmt) {
  return static_cast<__half_raw>(__float2half(kc_fp8::decode(x, fmt)));
}
__device__ __forceinline__ __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(__half_raw h, __nv_saturation_t sat,
                                                                      __nv_fp8_interpretation_t fmt) {
  return kc_fp8::encode(__half2float(__half(h)), sat, fmt);
}
__device__ __forceinline__ __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16 h, __nv_saturation_t sat,
                                                                          __nv_fp8_interpretation_t fmt) {
  return kc_fp8::encode(__bfloat162float(h), sat, fmt);
}

// The two types: conversions in (saturating, as CUDA's constructors) and out (through float).
#define KC_FP8_TYPE(name, fmt)                                                                   \
  struct name {                                                                                  \
    __nv_fp8_storage_t __x;                                                                      \
    name() = default;                                                                            \
    __device__ explicit name(float f) : __x(kc_fp8::encode(f, __NV_SATFINITE, fmt)) {}           \
    __device__ explicit name(double d) : __x(kc_fp8::encode((float)d, __NV_SATFINITE, fmt)) {}  \
    __device__ explicit name(__half h) : __x(kc_fp8::encode(__half2float(h), __NV_SATFINITE, fmt)) {} \
    __device__ explicit name(__nv_bfloat16 h)                                                    \
        : __x(kc_fp8::encode(__bfloat162float(h), __NV_SATFINITE, fmt)) {}                       \
    __device__ explicit name(int i) : __x(kc_fp8::encode((float)i, __NV_SATFINITE, fmt)) {}      \
    __device__ explicit name(unsigned int i) : __x(kc_fp8::encode((float)i, __NV_SATFINITE, fmt)) {} \
    __device__ explicit name(long long i) : __x(kc_fp8::encode((float)i, __NV_SATFINITE, fmt)) {} \
    __device__ explicit name(unsigned long long i)                                               \
        : __x(kc_fp8::encode((float)i, __NV_SATFINITE, fmt)) {}                                  \
    __device__ explicit name(short i) : __x(kc_fp8::encode((float)i, __NV_SATFINITE, fmt)) {}    \
    __device__ explicit name(unsigned short i) : __x(kc_fp8::encode((float)i, __NV_SATFINITE, fmt)) {} \
    __device__ explicit operator float() const { return kc_fp8::decode(__x, fmt); }              \
    __device__ explicit operator double() const { return kc_fp8::decode(__x, fmt); }             \
    __device__ explicit operator __half() const { return __float2half(kc_fp8::decode(__x, fmt)); } \
    __device__ explicit operator __nv_bfloat16() const { return __float2bfloat16_rn(kc_fp8::decode(__x, fmt)); } \
    __device__ explicit operator int() const { return (int)kc_fp8::decode(__x, fmt); }          \
    __device__ explicit operator unsigned int() const { return (unsigned int)kc_fp8::decode(__x, fmt); } \
    __device__ explicit operator long long() const { return (long long)kc_fp8::decode(__x, fmt); } \
    __device__ explicit operator unsigned long long() const {                                    \
      return (unsigned long long)kc_fp8::decode(__x, fmt);                                       \
    }                                                                                            \
    __device__ explicit operator short() const { return (short)kc_fp8::decode(__x, fmt); }      \
    __device__ explicit operator unsigned short() const { return (unsigned short)kc_fp8::decode(__x, fmt); } \
    __device__ explicit operator unsigned char() const { return (unsigned char)kc_fp8::decode(__x, fmt); } \
    __device__ explicit operator signed char() const { return (signed char)kc_fp8::decode(__x, fmt); } \
    __device__ explicit operator bool() const { return (__x & 0x7fu) != 0; }                    \
  };
KC_FP8_TYPE(__nv_fp8_e4m3, __NV_E4M3)
KC_FP8_TYPE(__nv_fp8_e5m2, __NV_E5M2)
#undef KC_FP8_TYPE
struct __nv_fp8x2_e4m3 { __nv_fp8x2_storage_t __x; };
struct __nv_fp8x2_e5m2 { __nv_fp8x2_storage_t __x; };
struct __nv_fp8x4_e4m3 { __nv_fp8x4_storage_t __x; };
struct __nv_fp8x4_e5m2 { __nv_fp8x4_storage_t __x; };
#endif
#undef KC_FP8_HD
#endif
