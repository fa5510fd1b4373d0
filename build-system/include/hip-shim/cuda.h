// cuda.h for hip-clang, shipped with kbuild (docs/compat-header.md): the runtime names
// (cuda_runtime_api.h) and the driver API's common names (CUresult, CUdevice, CUdeviceptr,
// CUstream, cuGetErrorString, cuDeviceGet, cuDeviceGetAttribute, the virtual memory calls) as
// HIP's (HIP 5.2 has no virtual memory device attribute: CU_DEVICE_ATTRIBUTE_VIRTUAL_*
// stays undeclared). CUDA_VERSION is not defined: this is not a CUDA toolkit. Only on hip-clang's include
// path.
#ifndef KBUILD_SHIM_CUDA_H
#define KBUILD_SHIM_CUDA_H
#include "cuda_runtime_api.h"
typedef hipError_t CUresult;
typedef hipDevice_t CUdevice;
typedef hipDeviceptr_t CUdeviceptr;
typedef hipStream_t CUstream;
typedef hipEvent_t CUevent;
typedef hipFunction_t CUfunction;
typedef hipModule_t CUmodule;
typedef hipCtx_t CUcontext;
#define CUDA_SUCCESS hipSuccess
#define cuGetErrorString(e, s) ((*(s) = hipGetErrorString(e)), hipSuccess)
#define cuDeviceGet hipDeviceGet
#define cuDeviceGetAttribute hipDeviceGetAttribute
#define cuMemAddressFree hipMemAddressFree
#define cuMemAddressReserve hipMemAddressReserve
#define cuMemCreate hipMemCreate
#define cuMemGetAllocationGranularity hipMemGetAllocationGranularity
#define cuMemMap hipMemMap
#define cuMemRelease hipMemRelease
#define cuMemSetAccess hipMemSetAccess
#define cuMemUnmap hipMemUnmap
#define CUmemAccessDesc hipMemAccessDesc
#define CUmemAllocationProp hipMemAllocationProp
#define CUmemGenericAllocationHandle hipMemGenericAllocationHandle_t
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE hipMemAccessFlagsProtReadWrite
#define CU_MEM_ALLOCATION_TYPE_PINNED hipMemAllocationTypePinned
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED hipMemAllocationGranularityRecommended
#define CU_MEM_LOCATION_TYPE_DEVICE hipMemLocationTypeDevice
#endif
