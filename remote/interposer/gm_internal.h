/*
 * Internals shared by the interposer's C files (not part of gm_wire.h,
 * which is what the generated stubs use). Nothing here is exported: the
 * library is built with -fvisibility=hidden and only GM_EXPORT symbols are
 * visible.
 */
#ifndef GPUMUX_GM_INTERNAL_H
#define GPUMUX_GM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gm_abi.h"

/* Protocol limits; remote/proto/frame.go is the reference. */
#define GM_MAX_STRING 4096u
#define GM_MAX_BLOB (32u << 10)
#define GM_MAX_IMAGE (512u << 20)

/* gm_log writes "gpumux: <message>\n" to stderr in one write. */
void gm_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* gm_wait waits at most GPUMUX_REMOTE_TIMEOUT for fd to be ready for ev
 * (POLLIN, POLLOUT); -1 with why when it is not. */
int gm_wait(int fd, short ev, char *why, size_t wl);

/* gm_first returns 1 the first time it is called with *once == 0 (and sets
 * it), 0 after: for messages logged once. */
int gm_first(unsigned char *once);

/* gm_debug: GPUMUX_REMOTE_DEBUG asks for a log line per failing call (1,
 * any non-empty value) or per call (2); 0 when unset. gm_debug_local logs a
 * call answered in the client that fails, at level 1 and up. */
int gm_debug(void);
#define gm_debug_local(name, r)                                                   \
	do {                                                                      \
		if (gm_debug())                                                   \
			gm_log("debug: %s (answered here) returned %d", name, (int)(r)); \
	} while (0)

/* gm_not_supported logs name once (through *once) and returns
 * CUDA_ERROR_NOT_SUPPORTED: the body of every unsupported entry point. */
CUresult gm_not_supported(const char *name, unsigned char *once);

/* gm_error_name is cuGetErrorName's answer, or "an unknown CUresult". */
const char *gm_error_name(CUresult r);

/* An entry point by name, for cuGetProcAddress. */
typedef struct gm_proc {
	const char *name;
	void *fn;
} gm_proc;

/* The NOT_SUPPORTED stubs generated from unsupported.list
 * (zz_unsupported.c). */
extern const gm_proc gm_unsupported_procs[];
extern const int gm_unsupported_count;

/* gpumux's own export table (gm_share.c; its layout is gm_share.h's
 * gm_share_table), which cuGetExportTable hands out. */
struct gm_share_table;
extern const struct gm_share_table gm_share;

/* The entry points of gm_dark.c that cuGetProcAddress hands out. */
#ifndef GM_USE_CUDA_H
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
			   unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
			   unsigned int numLibraryOptions);
CUresult cuLibraryUnload(CUlibrary library);
CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library);
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name);
CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name);
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel);
CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev);
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode);
CUresult cuCtxGetDevice(CUdevice *device);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
#endif

/* A launch's packed parameters (interposer.c): kernelParams packed by the
 * function's layout (cuFuncGetParamInfo, asked once per function), or
 * extra's CU_LAUNCH_PARAM_BUFFER_POINTER buffer as it is. gm_params_pack
 * refuses both at once, a NULL kernelParams for a kernel with parameters
 * and more than GM_MAX_BLOB bytes (CUDA_ERROR_INVALID_VALUE); free with
 * gm_params_free. */
struct gm_params {
	const void *buf;
	size_t len;
	unsigned char *owned; /* malloc'd, or NULL */
	unsigned char small[4096];
};
CUresult gm_params_pack(struct gm_params *p, CUfunction f, void **kernelParams, void **extra);
void gm_params_free(struct gm_params *p);

/* The calling thread's capture interaction mode
 * (cuThreadExchangeStreamCaptureMode; gm_wire.c sends it to the server
 * before a call of a thread whose mode is not the one last sent). */
int gm_thread_capture_mode(void);
void gm_set_thread_capture_mode(int mode);

/* The entry points of gm_more.c that cuGetProcAddress hands out. */
#define GM_MORE_PROCS(X)                                     \
	X(cuStreamIsCapturing)                               \
	X(cuStreamIsCapturing_ptsz)                          \
	X(cuStreamGetPriority_ptsz)                          \
	X(cuStreamGetFlags_ptsz)                             \
	X(cuEventRecordWithFlags_ptsz)                       \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessor)       \
	X(cuKernelSetAttribute)                              \
	X(cuMemHostAlloc)                                    \
	X(cuMemAllocHost_v2)                                 \
	X(cuMemFreeHost)                                     \
	X(cuMemHostGetFlags)                                 \
	X(cuMemcpy)                                          \
	X(cuMemcpyAsync)                                     \
	X(cuMemcpy_ptds)                                     \
	X(cuMemcpyAsync_ptsz)                                \
	X(cuModuleGetGlobal_v2)                              \
	X(cuFuncGetParamInfo)                                \
	X(cuCtxGetLimit)                                     \
	X(cuCtxGetApiVersion)                                \
	X(cuMemHostRegister_v2)                              \
	X(cuMemHostUnregister)                               \
	X(cuPointerGetAttribute)                             \
	X(cuPointerGetAttributes)                            \
	X(cuMemHostGetDevicePointer_v2)                      \
	X(cuDeviceGetP2PAttribute)                           \
	X(cuMemcpyPeer_ptds)                                 \
	X(cuMemcpyPeerAsync_ptsz)

