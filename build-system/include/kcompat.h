// kcompat.h - single-source CUDA/HIP portability layer, shipped with kbuild.
//
// kbuild writes it to <out-dir>/include/ and puts that directory on the include path of every
// kernel; for a language = "cuda" kernel compiled by hip-clang it is also force-included
// (-include kcompat.h), so a plain CUDA file gets the CUDA names below without a source edit.
// What maps and what does not: docs/compat-header.md. Opt out: [build] compat-header = false.
//
// Compiled by nvcc (NVIDIA) and by hip-clang (clang++ -x hip, AMD). Provides:
//   KC_WARP_SIZE             warp/wave size of the target being compiled (compile-time constant)
//   kc_shfl_xor(v, mask)     butterfly shuffle within a warp/wave
//   kc_warp_sum / kc_warp_max          full-warp reductions (result in every lane)
//   kc_block_sum<BLOCK> / kc_block_max<BLOCK>   full-block reductions (result in every thread)
//   kc_bf16, kc_bf16_to_float, kc_float_to_bf16 (round-to-nearest-even), kc_bf16x2_lo/hi
//   KC_EXTERN_C, KC_GLOBAL, KC_LAUNCH_BOUNDS(n), KC_KERNEL(n), KC_DEVICE, KC_RESTRICT
//   kc_copy_async16 / kc_copy_async4, kc_copy_async_commit, kc_copy_async_wait<N>
//                            global -> shared copies that run while the block computes
//                            (cp.async on sm_80+; a plain copy elsewhere, the waits no-ops)
//   kc_grid_dependency_wait, kc_launch_dependents
//                            programmatic dependent launch (sm_90+; no-ops elsewhere)
#ifndef KBUILD_KCOMPAT_H
#define KBUILD_KCOMPAT_H

#if defined(__HIPCC__) || defined(__HIP__)
// ----------------------------------------------------------------------------------- AMD / HIP
#define KC_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

// Wave size of the target being compiled: 64 on gfx9 (gfx90a, gfx942), 32 by default on
// gfx10+/gfx11/gfx12 (64 there only with -mwavefrontsize64, which updates the macro too).
// clang >= 20 deprecates the undecorated spelling, so prefer the __..__ one (clang-19 has both).
#if defined(__AMDGCN_WAVEFRONT_SIZE__)
#define KC_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE__
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
#define KC_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
// Host pass of a non-device-only compile: device code is not generated here, any value works.
#define KC_WARP_SIZE 64
#endif

#define KC_DEVICE __device__ __forceinline__

KC_DEVICE float kc_shfl_xor(float v, int lane_mask) { return __shfl_xor(v, lane_mask, KC_WARP_SIZE); }
KC_DEVICE int kc_shfl_xor(int v, int lane_mask) { return __shfl_xor(v, lane_mask, KC_WARP_SIZE); }
KC_DEVICE float kc_uint_as_float(unsigned int u) { return __uint_as_float(u); }
KC_DEVICE unsigned int kc_float_as_uint(float f) { return __float_as_uint(f); }

// bf16 on HIP. Debian's libamdhip64-dev 5.2 has no <hip/hip_bf16.h> (it appeared in ROCm 6);
// its <hip/hip_bfloat16.h> is the old rocBLAS-style struct that drags in <ostream>. So kbuild
// uses its own 2-byte storage type: bit-identical to __nv_bfloat16 / __hip_bfloat16 / torch bf16.
struct kc_bf16 {
  unsigned short bits;
};
KC_DEVICE float kc_bf16_to_float(kc_bf16 h) { return __uint_as_float(((unsigned int)h.bits) << 16); }
KC_DEVICE kc_bf16 kc_float_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  kc_bf16 h;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    h.bits = (unsigned short)((u >> 16) | 0x0040u);  // NaN: keep sign, force quiet
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even (overflow -> inf)
    h.bits = (unsigned short)(u >> 16);
  }
  return h;
}

