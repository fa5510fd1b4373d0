// GDN gates over T tokens: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b).
//
// Entry:
//   gdn_gates(const float* a, const float* b, const float* A_log, const float* dt_bias,
//             float* g, float* beta, int T, int tw, int hv, int layer0)
//   For layer l = layer0 + blockIdx.z, token t < T, value head h < hv:
//     g[l][t][h] = -exp(A_log[l][h]) * softplus(a[l][t][h] + dt_bias[l][h])   (threshold 20)
//     beta[l][t][h] = sigmoid(b[l][t][h])
//   Layouts: gdn_common.h.
// Launch: blockDim = (128, 1, 1); gridDim = (ceil(T*hv / 128), 1, layers). No dynamic shared
//   memory. 1 <= T <= tw.
#include "gdn_common.h"

KC_KERNEL(128)
void gdn_gates(const float* KC_RESTRICT a, const float* KC_RESTRICT b,
               const float* KC_RESTRICT a_log, const float* KC_RESTRICT dt_bias,
               float* KC_RESTRICT g, float* KC_RESTRICT beta, int T, int tw, int hv,
               int layer0) {
  const int l = layer0 + (int)blockIdx.z;
  const int idx = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  if (idx >= T * hv) return;
  const int t = idx / hv;
  const int h = idx % hv;
  const size_t at = gdn_tok(l, tw, t) * hv + h;
  const size_t ah = (size_t)l * hv + h;
  g[at] = gdn_gate_g(a[at], a_log[ah], dt_bias[ah]);
  beta[at] = gdn_gate_beta(b[at]);
}
