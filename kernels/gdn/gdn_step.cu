// GDN delta-rule step over exactly TOKENS tokens from the committed state.
//
// Entries (both in every object; TOKENS is the variant):
//   gdn_step_verify(const float* qkv, const float* g, const float* beta, const float* S,
//                   float* o, int tw, int hk, int hv, int layer0)
//     Outputs only: for t < TOKENS, o[l][t] = S_t^T q_t where S_t is the state after tokens
//     0..t applied to the committed S. S is not written.
//   gdn_step_commit(const float* qkv, const float* g, const float* beta, const float* x,
//                   float* S, float* conv_state, int tw, int hk, int hv, int layer0,
//                   int layers)
//     Advances the committed state of layers layer0 .. layer0 + layers - 1 by exactly TOKENS
//     tokens and writes it back (in place), and advances their conv states by the same tokens
//     of the raw input x. No outputs.
//   Per token, per value head h (key head kh = h*hk/hv), column j of S (tiled, gdn_common.h):
//     S <- e^g S;  u = v - S^T k;  S <- S + beta k (x) u;  o = S^T q
//   with q, k, v from qkv (gdn_conv's output), g and beta from gdn_gates. One launch covers one
//   layer or all of them (batched commit), with bitwise identical results.
// Launch: blockDim = (128, 1, 1). verify: gridDim = (DV/32, hv, layers), layer l = layer0 +
//   blockIdx.z; a block owns 32 state columns of one value head. commit: gridDim = (any, 1, 1),
//   best the blocks that fit on the device at once (it walks the layers' DV/32 * hv tiles).
//   No dynamic shared memory. TOKENS <= tw.
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
    eg_s[threadIdx.x] = gdn_exp(g[at]);
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
    const float ot = gdn_dot(s, gdn_kchunk(q_s + t * GDN_KPAD, ln.p));
    if (ln.p == 0) o[gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + ln.col] = ot;
  }
}

