// Numerically stable row softmax: y[r, c] = exp(x[r, c] - max_r) / sum_c exp(x[r, c] - max_r)
//
// Entry: softmax_f32(const float* x, float* y, int rows, int cols)
// x, y: row-major [rows, cols] (contiguous). In-place (y == x) is allowed.
// Launch: blockDim = (BLOCK, 1, 1) exactly; gridDim.x = rows (any gridDim.x >= 1 works: blocks
// stride over rows). No dynamic shared memory. Any cols >= 1.
// A row that is entirely -inf gives NaN (like exp(x - max) in a CPU reference).
// Defines: BLOCK (default 256): threads per block; multiple of 64, 64..1024.
#include "kcompat.h"

#ifndef BLOCK
#define BLOCK 256
#endif
static_assert(BLOCK % 64 == 0 && BLOCK >= 64 && BLOCK <= 1024, "BLOCK: multiple of 64 in [64, 1024]");

KC_KERNEL(BLOCK) void softmax_f32(const float* x, float* y, int rows, int cols) {
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + (size_t)row * (size_t)cols;
    float* yr = y + (size_t)row * (size_t)cols;

    float m = KC_NEG_INF;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, xr[c]);
    m = kc_block_max<BLOCK>(m);

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) s += expf(xr[c] - m);
    s = kc_block_sum<BLOCK>(s);

    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = expf(xr[c] - m) * inv;
    // In-place safety: each element is read then written by the same thread only, and all
    // reads of the row for the reductions finished before the block_sum barrier.
  }
}
