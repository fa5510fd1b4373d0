// GDN delta-rule step over exactly TOKENS tokens from the committed state.
//
// Entries (both in every object; TOKENS is the variant):
//   gdn_step_verify(const float* qkv, const float* g, const float* beta, const float* S,
//                   float* o, int tw, int hk, int hv, int layer0)
//     Outputs only: for t < TOKENS, o[l][t] = S_t^T q_t where S_t is the state after tokens
//     0..t applied to the committed S. S is not written.
//   gdn_step_commit(const float* qkv, const float* g, const float* beta, const float* x,
//                   float* S, float* conv_state, int tw, int hk, int hv, int layer0)
//     Advances the committed state by exactly TOKENS tokens and writes it back (in place), and
//     advances the conv state by the same tokens of the raw input x. No outputs.
//   Per token, per value head h (key head kh = h*hk/hv), column j of S (tiled, gdn_common.h):
//     S <- e^g S;  u = v - S^T k;  S <- S + beta k (x) u;  o = S^T q
//   with q, k, v from qkv (gdn_conv's output), g and beta from gdn_gates. Layer l is
//   layer0 + blockIdx.z: one launch covers one layer or all of them (batched commit), with
//   bitwise identical results.
// Launch: blockDim = (128, 1, 1); gridDim = (DV/32, hv, layers): a block owns 32 state columns
//   of one value head. No dynamic shared memory. TOKENS <= tw.
// Defines: TOKENS (1..8, default 1), DK, DV (default 128).
#include "gdn_common.h"

#define STEP_COLS 32
#define STEP_THREADS (STEP_COLS * GDN_PARTS)
static_assert(DV % STEP_COLS == 0, "DV: multiple of 32");

namespace {

struct Lane {
  int p;    // part: rows p * GDN_ROWS + r
  int c;    // column within the 8-column group
  int cg;   // 8-column group within the head
  int col;  // state column within the head
};

KC_DEVICE Lane step_lane() {
  const int tid = (int)threadIdx.x;
  const int lane32 = tid % 32;
  Lane ln;
  ln.p = lane32 / GDN_COLS_PER_GROUP;
  ln.c = lane32 % GDN_COLS_PER_GROUP;
  ln.cg = (int)blockIdx.x * (STEP_COLS / GDN_COLS_PER_GROUP) + tid / 32;
  ln.col = ln.cg * GDN_COLS_PER_GROUP + ln.c;
  return ln;
}

// Stage k (and q when WithQ) of key head kh (gdn_kpad layout), e^g and beta of head h for the
// TOKENS tokens.
template <bool WithQ>
KC_DEVICE void stage_tokens(const float* qkv, const float* g, const float* beta, int l, int tw,
                            int hk, int hv, int h, float* q_s, float* k_s, float* eg_s,
                            float* beta_s) {
  const int C = 2 * hk * DK + hv * DV;
  const int kh = h * hk / hv;
  for (int idx = (int)threadIdx.x; idx < TOKENS * DK; idx += STEP_THREADS) {
    const int t = idx / DK;
    const int i = idx % DK;
    const size_t base = gdn_tok(l, tw, t) * C;
    if (WithQ) q_s[t * GDN_KPAD + gdn_kpad(i)] = qkv[base + (size_t)kh * DK + i];
    k_s[t * GDN_KPAD + gdn_kpad(i)] = qkv[base + (size_t)(hk + kh) * DK + i];
  }
  if ((int)threadIdx.x < TOKENS) {
    const size_t at = gdn_tok(l, tw, (int)threadIdx.x) * hv + h;
    eg_s[threadIdx.x] = expf(g[at]);
    beta_s[threadIdx.x] = beta[at];
  }
}

}  // namespace

