/*
 * The C half of package cudabackend: a dlsym table over libcuda.so.1 and
 * thin wrappers that Go calls through cgo.
 *
 * No CUDA header is needed: the types come from the interposer's gm_abi.h,
 * cuda.h's ABI (CUDA 12/13) that the limiter uses too. Handles cross the cgo boundary as uintptr_t so that Go never
 * converts an integer to a pointer; the wrappers cast them back.
 */
#ifndef GPUMUX_CUDABACKEND_H
#define GPUMUX_CUDABACKEND_H

#include <stddef.h>
#include <stdint.h>

/* The CUDA ABI: the interposer's header of it (cuda.h's names, values
 * and layouts), which the limiter includes too. */
#include "../interposer/gm_abi.h"

/* A CUmemAllocationProp's fields as the server checked them (proto.MemProp). */
typedef struct gm_memprop {
	unsigned int type, handle_types, loc_type;
	int loc_id;
	unsigned int compression, rdma, usage;
} gm_memprop;
/* A CUmemAccessDesc's fields (proto.MemAccessDesc). */
typedef struct gm_access {
	unsigned int loc_type;
	int loc_id;
	unsigned int flags;
} gm_access;
/* GM_MAX_ACCESS_DESCS bounds the descriptors of one call (proto.MaxMemAccessDescs). */
#define GM_MAX_ACCESS_DESCS 64

/* GM_MAX_LAUNCH_ATTRS bounds the attributes of one call (proto.MaxLaunchAttrs). */
#define GM_MAX_LAUNCH_ATTRS 32
#define GM_CU_EVENT_DISABLE_TIMING 0x2

/*
 * The symbols, each field named as the symbol it holds. X(name) is
 * required; O(name) optional (NULL when the driver lacks it).
 */
