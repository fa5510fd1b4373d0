// cuda_fp16.h for hip-clang, shipped with kbuild (docs/compat-header.md): HIP's __half,
// __half2 and their conversions and arithmetic (__float2half, __half2float, __hadd, ...) keep
// CUDA's names. Only on hip-clang's include path; nvcc finds the toolkit's own.
#ifndef KBUILD_SHIM_CUDA_FP16_H
#define KBUILD_SHIM_CUDA_FP16_H
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#endif
