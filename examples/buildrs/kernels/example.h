// Shared by the example's kernels: touching it reruns the crate's build script.
#pragma once
#include "kcompat.h"

KC_DEVICE int example_index() { return blockIdx.x * blockDim.x + threadIdx.x; }