#define GM_CUDA_SYMBOLS(X, O)                                                  \
	X(cuInit)                                                              \
	X(cuDriverGetVersion)                                                  \
	X(cuDeviceGet)                                                         \
	X(cuDeviceGetCount)                                                    \
	X(cuDeviceGetName)                                                     \
	X(cuDeviceTotalMem_v2)                                                 \
	X(cuDeviceGetAttribute)                                                \
	O(cuDeviceGetUuid)                                                     \
	O(cuDeviceGetUuid_v2)                                                  \
	X(cuCtxCreate_v2)                                                      \
	X(cuCtxDestroy_v2)                                                     \
	X(cuCtxSetCurrent)                                                     \
	X(cuCtxGetCurrent)                                                     \
	X(cuCtxPushCurrent_v2)                                                 \
	X(cuCtxPopCurrent_v2)                                                  \
	X(cuCtxSynchronize)                                                    \
	X(cuMemAlloc_v2)                                                       \
	X(cuMemFree_v2)                                                        \
	X(cuMemGetInfo_v2)                                                     \
	X(cuMemAllocHost_v2)                                                   \
	X(cuMemFreeHost)                                                       \
	X(cuMemcpyHtoD_v2)                                                     \
	X(cuMemcpyHtoDAsync_v2)                                                \
	X(cuMemcpyDtoH_v2)                                                     \
	X(cuMemcpyDtoHAsync_v2)                                                \
	X(cuMemcpyDtoD_v2)                                                     \
	X(cuMemcpyDtoDAsync_v2)                                                \
	X(cuMemsetD8_v2)                                                       \
	X(cuMemsetD32_v2)                                                      \
	X(cuMemsetD8Async)                                                     \
	X(cuMemsetD32Async)                                                    \
	X(cuModuleLoadData)                                                    \
	X(cuModuleUnload)                                                      \
	X(cuModuleGetFunction)                                                 \
	X(cuModuleGetGlobal_v2)                                                \
	O(cuFuncGetParamInfo)                                                  \
	X(cuFuncGetAttribute)                                                  \
	X(cuLaunchKernel)                                                      \
	X(cuStreamCreate)                                                      \
	X(cuStreamDestroy_v2)                                                  \
	X(cuStreamSynchronize)                                                 \
	X(cuStreamQuery)                                                       \
	X(cuStreamWaitEvent)                                                   \
	X(cuEventCreate)                                                       \
	X(cuEventDestroy_v2)                                                   \
	X(cuEventRecord)                                                       \
	X(cuEventSynchronize)                                                  \
	X(cuEventQuery)                                                        \
	O(cuEventElapsedTime)                                                  \
	O(cuEventElapsedTime_v2)                                               \
	O(cuCtxGetStreamPriorityRange)                                         \
	O(cuStreamCreateWithPriority)                                          \
	O(cuStreamGetPriority)                                                 \
	O(cuStreamGetFlags)                                                    \
	O(cuStreamIsCapturing)                                                 \
	O(cuEventRecordWithFlags)                                              \
	O(cuFuncSetAttribute)                                                  \
	O(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)                \
	O(cuOccupancyAvailableDynamicSMemPerBlock)                             \
	O(cuLaunchKernelEx)                                                    \
	O(cuOccupancyMaxActiveClusters)                                        \
	O(cuOccupancyMaxPotentialClusterSize)                                  \
	O(cuCtxGetLimit)                                                       \
	O(cuCtxSetLimit)                                                       \
	O(cuMemGetAllocationGranularity)                                       \
	O(cuMemAddressReserve)                                                 \
	O(cuMemAddressFree)                                                    \
	O(cuMemCreate)                                                         \
	O(cuMemRelease)                                                        \
	O(cuMemMap)                                                            \
	O(cuMemUnmap)                                                          \
	O(cuMemSetAccess)                                                      \
	O(cuMemGetAccess)                                                      \
	O(cuMemPoolCreate)                                                     \
	O(cuMemPoolDestroy)                                                    \
	O(cuMemAllocFromPoolAsync)                                             \
	O(cuMemFreeAsync)                                                      \
	O(cuMemPoolSetAttribute)                                               \
	O(cuMemPoolGetAttribute)                                               \
	O(cuMemPoolTrimTo)                                                     \
	O(cuMemPoolSetAccess)                                                  \
	O(cuMemPoolGetAccess)                                                  \
	O(cuDeviceCanAccessPeer)                                               \
	O(cuDeviceGetP2PAttribute)                                             \
	O(cuCtxEnablePeerAccess)                                               \
	O(cuCtxDisablePeerAccess)                                              \
	O(cuMemcpyPeer)                                                        \
	O(cuMemcpyPeerAsync) \
	O(cuStreamBeginCapture_v2)                                             \
	O(cuStreamEndCapture)                                                  \
	O(cuStreamGetCaptureInfo_v2)                                           \
	O(cuStreamGetCaptureInfo_v3)                                           \
	O(cuStreamUpdateCaptureDependencies)                                   \
	O(cuStreamUpdateCaptureDependencies_v2)                                \
	O(cuThreadExchangeStreamCaptureMode)                                   \
	O(cuGraphCreate)                                                       \
	O(cuGraphDestroy)                                                      \
	O(cuGraphClone)                                                        \
	O(cuGraphGetNodes)                                                     \
	O(cuGraphGetRootNodes)                                                 \
	O(cuGraphAddKernelNode_v2)                                             \
	O(cuGraphAddMemsetNode)                                                \
	O(cuGraphAddMemcpyNode)                                                \
	O(cuGraphAddEmptyNode)                                                 \
	O(cuGraphAddEventRecordNode)                                           \
	O(cuGraphAddEventWaitNode)                                             \
	O(cuGraphAddDependencies)                                              \
	O(cuGraphAddDependencies_v2)                                           \
	O(cuGraphInstantiateWithFlags)                                         \
	O(cuGraphExecDestroy)                                                  \
	O(cuGraphLaunch)                                                       \
	O(cuGraphUpload)                                                       \
	O(cuGraphExecKernelNodeSetParams_v2)