// The commit is memory-bound: it streams every state tile in and out once. A block walks the
// tiles (layer, value head, 32 columns) b, b + gridDim.x, ... and while it advances one, the
// copy of the next tile's state slice (16 KB, contiguous in the tiled layout), k, v, g and
// beta into shared memory is in flight (cp.async on sm_80+). One block per tile, loading then
// computing, left DRAM idle while each block computed: on the H200, 36 layers, n = 5 took
// 73.7 us against the copy's 57.4; walking with the copies in flight, 69.5 (0.82 of the copy).
// Up to TOKENS = 5, 5 blocks per SM (<= 96 registers, no spills; 6 would spill) keep more
// tiles in flight; more tokens keep the compiler's choice (4 blocks).
#define COMMIT_STATE_FLOATS (STEP_COLS * DK)  // one tile's state slice
#if TOKENS <= 5
KC_KERNEL_OCC(STEP_THREADS, 5)
#else
KC_KERNEL(STEP_THREADS)
#endif
void gdn_step_commit(const float* KC_RESTRICT qkv, const float* KC_RESTRICT g,
                     const float* KC_RESTRICT beta, const float* KC_RESTRICT x,
                     float* KC_RESTRICT S, float* KC_RESTRICT conv_state, int tw, int hk,
                     int hv, int layer0, int layers) {
  constexpr int NBX = DV / STEP_COLS;  // tiles per value head
  const int C = 2 * hk * DK + hv * DV;
  const int tid = (int)threadIdx.x;
  const int lane32 = tid % 32;
  const int cgl = tid / 32;  // the lane's 8-column group within the tile
  const int lcol = cgl * GDN_COLS_PER_GROUP + lane32 % GDN_COLS_PER_GROUP;
  const int p = lane32 / GDN_COLS_PER_GROUP;
  const int tiles = layers * hv * NBX;

#if KC_HAS_COPY_ASYNC
  __shared__ float4 st_s4[COMMIT_STATE_FLOATS / 4];
  float* st_s = reinterpret_cast<float*>(st_s4);
#endif
  __shared__ float4 k_s4[2][TOKENS][GDN_KPAD / 4];
  __shared__ float4 v_s4[2][TOKENS][STEP_COLS / 4];
  __shared__ float g_s[2][TOKENS];
  __shared__ float beta_s[2][TOKENS];

  // The state slice of tile `tile` (contiguous in the tiled layout).
  auto tile_state = [&](int tile) {
    const int l = layer0 + tile / (hv * NBX);
    const int h = (tile / NBX) % hv;
    return S + ((size_t)l * hv + h) * (size_t)(DK * DV) + (size_t)(tile % NBX) * COMMIT_STATE_FLOATS;
  };
  // Issue the copies of tile `tile` into buffer `buf` (the state slice has one buffer: it is
  // read into registers before the next copy is issued). Without cp.async (HIP, sm < 80) the
  // state is read straight into registers instead: a shared copy would only cost LDS (and
  // occupancy: gfx90a fell to 1-2 waves per SIMD).
  auto issue = [&](int tile, int buf) {
    const int l = layer0 + tile / (hv * NBX);
    const int h = (tile / NBX) % hv;
    const int bx = tile % NBX;
    const int kh = h * hk / hv;
#if KC_HAS_COPY_ASYNC
    const float* src = tile_state(tile);
#pragma unroll 1
    for (int c = tid; c < COMMIT_STATE_FLOATS / 4; c += STEP_THREADS) kc_copy_async16(&st_s4[c], src + 4 * c);
#endif
#pragma unroll 1
    for (int idx = tid; idx < TOKENS * (DK / 4); idx += STEP_THREADS) {
      const int t = idx / (DK / 4);
      const int i = 4 * (idx % (DK / 4));
      kc_copy_async16(reinterpret_cast<float*>(k_s4[buf][t]) + gdn_kpad(i),
                      qkv + gdn_tok(l, tw, t) * C + (size_t)(hk + kh) * DK + i);
    }
#pragma unroll 1
    for (int idx = tid; idx < TOKENS * (STEP_COLS / 4); idx += STEP_THREADS) {
      const int t = idx / (STEP_COLS / 4);
      const int c4 = idx % (STEP_COLS / 4);
      kc_copy_async16(&v_s4[buf][t][c4],
                      qkv + gdn_tok(l, tw, t) * C + 2 * (size_t)hk * DK + (size_t)h * DV +
                          (size_t)bx * STEP_COLS + 4 * c4);
    }
    if (tid < TOKENS) {
      const size_t at = gdn_tok(l, tw, tid) * hv + h;
      kc_copy_async4(&g_s[buf][tid], g + at);
      kc_copy_async4(&beta_s[buf][tid], beta + at);
    }
  };

  int buf = 0;
  if ((int)blockIdx.x < tiles) issue((int)blockIdx.x, 0);
  kc_copy_async_commit();
  for (int tile = (int)blockIdx.x; tile < tiles; tile += (int)gridDim.x, buf ^= 1) {
    kc_copy_async_wait<0>();
    __syncthreads();  // the tile's copies are visible to every thread
    const size_t lane_at = (size_t)(cgl * (DK * GDN_COLS_PER_GROUP) + lane32);
    float s[GDN_ROWS];
#if KC_HAS_COPY_ASYNC
#pragma unroll
    for (int r = 0; r < GDN_ROWS; ++r) s[r] = st_s[lane_at + r * GDN_STATE_STEP];
#else
    const float* Sg = tile_state(tile) + lane_at;
#pragma unroll
    for (int r = 0; r < GDN_ROWS; ++r) s[r] = Sg[r * GDN_STATE_STEP];
#endif
    __syncthreads();  // the state buffer is free
    if (tile + (int)gridDim.x < tiles) issue(tile + (int)gridDim.x, buf ^ 1);
    kc_copy_async_commit();

    const float* k_s = reinterpret_cast<const float*>(k_s4[buf]);
    const float* v_s = reinterpret_cast<const float*>(v_s4[buf]);
#pragma unroll
    for (int t = 0; t < TOKENS; ++t)
      gdn_token(s, gdn_kchunk(k_s + t * GDN_KPAD, p), v_s[t * STEP_COLS + lcol], gdn_exp(g_s[buf][t]),
                beta_s[buf][t]);
    float* Sc = tile_state(tile) + lane_at;
#pragma unroll
    for (int r = 0; r < GDN_ROWS; ++r) Sc[r * GDN_STATE_STEP] = s[r];
  }

  // The conv states of the launch's layers, spread over its blocks: new rows = the last three
  // of (old rows ++ x[0..TOKENS)).
  const size_t channels = (size_t)layers * C;
  for (size_t idx = (size_t)blockIdx.x * STEP_THREADS + tid; idx < channels;
       idx += (size_t)gridDim.x * STEP_THREADS) {
    const int l = layer0 + (int)(idx / C);
    const int c = (int)(idx % C);
    float win[GDN_CS + TOKENS];
#pragma unroll
    for (int r = 0; r < GDN_CS; ++r) win[r] = conv_state[((size_t)l * GDN_CS + r) * C + c];
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) win[GDN_CS + t] = x[gdn_tok(l, tw, t) * C + c];
#pragma unroll
    for (int r = 0; r < GDN_CS; ++r) conv_state[((size_t)l * GDN_CS + r) * C + c] = win[TOKENS + r];
  }
}
