// gdn_common.h - the per-element arithmetic of the Gated DeltaNet kernels, shared by every GDN
// kernel so that the unfused path (gdn_conv -> gdn_gates -> gdn_step -> gdn_norm), the fused path
// (gdn_fused) and every exact-T instantiation run the SAME operation sequence on every element.
//
// Bitwise parity rules (tests: engine parity, `kbuild run gdn --check`):
//   * every kernel is built with FP contraction off (Kbuild.toml: nvcc --fmad=false, clang
//     -ffp-contract=off): each multiply-add written below as fmaf() is one FMA, everything
//     else is a separately rounded operation, whatever the surrounding code;
//   * no atomics; every reduction is one of the two fixed trees below, whose shape depends
//     neither on the block shape nor on the wave size (32 or 64):
//       gdn_sum32:   butterfly over a group of 32 lanes (xor 16, 8, 4, 2, 1); every lane of the
//                    group ends with the same bits (IEEE addition is commutative);
//       gdn_combine: left-to-right sum of the per-32-lane partials of a head vector.
//     Element e of a head vector (q/k of a key head, v/o of a value head) is always held by
//     lane e % 32 of the 32-lane group e / 32 when it enters a reduction;
//   * the state column j of value head h is owned by GDN_PARTS lanes of one 32-lane group:
//     lane32 = (j % 8) + 8 * p, part p holds the contiguous rows i = p * GDN_ROWS + r
//     (r = 0..GDN_ROWS-1); a dot product over the key dimension is a sequential fmaf chain over
//     r, then the parts are summed by gdn_sum_parts (xor 8 then xor 16).
//
// Layouts (row-major, f32, layer-major with a token stride `tw` = the verify window):
//   x      [L][tw][C]        raw mixed projection q|k|v (C = 2*Hk*DK + Hv*DV)
//   qkv    [L][tw][C]        after conv+SiLU; q, k L2-normalised per key head, q scaled by
//                            1/sqrt(DK); v as is
//   z      [L][tw][Hv*DV]    gate input of the output norm
//   a, b   [L][tw][Hv]       gate projections; g, beta [L][tw][Hv]
//   conv_w [L][C][KW]        depthwise conv weights, oldest tap first
//   conv_state [L][KW-1][C]  the last KW-1 raw inputs, oldest row first
//   A_log, dt_bias [L][Hv];  norm_w [L][DV]
//   S      [L][Hv][DV/8][GDN_ROWS][GDN_PARTS][8]  recurrent state, tiled: element (i, j) of head
//                            h (row i = key dim, column j = value dim) is at
//                            ((j/8 * GDN_ROWS + i % GDN_ROWS) * GDN_PARTS + i / GDN_ROWS) * 8 + j % 8,
//                            so the 32 lanes of a group read 128 contiguous bytes per row step and
//                            a block's columns are one contiguous range (kbuild-engine's
//                            engine::tile_state/untile_state convert from and to [DK][DV])
//   o, y   [L][tw][Hv*DV]
#ifndef KBUILD_GDN_COMMON_H
#define KBUILD_GDN_COMMON_H

#include "kcompat.h"

#ifndef DK
#define DK 128
#endif
#ifndef DV
#define DV 128
#endif
#define GDN_KW 4                         // causal conv width
#define GDN_CS (GDN_KW - 1)              // conv state rows
#define GDN_PARTS 4                      // lanes sharing one state column (engine: STATE_PARTS)
#define GDN_ROWS (DK / GDN_PARTS)        // state rows held per lane
#define GDN_COLS_PER_GROUP (32 / GDN_PARTS)
#define GDN_TMAX 8                       // the largest verify window the kernels accept
#define GDN_L2_EPS 1e-6f                 // eps of the q/k L2 norm (as FLA's l2norm)

#define GDN_KPAD (DK + GDN_PARTS * 4)    // q/k in shared memory: each part's rows + 4 floats pad

static_assert(DK % 32 == 0 && DK >= 32 && DK <= 128, "DK: multiple of 32 in [32, 128]");
static_assert(GDN_ROWS % 4 == 0, "a part's rows are read as float4");
static_assert(DV % 32 == 0 && DV >= 32 && DV <= 128, "DV: multiple of 32 in [32, 128]");

// Tokens of an exact-T instantiation: the variant axis is TOKENS (a bare `T` macro would
// rewrite every `template <typename T>` of the CUDA/HIP headers).
#ifndef TOKENS
#define TOKENS 1
#endif
static_assert(TOKENS >= 1 && TOKENS <= GDN_TMAX, "TOKENS: 1..8");

// The special functions: the hardware approximations (a few ulp; the fp64 reference's
// rel-L2 limit is 1e-5, measured 2e-7). Correctly rounded expf, division and 1/sqrtf are
// instruction sequences that a lane of a latency-bound kernel waits through per token: on the
// H200 they made the fused verify 9-12% slower (T = 1: 192 against 174 us for 36 layers).
KC_DEVICE float gdn_exp(float x) { return __expf(x); }
KC_DEVICE float gdn_div(float a, float b) { return __fdividef(a, b); }
KC_DEVICE float gdn_rsqrt(float x) { return rsqrtf(x); }

KC_DEVICE float gdn_silu(float x) { return gdn_div(x, 1.0f + gdn_exp(-x)); }

// softplus with PyTorch's threshold (x > 20 -> x).
KC_DEVICE float gdn_softplus(float x) { return x > 20.0f ? x : log1pf(gdn_exp(x)); }