// ------------------------------------------------------------ CUDA names on HIP
// For plain CUDA sources compiled by hip-clang. HIP (5.2, Debian) has the atomics, __half
// (<hip/hip_fp16.h>), __launch_bounds__, threadIdx & co. and the mask-less shuffles; these add
// the *_sync warp functions CUDA 9 made the only spelling. The mask is ignored (every lane of
// the warp/wave is assumed to take part) and may be 32 or 64 bits wide. The width defaults to
// 32, CUDA's warpSize, so a shuffle stays inside 32-lane groups on wave64 (gfx9) too: what a
// CUDA kernel that computes lane = threadIdx.x % 32 expects. KC_NO_CUDA_NAMES turns them off.
#if !defined(KC_NO_CUDA_NAMES)
// ROCm >= 6.2 declares its own *_sync functions when HIP_ENABLE_WARP_SYNC_BUILTINS is set.
#if !defined(HIP_ENABLE_WARP_SYNC_BUILTINS)
namespace kc_detail {
// HIP's shuffles take int, long, long long, their unsigned forms, float and double; any other
// type of at most 4 bytes (__half, __half2, __nv_bfloat16, short) moves as a 32-bit word.
template <typename T> struct native_shfl { static const bool value = false; };
#define KC_NATIVE_SHFL(T) template <> struct native_shfl<T> { static const bool value = true; };
KC_NATIVE_SHFL(int) KC_NATIVE_SHFL(unsigned int) KC_NATIVE_SHFL(long) KC_NATIVE_SHFL(unsigned long)
KC_NATIVE_SHFL(long long) KC_NATIVE_SHFL(unsigned long long) KC_NATIVE_SHFL(float) KC_NATIVE_SHFL(double)
#undef KC_NATIVE_SHFL
template <typename T, bool Native = native_shfl<T>::value>
struct shfl {
  static KC_DEVICE T idx(T v, int l, int w) { return __shfl(v, l, w); }
  static KC_DEVICE T bxor(T v, int m, int w) { return __shfl_xor(v, m, w); }
  static KC_DEVICE T down(T v, unsigned int d, int w) { return __shfl_down(v, d, w); }
  static KC_DEVICE T up(T v, unsigned int d, int w) { return __shfl_up(v, d, w); }
};
template <typename T>
struct shfl<T, false> {
  static_assert(sizeof(T) <= 4, "__shfl*_sync: a type other than HIP's must be at most 4 bytes");
  static KC_DEVICE int word(T v) {
    int w = 0;
    __builtin_memcpy(&w, &v, sizeof(T));
    return w;
  }
  static KC_DEVICE T value(int w) {
    T v;
    __builtin_memcpy(&v, &w, sizeof(T));
    return v;
  }
  static KC_DEVICE T idx(T v, int l, int w) { return value(__shfl(word(v), l, w)); }
  static KC_DEVICE T bxor(T v, int m, int w) { return value(__shfl_xor(word(v), m, w)); }
  static KC_DEVICE T down(T v, unsigned int d, int w) { return value(__shfl_down(word(v), d, w)); }
  static KC_DEVICE T up(T v, unsigned int d, int w) { return value(__shfl_up(word(v), d, w)); }
};
}  // namespace kc_detail
template <typename KcMask, typename T>
KC_DEVICE T __shfl_sync(KcMask, T var, int src_lane, int width = 32) { return kc_detail::shfl<T>::idx(var, src_lane, width); }
template <typename KcMask, typename T>
KC_DEVICE T __shfl_xor_sync(KcMask, T var, int lane_mask, int width = 32) { return kc_detail::shfl<T>::bxor(var, lane_mask, width); }
template <typename KcMask, typename T>
KC_DEVICE T __shfl_down_sync(KcMask, T var, unsigned int delta, int width = 32) { return kc_detail::shfl<T>::down(var, delta, width); }
template <typename KcMask, typename T>
KC_DEVICE T __shfl_up_sync(KcMask, T var, unsigned int delta, int width = 32) { return kc_detail::shfl<T>::up(var, delta, width); }
// Votes over the whole wave: the ballot is 64 bits wide on wave64.
template <typename KcMask>
KC_DEVICE unsigned long long __ballot_sync(KcMask, int predicate) { return __ballot(predicate); }
template <typename KcMask>
KC_DEVICE int __any_sync(KcMask, int predicate) { return __any(predicate); }
template <typename KcMask>
KC_DEVICE int __all_sync(KcMask, int predicate) { return __all(predicate); }
// A wave executes in lock step; the fences order its lanes' memory accesses as CUDA's does.
KC_DEVICE void __syncwarp(unsigned long long = ~0ull) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
#endif
#if HIP_VERSION_MAJOR < 6
KC_DEVICE unsigned long long __activemask() { return __ballot(1); }
#endif

