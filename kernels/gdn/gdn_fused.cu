// GDN fused verify of one layer: conv+SiLU+L2 norm -> gates -> delta-rule step -> gated
// RMSNorm in one launch, over exactly TOKENS tokens from the committed state.
//
// Entry:
//   gdn_fused_verify(const float* x, const float* z, const float* a, const float* b,
//                    const float* conv_w, const float* A_log, const float* dt_bias,
//                    const float* norm_w, const float* conv_state, const float* S,
//                    float* qkv, float* g, float* beta, float* o, float* y,
//                    float* norm_part, int* norm_count, int tw, int hk, int hv, float eps,
//                    int layer0)
//   Bitwise the same qkv, g, beta, o and y as gdn_conv -> gdn_gates -> gdn_step_verify ->
//   gdn_norm (every element goes through the same operations of gdn_common.h in the same
//   order), so gdn_step_commit can follow either path. S and conv_state are not written.
//   Every global load (state slice, conv inputs, z, norm_w) is issued at the start; those of
//   the inputs x, z, a, b after kc_grid_dependency_wait, so that the engine may launch layer
//   l + 1 programmatically (it then loads its state while layer l runs).
//   Block (cg, h) owns the 32 state columns cg*32.. of value head h, as gdn_step's blocks, and
//   recomputes the conv of its key head's q and k (the blocks of a key head share them; block
//   0 of the head's first value head writes them to qkv). The gated RMSNorm needs the head's
//   sum of squares over all DV columns: each block reduces its 32 (one 32-lane group of the
//   head vector) and the DV/32 partials are summed left to right, as in gdn_norm. On sm_90+
//   the DV/32 blocks of a head are one thread-block cluster and store their partials into
//   each other's shared memory (distributed shared memory); elsewhere (older CUDA, HIP) each block writes its
//   partials to norm_part [L][hv][GDN_TMAX][DV/32] and counts itself in norm_count [L][hv]
//   (zero before the first launch; the last block resets it), and the last block of the head
//   normalises all DV columns from o.
// Launch: blockDim = (128, 1, 1); gridDim = (DV/32, hv, layers). No dynamic shared memory.
//   TOKENS <= tw.
// Defines: TOKENS (1..8, default 1), DK, DV (default 128).
#include "gdn_common.h"

#define FUSED_COLS 32
#define FUSED_THREADS (FUSED_COLS * GDN_PARTS)  // a block owns 32 state columns
#define FUSED_WARPS (FUSED_THREADS / 32)
#define FUSED_BLOCKS_PER_HEAD (DV / FUSED_COLS)
static_assert(DK <= FUSED_THREADS, "one thread per q/k channel");

// GDN_NO_CLUSTER forces the portable path on sm_90, so that a CUDA GPU checks what HIP and
// older GPUs run (scripts/device/gdn-h200.sh).
#if defined(KC_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GDN_NO_CLUSTER)
#define FUSED_CLUSTER 1
#include <cooperative_groups.h>
#define FUSED_CLUSTER_DIMS __cluster_dims__(FUSED_BLOCKS_PER_HEAD, 1, 1)
#else
#define FUSED_CLUSTER 0
#define FUSED_CLUSTER_DIMS
#endif

