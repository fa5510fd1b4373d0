// y[i] = s * x[i] (or in place), i < n. blockDim = 128.
#include "example.h"

KC_KERNEL(128) void scale_f32(float s, const float* x, float* y, int n) {
  int i = example_index();
  if (i < n) y[i] = s * x[i];
}

KC_KERNEL(128) void scale_inplace_f32(float s, float* x, int n) {
  int i = example_index();
  if (i < n) x[i] *= s;
}
