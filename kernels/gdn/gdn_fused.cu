// GDN fused verify of one layer: conv+SiLU+L2 norm -> gates -> delta-rule step -> gated
// RMSNorm in one launch, over exactly TOKENS tokens from the committed state.
//
// Entry:
//   gdn_fused_verify(const float* x, const float* z, const float* a, const float* b,
//                    const float* conv_w, const float* A_log, const float* dt_bias,
//                    const float* norm_w, const float* conv_state, const float* S,
//                    float* qkv, float* g, float* beta, float* o, float* y,
//                    int tw, int hk, int hv, float eps, int layer0)
//   Bitwise the same qkv, g, beta, o and y as gdn_conv -> gdn_gates -> gdn_step_verify ->
//   gdn_norm (every element goes through the same operations of gdn_common.h in the same
//   order), so gdn_step_commit can follow either path. S and conv_state are not written.
//   Value head h = blockIdx.x recomputes the conv of its key head's q and k (the hv/hk value
//   heads of a key head share them; the first of them writes them to qkv).
// Launch: blockDim = (DV*4, 1, 1) (512 for DV = 128); gridDim = (hv, 1, layers). No dynamic
//   shared memory. TOKENS <= tw.
// Defines: TOKENS (1..8, default 1), DK, DV (default 128).
#include "gdn_common.h"

#define FUSED_THREADS (DV * GDN_PARTS)
static_assert(2 * DK + DV <= FUSED_THREADS, "one thread per conv channel of the block");

KC_KERNEL(FUSED_THREADS)
void gdn_fused_verify(const float* KC_RESTRICT x, const float* KC_RESTRICT z,
                      const float* KC_RESTRICT a, const float* KC_RESTRICT b,
                      const float* KC_RESTRICT conv_w, const float* KC_RESTRICT a_log,
                      const float* KC_RESTRICT dt_bias, const float* KC_RESTRICT norm_w,
                      const float* KC_RESTRICT conv_state, const float* KC_RESTRICT S,
                      float* KC_RESTRICT qkv, float* KC_RESTRICT g, float* KC_RESTRICT beta,
                      float* KC_RESTRICT o, float* KC_RESTRICT y, int tw, int hk, int hv,
                      float eps, int layer0) {
  const int l = layer0 + (int)blockIdx.z;
  const int h = (int)blockIdx.x;
  const int kh = h * hk / hv;
  const bool kh_writer = h == 0 || (h - 1) * hk / hv != kh;
  const int C = 2 * hk * DK + hv * DV;
  const int tid = (int)threadIdx.x;
  const int lane32 = tid % 32;

  __shared__ float q_s[TOKENS][DK];
  __shared__ float k_s[TOKENS][DK];
  __shared__ float v_s[TOKENS][DV];
  __shared__ float o_s[TOKENS][DV];
  __shared__ float red_s[TOKENS][2 * DK / 32];
  __shared__ float nred_s[TOKENS][DV / 32];
  __shared__ float eg_s[TOKENS];
  __shared__ float beta_s[TOKENS];

  // ---- conv + SiLU: thread tid < DK -> q channel, < 2*DK -> k channel, < 2*DK+DV -> v channel.
  const int kind = tid < DK ? 0 : tid < 2 * DK ? 1 : tid < 2 * DK + DV ? 2 : 3;
  const int e = kind == 0 ? tid : kind == 1 ? tid - DK : kind == 2 ? tid - 2 * DK : 0;
  const int c = kind == 0 ? kh * DK + e : kind == 1 ? (hk + kh) * DK + e : 2 * hk * DK + h * DV + e;
  float yv[TOKENS];
  float win[GDN_CS + TOKENS];
  if (kind < 3) {
    const float4 w4 = *reinterpret_cast<const float4*>(conv_w + ((size_t)l * C + c) * GDN_KW);
    float w[GDN_KW];
    w[0] = w4.x;
    w[1] = w4.y;
    w[2] = w4.z;
    w[3] = w4.w;
#pragma unroll
    for (int r = 0; r < GDN_CS; ++r) win[r] = conv_state[((size_t)l * GDN_CS + r) * C + c];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) win[GDN_CS + t] = x[gdn_tok(l, tw, t) * C + c];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) yv[t] = gdn_conv_silu(w, win + t);
  } else {
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) yv[t] = 0.0f;
  }
  // L2 norm of q and k: element e is lane e % 32 of group e / 32, as in gdn_conv.
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    const float s = gdn_sum32(kind < 2 ? yv[t] * yv[t] : 0.0f);
    if (lane32 == 0 && kind < 2) red_s[t][tid / 32] = s;
  }
  // ---- gates of head h.
  if (tid < TOKENS) {
    const size_t at = gdn_tok(l, tw, tid) * hv + h;
    const size_t ah = (size_t)l * hv + h;
    const float gt = gdn_gate_g(a[at], a_log[ah], dt_bias[ah]);
    const float bt = gdn_gate_beta(b[at]);
    g[at] = gt;
    beta[at] = bt;
    eg_s[tid] = expf(gt);
    beta_s[tid] = bt;
  }
  __syncthreads();
  if (kind < 3) {
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      float val = yv[t];
      if (kind == 0) {
        val = (val * gdn_l2_inv(gdn_combine(red_s[t], DK / 32))) * gdn_q_scale();
        q_s[t][e] = val;
      } else if (kind == 1) {
        val = val * gdn_l2_inv(gdn_combine(&red_s[t][DK / 32], DK / 32));
        k_s[t][e] = val;
      } else {
        v_s[t][e] = val;
      }
      if (kind == 2 || kh_writer) qkv[gdn_tok(l, tw, t) * C + c] = val;
    }
  }
  __syncthreads();

  // ---- delta-rule step: lane (col, p) of 32-lane group tid/32, as in gdn_step.
  {
    const int p = lane32 / GDN_COLS_PER_GROUP;
    const int col = (tid / 32) * GDN_COLS_PER_GROUP + lane32 % GDN_COLS_PER_GROUP;
    const float* Sc = S + ((size_t)l * hv + h) * (size_t)(DK * DV) + (size_t)p * DV + col;
    float s[GDN_ROWS];
#pragma unroll
    for (int r = 0; r < GDN_ROWS; ++r) s[r] = Sc[r * GDN_PARTS * DV];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      gdn_token(s, k_s[t], v_s[t][col], eg_s[t], beta_s[t], p);
      const float ot = gdn_readout(s, q_s[t], p);
      if (p == 0) {
        o_s[t][col] = ot;
        o[gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + col] = ot;
      }
    }
  }
  __syncthreads();

  // ---- gated RMSNorm: element j is lane j % 32 of group j / 32, as in gdn_norm.
  const int j = tid % DV;
  const int t0 = tid / DV;  // 0..GDN_PARTS-1
#pragma unroll
  for (int tb = 0; tb < TOKENS; tb += GDN_PARTS) {
    const int t = tb + t0;
    const float ov = t < TOKENS ? o_s[t][j] : 0.0f;
    const float s = gdn_sum32(ov * ov);
    if (lane32 == 0 && t < TOKENS) nred_s[t][j / 32] = s;
  }
  __syncthreads();
#pragma unroll
  for (int tb = 0; tb < TOKENS; tb += GDN_PARTS) {
    const int t = tb + t0;
    if (t < TOKENS) {
      const size_t at = gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + j;
      y[at] = gdn_gated_norm(o_s[t][j], gdn_combine(nred_s[t], DV / 32), norm_w[(size_t)l * DV + j], z[at], eps);
    }
  }
}