KC_KERNEL(FUSED_THREADS) FUSED_CLUSTER_DIMS
void gdn_fused_verify(const float* KC_RESTRICT x, const float* KC_RESTRICT z,
                      const float* KC_RESTRICT a, const float* KC_RESTRICT b,
                      const float* KC_RESTRICT conv_w, const float* KC_RESTRICT a_log,
                      const float* KC_RESTRICT dt_bias, const float* KC_RESTRICT norm_w,
                      const float* KC_RESTRICT conv_state, const float* KC_RESTRICT S,
                      float* KC_RESTRICT qkv, float* KC_RESTRICT g, float* KC_RESTRICT beta,
                      float* o, float* KC_RESTRICT y, float* norm_part, int* norm_count,
                      int tw, int hk, int hv, float eps, int layer0) {
  const int l = layer0 + (int)blockIdx.z;
  const int h = (int)blockIdx.y;
  const int bx = (int)blockIdx.x;  // which 32 columns of the head
  const int kh = h * hk / hv;
  const bool kh_writer = bx == 0 && (h == 0 || (h - 1) * hk / hv != kh);
  const int C = 2 * hk * DK + hv * DV;
  const int tid = (int)threadIdx.x;
  const int lane32 = tid % 32;

  __shared__ float4 q_s4[TOKENS][GDN_KPAD / 4];
  __shared__ float4 k_s4[TOKENS][GDN_KPAD / 4];
  __shared__ float v_s[TOKENS][FUSED_COLS];
  __shared__ float o_s[TOKENS][FUSED_COLS];
  __shared__ float red_s[TOKENS][2 * DK / 32];
#if !FUSED_CLUSTER
  __shared__ float part_s[TOKENS];
#endif
  __shared__ float eg_s[TOKENS];
  __shared__ float beta_s[TOKENS];
  float* q_s = reinterpret_cast<float*>(q_s4);
  float* k_s = reinterpret_cast<float*>(k_s4);
#if FUSED_CLUSTER
  // The cluster's first barrier phase only says "every block has started" (a block may write
  // another's shared memory only then): arrive now, wait just before the first remote store.
  namespace cgs = cooperative_groups;
  cgs::cluster_group cluster = cgs::this_cluster();
  __shared__ float part_all[TOKENS][FUSED_BLOCKS_PER_HEAD];
  cluster.barrier_arrive();
#endif


  // ---- every global load the block needs, issued first so their latencies overlap: the
  // committed state and the layer's weights, then its inputs.
  // Step lane (col, p) of 32-lane group cg, as in gdn_step: its slice of the tiled state.
  const int p = lane32 / GDN_COLS_PER_GROUP;
  const int cg = bx * (FUSED_COLS / GDN_COLS_PER_GROUP) + tid / 32;
  const int lcol = (tid / 32) * GDN_COLS_PER_GROUP + lane32 % GDN_COLS_PER_GROUP;
  const float* Sc = S + gdn_state_lane(l, hv, h, cg, p, lane32 % GDN_COLS_PER_GROUP);
  float s[GDN_ROWS];
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) s[r] = Sc[r * GDN_STATE_STEP];
  // Norm element j = bx*32 + lane32 of tokens t0, t0 + FUSED_WARPS, ... (warp t0 = tid / 32).
  const int jl = lane32;
  const int j = bx * FUSED_COLS + jl;
  const int t0 = tid / 32;
  constexpr int NORM_ROUNDS = (TOKENS + FUSED_WARPS - 1) / FUSED_WARPS;
  const float wj = norm_w[(size_t)l * DV + j];
  const bool has_qk = tid < DK;
  const bool has_v = tid < FUSED_COLS;
  const int cq = kh * DK + tid, ck = (hk + kh) * DK + tid, cv = 2 * hk * DK + h * DV + bx * FUSED_COLS + tid;
  float wq[GDN_KW], wk[GDN_KW], wv[GDN_KW];
  if (has_qk) {
    const float4 a4 = *reinterpret_cast<const float4*>(conv_w + ((size_t)l * C + cq) * GDN_KW);
    const float4 b4 = *reinterpret_cast<const float4*>(conv_w + ((size_t)l * C + ck) * GDN_KW);
    wq[0] = a4.x; wq[1] = a4.y; wq[2] = a4.z; wq[3] = a4.w;
    wk[0] = b4.x; wk[1] = b4.y; wk[2] = b4.z; wk[3] = b4.w;
  }
  if (has_v) {
    const float4 c4 = *reinterpret_cast<const float4*>(conv_w + ((size_t)l * C + cv) * GDN_KW);
    wv[0] = c4.x; wv[1] = c4.y; wv[2] = c4.z; wv[3] = c4.w;
  }
  float a_log_h = 0.0f, dt_bias_h = 0.0f;
  if (tid < TOKENS) {
    a_log_h = a_log[(size_t)l * hv + h];
    dt_bias_h = dt_bias[(size_t)l * hv + h];
  }

  // ---- conv + SiLU: thread e (< DK) -> q channel e and k channel e; threads < 32 -> the v
  // channel of column bx*32 + tid.
  float yq[TOKENS], yk[TOKENS], yv[TOKENS];
  float zv[NORM_ROUNDS];
  float a_t = 0.0f, b_t = 0.0f;  // thread t < TOKENS: the gate inputs of token t
  {
    float winq[GDN_CS + TOKENS], wink[GDN_CS + TOKENS], winv[GDN_CS + TOKENS];
    if (has_qk) {
#pragma unroll
      for (int r = 0; r < GDN_CS; ++r) {
        winq[r] = conv_state[((size_t)l * GDN_CS + r) * C + cq];
        wink[r] = conv_state[((size_t)l * GDN_CS + r) * C + ck];
      }
    }
    if (has_v) {
#pragma unroll
      for (int r = 0; r < GDN_CS; ++r) winv[r] = conv_state[((size_t)l * GDN_CS + r) * C + cv];
    }

    // ---- Everything above (state, conv state, weights) no earlier kernel of the forward
    // writes; the inputs below (x, z, a, b) are in a model the previous layer's output. With
    // a programmatic launch this block started while that layer's kernel ran: wait for it.
    kc_grid_dependency_wait();
    // The next layer may launch now (not at entry: two layers ahead only contend for the SMs;
    // H200, T = 8: 392 against 290 us).
    kc_launch_dependents();
#pragma unroll
    for (int k = 0; k < NORM_ROUNDS; ++k) {
      const int t = k * FUSED_WARPS + t0;
      zv[k] = t < TOKENS ? z[gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + j] : 0.0f;
    }
    if (tid < TOKENS) {
      const size_t at = gdn_tok(l, tw, tid) * hv + h;
      a_t = a[at];
      b_t = b[at];
    }

    if (has_qk) {
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) {
        winq[GDN_CS + t] = x[gdn_tok(l, tw, t) * C + cq];
        wink[GDN_CS + t] = x[gdn_tok(l, tw, t) * C + ck];
      }
    }
    if (has_v) {
#pragma unroll
      for (int t = 0; t < TOKENS; ++t) winv[GDN_CS + t] = x[gdn_tok(l, tw, t) * C + cv];
    }