typedef struct gm_cuda {
	void *lib;
	CUresult (*cuInit)(unsigned int flags);
	CUresult (*cuDriverGetVersion)(int *version);
	CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
	CUresult (*cuDeviceGetCount)(int *count);
	CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
	CUresult (*cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev);
	CUresult (*cuDeviceGetAttribute)(int *pi, int attrib, CUdevice dev);
	CUresult (*cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev);
	CUresult (*cuDeviceGetUuid_v2)(CUuuid *uuid, CUdevice dev);
	CUresult (*cuCtxCreate_v2)(CUcontext *pctx, unsigned int flags, CUdevice dev);
	CUresult (*cuCtxDestroy_v2)(CUcontext ctx);
	CUresult (*cuCtxSetCurrent)(CUcontext ctx);
	CUresult (*cuCtxGetCurrent)(CUcontext *pctx);
	CUresult (*cuCtxPushCurrent_v2)(CUcontext ctx);
	CUresult (*cuCtxPopCurrent_v2)(CUcontext *pctx);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemAlloc_v2)(CUdeviceptr *dptr, size_t bytes);
	CUresult (*cuMemFree_v2)(CUdeviceptr dptr);
	CUresult (*cuMemGetInfo_v2)(size_t *free, size_t *total);
	CUresult (*cuMemAllocHost_v2)(void **pp, size_t bytes);
	CUresult (*cuMemFreeHost)(void *p);
	CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr dst, const void *src, size_t n);
	CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr dst, const void *src, size_t n, CUstream s);
	CUresult (*cuMemcpyDtoH_v2)(void *dst, CUdeviceptr src, size_t n);
	CUresult (*cuMemcpyDtoHAsync_v2)(void *dst, CUdeviceptr src, size_t n, CUstream s);
	CUresult (*cuMemcpyDtoD_v2)(CUdeviceptr dst, CUdeviceptr src, size_t n);
	CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
	CUresult (*cuMemsetD8_v2)(CUdeviceptr dst, unsigned char v, size_t n);
	CUresult (*cuMemsetD32_v2)(CUdeviceptr dst, unsigned int v, size_t n);
	CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char v, size_t n, CUstream s);
	CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned int v, size_t n, CUstream s);
	CUresult (*cuModuleLoadData)(CUmodule *mod, const void *image);
	CUresult (*cuModuleUnload)(CUmodule mod);
	CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
	CUresult (*cuModuleGetGlobal_v2)(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name);
	CUresult (*cuFuncGetParamInfo)(CUfunction fn, size_t index, size_t *offset, size_t *size);
	CUresult (*cuFuncGetAttribute)(int *pi, int attrib, CUfunction fn);
	CUresult (*cuLaunchKernel)(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
				   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
				   CUstream s, void **params, void **extra);
	CUresult (*cuStreamCreate)(CUstream *s, unsigned int flags);
	CUresult (*cuStreamDestroy_v2)(CUstream s);
	CUresult (*cuStreamSynchronize)(CUstream s);
	CUresult (*cuStreamQuery)(CUstream s);
	CUresult (*cuStreamWaitEvent)(CUstream s, CUevent ev, unsigned int flags);
	CUresult (*cuEventCreate)(CUevent *ev, unsigned int flags);
	CUresult (*cuEventDestroy_v2)(CUevent ev);
	CUresult (*cuEventRecord)(CUevent ev, CUstream s);
	CUresult (*cuEventSynchronize)(CUevent ev);
	CUresult (*cuEventQuery)(CUevent ev);
	CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
	CUresult (*cuEventElapsedTime_v2)(float *ms, CUevent start, CUevent end);
	CUresult (*cuCtxGetStreamPriorityRange)(int *least, int *greatest);
	CUresult (*cuStreamCreateWithPriority)(CUstream *s, unsigned int flags, int priority);
	CUresult (*cuStreamGetPriority)(CUstream s, int *priority);
	CUresult (*cuStreamGetFlags)(CUstream s, unsigned int *flags);
	CUresult (*cuStreamIsCapturing)(CUstream s, int *status); /* CUstreamCaptureStatus: int-sized */
	CUresult (*cuEventRecordWithFlags)(CUevent ev, CUstream s, unsigned int flags);
	CUresult (*cuFuncSetAttribute)(CUfunction fn, int attr, int value);
	CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)(int *n, CUfunction fn, int blockSize,
									 size_t smem, unsigned int flags);
	CUresult (*cuOccupancyAvailableDynamicSMemPerBlock)(size_t *smem, CUfunction fn, int numBlocks, int blockSize);
	CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction fn, void **params, void **extra);
	CUresult (*cuOccupancyMaxActiveClusters)(int *n, CUfunction fn, const CUlaunchConfig *config);
	CUresult (*cuOccupancyMaxPotentialClusterSize)(int *n, CUfunction fn, const CUlaunchConfig *config);
	CUresult (*cuCtxGetLimit)(size_t *value, int limit);
	CUresult (*cuCtxSetLimit)(int limit, size_t value);
	CUresult (*cuMemGetAllocationGranularity)(size_t *granularity, const CUmemAllocationProp *prop, int option);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
					unsigned long long flags);
	CUresult (*cuMemAddressFree)(CUdeviceptr ptr, size_t size);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
				unsigned long long flags);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle handle);
	CUresult (*cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			     unsigned long long flags);
	CUresult (*cuMemUnmap)(CUdeviceptr ptr, size_t size);
	CUresult (*cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
	CUresult (*cuMemGetAccess)(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr);
	CUresult (*cuMemPoolCreate)(CUmemoryPool *pool, const CUmemPoolProps *props);
	CUresult (*cuMemPoolDestroy)(CUmemoryPool pool);
	CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s);
	CUresult (*cuMemFreeAsync)(CUdeviceptr dptr, CUstream s);
	CUresult (*cuMemPoolSetAttribute)(CUmemoryPool pool, int attr, void *value);
	CUresult (*cuMemPoolGetAttribute)(CUmemoryPool pool, int attr, void *value);
	CUresult (*cuMemPoolTrimTo)(CUmemoryPool pool, size_t minBytesToKeep);
	CUresult (*cuMemPoolSetAccess)(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count);
	CUresult (*cuMemPoolGetAccess)(int *flags, CUmemoryPool pool, CUmemLocation *location);
	CUresult (*cuDeviceCanAccessPeer)(int *can, CUdevice dev, CUdevice peer);
	/* attrib: a CUdevice_P2PAttribute, int-sized */
	CUresult (*cuDeviceGetP2PAttribute)(int *value, int attrib, CUdevice src, CUdevice dst);
	CUresult (*cuCtxEnablePeerAccess)(CUcontext peer, unsigned int flags);
	CUresult (*cuCtxDisablePeerAccess)(CUcontext peer);
	CUresult (*cuMemcpyPeer)(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n);
	CUresult (*cuMemcpyPeerAsync)(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t n,
				      CUstream s);
	/* Stream capture and graphs. Capture statuses and modes are enums:
	 * int-sized. */
	CUresult (*cuStreamBeginCapture_v2)(CUstream s, int mode);
	CUresult (*cuStreamEndCapture)(CUstream s, CUgraph *g);
	CUresult (*cuStreamGetCaptureInfo_v2)(CUstream s, int *status, unsigned long long *id, CUgraph *g,
					      const CUgraphNode **deps, size_t *n);
	CUresult (*cuStreamGetCaptureInfo_v3)(CUstream s, int *status, unsigned long long *id, CUgraph *g,
					      const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n);
	CUresult (*cuStreamUpdateCaptureDependencies)(CUstream s, CUgraphNode *deps, size_t n, unsigned int flags);
	CUresult (*cuStreamUpdateCaptureDependencies_v2)(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges,
							 size_t n, unsigned int flags);
	CUresult (*cuThreadExchangeStreamCaptureMode)(int *mode);
	CUresult (*cuGraphCreate)(CUgraph *g, unsigned int flags);
	CUresult (*cuGraphDestroy)(CUgraph g);
	CUresult (*cuGraphClone)(CUgraph *clone, CUgraph g);
	CUresult (*cuGraphGetNodes)(CUgraph g, CUgraphNode *nodes, size_t *n);
	CUresult (*cuGraphGetRootNodes)(CUgraph g, CUgraphNode *nodes, size_t *n);
	CUresult (*cuGraphAddKernelNode_v2)(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
					    const CUDA_KERNEL_NODE_PARAMS_v2 *p);
	CUresult (*cuGraphAddMemsetNode)(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
					 const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx);
	CUresult (*cuGraphAddMemcpyNode)(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
					 const CUDA_MEMCPY3D *p, CUcontext ctx);
	CUresult (*cuGraphAddEmptyNode)(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n);
	CUresult (*cuGraphAddEventRecordNode)(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
					      CUevent ev);
	CUresult (*cuGraphAddEventWaitNode)(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
					    CUevent ev);
	CUresult (*cuGraphAddDependencies)(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n);
	CUresult (*cuGraphAddDependencies_v2)(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
					      const CUgraphEdgeData *edges, size_t n);
	CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *e, CUgraph g, unsigned long long flags);
	CUresult (*cuGraphExecDestroy)(CUgraphExec e);
	CUresult (*cuGraphLaunch)(CUgraphExec e, CUstream s);
	CUresult (*cuGraphUpload)(CUgraphExec e, CUstream s);
	CUresult (*cuGraphExecKernelNodeSetParams_v2)(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v2 *p);
} gm_cuda;

