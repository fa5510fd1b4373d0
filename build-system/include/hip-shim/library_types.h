// library_types.h for hip-clang, shipped with kbuild (docs/compat-header.md): CUDA's
// cudaDataType and libraryPropertyType enums with CUDA's values, for headers (cuBLAS's) that
// name them in declarations. Only on hip-clang's include path.
#ifndef KBUILD_SHIM_LIBRARY_TYPES_H
#define KBUILD_SHIM_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
  CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_8I = 3, CUDA_C_32F = 4, CUDA_C_64F = 5,
  CUDA_C_16F = 6, CUDA_C_8I = 7, CUDA_R_8U = 8, CUDA_C_8U = 9, CUDA_R_32I = 10, CUDA_C_32I = 11,
  CUDA_R_32U = 12, CUDA_C_32U = 13, CUDA_R_16BF = 14, CUDA_C_16BF = 15, CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29
} cudaDataType;
typedef enum libraryPropertyType_t { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
// CUDA 13's emulation settings, named by cuBLAS 13's declarations: declared without
// enumerators (nothing here calls cuBLAS).
typedef enum cudaEmulationStrategy_t : int {} cudaEmulationStrategy;
typedef enum cudaEmulationSpecialValuesSupport_t : int {} cudaEmulationSpecialValuesSupport;
typedef enum cudaEmulationMantissaControl_t : int {} cudaEmulationMantissaControl;
#endif