// g = -exp(A_log) * softplus(a + dt_bias)
KC_DEVICE float gdn_gate_g(float a, float a_log, float dt_bias) {
  return -gdn_exp(a_log) * gdn_softplus(a + dt_bias);
}

// beta = sigmoid(b)
KC_DEVICE float gdn_gate_beta(float b) { return gdn_div(1.0f, 1.0f + gdn_exp(-b)); }

// Causal depthwise conv of one channel at one token + SiLU: win[0..KW) oldest first.
KC_DEVICE float gdn_conv_silu(const float (&w)[GDN_KW], const float* win) {
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < GDN_KW; ++j) acc = fmaf(w[j], win[j], acc);
  return gdn_silu(acc);
}

// Butterfly sum over the 32-lane group of the calling lane (same tree on wave32 and wave64).
KC_DEVICE float gdn_sum32(float v) {
  v = v + kc_shfl_xor(v, 16);
  v = v + kc_shfl_xor(v, 8);
  v = v + kc_shfl_xor(v, 4);
  v = v + kc_shfl_xor(v, 2);
  v = v + kc_shfl_xor(v, 1);
  return v;
}

// Sum of the GDN_PARTS lanes owning one state column (lane32 bits 3..4).
KC_DEVICE float gdn_sum_parts(float v) {
#pragma unroll
  for (int m = GDN_COLS_PER_GROUP; m < 32; m *= 2) v = v + kc_shfl_xor(v, m);
  return v;
}

// Left-to-right sum of n per-group partials.
KC_DEVICE float gdn_combine(const float* partials, int n) {
  float s = partials[0];
  for (int i = 1; i < n; ++i) s = s + partials[i];
  return s;
}

// 1 / sqrt(sum of squares + eps): the L2-norm factor of q and k.
KC_DEVICE float gdn_l2_inv(float sumsq) { return gdn_rsqrt(sumsq + GDN_L2_EPS); }

// q's scale 1/sqrt(DK), applied after the L2 norm.
KC_DEVICE float gdn_q_scale() { return 1.0f / sqrtf((float)DK); }

// Shared-memory index of key-dim element i in a staged q/k vector (GDN_KPAD floats, 16-byte
// aligned): part p's rows start at p * (GDN_ROWS + 4), so the 4 parts' float4 reads fall in
// distinct banks.
KC_DEVICE int gdn_kpad(int i) { return i + (i / GDN_ROWS) * 4; }

// The lane's rows of a staged q/k vector.
KC_DEVICE const float4* gdn_kchunk(const float* staged, int p) {
  return reinterpret_cast<const float4*>(staged + p * (GDN_ROWS + 4));
}

// The lane's first state element in a tiled S (layout above); element r is at [r * 32].
KC_DEVICE size_t gdn_state_lane(int l, int hv, int h, int cg, int p, int c) {
  return ((size_t)l * hv + h) * (size_t)(DK * DV) + (size_t)cg * (DK * GDN_COLS_PER_GROUP) +
         (size_t)(p * GDN_COLS_PER_GROUP + c);
}
#define GDN_STATE_STEP 32  // between a lane's consecutive state rows (GDN_PARTS * columns)

// sum_i S[i][j] x[i] over the key dimension, every part lane gets it (S^T k of the update, the
// readout o = S^T q): a sequential fmaf chain over the lane's rows, then gdn_sum_parts.
// x: the lane's rows (gdn_kchunk).
KC_DEVICE float gdn_dot(const float (&s)[GDN_ROWS], const float4* x) {
  float acc = 0.0f;
#pragma unroll
  for (int m = 0; m < GDN_ROWS / 4; ++m) {
    const float4 xv = x[m];
    acc = fmaf(s[4 * m + 0], xv.x, acc);
    acc = fmaf(s[4 * m + 1], xv.y, acc);
    acc = fmaf(s[4 * m + 2], xv.z, acc);
    acc = fmaf(s[4 * m + 3], xv.w, acc);
  }
  return gdn_sum_parts(acc);
}

// One token of the delta rule on the lane's slice of state column j:
//   S <- e^g S;  u_j = v_j - sum_i S[i][j] k[i];  S[i][j] <- S[i][j] + k[i] * (beta * u_j)
// k: the lane's rows of the token's staged key (gdn_kchunk).
KC_DEVICE void gdn_token(float (&s)[GDN_ROWS], const float4* k, float v, float eg, float beta) {
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) s[r] = s[r] * eg;
  const float bu = beta * (v - gdn_dot(s, k));
#pragma unroll
  for (int m = 0; m < GDN_ROWS / 4; ++m) {
    const float4 kv = k[m];
    s[4 * m + 0] = fmaf(kv.x, bu, s[4 * m + 0]);
    s[4 * m + 1] = fmaf(kv.y, bu, s[4 * m + 1]);
    s[4 * m + 2] = fmaf(kv.z, bu, s[4 * m + 2]);
    s[4 * m + 3] = fmaf(kv.w, bu, s[4 * m + 3]);
  }
}

// The gated RMSNorm of one element given the head's sum of squares of o:
//   y = o / sqrt(mean(o^2) + eps) * w * silu(z)
KC_DEVICE float gdn_gated_norm(float o, float sumsq, float w, float z, float eps) {
  const float inv = gdn_rsqrt(sumsq / (float)DV + eps);
  return ((o * inv) * w) * gdn_silu(z);
}

// Flat index helpers (size_t: L * tw * C overflows nothing, but be explicit).
KC_DEVICE size_t gdn_tok(int layer, int tw, int t) { return (size_t)layer * (size_t)tw + (size_t)t; }

#endif  // KBUILD_GDN_COMMON_H