/* gm_open's results. */
enum { GM_OPEN_OK = 0, GM_OPEN_NO_LIBRARY = 1, GM_OPEN_NO_SYMBOL = 2, GM_OPEN_NO_MEMORY = 3 };

/*
 * gm_open loads path and resolves the table into *out (malloc'd). On
 * failure it writes dlerror's text or the missing symbol's name into msg.
 */
int gm_open(const char *path, gm_cuda **out, char *msg, size_t msglen);

/*
 * Staging: a per-context ring of pinned host buffers for asynchronous
 * copies. Slot i is busy while ev[i] (recorded after its copy) is pending.
 */
#define GM_STAGING_SLOTS 4
typedef struct gm_staging {
	size_t size; /* bytes per slot */
	unsigned next;
	void *buf[GM_STAGING_SLOTS];
	CUevent ev[GM_STAGING_SLOTS];
	int busy[GM_STAGING_SLOTS];
} gm_staging;

gm_staging *gm_staging_new(size_t size);
CUresult gm_htod_staged(const gm_cuda *t, gm_staging *st, CUdeviceptr dst, const void *src, size_t n,
			uintptr_t s);
CUresult gm_dtoh_staged(const gm_cuda *t, gm_staging *st, void *dst, CUdeviceptr src, size_t n, uintptr_t s);