// __CUDA_ARCH__ in the device pass: undefined under hip-clang, so `#if __CUDA_ARCH__ < 600` is
// true and `#if __CUDA_ARCH__ >= 700` false, which picks the oldest code path (and its own
// atomicAdd(double), which HIP already has). kbuild defines it to KC_CUDA_ARCH (default 610:
// fp16 and __dp4a, no tensor-core or cp.async paths, which are inline PTX). -DKC_CUDA_ARCH=N
// picks another level (800 turns on bf16/fp8 paths), -DKC_NO_CUDA_ARCH leaves it undefined.
#if defined(__HIP_DEVICE_COMPILE__) && !defined(__CUDA_ARCH__) && !defined(KC_NO_CUDA_ARCH)
#ifndef KC_CUDA_ARCH
#define KC_CUDA_ARCH 610
#endif
#define __CUDA_ARCH__ KC_CUDA_ARCH
#endif

// Declared as templates with a defaulted parameter: a library that defines one of these itself
// (a fallback behind an arch guard) declares a plain function, which wins overload resolution
// instead of colliding with ours.
#define KC_SHIM template <typename KcShim = void> KC_DEVICE

// __trap: abort the kernel.
KC_SHIM void __trap() { __builtin_trap(); }

// SIMD-in-a-word intrinsics (per byte: 4, per halfword: 2), computed lane by lane.
namespace kc_detail {
template <typename Lane, int N, typename F>
KC_DEVICE unsigned int simd(unsigned int a, unsigned int b, F f) {
  constexpr int bits = 32 / N;
  constexpr unsigned int mask = (1u << bits) - 1u;
  unsigned int r = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const Lane x = (Lane)((a >> (i * bits)) & mask), y = (Lane)((b >> (i * bits)) & mask);
    r |= ((unsigned int)f(x, y) & mask) << (i * bits);
  }
  return r;
}
template <typename T, int Lo, int Hi> KC_DEVICE int sat(int v) { return v < Lo ? Lo : (v > Hi ? Hi : v); }
}  // namespace kc_detail
#define KC_SIMD(name, lane, n, expr) \
  KC_SHIM unsigned int name(unsigned int a, unsigned int b) { \
    return kc_detail::simd<lane, n>(a, b, [](lane x, lane y) { return (int)(expr); }); \
  }
