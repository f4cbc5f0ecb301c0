/*
 * libcuda.so.1's internals: the entry points the limiter defines
 * (cuda.intercept) and the process-local allocation tracking.
 */
#ifndef GPUMUX_CUDA_LIM_H
#define GPUMUX_CUDA_LIM_H

#include "lim.h"
#include "zz_cuda.h"

/* lim_cuda_init reads the limits file and opens the accounting, once:
 * CUDA_SUCCESS, or CUDA_ERROR_NOT_PERMITTED (logged) when the limiter
 * must fail closed. */
LIM_HIDDEN CUresult lim_cuda_init(void);
/* lim_cuda_policy_off: the limits file is good and says policy=off. */
LIM_HIDDEN int lim_cuda_policy_off(void);

/* ---- process-local tracking of what this process allocated (cuda_mem.c) ---- */

enum lim_kind { LIM_KIND_PTR = 1, LIM_KIND_HANDLE, LIM_KIND_ARRAY, LIM_KIND_MIPMAP };

LIM_HIDDEN void lim_track_prefork(void);
LIM_HIDDEN void lim_track_postfork_parent(void);
LIM_HIDDEN void lim_track_forked(void);

/* ---- the compute limit (cuda_compute.c) ---- */

/* lim_compute_init turns the compute limit on (policy cap or share). */
LIM_HIDDEN void lim_compute_init(const struct lim_config *c);
/* lim_compute_ctx_gone forgets the limiter's events of a context about to
 * be destroyed (NULL: of every context). */
LIM_HIDDEN void lim_compute_ctx_gone(CUcontext ctx);
LIM_HIDDEN void lim_compute_prefork(void);
LIM_HIDDEN void lim_compute_postfork_parent(void);
LIM_HIDDEN void lim_compute_forked(void);

/* ---- the entry points (cuda.intercept) ---- */

LIM_EXPORT CUresult cuInit(unsigned int Flags);
LIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
LIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
					CUdriverProcAddressQueryResult *symbolStatus);

LIM_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
LIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
LIM_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
				    unsigned int Height, unsigned int ElementSizeBytes);
LIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				       unsigned int ElementSizeBytes);
LIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
LIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
LIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
LIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
LIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
						 CUstream hStream);
LIM_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr);
LIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr);
LIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
LIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
LIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
				unsigned long long flags);
LIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
LIM_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray);
LIM_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);
LIM_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray);
LIM_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);
LIM_EXPORT CUresult cuArrayDestroy(CUarray hArray);
LIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
					   unsigned int numMipmapLevels);
LIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray);

LIM_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
LIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
LIM_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
LIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);

LIM_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
LIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
LIM_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
				   unsigned int flags, CUdevice dev);
LIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
				   CUdevice dev);
LIM_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx);
LIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx);
LIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx);
LIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
LIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
LIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev);
LIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);

LIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
				   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
				   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
LIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					void **kernelParams, void **extra);
LIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
LIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
					  void **extra);
LIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					      unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					      unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					      void **kernelParams);
LIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
						   unsigned int gridDimZ, unsigned int blockDimX,
						   unsigned int blockDimY, unsigned int blockDimZ,
						   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams);
LIM_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
							 unsigned int flags);
LIM_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
LIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
LIM_EXPORT CUresult cuLaunch(CUfunction f);
LIM_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height);
LIM_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream);

/* Real driver calls the limiter makes for itself (not intercepted). */
typedef CUresult (*lim_ctx_get_current_fn)(CUcontext *);
typedef CUresult (*lim_ctx_get_device_fn)(CUdevice *);
typedef CUresult (*lim_primary_state_fn)(CUdevice, unsigned int *, int *);
#define LIM_CALL(fn_type, name) ((fn_type)lim_cu_resolve(LIM_CU_##name))

#endif
