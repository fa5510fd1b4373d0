// y[i] += a * x[i], i < n. blockDim = 256.
#include "example.h"

KC_KERNEL(256) void axpy_f32(float a, const float* x, float* y, int n) {
  int i = example_index();
  if (i < n) y[i] += a * x[i];
}