KC_SIMD(__vadd4, unsigned char, 4, x + y)
KC_SIMD(__vsub4, unsigned char, 4, x - y)
KC_SIMD(__vaddss4, signed char, 4, (kc_detail::sat<int, -128, 127>((int)x + (int)y)))
KC_SIMD(__vsubss4, signed char, 4, (kc_detail::sat<int, -128, 127>((int)x - (int)y)))
KC_SIMD(__vaddus4, unsigned char, 4, (kc_detail::sat<int, 0, 255>((int)x + (int)y)))
KC_SIMD(__vsubus4, unsigned char, 4, (kc_detail::sat<int, 0, 255>((int)x - (int)y)))
KC_SIMD(__vabsdiffu4, unsigned char, 4, x > y ? x - y : y - x)
KC_SIMD(__vabsdiffs4, signed char, 4, x > y ? (int)x - (int)y : (int)y - (int)x)
KC_SIMD(__vmaxu4, unsigned char, 4, x > y ? x : y)
KC_SIMD(__vminu4, unsigned char, 4, x < y ? x : y)
KC_SIMD(__vmaxs4, signed char, 4, x > y ? x : y)
KC_SIMD(__vmins4, signed char, 4, x < y ? x : y)
KC_SIMD(__vcmpeq4, unsigned char, 4, x == y ? 0xff : 0)
KC_SIMD(__vcmpne4, unsigned char, 4, x != y ? 0xff : 0)
KC_SIMD(__vadd2, unsigned short, 2, x + y)
KC_SIMD(__vsub2, unsigned short, 2, x - y)
KC_SIMD(__vaddss2, short, 2, (kc_detail::sat<int, -32768, 32767>((int)x + (int)y)))
KC_SIMD(__vsubss2, short, 2, (kc_detail::sat<int, -32768, 32767>((int)x - (int)y)))
KC_SIMD(__vmaxs2, short, 2, x > y ? x : y)
KC_SIMD(__vmins2, short, 2, x < y ? x : y)
KC_SIMD(__vcmpeq2, unsigned short, 2, x == y ? 0xffff : 0)
#undef KC_SIMD
KC_SHIM unsigned int __vabs4(unsigned int a) { return __vabsdiffs4(a, 0u); }
KC_SHIM unsigned int __vneg4(unsigned int a) { return __vsub4(0u, a); }
// Byte-wise dot products with a 32-bit accumulator.
KC_SHIM int __dp4a(int a, int b, int c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
  return c;
}
KC_SHIM unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) c += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
  return c;
}
KC_SHIM int __dp4a(char4 a, char4 b, int c) {
  return c + a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
// Two 16-bit products (a's halves) with the low (lo=true) or high two bytes of b.
KC_SHIM int __dp2a_lo(int a, int b, int c) {
  return c + (int)(short)a * (int)(signed char)b + (int)(short)(a >> 16) * (int)(signed char)(b >> 8);
}
KC_SHIM int __dp2a_hi(int a, int b, int c) {
  return c + (int)(short)a * (int)(signed char)(b >> 16) + (int)(short)(a >> 16) * (int)(signed char)(b >> 24);
}

// Atomics HIP 5.2 lacks: 64-bit signed min/max and 16-bit compare-and-swap, as CAS loops on the
// aligned 32- or 64-bit word.
KC_SHIM long long atomicMax(long long* address, long long val) {
  unsigned long long* p = (unsigned long long*)address;
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    if ((long long)assumed >= val) break;
    old = atomicCAS(p, assumed, (unsigned long long)val);
  } while (assumed != old);
  return (long long)old;
}
KC_SHIM long long atomicMin(long long* address, long long val) {
  unsigned long long* p = (unsigned long long*)address;
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    if ((long long)assumed <= val) break;
    old = atomicCAS(p, assumed, (unsigned long long)val);
  } while (assumed != old);
  return (long long)old;
}
KC_SHIM unsigned short atomicCAS(unsigned short* address, unsigned short compare, unsigned short val) {
  unsigned int* word = (unsigned int*)((unsigned long long)address & ~3ull);
  const unsigned int shift = ((unsigned long long)address & 2ull) ? 16u : 0u;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    if ((unsigned short)(assumed >> shift) != compare) break;
    old = atomicCAS(word, assumed, (assumed & ~(0xffffu << shift)) | ((unsigned int)val << shift));
  } while (assumed != old);
  return (unsigned short)(old >> shift);
}

// atomicAdd on __half (CUDA has it from sm_70): a 16-bit CAS loop, the sum rounded per step.
KC_SHIM __half atomicAdd(__half* address, __half val) {
  unsigned short* p = (unsigned short*)address;
  unsigned short old = *p, assumed;
  do {
    assumed = old;
    const __half sum = __float2half(__half2float(__ushort_as_half(assumed)) + __half2float(val));
    old = atomicCAS<>(p, assumed, __half_as_ushort(sum));
  } while (assumed != old);
  return __ushort_as_half(old);
}
// __hmax / __hmin on __half (HIP 5.2 has neither): the larger / smaller, the number when one
// is NaN (as CUDA's); the _nan forms return NaN when either is.
KC_SHIM __half __hmax(__half a, __half b) { return __half(fmaxf(__half2float(a), __half2float(b))); }
KC_SHIM __half __hmin(__half a, __half b) { return __half(fminf(__half2float(a), __half2float(b))); }
KC_SHIM __half __hmax_nan(__half a, __half b) { return __hisnan(a) ? a : (__hisnan(b) ? b : __hmax(a, b)); }
KC_SHIM __half __hmin_nan(__half a, __half b) { return __hisnan(a) ? a : (__hisnan(b) ? b : __hmin(a, b)); }
KC_SHIM __half2 __hmax2(__half2 a, __half2 b) { return __half2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }
KC_SHIM __half2 __hmin2(__half2 a, __half2 b) { return __half2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }
// min/max on unsigned and 64-bit integers, and mixed int/unsigned (CUDA's math headers have
// them; clang's HIP headers only int, float and double, so min(unsigned, blockDim.x) is ambiguous).
#define KC_MINMAX(T)                                          \
  KC_SHIM T min(T a, T b) { return a < b ? a : b; }           \
  KC_SHIM T max(T a, T b) { return a > b ? a : b; }