/* Wrappers: each returns the CUresult. dev arguments are ordinals. */
CUresult gm_init(const gm_cuda *t, unsigned int flags);
CUresult gm_driver_version(const gm_cuda *t, int *v);
CUresult gm_device_count(const gm_cuda *t, int *n);
CUresult gm_device_name(const gm_cuda *t, int dev, char *name, int len);
CUresult gm_device_total_mem(const gm_cuda *t, int dev, size_t *bytes);
CUresult gm_device_attribute(const gm_cuda *t, int attr, int dev, int *v);
CUresult gm_device_uuid(const gm_cuda *t, int dev, char *uuid16);

CUresult gm_ctx_create(const gm_cuda *t, int dev, unsigned int flags, uintptr_t *ctx);
/* gm_ctx_destroy frees st's buffers (in ctx) and st, then destroys ctx. */
CUresult gm_ctx_destroy(const gm_cuda *t, uintptr_t ctx, gm_staging *st);
CUresult gm_ctx_set_current(const gm_cuda *t, uintptr_t ctx);
CUresult gm_ctx_get_current(const gm_cuda *t, uintptr_t *ctx);
CUresult gm_ctx_synchronize(const gm_cuda *t);

CUresult gm_mem_alloc(const gm_cuda *t, size_t n, CUdeviceptr *p);
CUresult gm_mem_free(const gm_cuda *t, CUdeviceptr p);
CUresult gm_mem_get_info(const gm_cuda *t, size_t *free, size_t *total);
CUresult gm_memcpy_htod(const gm_cuda *t, CUdeviceptr dst, const void *src, size_t n);
CUresult gm_memcpy_dtoh(const gm_cuda *t, void *dst, CUdeviceptr src, size_t n);
CUresult gm_memcpy_dtod(const gm_cuda *t, CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s, int async);
CUresult gm_memset_d8(const gm_cuda *t, CUdeviceptr dst, unsigned char v, size_t n, uintptr_t s, int async);
CUresult gm_memset_d32(const gm_cuda *t, CUdeviceptr dst, unsigned int v, size_t n, uintptr_t s, int async);