#pragma unroll
    for (int t = 0; t < TOKENS; ++t) {
      yq[t] = has_qk ? gdn_conv_silu(wq, winq + t) : 0.0f;
      yk[t] = has_qk ? gdn_conv_silu(wk, wink + t) : 0.0f;
      yv[t] = has_v ? gdn_conv_silu(wv, winv + t) : 0.0f;
    }
  }
  // L2 norm of q and k: element e is lane e % 32 of group e / 32, as in gdn_conv.
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    const float sq = gdn_sum32(yq[t] * yq[t]);
    const float sk = gdn_sum32(yk[t] * yk[t]);
    if (lane32 == 0 && has_qk) {
      red_s[t][tid / 32] = sq;
      red_s[t][DK / 32 + tid / 32] = sk;
    }
  }
  // ---- gates of head h.
  if (tid < TOKENS) {
    const size_t at = gdn_tok(l, tw, tid) * hv + h;
    const float gt = gdn_gate_g(a_t, a_log_h, dt_bias_h);
    const float bt = gdn_gate_beta(b_t);
    if (bx == 0) {
      g[at] = gt;
      beta[at] = bt;
    }
    eg_s[tid] = gdn_exp(gt);
    beta_s[tid] = bt;
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    const size_t row = gdn_tok(l, tw, t) * C;
    if (has_qk) {
      const float qv = (yq[t] * gdn_l2_inv(gdn_combine(red_s[t], DK / 32))) * gdn_q_scale();
      const float kv = yk[t] * gdn_l2_inv(gdn_combine(&red_s[t][DK / 32], DK / 32));
      q_s[t * GDN_KPAD + gdn_kpad(tid)] = qv;
      k_s[t * GDN_KPAD + gdn_kpad(tid)] = kv;
      if (kh_writer) {
        qkv[row + (size_t)kh * DK + tid] = qv;
        qkv[row + (size_t)(hk + kh) * DK + tid] = kv;
      }
    }
    if (has_v) {
      v_s[t][tid] = yv[t];
      qkv[row + 2 * (size_t)hk * DK + (size_t)h * DV + (size_t)bx * FUSED_COLS + tid] = yv[t];
    }
  }
  __syncthreads();

  // ---- delta-rule step on the prefetched state slice.
