// cuda_runtime.h for hip-clang, shipped with kbuild (docs/compat-header.md): a plain CUDA
// source that includes it gets the HIP runtime, CUDA's runtime API names
// (cuda_runtime_api.h) and kcompat.h's CUDA names. Only on hip-clang's include path; nvcc
// finds the toolkit's own.
#ifndef KBUILD_SHIM_CUDA_RUNTIME_H
#define KBUILD_SHIM_CUDA_RUNTIME_H
#include <hip/hip_runtime.h>
#include "cuda_runtime_api.h"
#include "kcompat.h"
#endif
