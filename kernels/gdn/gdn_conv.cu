// GDN causal conv1d (width 4) + SiLU + per-head L2 norm of q and k, over T tokens.
//
// Entry:
//   gdn_conv(const float* x, const float* conv_w, const float* conv_state,
//            float* conv_state_out, float* qkv, int T, int tw, int hk, int hv, int layer0)
//   For layer l = layer0 + blockIdx.z and every token t < T, channel c:
//     y[t][c] = silu(sum_j conv_w[c][j] * win[t + j]),  win = conv_state[0..3)[c] ++ x[0..T)[c]
//   q and k segments are L2-normalised per key head (eps 1e-6), q then scaled by 1/sqrt(DK):
//   qkv[l][t] = q | k | v. conv_state is read, never written; if conv_state_out is not null it
//   receives the state advanced by all T tokens (it may alias conv_state).
//   Layouts: gdn_common.h.
// Launch: blockDim = (128, 1, 1); gridDim = (2*hk + hv, 1, layers): block x handles one head
//   segment (q head x, k head x - hk, or v head x - 2*hk). No dynamic shared memory.
//   1 <= T <= min(tw, 8).
// Defines: DK, DV (default 128).
#include "gdn_common.h"

#define CONV_THREADS 128
static_assert(DK <= CONV_THREADS && DV <= CONV_THREADS, "one thread per channel of a segment");

KC_KERNEL(CONV_THREADS)
void gdn_conv(const float* KC_RESTRICT x, const float* KC_RESTRICT conv_w,
              const float* conv_state, float* conv_state_out, float* KC_RESTRICT qkv, int T,
              int tw, int hk, int hv, int layer0) {
  const int l = layer0 + (int)blockIdx.z;
  const int seg = (int)blockIdx.x;
  const int e = (int)threadIdx.x;  // element of the segment
  const int C = 2 * hk * DK + hv * DV;
  const bool is_v = seg >= 2 * hk;
  const int width = is_v ? DV : DK;
  const int c0 = is_v ? 2 * hk * DK + (seg - 2 * hk) * DV : seg * DK;
  const bool active = e < width;
  const int c = c0 + (active ? e : 0);

  float win[GDN_CS + GDN_TMAX];
  float w[GDN_KW];
  float y[GDN_TMAX];
  if (active) {
    const float4 w4 = *reinterpret_cast<const float4*>(conv_w + ((size_t)l * C + c) * GDN_KW);
    w[0] = w4.x;
    w[1] = w4.y;
    w[2] = w4.z;
    w[3] = w4.w;
#pragma unroll
    for (int r = 0; r < GDN_CS; ++r) win[r] = conv_state[((size_t)l * GDN_CS + r) * C + c];
#pragma unroll
    for (int t = 0; t < GDN_TMAX; ++t)
      win[GDN_CS + t] = t < T ? x[gdn_tok(l, tw, t) * C + c] : 0.0f;
#pragma unroll
    for (int t = 0; t < GDN_TMAX; ++t) y[t] = t < T ? gdn_conv_silu(w, win + t) : 0.0f;
  } else {
#pragma unroll
    for (int t = 0; t < GDN_TMAX; ++t) y[t] = 0.0f;
  }

  if (!is_v) {
    // L2 norm over the head: element e is lane e % 32 of group e / 32 (gdn_common.h).
    __shared__ float partial[GDN_TMAX][CONV_THREADS / 32];
    const int lane32 = e % 32;
#pragma unroll
    for (int t = 0; t < GDN_TMAX; ++t) {
      const float s = gdn_sum32(y[t] * y[t]);
      if (lane32 == 0 && t < T) partial[t][e / 32] = s;
    }
    __syncthreads();
    const float scale = seg < hk ? gdn_q_scale() : 1.0f;
#pragma unroll
    for (int t = 0; t < GDN_TMAX; ++t) {
      if (t < T) {
        const float inv = gdn_l2_inv(gdn_combine(partial[t], DK / 32));
        y[t] = seg < hk ? (y[t] * inv) * scale : y[t] * inv;
      }
    }
  }

  if (!active) return;
#pragma unroll
  for (int t = 0; t < GDN_TMAX; ++t)
    if (t < T) qkv[gdn_tok(l, tw, t) * C + c] = y[t];
  if (conv_state_out != nullptr) {
    // win[T + r] for r < 3: the last three inputs (state rows first when T < 3).
#pragma unroll
    for (int r = 0; r < GDN_CS; ++r) {
      float v = 0.0f;
#pragma unroll
      for (int i = 0; i < GDN_CS + GDN_TMAX; ++i)
        if (i == T + r) v = win[i];
      conv_state_out[((size_t)l * GDN_CS + r) * C + c] = v;
    }
  }
}
