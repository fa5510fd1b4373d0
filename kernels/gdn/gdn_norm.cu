// GDN gated RMSNorm of the delta-rule output: y = o / sqrt(mean(o^2) + eps) * w * silu(z),
// per value head (DV elements), over T tokens.
//
// Entry:
//   gdn_norm(const float* o, const float* z, const float* norm_w, float* y, int T, int tw,
//            int hv, float eps, int layer0)
//   For layer l = layer0 + blockIdx.z, token t = blockIdx.y, value head h = blockIdx.x:
//     y[l][t][h*DV + j] = o[..] / sqrt(mean_j(o^2) + eps) * norm_w[l][j] * silu(z[..])
//   Layouts: gdn_common.h.
// Launch: blockDim = (128, 1, 1); gridDim = (hv, T, layers). No dynamic shared memory.
// Defines: DV (default 128).
#include "gdn_common.h"

#define NORM_THREADS 128
static_assert(DV <= NORM_THREADS, "one thread per element of a value head");

KC_KERNEL(NORM_THREADS)
void gdn_norm(const float* KC_RESTRICT o, const float* KC_RESTRICT z,
              const float* KC_RESTRICT norm_w, float* KC_RESTRICT y, int T, int tw, int hv,
              float eps, int layer0) {
  const int l = layer0 + (int)blockIdx.z;
  const int t = (int)blockIdx.y;
  const int h = (int)blockIdx.x;
  const int j = (int)threadIdx.x;
  if (t >= T) return;  // uniform per block
  const size_t at = gdn_tok(l, tw, t) * (size_t)(hv * DV) + (size_t)h * DV + j;
  const float ov = j < DV ? o[at] : 0.0f;
  // Element j is lane j % 32 of group j / 32 (gdn_common.h).
  __shared__ float partial[NORM_THREADS / 32];
  const float s = gdn_sum32(ov * ov);
  if (j % 32 == 0 && j < DV) partial[j / 32] = s;
  __syncthreads();
  if (j >= DV) return;
  const float ss = gdn_combine(partial, DV / 32);
  y[at] = gdn_gated_norm(ov, ss, norm_w[(size_t)l * DV + j], z[at], eps);
}