KC_MINMAX(unsigned int)
KC_MINMAX(long)
KC_MINMAX(unsigned long)
KC_MINMAX(long long)
KC_MINMAX(unsigned long long)
#undef KC_MINMAX
KC_SHIM unsigned int min(int a, unsigned int b) { return min<>((unsigned int)a, b); }
KC_SHIM unsigned int min(unsigned int a, int b) { return min<>(a, (unsigned int)b); }
KC_SHIM unsigned int max(int a, unsigned int b) { return max<>((unsigned int)a, b); }
KC_SHIM unsigned int max(unsigned int a, int b) { return max<>(a, (unsigned int)b); }
#undef KC_SHIM
#endif  // !KC_NO_CUDA_NAMES

#else
// -------------------------------------------------------------------------------- NVIDIA / CUDA
#define KC_CUDA 1
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define KC_WARP_SIZE 32
#define KC_DEVICE __device__ __forceinline__

KC_DEVICE float kc_shfl_xor(float v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }
KC_DEVICE int kc_shfl_xor(int v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }
KC_DEVICE float kc_uint_as_float(unsigned int u) { return __uint_as_float(u); }
KC_DEVICE unsigned int kc_float_as_uint(float f) { return __float_as_uint(f); }

typedef __nv_bfloat16 kc_bf16;
KC_DEVICE float kc_bf16_to_float(kc_bf16 h) { return __bfloat162float(h); }
KC_DEVICE kc_bf16 kc_float_to_bf16(float f) { return __float2bfloat16_rn(f); }  // RNE

#endif

// ----------------------------------------------------------------------------------- common
#define KC_EXTERN_C extern "C"
#define KC_GLOBAL __global__
#define KC_RESTRICT __restrict__
// __launch_bounds__(n): CUDA native; HIP maps it to amdgpu_flat_work_group_size(1, n).
#define KC_LAUNCH_BOUNDS(n) __launch_bounds__(n)
// Unmangled kernel entry with a max block size: KC_KERNEL(256) void name(args) { ... }
#define KC_KERNEL(n) KC_EXTERN_C KC_GLOBAL KC_LAUNCH_BOUNDS(n)
// The same, asking the compiler to fit `blocks` blocks per SM/CU (a register cap), for
// memory-bound kernels that want more bytes in flight.
#define KC_KERNEL_OCC(n, blocks) KC_EXTERN_C KC_GLOBAL __launch_bounds__(n, blocks)

#define KC_NEG_INF (kc_uint_as_float(0xff800000u))

// ------------------------------------------------------- programmatic dependent launch
// A kernel launched with programmatic stream serialisation (kbuild-loader's
// LaunchConfig::programmatic) may start while the previous kernel in the stream still runs:
// it may read what that kernel does not write (weights, a state the kernel before it
// committed), then kc_grid_dependency_wait() returns once the previous kernel has finished and
// its writes are visible. kc_launch_dependents() lets the next such kernel start early. Both
// are no-ops without sm_90 (and a plain launch makes the wait return at once).
#if defined(KC_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
KC_DEVICE void kc_grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
KC_DEVICE void kc_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
#else
KC_DEVICE void kc_grid_dependency_wait() {}
KC_DEVICE void kc_launch_dependents() {}
#endif

