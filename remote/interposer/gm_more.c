/*
 * Entry points composed from forwarded calls or answered in the client:
 * stream capture status (no capture can begin: cuStreamBeginCapture is not
 * forwarded), the _ptsz variants of the newer stream calls, occupancy
 * without flags, kernel attributes, and page-locked host memory, which is
 * plain host memory here (copies stream through the connection anyway, so
 * nothing needs it pinned on the client).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gm_internal.h"
#include "gm_wire.h"
#include "zz_calls.h"

#define GM_PTSZ(s) ((s) == NULL ? CU_STREAM_PER_THREAD : (s))

GM_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	if (captureStatus == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int st = 0;
	CUresult r = gm_rpc_cuStreamIsCapturing(hStream, &st);
	if (r == CUDA_SUCCESS)
		*captureStatus = (CUstreamCaptureStatus)st;
	return r;
}

GM_EXPORT CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	return cuStreamIsCapturing(GM_PTSZ(hStream), captureStatus);
}

/* The capture info calls: CUDA defines the outputs besides the status only
 * for an active capture, which gpumux never has; should the server report
 * one, the call is CUDA_ERROR_NOT_SUPPORTED rather than made-up data. */
static CUresult gm_capture_info(CUstream hStream, CUstreamCaptureStatus *status)
{
	CUresult r = cuStreamIsCapturing(hStream, status);
	if (r == CUDA_SUCCESS && *status != CU_STREAM_CAPTURE_STATUS_NONE)
		return CUDA_ERROR_NOT_SUPPORTED;
	return r;
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						  cuuint64_t *id_out)
{
	(void)id_out;
	return gm_capture_info(hStream, captureStatus_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
	(void)id_out;
	(void)graph_out;
	(void)dependencies_out;
	(void)numDependencies_out;
	return gm_capture_info(hStream, captureStatus_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out,
						     const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	(void)id_out;
	(void)graph_out;
	(void)dependencies_out;
	(void)edgeData_out;
	(void)numDependencies_out;
	return gm_capture_info(hStream, captureStatus_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						       cuuint64_t *id_out)
{
	return cuStreamGetCaptureInfo(GM_PTSZ(hStream), captureStatus_out, id_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
							  CUstreamCaptureStatus *captureStatus_out,
							  cuuint64_t *id_out, CUgraph *graph_out,
							  const CUgraphNode **dependencies_out,
							  size_t *numDependencies_out)
{
	return cuStreamGetCaptureInfo_v2(GM_PTSZ(hStream), captureStatus_out, id_out, graph_out, dependencies_out,
					 numDependencies_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
							  CUstreamCaptureStatus *captureStatus_out,
							  cuuint64_t *id_out, CUgraph *graph_out,
							  const CUgraphNode **dependencies_out,
							  const CUgraphEdgeData **edgeData_out,
							  size_t *numDependencies_out)
{
	return cuStreamGetCaptureInfo_v3(GM_PTSZ(hStream), captureStatus_out, id_out, graph_out, dependencies_out,
					 edgeData_out, numDependencies_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
	return gm_rpc_cuStreamGetPriority(GM_PTSZ(hStream), priority);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
	return gm_rpc_cuStreamGetFlags(GM_PTSZ(hStream), flags);
}

GM_EXPORT CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	return gm_rpc_cuEventRecordWithFlags(hEvent, GM_PTSZ(hStream), flags);
}

GM_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
								       size_t dynamicSMemSize)
{
	return gm_rpc_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
									   dynamicSMemSize, 0);
}

/* A CUkernel is its module's CUfunction (gm_dark.c), bound to one context. */
GM_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	(void)dev;
	return gm_rpc_cuFuncSetAttribute((CUfunction)kernel, attrib, val);
}

/* ---- page-locked host memory: plain host memory, page-aligned ---- */

struct gm_host {
	char *p;
	size_t n;
	unsigned int flags;
};

static pthread_mutex_t gm_host_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gm_host *gm_hosts;
static size_t gm_nhosts, gm_caphosts;

/* The lock is never held across anything that blocks, so the fork
 * handlers may take it. */
void gm_more_atfork_prepare(void)
{
	pthread_mutex_lock(&gm_host_mu);
}

void gm_more_atfork_parent(void)
{
	pthread_mutex_unlock(&gm_host_mu);
}

/* The child keeps the parent's host allocations: its memory is a copy. */
void gm_more_atfork_child(void)
{
	pthread_mutex_unlock(&gm_host_mu);
}

/* gm_host_find returns the allocation holding p; the caller holds the lock. */
static struct gm_host *gm_host_find(const void *p)
{
	for (size_t i = 0; i < gm_nhosts; i++)
		if ((const char *)p >= gm_hosts[i].p && (const char *)p < gm_hosts[i].p + gm_hosts[i].n)
			return &gm_hosts[i];
	return NULL;
}

GM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (pp == NULL || bytesize == 0 ||
	    (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)))
		return CUDA_ERROR_INVALID_VALUE;
	/* Mapped memory would need a device address for host memory. */
	if (Flags & CU_MEMHOSTALLOC_DEVICEMAP) {
		gm_debug_local("cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)", CUDA_ERROR_NOT_SUPPORTED);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (gm_current_ctx() == 0) {
		gm_debug_local("cuMemHostAlloc", CUDA_ERROR_INVALID_CONTEXT);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	void *p = NULL;
	if (posix_memalign(&p, 4096, bytesize) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&gm_host_mu);
	if (gm_nhosts == gm_caphosts) {
		size_t cap = gm_caphosts ? 2 * gm_caphosts : 64;
		struct gm_host *h = realloc(gm_hosts, cap * sizeof *h);
		if (h == NULL) {
			pthread_mutex_unlock(&gm_host_mu);
			free(p);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		gm_hosts = h;
		gm_caphosts = cap;
	}
	gm_hosts[gm_nhosts++] = (struct gm_host){p, bytesize, Flags};
	pthread_mutex_unlock(&gm_host_mu);
	*pp = p;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return cuMemHostAlloc(pp, bytesize, 0);
}

/* Only memory cuMemHostAlloc returned, by its start. */
GM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	pthread_mutex_lock(&gm_host_mu);
	struct gm_host *h = gm_host_find(p);
	if (h == NULL || h->p != p) {
		pthread_mutex_unlock(&gm_host_mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*h = gm_hosts[--gm_nhosts];
	pthread_mutex_unlock(&gm_host_mu);
	free(p);
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	if (pFlags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gm_host_mu);
	struct gm_host *h = gm_host_find(p);
	if (h != NULL)
		*pFlags = h->flags;
	pthread_mutex_unlock(&gm_host_mu);
	return h != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- unified copies: cuMemcpy, cuMemcpyAsync ----
 *
 * A pointer is device memory when it lies in one of the client's
 * allocations, as the server's records say (cuMemGetAddressRange, which
 * knows every cuMemAlloc result and module global of this client); any
 * other pointer is host memory of this process. The client's host and the
 * server's device addresses are separate address spaces, so a host pointer
 * that happens to equal an address inside one of the client's allocations
 * is taken for device memory. */
static CUresult gm_is_device(CUdeviceptr p, int *dev)
{
	CUdeviceptr base;
	size_t size;
	CUresult r = gm_rpc_cuMemGetAddressRange_v2(&base, &size, p);
	if (r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE) {
		*dev = r == CUDA_SUCCESS;
		return CUDA_SUCCESS;
	}
	return r;
}

static CUresult gm_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	if (n == 0)
		return CUDA_SUCCESS;
	int ddev, sdev;
	CUresult r = gm_is_device(dst, &ddev);
	if (r == CUDA_SUCCESS)
		r = gm_is_device(src, &sdev);
	if (r != CUDA_SUCCESS)
		return r;
	void *dh = (void *)(uintptr_t)dst;
	const void *sh = (const void *)(uintptr_t)src;
	if (ddev && sdev)
		return async ? gm_rpc_cuMemcpyDtoDAsync_v2(dst, src, n, s) : gm_rpc_cuMemcpyDtoD_v2(dst, src, n);
	if (ddev)
		return async ? gm_rpc_cuMemcpyHtoDAsync_v2(dst, sh, n, s) : gm_rpc_cuMemcpyHtoD_v2(dst, sh, n);
	if (sdev)
		return async ? gm_rpc_cuMemcpyDtoHAsync_v2(dh, src, n, s) : gm_rpc_cuMemcpyDtoH_v2(dh, src, n);
	/* Host to host, in stream order for an asynchronous copy. */
	if (async && (r = gm_rpc_cuStreamSynchronize(s)) != CUDA_SUCCESS)
		return r;
	memmove(dh, sh, n);
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return gm_memcpy(dst, src, ByteCount, NULL, 0);
}

GM_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return gm_memcpy(dst, src, ByteCount, hStream, 1);
}

GM_EXPORT CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return gm_memcpy(dst, src, ByteCount, NULL, 0);
}

GM_EXPORT CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return gm_memcpy(dst, src, ByteCount, GM_PTSZ(hStream), 1);
}

/* ---- optional outputs ----
 * CUDA ignores a NULL output of these calls (cuBLAS asks for a global's
 * address without its size); the wire stubs want both. */

GM_EXPORT CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	CUdeviceptr p = 0;
	size_t n = 0;
	CUresult r = gm_rpc_cuModuleGetGlobal_v2(&p, &n, hmod, name);
	if (r == CUDA_SUCCESS) {
		if (dptr != NULL)
			*dptr = p;
		if (bytes != NULL)
			*bytes = n;
	}
	return r;
}

GM_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
					      size_t *paramSize)
{
	size_t off = 0, size = 0;
	CUresult r = gm_rpc_cuFuncGetParamInfo(func, paramIndex, &off, &size);
	if (r == CUDA_SUCCESS) {
		if (paramOffset != NULL)
			*paramOffset = off;
		if (paramSize != NULL)
			*paramSize = size;
	}
	return r;
}

/* cuCtxGetLimit: the server's answer for the current context. */
GM_EXPORT CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	return gm_rpc_cuCtxGetLimit(pvalue, (unsigned int)limit);
}
