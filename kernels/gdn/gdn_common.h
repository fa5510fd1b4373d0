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
//     lane32 = (j % 8) + 8 * p, part p holds rows i = r * GDN_PARTS + p (r = 0..GDN_ROWS-1);
//     a dot product over the key dimension is a sequential fmaf chain over r, then the parts
//     are summed by gdn_sum_parts (xor 8 then xor 16).
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
//   S      [L][Hv][DK][DV]   recurrent state (row i = key dim, column j = value dim)
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
#define GDN_PARTS 4                      // lanes sharing one state column
#define GDN_ROWS (DK / GDN_PARTS)        // state rows held per lane
#define GDN_COLS_PER_GROUP (32 / GDN_PARTS)
#define GDN_TMAX 8                       // the largest verify window the kernels accept
#define GDN_L2_EPS 1e-6f                 // eps of the q/k L2 norm (as FLA's l2norm)

static_assert(DK % 32 == 0 && DK >= 32 && DK <= 128, "DK: multiple of 32 in [32, 128]");
static_assert(DV % 32 == 0 && DV >= 32 && DV <= 128, "DV: multiple of 32 in [32, 128]");

// Tokens of an exact-T instantiation: the variant axis is TOKENS (a bare `T` macro would
// rewrite every `template <typename T>` of the CUDA/HIP headers).
#ifndef TOKENS
#define TOKENS 1
#endif
static_assert(TOKENS >= 1 && TOKENS <= GDN_TMAX, "TOKENS: 1..8");

KC_DEVICE float gdn_silu(float x) { return x / (1.0f + expf(-x)); }

// softplus with PyTorch's threshold (x > 20 -> x).
KC_DEVICE float gdn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// g = -exp(A_log) * softplus(a + dt_bias)
KC_DEVICE float gdn_gate_g(float a, float a_log, float dt_bias) {
  return -expf(a_log) * gdn_softplus(a + dt_bias);
}

// beta = sigmoid(b)
KC_DEVICE float gdn_gate_beta(float b) { return 1.0f / (1.0f + expf(-b)); }

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
  v = v + kc_shfl_xor(v, 8);
  v = v + kc_shfl_xor(v, 16);
  return v;
}

// Left-to-right sum of n per-group partials.
KC_DEVICE float gdn_combine(const float* partials, int n) {
  float s = partials[0];
  for (int i = 1; i < n; ++i) s = s + partials[i];
  return s;
}

// 1 / sqrt(sum of squares + eps): the L2-norm factor of q and k.
KC_DEVICE float gdn_l2_inv(float sumsq) { return 1.0f / sqrtf(sumsq + GDN_L2_EPS); }

// q's scale 1/sqrt(DK), applied after the L2 norm.
KC_DEVICE float gdn_q_scale() { return 1.0f / sqrtf((float)DK); }

// One token of the delta rule on the lane's slice of state column j:
//   S <- e^g S;  u_j = v_j - sum_i S[i][j] k[i];  S[i][j] <- S[i][j] + k[i] * (beta * u_j)
// k: the token's DK-vector in shared memory; p: the lane's part.
KC_DEVICE void gdn_token(float (&s)[GDN_ROWS], const float* k, float v, float eg, float beta,
                         int p) {
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) s[r] = s[r] * eg;
  float acc = 0.0f;
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) acc = fmaf(s[r], k[r * GDN_PARTS + p], acc);
  acc = gdn_sum_parts(acc);
  const float bu = beta * (v - acc);
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) s[r] = fmaf(k[r * GDN_PARTS + p], bu, s[r]);
}

// o_j = sum_i S[i][j] q[i] (every part lane gets it).
KC_DEVICE float gdn_readout(const float (&s)[GDN_ROWS], const float* q, int p) {
  float acc = 0.0f;
#pragma unroll
  for (int r = 0; r < GDN_ROWS; ++r) acc = fmaf(s[r], q[r * GDN_PARTS + p], acc);
  return gdn_sum_parts(acc);
}

// The gated RMSNorm of one element given the head's sum of squares of o:
//   y = o / sqrt(mean(o^2) + eps) * w * silu(z)
KC_DEVICE float gdn_gated_norm(float o, float sumsq, float w, float z, float eps) {
  const float inv = 1.0f / sqrtf(sumsq / (float)DV + eps);
  return ((o * inv) * w) * gdn_silu(z);
}

// Flat index helpers (size_t: L * tw * C overflows nothing, but be explicit).
KC_DEVICE size_t gdn_tok(int layer, int tw, int t) { return (size_t)layer * (size_t)tw + (size_t)t; }

#endif  // KBUILD_GDN_COMMON_H