CUresult gm_module_load(const gm_cuda *t, const void *image, size_t n, uintptr_t *mod);
CUresult gm_module_unload(const gm_cuda *t, uintptr_t mod);
CUresult gm_module_get_function(const gm_cuda *t, uintptr_t mod, const char *name, size_t namelen,
				uintptr_t *fn);
CUresult gm_module_get_global(const gm_cuda *t, uintptr_t mod, const char *name, size_t namelen,
			      CUdeviceptr *p, size_t *bytes);
CUresult gm_func_param_info(const gm_cuda *t, uintptr_t fn, size_t index, size_t *offset, size_t *size);
CUresult gm_func_attribute(const gm_cuda *t, int attr, uintptr_t fn, int *v);
CUresult gm_launch(const gm_cuda *t, uintptr_t fn, unsigned int gx, unsigned int gy, unsigned int gz,
		   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, uintptr_t s,
		   void *params, size_t nparams);

CUresult gm_stream_create(const gm_cuda *t, unsigned int flags, uintptr_t *s);
CUresult gm_stream_destroy(const gm_cuda *t, uintptr_t s);
CUresult gm_stream_synchronize(const gm_cuda *t, uintptr_t s);
CUresult gm_stream_query(const gm_cuda *t, uintptr_t s);
CUresult gm_stream_wait_event(const gm_cuda *t, uintptr_t s, uintptr_t ev, unsigned int flags);
CUresult gm_event_create(const gm_cuda *t, unsigned int flags, uintptr_t *ev);
CUresult gm_event_destroy(const gm_cuda *t, uintptr_t ev);
CUresult gm_event_record(const gm_cuda *t, uintptr_t ev, uintptr_t s);
CUresult gm_event_synchronize(const gm_cuda *t, uintptr_t ev);
CUresult gm_event_query(const gm_cuda *t, uintptr_t ev);
CUresult gm_event_elapsed(const gm_cuda *t, uintptr_t start, uintptr_t end, float *ms);

