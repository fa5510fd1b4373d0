// cuComplex.h for hip-clang, shipped with kbuild (docs/compat-header.md): CUDA's complex types
// as HIP's (float2 / double2 underneath, as CUDA's). Only on hip-clang's include path.
#ifndef KBUILD_SHIM_CUCOMPLEX_H
#define KBUILD_SHIM_CUCOMPLEX_H
#include <hip/hip_complex.h>
typedef hipFloatComplex cuFloatComplex;
typedef hipDoubleComplex cuDoubleComplex;
typedef cuFloatComplex cuComplex;
#define make_cuFloatComplex make_hipFloatComplex
#define make_cuDoubleComplex make_hipDoubleComplex
#define make_cuComplex make_hipFloatComplex
#define cuCrealf hipCrealf
#define cuCimagf hipCimagf
#define cuCreal hipCreal
#define cuCimag hipCimag
#endif
