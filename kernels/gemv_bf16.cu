// bf16 GEMV: y[r] = sum_c A[r, c] * x[c], f32 accumulation.
//
// Entries (both in every object, both instantiate gemv_impl<ROWS_PER_BLOCK, OutT>):
//   gemv_bf16     (const kc_bf16* A, const kc_bf16* x, float*   y, int rows, int cols)
//   gemv_bf16_bf16(const kc_bf16* A, const kc_bf16* x, kc_bf16* y, int rows, int cols)
//     (bf16 output rounded to nearest even)
// A: row-major [rows, cols], contiguous (row stride = cols); x: [cols]; y: [rows].
// Launch: blockDim = (BLOCK, 1, 1) exactly; gridDim.x = ceil(rows / ROWS_PER_BLOCK)
// (any gridDim.x >= 1 works: blocks stride over row groups). No dynamic shared memory.
// Fast path (16-byte loads) when cols % 8 == 0 and A, x are 16-byte aligned; otherwise a scalar
// path. Any rows >= 0, cols >= 1.
// Defines:
//   ROWS_PER_BLOCK (default 4): rows per block, the build variant axis; 1..8 (e.g. 1, 2, 4, 8).
//   BLOCK          (default 256): threads per block; multiple of 64, 64..1024. Spill-free on
//                  every target for BLOCK <= 256 with any ROWS_PER_BLOCK; on NVIDIA,
//                  BLOCK >= 512 with ROWS_PER_BLOCK = 8 spills a few bytes (ptxas register cap).
#include "kcompat.h"

#ifndef ROWS_PER_BLOCK
#define ROWS_PER_BLOCK 4
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
static_assert(ROWS_PER_BLOCK >= 1 && ROWS_PER_BLOCK <= 8, "ROWS_PER_BLOCK must be in [1, 8]");
static_assert(BLOCK % 64 == 0 && BLOCK >= 64 && BLOCK <= 1024, "BLOCK: multiple of 64 in [64, 1024]");

KC_DEVICE void kc_store_f(float* p, float v) { *p = v; }
KC_DEVICE void kc_store_f(kc_bf16* p, float v) { *p = kc_float_to_bf16(v); }

// dot of 8 bf16 (one uint4 of A) with 8 floats of x
KC_DEVICE float dot8(uint4 a, const float (&xf)[8], float acc) {
  acc = fmaf(kc_bf16x2_lo(a.x), xf[0], acc);
  acc = fmaf(kc_bf16x2_hi(a.x), xf[1], acc);
  acc = fmaf(kc_bf16x2_lo(a.y), xf[2], acc);
  acc = fmaf(kc_bf16x2_hi(a.y), xf[3], acc);
  acc = fmaf(kc_bf16x2_lo(a.z), xf[4], acc);
  acc = fmaf(kc_bf16x2_hi(a.z), xf[5], acc);
  acc = fmaf(kc_bf16x2_lo(a.w), xf[6], acc);
  acc = fmaf(kc_bf16x2_hi(a.w), xf[7], acc);
  return acc;
}

template <int KcRows, typename OutT>
__device__ void gemv_impl(const kc_bf16* KC_RESTRICT A, const kc_bf16* KC_RESTRICT x,
                          OutT* KC_RESTRICT y, int rows, int cols) {
  constexpr int NW = BLOCK / KC_WARP_SIZE;
  __shared__ float partial[KcRows][NW];
  const int tid = (int)threadIdx.x;
  const bool vec = (cols % 8 == 0) && ((size_t)A % 16 == 0) && ((size_t)x % 16 == 0);

  const long long step = (long long)gridDim.x * KcRows;
  for (long long r0 = (long long)blockIdx.x * KcRows; r0 < rows; r0 += step) {
    // Rows past the end are clamped to the last row (valid reads, result discarded), so the
    // inner loops carry no per-row bounds checks.
    const kc_bf16* Ar[KcRows];
#pragma unroll
    for (int i = 0; i < KcRows; ++i) {
      const long long r = (r0 + i < rows) ? (r0 + i) : (long long)(rows - 1);
      Ar[i] = A + (size_t)r * (size_t)cols;
    }
    float acc[KcRows];
#pragma unroll
    for (int i = 0; i < KcRows; ++i) acc[i] = 0.0f;

    if (vec) {
      const int n8 = cols / 8;
      const uint4* x4 = reinterpret_cast<const uint4*>(x);
      for (int j = tid; j < n8; j += BLOCK) {
        const uint4 xv = x4[j];
        const float xf[8] = {kc_bf16x2_lo(xv.x), kc_bf16x2_hi(xv.x), kc_bf16x2_lo(xv.y),
                             kc_bf16x2_hi(xv.y), kc_bf16x2_lo(xv.z), kc_bf16x2_hi(xv.z),
                             kc_bf16x2_lo(xv.w), kc_bf16x2_hi(xv.w)};
        uint4 av[KcRows];
#pragma unroll
        for (int i = 0; i < KcRows; ++i) av[i] = reinterpret_cast<const uint4*>(Ar[i])[j];
#pragma unroll
        for (int i = 0; i < KcRows; ++i) acc[i] = dot8(av[i], xf, acc[i]);
      }
    } else {
      for (int c = tid; c < cols; c += BLOCK) {
        const float xc = kc_bf16_to_float(x[c]);
#pragma unroll
        for (int i = 0; i < KcRows; ++i) acc[i] = fmaf(kc_bf16_to_float(Ar[i][c]), xc, acc[i]);
      }
    }

    // Reduce each row's partial sums: warp butterfly, then one value per warp through shared.
    const int lane = tid % KC_WARP_SIZE;
    const int warp = tid / KC_WARP_SIZE;
#pragma unroll
    for (int i = 0; i < KcRows; ++i) {
      const float v = kc_warp_sum(acc[i]);
      if (lane == 0) partial[i][warp] = v;
    }
    __syncthreads();
    if (tid < KcRows && r0 + tid < rows) {
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < NW; ++k) s += partial[tid][k];
      kc_store_f(y + (r0 + tid), s);
    }
    __syncthreads();  // partial[] is reused by the next row group
  }
}

KC_KERNEL(BLOCK) void gemv_bf16(const kc_bf16* KC_RESTRICT A, const kc_bf16* KC_RESTRICT x,
                                float* KC_RESTRICT y, int rows, int cols) {
  gemv_impl<ROWS_PER_BLOCK, float>(A, x, y, rows, cols);
}

KC_KERNEL(BLOCK) void gemv_bf16_bf16(const kc_bf16* KC_RESTRICT A, const kc_bf16* KC_RESTRICT x,
                                     kc_bf16* KC_RESTRICT y, int rows, int cols) {
  gemv_impl<ROWS_PER_BLOCK, kc_bf16>(A, x, y, rows, cols);
}