/* Optional symbols: CUDA_ERROR_NOT_SUPPORTED where the driver lacks them. */
CUresult gm_stream_priority_range(const gm_cuda *t, int *least, int *greatest);
CUresult gm_stream_create_prio(const gm_cuda *t, unsigned int flags, int priority, uintptr_t *s);
CUresult gm_stream_priority(const gm_cuda *t, uintptr_t s, int *priority);
CUresult gm_stream_flags(const gm_cuda *t, uintptr_t s, unsigned int *flags);
CUresult gm_stream_is_capturing(const gm_cuda *t, uintptr_t s, int *status);
CUresult gm_event_record_flags(const gm_cuda *t, uintptr_t ev, uintptr_t s, unsigned int flags);
CUresult gm_func_set_attribute(const gm_cuda *t, uintptr_t fn, int attr, int value);
CUresult gm_occupancy(const gm_cuda *t, uintptr_t fn, int block, size_t smem, unsigned int flags, int *n);
CUresult gm_occupancy_smem(const gm_cuda *t, uintptr_t fn, int blocks, int block, size_t *smem);
/* dims: grid x, y, z, block x, y, z, shared memory bytes. attrs: nattrs
 * CUlaunchAttribute records (72 bytes each, proto.LaunchAttrSize), copied
 * into an aligned array before use. which: 0 max active clusters, 1 max
 * potential cluster size. */
CUresult gm_ctx_get_limit(const gm_cuda *t, int limit, size_t *value);
CUresult gm_ctx_set_limit(const gm_cuda *t, int limit, size_t value);

/* Virtual memory management and memory pools: CUDA_ERROR_NOT_SUPPORTED
 * where the driver lacks them. Access descriptors are n gm_access records
 * (at most GM_MAX_ACCESS_DESCS). Pool attributes 1 to 3 are ints in CUDA,
 * the others 64-bit: value is widened either way. */
CUresult gm_mem_granularity(const gm_cuda *t, const gm_memprop *p, int option, size_t *g);
CUresult gm_mem_address_reserve(const gm_cuda *t, size_t size, size_t align, CUdeviceptr addr,
				unsigned long long flags, CUdeviceptr *p);
CUresult gm_mem_address_free(const gm_cuda *t, CUdeviceptr p, size_t size);
CUresult gm_mem_create(const gm_cuda *t, size_t size, const gm_memprop *p, unsigned long long flags,
		       unsigned long long *h);
CUresult gm_mem_release(const gm_cuda *t, unsigned long long h);
CUresult gm_mem_map(const gm_cuda *t, CUdeviceptr p, size_t size, size_t offset, unsigned long long h,
		    unsigned long long flags);
CUresult gm_mem_unmap(const gm_cuda *t, CUdeviceptr p, size_t size);
CUresult gm_mem_set_access(const gm_cuda *t, CUdeviceptr p, size_t size, const gm_access *d, size_t n);
CUresult gm_mem_get_access(const gm_cuda *t, int loc_type, int loc_id, CUdeviceptr p, unsigned long long *flags);
CUresult gm_mem_pool_create(const gm_cuda *t, int loc_id, size_t max_size, uintptr_t *pool);
CUresult gm_mem_pool_destroy(const gm_cuda *t, uintptr_t pool);
CUresult gm_mem_alloc_from_pool(const gm_cuda *t, size_t n, uintptr_t pool, uintptr_t s, CUdeviceptr *p);
CUresult gm_mem_free_async(const gm_cuda *t, CUdeviceptr p, uintptr_t s);
CUresult gm_mem_pool_set_attribute(const gm_cuda *t, uintptr_t pool, int attr, unsigned long long value);
CUresult gm_mem_pool_get_attribute(const gm_cuda *t, uintptr_t pool, int attr, unsigned long long *value);
CUresult gm_mem_pool_trim(const gm_cuda *t, uintptr_t pool, size_t keep);
CUresult gm_mem_pool_set_access(const gm_cuda *t, uintptr_t pool, const gm_access *d, size_t n);
CUresult gm_mem_pool_get_access(const gm_cuda *t, uintptr_t pool, int loc_type, int loc_id, int *flags);

CUresult gm_launch_ex(const gm_cuda *t, uintptr_t fn, const unsigned int *dims, uintptr_t s, const void *attrs,
		      unsigned int nattrs, void *params, size_t nparams);
CUresult gm_cluster_occupancy(const gm_cuda *t, int which, uintptr_t fn, const unsigned int *dims, uintptr_t s,
			      const void *attrs, unsigned int nattrs, int *n);