KC_KERNEL(STEP_THREADS)
void gdn_step_verify(const float* KC_RESTRICT qkv, const float* KC_RESTRICT g,
                     const float* KC_RESTRICT beta, const float* KC_RESTRICT S,
                     float* KC_RESTRICT o, int tw, int hk, int hv, int layer0) {
  const int l = layer0 + (int)blockIdx.z;
  const int h = (int)blockIdx.y;
  const int C = 2 * hk * DK + hv * DV;
  const Lane ln = step_lane();
  __shared__ float4 q_s4[TOKENS][GDN_KPAD / 4];
  __shared__ float4 k_s4[TOKENS][GDN_KPAD / 4];
  __shared__ float eg_s[TOKENS];
  __shared__ float beta_s[TOKENS];
  float* q_s = reinterpret_cast<float*>(q_s4);
  float* k_s = reinterpret_cast<float*>(k_s4);

  const float* Sc = S + gdn_state_lane(l, hv, h, ln.cg, ln.p, ln.c);
  float s[GDN_ROWS];
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) s[r] = Sc[r * GDN_STATE_STEP];
  float v[TOKENS];
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) v[t] = qkv[gdn_tok(l, tw, t) * C + 2 * hk * DK + h * DV + ln.col];
  stage_tokens<true>(qkv, g, beta, l, tw, hk, hv, h, q_s, k_s, eg_s, beta_s);
  __syncthreads();

#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    gdn_token(s, gdn_kchunk(k_s + t * GDN_KPAD, ln.p), v[t], eg_s[t], beta_s[t]);
    const float ot = gdn_readout(s, gdn_kchunk(q_s + t * GDN_KPAD, ln.p));
    if (ln.p == 0) o[gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + ln.col] = ot;
  }
}

// Memory-bound: 6 blocks per SM (<= 80 registers) keep more of the state in flight. Up to
// TOKENS = 5 that costs no spills (more tokens would spill: they keep the compiler's choice).
// H200, batched commit of 36 layers: n = 3 went from 0.78 to 0.81 of the copy bandwidth.
#if TOKENS <= 5
KC_KERNEL_OCC(STEP_THREADS, 6)
#else
KC_KERNEL(STEP_THREADS)
#endif
void gdn_step_commit(const float* KC_RESTRICT qkv, const float* KC_RESTRICT g,
                     const float* KC_RESTRICT beta, const float* KC_RESTRICT x,
                     float* KC_RESTRICT S, float* KC_RESTRICT conv_state, int tw, int hk,
                     int hv, int layer0) {
  const int l = layer0 + (int)blockIdx.z;
  const int h = (int)blockIdx.y;
  const int C = 2 * hk * DK + hv * DV;
  const Lane ln = step_lane();
  __shared__ float4 k_s4[TOKENS][GDN_KPAD / 4];
  __shared__ float eg_s[TOKENS];
  __shared__ float beta_s[TOKENS];
  float* k_s = reinterpret_cast<float*>(k_s4);

  float* Sc = S + gdn_state_lane(l, hv, h, ln.cg, ln.p, ln.c);
  float s[GDN_ROWS];
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) s[r] = Sc[r * GDN_STATE_STEP];
  float v[TOKENS];
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) v[t] = qkv[gdn_tok(l, tw, t) * C + 2 * hk * DK + h * DV + ln.col];
  stage_tokens<false>(qkv, g, beta, l, tw, hk, hv, h, nullptr, k_s, eg_s, beta_s);
  __syncthreads();

#pragma unroll
  for (int t = 0; t < TOKENS; ++t) gdn_token(s, gdn_kchunk(k_s + t * GDN_KPAD, ln.p), v[t], eg_s[t], beta_s[t]);
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) Sc[r * GDN_STATE_STEP] = s[r];

  // The layer's conv state, spread over the layer's blocks: new rows = the last three of
  // (old rows ++ x[0..TOKENS)).
  const int nb = (int)(gridDim.x * gridDim.y);
  const int fb = (int)(blockIdx.y * gridDim.x + blockIdx.x);
  for (int c = fb * STEP_THREADS + (int)threadIdx.x; c < C; c += nb * STEP_THREADS) {
    float win[GDN_CS + TOKENS];
#pragma unroll
    for (int r = 0; r < GDN_CS; ++r) win[r] = conv_state[((size_t)l * GDN_CS + r) * C + c];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) win[GDN_CS + t] = x[gdn_tok(l, tw, t) * C + c];
#pragma unroll
    for (int r = 0; r < GDN_CS; ++r) conv_state[((size_t)l * GDN_CS + r) * C + c] = win[TOKENS + r];
  }
}