#pragma unroll
  for (int t = 0; t < TOKENS; ++t) {
    gdn_token(s, gdn_kchunk(k_s + t * GDN_KPAD, p), v_s[t][lcol], eg_s[t], beta_s[t]);
    const float ot = gdn_dot(s, gdn_kchunk(q_s + t * GDN_KPAD, p));
    if (p == 0) {
      o_s[t][lcol] = ot;
      o[gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + (size_t)bx * FUSED_COLS + lcol] = ot;
    }
  }
  __syncthreads();

  float part_reg[NORM_ROUNDS];
  // ---- gated RMSNorm. This block's 32 columns are group bx of the head vector: its partial
  // sum of squares per token, element jl at lane jl (as in gdn_norm).
#pragma unroll
  for (int k = 0; k < NORM_ROUNDS; ++k) {
    const int t = k * FUSED_WARPS + t0;
    const float ov = t < TOKENS ? o_s[t][jl] : 0.0f;
    const float sq = gdn_sum32(ov * ov);
    part_reg[k] = sq;
#if !FUSED_CLUSTER
    if (lane32 == 0 && t < TOKENS) part_s[t] = sq;
#endif
  }
#if FUSED_CLUSTER
  // Every block pushes its partials into every block's part_all (DSMEM stores), then one
  // cluster barrier: after it nobody touches another block's memory, so blocks may exit. (A
  // pull, read the others' partials between two barriers, costs a barrier and a round trip
  // more: H200, 36 layers, T = 8: 447 against 439 us.)
  cluster.barrier_wait();  // every block of the cluster has started (arrived at entry)
#pragma unroll
  for (int k = 0; k < NORM_ROUNDS; ++k) {
    const int t = k * FUSED_WARPS + t0;
    if (t < TOKENS && lane32 < FUSED_BLOCKS_PER_HEAD)
      cluster.map_shared_rank(&part_all[0][0], lane32)[t * FUSED_BLOCKS_PER_HEAD + bx] = part_reg[k];
  }
  cluster.sync();
#pragma unroll
  for (int k = 0; k < NORM_ROUNDS; ++k) {
    const int t = k * FUSED_WARPS + t0;
    if (t < TOKENS) {
      const size_t at = gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + j;
      y[at] = gdn_gated_norm(o_s[t][jl], gdn_combine(part_all[t], FUSED_BLOCKS_PER_HEAD), wj, zv[k], eps);
    }
  }
#else
  // Partials to global, then the last block of the head to arrive normalises every column.
  __syncthreads();
  float* head_part = norm_part + ((size_t)l * hv + h) * (size_t)(GDN_TMAX * FUSED_BLOCKS_PER_HEAD);
  if (tid < TOKENS) head_part[tid * FUSED_BLOCKS_PER_HEAD + bx] = part_s[tid];
  __threadfence();  // o and the partials are visible before the count says so
  __syncthreads();
  __shared__ int last_s;
  if (tid == 0) {
    const int before = atomicAdd(norm_count + (size_t)l * hv + h, 1);
    last_s = before == FUSED_BLOCKS_PER_HEAD - 1;
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  const volatile float* vpart = head_part;
  const volatile float* vo = o;
  for (int idx = tid; idx < TOKENS * DV; idx += FUSED_THREADS) {
    const int t = idx / DV;
    const int jj = idx % DV;
    float pr[FUSED_BLOCKS_PER_HEAD];
#pragma unroll
    for (int r = 0; r < FUSED_BLOCKS_PER_HEAD; ++r) pr[r] = vpart[t * FUSED_BLOCKS_PER_HEAD + r];
    const size_t at = gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + jj;
    y[at] = gdn_gated_norm(vo[at], gdn_combine(pr, FUSED_BLOCKS_PER_HEAD), norm_w[(size_t)l * DV + jj], z[at], eps);
  }
  if (tid == 0) norm_count[(size_t)l * hv + h] = 0;  // ready for the next launch
#endif
}