// ------------------------------------------------------------------- asynchronous copies
// Global -> shared copies whose latency overlaps the block's compute: issue, commit the group,
// compute on something else, then kc_copy_async_wait<N>() (at most N newer groups still in
// flight) and __syncthreads() before any thread reads the copied bytes. The 16-byte form needs
// both addresses 16-byte aligned. Without cp.async (HIP, sm < 80) each copy completes at once.
// KC_NO_COPY_ASYNC forces the plain copies (to test that path on a CUDA GPU).
#if defined(KC_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(KC_NO_COPY_ASYNC)
#define KC_HAS_COPY_ASYNC 1
KC_DEVICE void kc_copy_async16(void* smem, const void* gmem) {
  const unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
KC_DEVICE void kc_copy_async4(void* smem, const void* gmem) {
  const unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}
KC_DEVICE void kc_copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
KC_DEVICE void kc_copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#else
#define KC_HAS_COPY_ASYNC 0
KC_DEVICE void kc_copy_async16(void* smem, const void* gmem) {
  *reinterpret_cast<float4*>(smem) = *reinterpret_cast<const float4*>(gmem);
}
KC_DEVICE void kc_copy_async4(void* smem, const void* gmem) {
  *reinterpret_cast<float*>(smem) = *reinterpret_cast<const float*>(gmem);
}
KC_DEVICE void kc_copy_async_commit() {}
template <int N>
KC_DEVICE void kc_copy_async_wait() {}
#endif

static_assert(sizeof(kc_bf16) == 2, "kc_bf16 must be 2 bytes");

// Upper / lower bf16 of a 32-bit word holding two consecutive bf16 (little endian: element 0 is
// the low half), as float. Exact.
KC_DEVICE float kc_bf16x2_lo(unsigned int w) { return kc_uint_as_float(w << 16); }
KC_DEVICE float kc_bf16x2_hi(unsigned int w) { return kc_uint_as_float(w & 0xffff0000u); }

// ------------------------------------------------------------------------------ reductions
// Butterfly reductions over the whole warp/wave (KC_WARP_SIZE lanes, 32 or 64): every lane ends
// with the full result. All lanes of the warp must be active.
KC_DEVICE float kc_warp_sum(float v) {
#pragma unroll
  for (int o = KC_WARP_SIZE / 2; o > 0; o >>= 1) v += kc_shfl_xor(v, o);
  return v;
}
KC_DEVICE float kc_warp_max(float v) {
#pragma unroll
  for (int o = KC_WARP_SIZE / 2; o > 0; o >>= 1) v = fmaxf(v, kc_shfl_xor(v, o));
  return v;
}

// Block reductions for a 1-D block of exactly BLOCK threads (BLOCK a multiple of KC_WARP_SIZE,
// at most 1024). Every thread must call it (contains __syncthreads); every thread gets the
// result. Safe to call repeatedly back to back (trailing barrier protects the scratch array).
namespace kc_detail {
struct op_sum {
  static KC_DEVICE float identity() { return 0.0f; }
  static KC_DEVICE float apply(float a, float b) { return a + b; }
  static KC_DEVICE float warp(float v) { return kc_warp_sum(v); }
};
struct op_max {
  static KC_DEVICE float identity() { return KC_NEG_INF; }
  static KC_DEVICE float apply(float a, float b) { return fmaxf(a, b); }
  static KC_DEVICE float warp(float v) { return kc_warp_max(v); }
};

template <int KcBlock, typename Op>
KC_DEVICE float block_reduce(float v) {
  static_assert(KcBlock % KC_WARP_SIZE == 0, "the block size must be a multiple of the warp/wave size");
  static_assert(KcBlock >= KC_WARP_SIZE && KcBlock <= 1024, "the block size must be in [warp size, 1024]");
  constexpr int NW = KcBlock / KC_WARP_SIZE;  // <= KC_WARP_SIZE since KcBlock <= 1024
  v = Op::warp(v);
  if (NW == 1) return v;
  __shared__ float scratch[NW];
  const int lane = (int)threadIdx.x % KC_WARP_SIZE;
  const int warp = (int)threadIdx.x / KC_WARP_SIZE;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < NW ? scratch[lane] : Op::identity();
  v = Op::warp(v);
  __syncthreads();
  return v;
}
}  // namespace kc_detail

template <int KcBlock>
KC_DEVICE float kc_block_sum(float v) { return kc_detail::block_reduce<KcBlock, kc_detail::op_sum>(v); }
template <int KcBlock>
KC_DEVICE float kc_block_max(float v) { return kc_detail::block_reduce<KcBlock, kc_detail::op_max>(v); }

#endif  // KBUILD_KCOMPAT_H