/* Several devices: dev, peer, src and dst are ordinals. */
CUresult gm_device_can_access_peer(const gm_cuda *t, int dev, int peer, int *can);
CUresult gm_device_p2p_attribute(const gm_cuda *t, int attrib, int src, int dst, int *value);
CUresult gm_ctx_enable_peer(const gm_cuda *t, uintptr_t peer, unsigned int flags);
CUresult gm_ctx_disable_peer(const gm_cuda *t, uintptr_t peer);
CUresult gm_memcpy_peer(const gm_cuda *t, CUdeviceptr dst, uintptr_t dst_ctx, CUdeviceptr src, uintptr_t src_ctx,
			size_t n, uintptr_t s, int async);
/*
 * Stream capture and graphs (optional: CUDA_ERROR_NOT_SUPPORTED where the
 * driver lacks a call). Lists of nodes are arrays of uintptr_t (CUgraphNode
 * values), edge data 8-byte records; NULL edges are default edges.
 */
CUresult gm_stream_begin_capture(const gm_cuda *t, uintptr_t s, int mode);
CUresult gm_stream_end_capture(const gm_cuda *t, uintptr_t s, uintptr_t *g);
/* gm_stream_capture_info copies at most cap dependencies (and their edge
 * data, zero without cuStreamGetCaptureInfo_v3) and sets *n to their
 * number. */
CUresult gm_stream_capture_info(const gm_cuda *t, uintptr_t s, int *status, unsigned long long *id, uintptr_t *g,
				uintptr_t *deps, void *edges, size_t cap, size_t *n);
CUresult gm_stream_update_capture_deps(const gm_cuda *t, uintptr_t s, const uintptr_t *deps, const void *edges,
				       size_t n, unsigned int flags);
CUresult gm_thread_exchange_capture_mode(const gm_cuda *t, int *mode);
CUresult gm_graph_create(const gm_cuda *t, unsigned int flags, uintptr_t *g);
CUresult gm_graph_destroy(const gm_cuda *t, uintptr_t g);
CUresult gm_graph_clone(const gm_cuda *t, uintptr_t g, uintptr_t *clone);
/* gm_graph_nodes: all nodes, or the roots; at most cap into nodes, their
 * number in *n. */
CUresult gm_graph_nodes(const gm_cuda *t, uintptr_t g, int roots, uintptr_t *nodes, size_t cap, size_t *n);
/* dims as gm_launch_ex takes them. */
CUresult gm_graph_add_kernel(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, uintptr_t fn,
			     const unsigned int *dims, void *params, size_t nparams, uintptr_t *node);
CUresult gm_graph_add_memset(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, CUdeviceptr dst,
			     size_t pitch, unsigned int value, unsigned int elementSize, size_t width, size_t height,
			     uintptr_t *node);
/* c: a proto.Copy3D's 15 fields (src, x, y, z, pitch, height; dst, ...;
 * width, height, depth). */
CUresult gm_graph_add_memcpy(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps,
			     const unsigned long long *c, uintptr_t *node);
CUresult gm_graph_add_empty(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, uintptr_t *node);
CUresult gm_graph_add_event(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, uintptr_t ev,
			    int wait, uintptr_t *node);
CUresult gm_graph_add_deps(const gm_cuda *t, uintptr_t g, const uintptr_t *from, const uintptr_t *to,
			   const void *edges, size_t n);
CUresult gm_graph_instantiate(const gm_cuda *t, uintptr_t g, unsigned long long flags, uintptr_t *e);
CUresult gm_graph_exec_destroy(const gm_cuda *t, uintptr_t e);
CUresult gm_graph_launch(const gm_cuda *t, uintptr_t e, uintptr_t s, int upload);
CUresult gm_graph_exec_kernel_params(const gm_cuda *t, uintptr_t e, uintptr_t node, uintptr_t fn,
				     const unsigned int *dims, void *params, size_t nparams);

#endif