/* The entry points of gm_graph.c (stream capture and graphs) that
 * cuGetProcAddress hands out. */
#define GM_GRAPH_PROCS(X)                                    \
	X(cuStreamBeginCapture)                              \
	X(cuStreamBeginCapture_v2)                           \
	X(cuStreamBeginCapture_ptsz)                         \
	X(cuStreamBeginCapture_v2_ptsz)                      \
	X(cuStreamEndCapture)                                \
	X(cuStreamEndCapture_ptsz)                           \
	X(cuStreamGetCaptureInfo)                            \
	X(cuStreamGetCaptureInfo_v2)                         \
	X(cuStreamGetCaptureInfo_v3)                         \
	X(cuStreamGetCaptureInfo_ptsz)                       \
	X(cuStreamGetCaptureInfo_v2_ptsz)                    \
	X(cuStreamGetCaptureInfo_v3_ptsz)                    \
	X(cuStreamUpdateCaptureDependencies)                 \
	X(cuStreamUpdateCaptureDependencies_v2)              \
	X(cuStreamUpdateCaptureDependencies_ptsz)            \
	X(cuStreamUpdateCaptureDependencies_v2_ptsz)         \
	X(cuThreadExchangeStreamCaptureMode)                 \
	X(cuGraphCreate)                                     \
	X(cuGraphDestroy)                                    \
	X(cuGraphClone)                                      \
	X(cuGraphGetNodes)                                   \
	X(cuGraphGetRootNodes)                               \
	X(cuGraphAddKernelNode)                              \
	X(cuGraphAddKernelNode_v2)                           \
	X(cuGraphAddMemsetNode)                              \
	X(cuGraphAddMemcpyNode)                              \
	X(cuGraphAddEmptyNode)                               \
	X(cuGraphAddEventRecordNode)                         \
	X(cuGraphAddEventWaitNode)                           \
	X(cuGraphAddDependencies)                            \
	X(cuGraphAddDependencies_v2)                         \
	X(cuGraphInstantiate)                                \
	X(cuGraphInstantiate_v2)                             \
	X(cuGraphInstantiateWithFlags)                       \
	X(cuGraphInstantiateWithParams)                      \
	X(cuGraphInstantiateWithParams_ptsz)                 \
	X(cuGraphLaunch)                                     \
	X(cuGraphLaunch_ptsz)                                \
	X(cuGraphUpload)                                     \
	X(cuGraphUpload_ptsz)                                \
	X(cuGraphExecDestroy)                                \
	X(cuGraphExecKernelNodeSetParams)                    \
	X(cuGraphExecKernelNodeSetParams_v2)
/* The entry points of gm_mem.c that cuGetProcAddress hands out. */
#define GM_MEM_PROCS(X)                  \
	X(cuCtxSetLimit)                 \
	X(cuMemGetAllocationGranularity) \
	X(cuMemSetAccess)                \
	X(cuMemGetAccess)                \
	X(cuMemRetainAllocationHandle)   \
	X(cuMemAllocAsync_ptsz)          \
	X(cuMemFreeAsync_ptsz)           \
	X(cuMemAllocFromPoolAsync_ptsz)  \
	X(cuMemPoolCreate)               \
	X(cuMemPoolSetAttribute)         \
	X(cuMemPoolGetAttribute)         \
	X(cuMemPoolSetAccess)            \
	X(cuMemPoolGetAccess)

/* Fork handlers of gm_more.c (its host allocation table's lock). */
void gm_more_atfork_prepare(void);
void gm_more_atfork_parent(void);
void gm_more_atfork_child(void);

#include "gm_md2.h"

/* gm_kernel_function_in is gm_kernel_function in ctx (a graph kernel
 * node's), pushed for the lookup if it is not the current one. */
CUresult gm_kernel_function_in(CUfunction *f, uint64_t ctx);

/* gm_lib_forget_ctx drops the libraries' modules and kernels' functions
 * in ctx, which the server has destroyed (gm_dark.c). */
void gm_lib_forget_ctx(uint64_t ctx);

/* Fork handlers of gm_dark.c's libraries, run from interposer.c's. */
void gm_dark_atfork_prepare(void);
void gm_dark_atfork_parent(void);
void gm_dark_atfork_child(void);

/* Fork handlers of interposer.c, run from gm_wire.c's pthread_atfork
 * handlers (prepare before gm_wire's lock, child after its reset). */
void gm_interposer_atfork_prepare(void);
void gm_interposer_atfork_parent(void);
void gm_interposer_atfork_child(void);

#endif
