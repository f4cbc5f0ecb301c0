/*
 * Entry points composed from forwarded calls or answered in the client:
 * stream capture status (the rest of capture is gm_graph.c's), the _ptsz
 * variants of the newer stream calls, occupancy
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

/* A CUkernel runs as its function in the current context (gm_dark.c). */
GM_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	(void)dev;
	return gm_rpc_cuFuncSetAttribute((CUfunction)kernel, attrib, val);
}

/* ---- page-locked host memory: plain host memory, page-aligned ----
 *
 * Memory the client pins or registers stays in the client: copies stream
 * it to the server whatever it is. CU_MEMHOSTALLOC_DEVICEMAP and
 * CU_MEMHOSTREGISTER_DEVICEMAP are accepted (frameworks and cuDNN ask for
 * them as a matter of course), but the remote GPU cannot reach the
 * client's memory: cuMemHostGetDevicePointer is CUDA_ERROR_NOT_SUPPORTED
 * (below), and a pointer's device address (cuPointerGetAttribute) is none. */

struct gm_host {
	char *p;
	size_t n;
	unsigned int flags;
	int registered; /* the caller's memory (cuMemHostRegister): not ours to free */
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

static CUresult gm_host_add(struct gm_host h);

GM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (pp == NULL || bytesize == 0 ||
	    (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)))
		return CUDA_ERROR_INVALID_VALUE;
	if (gm_current_ctx() == 0) {
		gm_debug_local("cuMemHostAlloc", CUDA_ERROR_INVALID_CONTEXT);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	void *p = NULL;
	if (posix_memalign(&p, 4096, bytesize) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = gm_host_add((struct gm_host){p, bytesize, Flags, 0});
	if (r != CUDA_SUCCESS) {
		free(p);
		return r;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

/* gm_host_add records an allocation or registration; CUDA_ERROR_INVALID_VALUE
 * when it overlaps one already recorded (CUDA's answer for registering
 * memory twice: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, which the caller
 * substitutes). */
static CUresult gm_host_add(struct gm_host h)
{
	pthread_mutex_lock(&gm_host_mu);
	for (size_t i = 0; i < gm_nhosts; i++) {
		if (h.p < gm_hosts[i].p + gm_hosts[i].n && gm_hosts[i].p < h.p + h.n) {
			pthread_mutex_unlock(&gm_host_mu);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	if (gm_nhosts == gm_caphosts) {
		size_t cap = gm_caphosts ? 2 * gm_caphosts : 64;
		struct gm_host *n = realloc(gm_hosts, cap * sizeof *n);
		if (n == NULL) {
			pthread_mutex_unlock(&gm_host_mu);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		gm_hosts = n;
		gm_caphosts = cap;
	}
	gm_hosts[gm_nhosts++] = h;
	pthread_mutex_unlock(&gm_host_mu);
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	if (p == NULL || bytesize == 0 ||
	    (Flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY)))
		return CUDA_ERROR_INVALID_VALUE;
	if (gm_current_ctx() == 0) {
		gm_debug_local("cuMemHostRegister", CUDA_ERROR_INVALID_CONTEXT);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	CUresult r = gm_host_add((struct gm_host){p, bytesize, Flags, 1});
	return r == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : r;
}

/* Only memory cuMemHostRegister registered, by its start. */
GM_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	pthread_mutex_lock(&gm_host_mu);
	struct gm_host *h = gm_host_find(p);
	if (h == NULL || h->p != p || !h->registered) {
		pthread_mutex_unlock(&gm_host_mu);
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	}
	*h = gm_hosts[--gm_nhosts];
	pthread_mutex_unlock(&gm_host_mu);
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
	if (h == NULL || h->p != p || h->registered) {
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

/* cuMemHostGetDevicePointer: a device address for this process's
 * page-locked memory (zero-copy access from kernels). The remote GPU is in
 * another machine or process: it cannot reach memory of this one, so there
 * is no such address to give. CUDA_ERROR_NOT_SUPPORTED, said once. */
GM_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	static unsigned char once;
	if (pdptr == NULL || p == NULL || Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (gm_first(&once))
		gm_log("cuMemHostGetDevicePointer: a remote GPU cannot map this process's host memory "
		       "(zero-copy); it returns CUDA_ERROR_NOT_SUPPORTED");
	gm_debug_local("cuMemHostGetDevicePointer_v2", CUDA_ERROR_NOT_SUPPORTED);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- pointer attributes ----
 *
 * Answered here from what the interposer knows: host memory it pinned or
 * registered, and device memory by the server's record of the client's
 * allocations (a round trip: the allocation's range, its context and that
 * context's device, on any of the client's GPUs). Attributes gpumux cannot
 * answer truthfully (P2P tokens,
 * legacy IPC, memory pools, handles) are CUDA_ERROR_NOT_SUPPORTED from
 * cuPointerGetAttribute and zero from cuPointerGetAttributes, which, as
 * CUDA documents, does not fail for a pointer CUDA does not know. */
struct gm_ptr {
	int kind; /* 0: unknown to CUDA, CU_MEMORYTYPE_HOST or _DEVICE */
	char *host_base;
	size_t host_size;
	CUdeviceptr base;
	size_t size;
	CUcontext ctx; /* device memory: its context and that context's device */
	CUdevice dev;
};

/* gm_ptr_attr_size: the size of an attribute's value, as cuda.h gives
 * it (0: not an attribute CUDA 13 knows). */
static size_t gm_ptr_attr_size(CUpointer_attribute a)
{
	switch ((int)a) {
	case 1:  /* CONTEXT */
	case 3:  /* DEVICE_POINTER */
	case 4:  /* HOST_POINTER */
	case 7:  /* BUFFER_ID */
	case 11: /* RANGE_START_ADDR */
	case 12: /* RANGE_SIZE */
	case 14: /* ALLOWED_HANDLE_TYPES */
	case 17: /* MEMPOOL_HANDLE */
	case 18: /* MAPPING_SIZE */
	case 19: /* MAPPING_BASE_ADDR */
	case 20: /* MEMORY_BLOCK_ID */
		return 8;
	case 5: /* P2P_TOKENS: a struct of two 64-bit tokens */
		return 16;
	case 2: case 6: case 8: case 9: case 10: case 13: case 15: case 16: case 21:
		return 4;
	default:
		return 0;
	}
}

static CUresult gm_ptr_info(CUdeviceptr ptr, struct gm_ptr *pi)
{
	memset(pi, 0, sizeof *pi);
	pthread_mutex_lock(&gm_host_mu);
	struct gm_host *h = gm_host_find((const void *)(uintptr_t)ptr);
	if (h != NULL) {
		pi->kind = CU_MEMORYTYPE_HOST;
		pi->host_base = h->p;
		pi->host_size = h->n;
	}
	pthread_mutex_unlock(&gm_host_mu);
	if (pi->kind != 0)
		return CUDA_SUCCESS;
	CUresult r = gm_rpc_cuPointerGetAttributes(&pi->base, &pi->size, &pi->ctx, &pi->dev, ptr);
	if (r == CUDA_SUCCESS)
		pi->kind = CU_MEMORYTYPE_DEVICE;
	return r == CUDA_ERROR_INVALID_VALUE ? CUDA_SUCCESS : r;
}

/* gm_ptr_attr writes one attribute's value (of the size CUDA gives it) to
 * data; CUDA_ERROR_NOT_SUPPORTED for those gpumux does not answer. */
static CUresult gm_ptr_attr(const struct gm_ptr *pi, CUpointer_attribute a, CUdeviceptr ptr, void *data)
{
	int dev = pi->kind == CU_MEMORYTYPE_DEVICE;
	switch (a) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = dev ? pi->ctx : NULL;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = (unsigned int)pi->kind;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = dev ? ptr : 0;
		return dev ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		*(void **)data = pi->kind == CU_MEMORYTYPE_HOST ? (void *)(uintptr_t)ptr : NULL;
		return pi->kind == CU_MEMORYTYPE_HOST ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		/* Unique among live allocations: the start of the allocation. */
		*(unsigned long long *)data = dev ? (unsigned long long)pi->base : (unsigned long long)(uintptr_t)pi->host_base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = dev ? pi->dev : 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = dev ? pi->base : (CUdeviceptr)(uintptr_t)pi->host_base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = dev ? pi->size : pi->host_size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = dev;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

GM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	if (data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct gm_ptr pi;
	CUresult r = gm_ptr_info(ptr, &pi);
	if (r != CUDA_SUCCESS)
		return r;
	if (pi.kind == 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = gm_ptr_attr(&pi, attribute, ptr, data);
	if (r == CUDA_ERROR_NOT_SUPPORTED) {
		static unsigned char once;
		return gm_not_supported("cuPointerGetAttribute of a device address for host memory, or of a P2P, IPC, pool or handle attribute", &once);
	}
	return r;
}

GM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
						  void **data, CUdeviceptr ptr)
{
	if (numAttributes == 0 || attributes == NULL || data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct gm_ptr pi;
	CUresult r = gm_ptr_info(ptr, &pi);
	if (r != CUDA_SUCCESS)
		return r;
	for (unsigned int i = 0; i < numAttributes; i++) {
		if (data[i] == NULL)
			continue;
		size_t n = gm_ptr_attr_size(attributes[i]);
		if (n == 0)
			return CUDA_ERROR_INVALID_VALUE;
		/* What cannot be answered is left at CUDA's default, zero. */
		unsigned char buf[16] = {0};
		r = gm_ptr_attr(&pi, attributes[i], ptr, buf);
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_SUPPORTED && r != CUDA_ERROR_INVALID_VALUE)
			return r;
		if (r != CUDA_SUCCESS)
			memset(buf, 0, sizeof buf);
		memcpy(data[i], buf, n);
	}
	return CUDA_SUCCESS;
}

/* ---- unified copies: cuMemcpy, cuMemcpyAsync ----
 *
 * A pointer is device memory when it lies in one of the client's
 * allocations, as the server's records say (cuMemGetAddressRange, which
 * knows every cuMemAlloc result and module global of this client, on any
 * of its devices); any other pointer is host memory of this process. A
 * device-to-device copy between two devices' memory is the server's to
 * run as a peer copy. The client's host and the
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

/* ---- several devices ----
 * cuDeviceCanAccessPeer, cuCtxEnablePeerAccess, cuCtxDisablePeerAccess,
 * cuMemcpyPeer and cuMemcpyPeerAsync are forwarded as they are
 * (calls.def); the server checks that each address is the client's memory
 * on the device of the context named with it. */

GM_EXPORT CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
						   CUdevice dstDevice)
{
	return gm_rpc_cuDeviceGetP2PAttribute(value, (unsigned int)attrib, srcDevice, dstDevice);
}

GM_EXPORT CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
					     CUcontext srcContext, size_t ByteCount)
{
	return gm_rpc_cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount);
}

GM_EXPORT CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
						  CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
	return gm_rpc_cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount, GM_PTSZ(hStream));
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

/* cuCtxGetApiVersion: the driver creates every context, primary or not,
 * with the API version of cuCtxCreate_v2, 3020 (what the real 580 driver
 * answers, e2e/gpu/remote/check.c); the runtime asks it of each thread's
 * context, autograd's device threads included. A context handle is
 * checked where it is used, by the server. */
GM_EXPORT CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx == NULL && gm_current_ctx() == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	*version = 3020;
	return CUDA_SUCCESS;
}

/* cuCtxGetLimit: the server's answer for the current context. */
GM_EXPORT CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	return gm_rpc_cuCtxGetLimit(pvalue, (unsigned int)limit);
}
