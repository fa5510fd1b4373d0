// RMSNorm: y[r, c] = x[r, c] / sqrt(mean_c(x[r, :]^2) + eps) * w[c]
//
// Entries (both in every object):
//   rmsnorm_f32 (const float*   x, const float*   w, float*   y, int rows, int cols, float eps)
//   rmsnorm_bf16(const kc_bf16* x, const kc_bf16* w, kc_bf16* y, int rows, int cols, float eps)
//     bf16 in/out, f32 accumulation, output rounded to nearest even.
// x, y: row-major [rows, cols] (contiguous); w: [cols]. y may not alias x.
// Launch: blockDim = (BLOCK, 1, 1) exactly; gridDim.x = rows (any gridDim.x >= 1 works: blocks
// stride over rows). No dynamic shared memory. Any cols >= 1.
// Defines: BLOCK (default 256): threads per block; multiple of 64, 64..1024.
#include "kcompat.h"

#ifndef BLOCK
#define BLOCK 256
#endif
static_assert(BLOCK % 64 == 0 && BLOCK >= 64 && BLOCK <= 1024, "BLOCK: multiple of 64 in [64, 1024]");

KC_DEVICE float kc_load_f(const float* p) { return *p; }
KC_DEVICE float kc_load_f(const kc_bf16* p) { return kc_bf16_to_float(*p); }
KC_DEVICE void kc_store_f(float* p, float v) { *p = v; }
KC_DEVICE void kc_store_f(kc_bf16* p, float v) { *p = kc_float_to_bf16(v); }

template <typename T>
__device__ void rmsnorm_impl(const T* KC_RESTRICT x, const T* KC_RESTRICT w, T* KC_RESTRICT y,
                             int rows, int cols, float eps) {
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + (size_t)row * (size_t)cols;
    T* yr = y + (size_t)row * (size_t)cols;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
      const float v = kc_load_f(xr + c);
      ss = fmaf(v, v, ss);
    }
    ss = kc_block_sum<BLOCK>(ss);
    const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += BLOCK) {
      kc_store_f(yr + c, (kc_load_f(xr + c) * inv) * kc_load_f(w + c));
    }
  }
}

KC_KERNEL(BLOCK) void rmsnorm_f32(const float* KC_RESTRICT x, const float* KC_RESTRICT w,
                                  float* KC_RESTRICT y, int rows, int cols, float eps) {
  rmsnorm_impl<float>(x, w, y, rows, cols, eps);
}

KC_KERNEL(BLOCK) void rmsnorm_bf16(const kc_bf16* KC_RESTRICT x, const kc_bf16* KC_RESTRICT w,
                                   kc_bf16* KC_RESTRICT y, int rows, int cols, float eps) {
  rmsnorm_impl<kc_bf16>(x, w, y, rows, cols, eps);
}
