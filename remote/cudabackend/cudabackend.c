// The dlsym table and the thin wrappers of package cudabackend; see
// cudabackend.h and doc.go.

#include "cudabackend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gm_open(const char *path, gm_cuda **out, char *msg, size_t msglen)
{
	*out = NULL;
	msg[0] = 0;
	dlerror();
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *e = dlerror();
		snprintf(msg, msglen, "%s", e != NULL ? e : "dlopen failed");
		return GM_OPEN_NO_LIBRARY;
	}
	gm_cuda *t = calloc(1, sizeof *t);
	if (t == NULL) {
		dlclose(lib);
		snprintf(msg, msglen, "out of memory");
		return GM_OPEN_NO_MEMORY;
	}
	t->lib = lib;
	/* The POSIX idiom for a function pointer from dlsym. */
#define GM_REQUIRED(name)                                                      \
	*(void **)(&t->name) = dlsym(lib, #name);                              \
	if (t->name == NULL) {                                                 \
		snprintf(msg, msglen, "%s", #name);                            \
		goto missing;                                                  \
	}
#define GM_OPTIONAL(name) *(void **)(&t->name) = dlsym(lib, #name);
	GM_CUDA_SYMBOLS(GM_REQUIRED, GM_OPTIONAL)
#undef GM_REQUIRED
#undef GM_OPTIONAL
	*out = t;
	return GM_OPEN_OK;
missing:
	/* Nothing of the library has run yet: it can go again. */
	dlclose(lib);
	free(t);
	return GM_OPEN_NO_SYMBOL;
}

/* ---- staging ---- */

gm_staging *gm_staging_new(size_t size)
{
	gm_staging *st = calloc(1, sizeof *st);
	if (st != NULL)
		st->size = size;
	return st;
}

/*
 * slot_take returns the next slot of the ring, its buffer and event
 * allocated, after waiting for the copy that last used it.
 */
static CUresult slot_take(const gm_cuda *t, gm_staging *st, unsigned *slot)
{
	unsigned i = st->next;
	CUresult r;
	st->next = (i + 1) % GM_STAGING_SLOTS;
	if (st->busy[i]) {
		st->busy[i] = 0;
		if ((r = t->cuEventSynchronize(st->ev[i])) != CUDA_SUCCESS)
			return r;
	}
	if (st->buf[i] == NULL && (r = t->cuMemAllocHost_v2(&st->buf[i], st->size)) != CUDA_SUCCESS) {
		st->buf[i] = NULL;
		return r;
	}
	if (st->ev[i] == NULL &&
	    (r = t->cuEventCreate(&st->ev[i], GM_CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
		st->ev[i] = NULL;
		return r;
	}
	*slot = i;
	return CUDA_SUCCESS;
}

CUresult gm_htod_staged(const gm_cuda *t, gm_staging *st, CUdeviceptr dst, const void *src, size_t n,
			uintptr_t s)
{
	CUstream stream = (CUstream)s;
	for (size_t off = 0; off < n;) {
		size_t k = n - off < st->size ? n - off : st->size;
		unsigned i;
		CUresult r = slot_take(t, st, &i);
		if (r != CUDA_SUCCESS)
			return r;
		memcpy(st->buf[i], (const char *)src + off, k);
		if ((r = t->cuMemcpyHtoDAsync_v2(dst + off, st->buf[i], k, stream)) != CUDA_SUCCESS)
			return r;
		if ((r = t->cuEventRecord(st->ev[i], stream)) != CUDA_SUCCESS) {
			/* The copy is queued but cannot be tracked: wait for it. */
			t->cuStreamSynchronize(stream);
			return r;
		}
		st->busy[i] = 1;
		off += k;
	}
	return CUDA_SUCCESS;
}

CUresult gm_dtoh_staged(const gm_cuda *t, gm_staging *st, void *dst, CUdeviceptr src, size_t n, uintptr_t s)
{
	CUstream stream = (CUstream)s;
	unsigned i;
	CUresult r;
	if (n == 0)
		return CUDA_SUCCESS;
	if ((r = slot_take(t, st, &i)) != CUDA_SUCCESS)
		return r;
	for (size_t off = 0; off < n;) {
		size_t k = n - off < st->size ? n - off : st->size;
		if ((r = t->cuMemcpyDtoHAsync_v2(st->buf[i], src + off, k, stream)) != CUDA_SUCCESS)
			return r;
		if ((r = t->cuStreamSynchronize(stream)) != CUDA_SUCCESS)
			return r;
		memcpy((char *)dst + off, st->buf[i], k);
		off += k;
	}
	return CUDA_SUCCESS;
}

/* ---- device ---- */

CUresult gm_init(const gm_cuda *t, unsigned int flags)
{
	return t->cuInit(flags);
}

CUresult gm_driver_version(const gm_cuda *t, int *v)
{
	return t->cuDriverGetVersion(v);
}

CUresult gm_device_count(const gm_cuda *t, int *n)
{
	return t->cuDeviceGetCount(n);
}

CUresult gm_device_name(const gm_cuda *t, int dev, char *name, int len)
{
	CUdevice d;
	CUresult r = t->cuDeviceGet(&d, dev);
	return r != CUDA_SUCCESS ? r : t->cuDeviceGetName(name, len, d);
}

CUresult gm_device_total_mem(const gm_cuda *t, int dev, size_t *bytes)
{
	CUdevice d;
	CUresult r = t->cuDeviceGet(&d, dev);
	return r != CUDA_SUCCESS ? r : t->cuDeviceTotalMem_v2(bytes, d);
}

CUresult gm_device_attribute(const gm_cuda *t, int attr, int dev, int *v)
{
	CUdevice d;
	CUresult r = t->cuDeviceGet(&d, dev);
	return r != CUDA_SUCCESS ? r : t->cuDeviceGetAttribute(v, attr, d);
}

CUresult gm_device_uuid(const gm_cuda *t, int dev, char *uuid16)
{
	CUdevice d;
	CUuuid u;
	CUresult r;
	if (t->cuDeviceGetUuid_v2 == NULL && t->cuDeviceGetUuid == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	if ((r = t->cuDeviceGet(&d, dev)) != CUDA_SUCCESS)
		return r;
	r = t->cuDeviceGetUuid_v2 != NULL ? t->cuDeviceGetUuid_v2(&u, d) : t->cuDeviceGetUuid(&u, d);
	if (r == CUDA_SUCCESS)
		memcpy(uuid16, u.bytes, 16);
	return r;
}

/* ---- contexts ---- */

CUresult gm_ctx_create(const gm_cuda *t, int dev, unsigned int flags, uintptr_t *ctx)
{
	CUdevice d;
	CUcontext c = NULL;
	CUresult r = t->cuDeviceGet(&d, dev);
	if (r != CUDA_SUCCESS)
		return r;
	r = t->cuCtxCreate_v2(&c, flags, d);
	*ctx = (uintptr_t)c;
	return r;
}

CUresult gm_ctx_destroy(const gm_cuda *t, uintptr_t ctx, gm_staging *st)
{
	if (st != NULL) {
		if (t->cuCtxPushCurrent_v2((CUcontext)ctx) == CUDA_SUCCESS) {
			for (unsigned i = 0; i < GM_STAGING_SLOTS; i++) {
				if (st->busy[i])
					t->cuEventSynchronize(st->ev[i]);
				if (st->ev[i] != NULL)
					t->cuEventDestroy_v2(st->ev[i]);
				if (st->buf[i] != NULL)
					t->cuMemFreeHost(st->buf[i]);
			}
			CUcontext popped;
			t->cuCtxPopCurrent_v2(&popped);
		}
		free(st);
	}
	return t->cuCtxDestroy_v2((CUcontext)ctx);
}

CUresult gm_ctx_set_current(const gm_cuda *t, uintptr_t ctx)
{
	return t->cuCtxSetCurrent((CUcontext)ctx);
}

CUresult gm_ctx_get_current(const gm_cuda *t, uintptr_t *ctx)
{
	CUcontext c = NULL;
	CUresult r = t->cuCtxGetCurrent(&c);
	*ctx = (uintptr_t)c;
	return r;
}

CUresult gm_ctx_synchronize(const gm_cuda *t)
{
	return t->cuCtxSynchronize();
}

/* ---- memory ---- */

CUresult gm_mem_alloc(const gm_cuda *t, size_t n, CUdeviceptr *p)
{
	*p = 0;
	return t->cuMemAlloc_v2(p, n);
}

CUresult gm_mem_free(const gm_cuda *t, CUdeviceptr p)
{
	return t->cuMemFree_v2(p);
}

CUresult gm_mem_get_info(const gm_cuda *t, size_t *free, size_t *total)
{
	return t->cuMemGetInfo_v2(free, total);
}

CUresult gm_memcpy_htod(const gm_cuda *t, CUdeviceptr dst, const void *src, size_t n)
{
	return t->cuMemcpyHtoD_v2(dst, src, n);
}

CUresult gm_memcpy_dtoh(const gm_cuda *t, void *dst, CUdeviceptr src, size_t n)
{
	return t->cuMemcpyDtoH_v2(dst, src, n);
}

CUresult gm_memcpy_dtod(const gm_cuda *t, CUdeviceptr dst, CUdeviceptr src, size_t n, uintptr_t s, int async)
{
	return async ? t->cuMemcpyDtoDAsync_v2(dst, src, n, (CUstream)s) : t->cuMemcpyDtoD_v2(dst, src, n);
}

CUresult gm_memset_d8(const gm_cuda *t, CUdeviceptr dst, unsigned char v, size_t n, uintptr_t s, int async)
{
	return async ? t->cuMemsetD8Async(dst, v, n, (CUstream)s) : t->cuMemsetD8_v2(dst, v, n);
}

CUresult gm_memset_d32(const gm_cuda *t, CUdeviceptr dst, unsigned int v, size_t n, uintptr_t s, int async)
{
	return async ? t->cuMemsetD32Async(dst, v, n, (CUstream)s) : t->cuMemsetD32_v2(dst, v, n);
}

/* ---- modules and kernels ---- */

CUresult gm_module_load(const gm_cuda *t, const void *image, size_t n, uintptr_t *mod)
{
	CUmodule m = NULL;
	CUresult r;
	*mod = 0;
	if (n == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (((const char *)image)[n - 1] == 0) {
		r = t->cuModuleLoadData(&m, image);
	} else {
		/* PTX is read up to its NUL: give it one. */
		char *c = malloc(n + 1);
		if (c == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(c, image, n);
		c[n] = 0;
		r = t->cuModuleLoadData(&m, c);
		free(c);
	}
	*mod = (uintptr_t)m;
	return r;
}

CUresult gm_module_unload(const gm_cuda *t, uintptr_t mod)
{
	return t->cuModuleUnload((CUmodule)mod);
}

/* cstr gives name[0:len] a NUL: in buf when it fits, else malloc'd. */
static char *cstr(const char *name, size_t len, char *buf, size_t buflen)
{
	char *s = len < buflen ? buf : malloc(len + 1);
	if (s != NULL) {
		if (len > 0)
			memcpy(s, name, len);
		s[len] = 0;
	}
	return s;
}

CUresult gm_module_get_function(const gm_cuda *t, uintptr_t mod, const char *name, size_t namelen,
				uintptr_t *fn)
{
	char buf[512];
	char *s = cstr(name, namelen, buf, sizeof buf);
	CUfunction f = NULL;
	CUresult r;
	*fn = 0;
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = t->cuModuleGetFunction(&f, (CUmodule)mod, s);
	if (s != buf)
		free(s);
	*fn = (uintptr_t)f;
	return r;
}

CUresult gm_module_get_global(const gm_cuda *t, uintptr_t mod, const char *name, size_t namelen,
			      CUdeviceptr *p, size_t *bytes)
{
	char buf[512];
	char *s = cstr(name, namelen, buf, sizeof buf);
	CUresult r;
	*p = 0;
	*bytes = 0;
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = t->cuModuleGetGlobal_v2(p, bytes, (CUmodule)mod, s);
	if (s != buf)
		free(s);
	return r;
}

CUresult gm_func_param_info(const gm_cuda *t, uintptr_t fn, size_t index, size_t *offset, size_t *size)
{
	*offset = 0;
	*size = 0;
	if (t->cuFuncGetParamInfo == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	return t->cuFuncGetParamInfo((CUfunction)fn, index, offset, size);
}

CUresult gm_func_attribute(const gm_cuda *t, int attr, uintptr_t fn, int *v)
{
	return t->cuFuncGetAttribute(v, attr, (CUfunction)fn);
}

CUresult gm_launch(const gm_cuda *t, uintptr_t fn, unsigned int gx, unsigned int gy, unsigned int gz,
		   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, uintptr_t s,
		   void *params, size_t nparams)
{
	size_t size = nparams;
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
		CU_LAUNCH_PARAM_END,
	};
	/* The driver copies the parameters before it returns. */
	return t->cuLaunchKernel((CUfunction)fn, gx, gy, gz, bx, by, bz, shmem, (CUstream)s, NULL,
				 nparams > 0 ? extra : NULL);
}

/* ---- streams and events ---- */

CUresult gm_stream_create(const gm_cuda *t, unsigned int flags, uintptr_t *s)
{
	CUstream st = NULL;
	CUresult r = t->cuStreamCreate(&st, flags);
	*s = (uintptr_t)st;
	return r;
}

CUresult gm_stream_destroy(const gm_cuda *t, uintptr_t s)
{
	return t->cuStreamDestroy_v2((CUstream)s);
}

CUresult gm_stream_synchronize(const gm_cuda *t, uintptr_t s)
{
	return t->cuStreamSynchronize((CUstream)s);
}

CUresult gm_stream_query(const gm_cuda *t, uintptr_t s)
{
	return t->cuStreamQuery((CUstream)s);
}

CUresult gm_stream_wait_event(const gm_cuda *t, uintptr_t s, uintptr_t ev, unsigned int flags)
{
	return t->cuStreamWaitEvent((CUstream)s, (CUevent)ev, flags);
}

CUresult gm_event_create(const gm_cuda *t, unsigned int flags, uintptr_t *ev)
{
	CUevent e = NULL;
	CUresult r = t->cuEventCreate(&e, flags);
	*ev = (uintptr_t)e;
	return r;
}

CUresult gm_event_destroy(const gm_cuda *t, uintptr_t ev)
{
	return t->cuEventDestroy_v2((CUevent)ev);
}

CUresult gm_event_record(const gm_cuda *t, uintptr_t ev, uintptr_t s)
{
	return t->cuEventRecord((CUevent)ev, (CUstream)s);
}

CUresult gm_event_synchronize(const gm_cuda *t, uintptr_t ev)
{
	return t->cuEventSynchronize((CUevent)ev);
}

CUresult gm_event_query(const gm_cuda *t, uintptr_t ev)
{
	return t->cuEventQuery((CUevent)ev);
}

CUresult gm_event_elapsed(const gm_cuda *t, uintptr_t start, uintptr_t end, float *ms)
{
	*ms = 0;
	if (t->cuEventElapsedTime_v2 != NULL)
		return t->cuEventElapsedTime_v2(ms, (CUevent)start, (CUevent)end);
	if (t->cuEventElapsedTime != NULL)
		return t->cuEventElapsedTime(ms, (CUevent)start, (CUevent)end);
	return CUDA_ERROR_NOT_SUPPORTED;
}

#define GM_OPTIONAL(sym, call)                            \
	do {                                              \
		if (!t->sym)                              \
			return CUDA_ERROR_NOT_SUPPORTED; \
		return t->call;                           \
	} while (0)

CUresult gm_stream_priority_range(const gm_cuda *t, int *least, int *greatest)
{
	GM_OPTIONAL(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange(least, greatest));
}

CUresult gm_stream_create_prio(const gm_cuda *t, unsigned int flags, int priority, uintptr_t *s)
{
	CUstream st = NULL;
	if (!t->cuStreamCreateWithPriority)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuStreamCreateWithPriority(&st, flags, priority);
	*s = (uintptr_t)st;
	return r;
}

CUresult gm_stream_priority(const gm_cuda *t, uintptr_t s, int *priority)
{
	GM_OPTIONAL(cuStreamGetPriority, cuStreamGetPriority((CUstream)s, priority));
}

CUresult gm_stream_flags(const gm_cuda *t, uintptr_t s, unsigned int *flags)
{
	GM_OPTIONAL(cuStreamGetFlags, cuStreamGetFlags((CUstream)s, flags));
}

CUresult gm_stream_is_capturing(const gm_cuda *t, uintptr_t s, int *status)
{
	GM_OPTIONAL(cuStreamIsCapturing, cuStreamIsCapturing((CUstream)s, status));
}

CUresult gm_event_record_flags(const gm_cuda *t, uintptr_t ev, uintptr_t s, unsigned int flags)
{
	GM_OPTIONAL(cuEventRecordWithFlags, cuEventRecordWithFlags((CUevent)ev, (CUstream)s, flags));
}

CUresult gm_func_set_attribute(const gm_cuda *t, uintptr_t fn, int attr, int value)
{
	GM_OPTIONAL(cuFuncSetAttribute, cuFuncSetAttribute((CUfunction)fn, attr, value));
}

CUresult gm_occupancy(const gm_cuda *t, uintptr_t fn, int block, size_t smem, unsigned int flags, int *n)
{
	GM_OPTIONAL(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
		    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, (CUfunction)fn, block, smem, flags));
}

CUresult gm_occupancy_smem(const gm_cuda *t, uintptr_t fn, int blocks, int block, size_t *smem)
{
	GM_OPTIONAL(cuOccupancyAvailableDynamicSMemPerBlock,
		    cuOccupancyAvailableDynamicSMemPerBlock(smem, (CUfunction)fn, blocks, block));
}

/* ---- launches with a CUlaunchConfig ---- */

_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");

static CUresult gm_config(CUlaunchConfig *c, CUlaunchAttribute *a, const unsigned int *dims, uintptr_t s,
			  const void *attrs, unsigned int nattrs)
{
	if (nattrs > GM_MAX_LAUNCH_ATTRS)
		return CUDA_ERROR_INVALID_VALUE;
	if (nattrs > 0)
		memcpy(a, attrs, nattrs * sizeof *a);
	memset(c, 0, sizeof *c);
	c->gridDimX = dims[0];
	c->gridDimY = dims[1];
	c->gridDimZ = dims[2];
	c->blockDimX = dims[3];
	c->blockDimY = dims[4];
	c->blockDimZ = dims[5];
	c->sharedMemBytes = dims[6];
	c->hStream = (CUstream)s;
	c->attrs = nattrs > 0 ? a : NULL;
	c->numAttrs = nattrs;
	return CUDA_SUCCESS;
}

CUresult gm_launch_ex(const gm_cuda *t, uintptr_t fn, const unsigned int *dims, uintptr_t s, const void *attrs,
		      unsigned int nattrs, void *params, size_t nparams)
{
	if (t->cuLaunchKernelEx == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUlaunchConfig c;
	CUlaunchAttribute a[GM_MAX_LAUNCH_ATTRS];
	CUresult r = gm_config(&c, a, dims, s, attrs, nattrs);
	if (r != CUDA_SUCCESS)
		return r;
	size_t size = nparams;
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
		CU_LAUNCH_PARAM_END,
	};
	/* The driver copies the parameters and the configuration before it returns. */
	return t->cuLaunchKernelEx(&c, (CUfunction)fn, NULL, nparams > 0 ? extra : NULL);
}

CUresult gm_cluster_occupancy(const gm_cuda *t, int which, uintptr_t fn, const unsigned int *dims, uintptr_t s,
			      const void *attrs, unsigned int nattrs, int *n)
{
	*n = 0;
	CUresult (*call)(int *, CUfunction, const CUlaunchConfig *) =
		which == 0 ? t->cuOccupancyMaxActiveClusters : t->cuOccupancyMaxPotentialClusterSize;
	if (call == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUlaunchConfig c;
	CUlaunchAttribute a[GM_MAX_LAUNCH_ATTRS];
	CUresult r = gm_config(&c, a, dims, s, attrs, nattrs);
	if (r != CUDA_SUCCESS)
		return r;
	return call(n, (CUfunction)fn, &c);
}

CUresult gm_ctx_get_limit(const gm_cuda *t, int limit, size_t *value)
{
	*value = 0;
	if (t->cuCtxGetLimit == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	return t->cuCtxGetLimit(value, limit);
}

CUresult gm_ctx_set_limit(const gm_cuda *t, int limit, size_t value)
{
	GM_OPTIONAL(cuCtxSetLimit, cuCtxSetLimit(limit, value));
}

/* ---- virtual memory management ---- */

_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes");
_Static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps is 88 bytes");

/* prop_of builds a CUmemAllocationProp from the server's fields; the rest
 * (Windows metadata, reserved bytes) is zero. */
static void prop_of(CUmemAllocationProp *c, const gm_memprop *p)
{
	memset(c, 0, sizeof *c);
	c->type = (int)p->type;
	c->requestedHandleTypes = (int)p->handle_types;
	c->location.type = (int)p->loc_type;
	c->location.id = p->loc_id;
	c->allocFlags.compressionType = (unsigned char)p->compression;
	c->allocFlags.gpuDirectRDMACapable = (unsigned char)p->rdma;
	c->allocFlags.usage = (unsigned short)p->usage;
}

/* descs_of builds CUmemAccessDesc records; 0 when there are too many. */
static int descs_of(CUmemAccessDesc *c, const gm_access *d, size_t n)
{
	if (n == 0 || n > GM_MAX_ACCESS_DESCS)
		return 0;
	for (size_t i = 0; i < n; i++) {
		c[i].location.type = (int)d[i].loc_type;
		c[i].location.id = d[i].loc_id;
		c[i].flags = (int)d[i].flags;
	}
	return 1;
}

CUresult gm_mem_granularity(const gm_cuda *t, const gm_memprop *p, int option, size_t *g)
{
	CUmemAllocationProp c;
	*g = 0;
	if (t->cuMemGetAllocationGranularity == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	prop_of(&c, p);
	return t->cuMemGetAllocationGranularity(g, &c, option);
}

CUresult gm_mem_address_reserve(const gm_cuda *t, size_t size, size_t align, CUdeviceptr addr,
				unsigned long long flags, CUdeviceptr *p)
{
	*p = 0;
	GM_OPTIONAL(cuMemAddressReserve, cuMemAddressReserve(p, size, align, addr, flags));
}

CUresult gm_mem_address_free(const gm_cuda *t, CUdeviceptr p, size_t size)
{
	GM_OPTIONAL(cuMemAddressFree, cuMemAddressFree(p, size));
}

CUresult gm_mem_create(const gm_cuda *t, size_t size, const gm_memprop *p, unsigned long long flags,
		       unsigned long long *h)
{
	CUmemAllocationProp c;
	*h = 0;
	if (t->cuMemCreate == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	prop_of(&c, p);
	return t->cuMemCreate(h, size, &c, flags);
}

CUresult gm_mem_release(const gm_cuda *t, unsigned long long h)
{
	GM_OPTIONAL(cuMemRelease, cuMemRelease(h));
}

CUresult gm_mem_map(const gm_cuda *t, CUdeviceptr p, size_t size, size_t offset, unsigned long long h,
		    unsigned long long flags)
{
	GM_OPTIONAL(cuMemMap, cuMemMap(p, size, offset, h, flags));
}

CUresult gm_mem_unmap(const gm_cuda *t, CUdeviceptr p, size_t size)
{
	GM_OPTIONAL(cuMemUnmap, cuMemUnmap(p, size));
}

CUresult gm_mem_set_access(const gm_cuda *t, CUdeviceptr p, size_t size, const gm_access *d, size_t n)
{
	CUmemAccessDesc c[GM_MAX_ACCESS_DESCS];
	if (t->cuMemSetAccess == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!descs_of(c, d, n))
		return CUDA_ERROR_INVALID_VALUE;
	return t->cuMemSetAccess(p, size, c, n);
}

CUresult gm_mem_get_access(const gm_cuda *t, int loc_type, int loc_id, CUdeviceptr p, unsigned long long *flags)
{
	CUmemLocation loc = {loc_type, loc_id};
	*flags = 0;
	GM_OPTIONAL(cuMemGetAccess, cuMemGetAccess(flags, &loc, p));
}

/* ---- memory pools ---- */

CUresult gm_mem_pool_create(const gm_cuda *t, int loc_id, size_t max_size, uintptr_t *pool)
{
	CUmemPoolProps props;
	CUmemoryPool p = NULL;
	*pool = 0;
	if (t->cuMemPoolCreate == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	memset(&props, 0, sizeof props);
	props.allocType = 1;	 /* CU_MEM_ALLOCATION_TYPE_PINNED */
	props.location.type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
	props.location.id = loc_id;
	props.maxSize = max_size;
	CUresult r = t->cuMemPoolCreate(&p, &props);
	*pool = (uintptr_t)p;
	return r;
}

CUresult gm_mem_pool_destroy(const gm_cuda *t, uintptr_t pool)
{
	GM_OPTIONAL(cuMemPoolDestroy, cuMemPoolDestroy((CUmemoryPool)pool));
}

CUresult gm_mem_alloc_from_pool(const gm_cuda *t, size_t n, uintptr_t pool, uintptr_t s, CUdeviceptr *p)
{
	*p = 0;
	GM_OPTIONAL(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync(p, n, (CUmemoryPool)pool, (CUstream)s));
}

CUresult gm_mem_free_async(const gm_cuda *t, CUdeviceptr p, uintptr_t s)
{
	GM_OPTIONAL(cuMemFreeAsync, cuMemFreeAsync(p, (CUstream)s));
}

/* pool_attr_is_int: CUmemPool_attribute 1 to 3 (the reuse policies) are
 * ints; the others cuuint64_t. */
static int pool_attr_is_int(int attr)
{
	return attr >= 1 && attr <= 3;
}

CUresult gm_mem_pool_set_attribute(const gm_cuda *t, uintptr_t pool, int attr, unsigned long long value)
{
	int i = (int)value;
	if (t->cuMemPoolSetAttribute == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (pool_attr_is_int(attr))
		return t->cuMemPoolSetAttribute((CUmemoryPool)pool, attr, &i);
	return t->cuMemPoolSetAttribute((CUmemoryPool)pool, attr, &value);
}

CUresult gm_mem_pool_get_attribute(const gm_cuda *t, uintptr_t pool, int attr, unsigned long long *value)
{
	int i = 0;
	CUresult r;
	*value = 0;
	if (t->cuMemPoolGetAttribute == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!pool_attr_is_int(attr))
		return t->cuMemPoolGetAttribute((CUmemoryPool)pool, attr, value);
	r = t->cuMemPoolGetAttribute((CUmemoryPool)pool, attr, &i);
	*value = (unsigned long long)(unsigned int)i;
	return r;
}

CUresult gm_mem_pool_trim(const gm_cuda *t, uintptr_t pool, size_t keep)
{
	GM_OPTIONAL(cuMemPoolTrimTo, cuMemPoolTrimTo((CUmemoryPool)pool, keep));
}

CUresult gm_mem_pool_set_access(const gm_cuda *t, uintptr_t pool, const gm_access *d, size_t n)
{
	CUmemAccessDesc c[GM_MAX_ACCESS_DESCS];
	if (t->cuMemPoolSetAccess == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!descs_of(c, d, n))
		return CUDA_ERROR_INVALID_VALUE;
	return t->cuMemPoolSetAccess((CUmemoryPool)pool, c, n);
}

CUresult gm_mem_pool_get_access(const gm_cuda *t, uintptr_t pool, int loc_type, int loc_id, int *flags)
{
	CUmemLocation loc = {loc_type, loc_id};
	*flags = 0;
	GM_OPTIONAL(cuMemPoolGetAccess, cuMemPoolGetAccess(flags, (CUmemoryPool)pool, &loc));
}

/* ---- several devices ---- */

CUresult gm_device_can_access_peer(const gm_cuda *t, int dev, int peer, int *can)
{
	CUdevice d, p;
	*can = 0;
	if (t->cuDeviceCanAccessPeer == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuDeviceGet(&d, dev);
	if (r == CUDA_SUCCESS)
		r = t->cuDeviceGet(&p, peer);
	return r != CUDA_SUCCESS ? r : t->cuDeviceCanAccessPeer(can, d, p);
}

CUresult gm_device_p2p_attribute(const gm_cuda *t, int attrib, int src, int dst, int *value)
{
	CUdevice s, d;
	*value = 0;
	if (t->cuDeviceGetP2PAttribute == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuDeviceGet(&s, src);
	if (r == CUDA_SUCCESS)
		r = t->cuDeviceGet(&d, dst);
	return r != CUDA_SUCCESS ? r : t->cuDeviceGetP2PAttribute(value, attrib, s, d);
}

CUresult gm_ctx_enable_peer(const gm_cuda *t, uintptr_t peer, unsigned int flags)
{
	GM_OPTIONAL(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess((CUcontext)peer, flags));
}

CUresult gm_ctx_disable_peer(const gm_cuda *t, uintptr_t peer)
{
	GM_OPTIONAL(cuCtxDisablePeerAccess, cuCtxDisablePeerAccess((CUcontext)peer));
}

CUresult gm_memcpy_peer(const gm_cuda *t, CUdeviceptr dst, uintptr_t dst_ctx, CUdeviceptr src, uintptr_t src_ctx,
			size_t n, uintptr_t s, int async)
{
	if (async)
		GM_OPTIONAL(cuMemcpyPeerAsync,
			    cuMemcpyPeerAsync(dst, (CUcontext)dst_ctx, src, (CUcontext)src_ctx, n, (CUstream)s));
	GM_OPTIONAL(cuMemcpyPeer, cuMemcpyPeer(dst, (CUcontext)dst_ctx, src, (CUcontext)src_ctx, n));
}

/* ---- stream capture and graphs ---- */

_Static_assert(sizeof(CUgraphNode) == sizeof(uintptr_t), "a CUgraphNode is a uintptr_t");
_Static_assert(sizeof(CUgraphEdgeData) == 8, "CUgraphEdgeData is 8 bytes");

CUresult gm_stream_begin_capture(const gm_cuda *t, uintptr_t s, int mode)
{
	GM_OPTIONAL(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2((CUstream)s, mode));
}

CUresult gm_stream_end_capture(const gm_cuda *t, uintptr_t s, uintptr_t *g)
{
	CUgraph graph = NULL;
	*g = 0;
	if (t->cuStreamEndCapture == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuStreamEndCapture((CUstream)s, &graph);
	*g = (uintptr_t)graph;
	return r;
}

CUresult gm_stream_capture_info(const gm_cuda *t, uintptr_t s, int *status, unsigned long long *id, uintptr_t *g,
				uintptr_t *deps, void *edges, size_t cap, size_t *n)
{
	CUgraph graph = NULL;
	const CUgraphNode *d = NULL;
	const CUgraphEdgeData *e = NULL;
	CUresult r;
	*status = 0;
	*id = 0;
	*g = 0;
	*n = 0;
	if (t->cuStreamGetCaptureInfo_v3 != NULL)
		r = t->cuStreamGetCaptureInfo_v3((CUstream)s, status, id, &graph, &d, &e, n);
	else if (t->cuStreamGetCaptureInfo_v2 != NULL)
		r = t->cuStreamGetCaptureInfo_v2((CUstream)s, status, id, &graph, &d, n);
	else
		return CUDA_ERROR_NOT_SUPPORTED;
	if (r != CUDA_SUCCESS)
		return r;
	*g = (uintptr_t)graph;
	size_t k = *n < cap ? *n : cap;
	if (k > 0 && d != NULL)
		memcpy(deps, d, k * sizeof *d);
	if (k > 0) {
		if (e != NULL)
			memcpy(edges, e, k * sizeof *e);
		else
			memset(edges, 0, k * sizeof *e);
	}
	return r;
}

static int gm_all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != 0)
			return 0;
	return 1;
}

CUresult gm_stream_update_capture_deps(const gm_cuda *t, uintptr_t s, const uintptr_t *deps, const void *edges,
				       size_t n, unsigned int flags)
{
	if (t->cuStreamUpdateCaptureDependencies_v2 != NULL)
		return t->cuStreamUpdateCaptureDependencies_v2((CUstream)s, (CUgraphNode *)deps, edges, n, flags);
	if (t->cuStreamUpdateCaptureDependencies != NULL && (edges == NULL || gm_all_zero(edges, 8 * n)))
		return t->cuStreamUpdateCaptureDependencies((CUstream)s, (CUgraphNode *)deps, n, flags);
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult gm_thread_exchange_capture_mode(const gm_cuda *t, int *mode)
{
	GM_OPTIONAL(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode(mode));
}

CUresult gm_graph_create(const gm_cuda *t, unsigned int flags, uintptr_t *g)
{
	CUgraph graph = NULL;
	*g = 0;
	if (t->cuGraphCreate == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuGraphCreate(&graph, flags);
	*g = (uintptr_t)graph;
	return r;
}

CUresult gm_graph_destroy(const gm_cuda *t, uintptr_t g)
{
	GM_OPTIONAL(cuGraphDestroy, cuGraphDestroy((CUgraph)g));
}

CUresult gm_graph_clone(const gm_cuda *t, uintptr_t g, uintptr_t *clone)
{
	CUgraph c = NULL;
	*clone = 0;
	if (t->cuGraphClone == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuGraphClone(&c, (CUgraph)g);
	*clone = (uintptr_t)c;
	return r;
}

CUresult gm_graph_nodes(const gm_cuda *t, uintptr_t g, int roots, uintptr_t *nodes, size_t cap, size_t *n)
{
	CUresult (*call)(CUgraph, CUgraphNode *, size_t *) = roots ? t->cuGraphGetRootNodes : t->cuGraphGetNodes;
	*n = 0;
	if (call == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = call((CUgraph)g, NULL, n);
	if (r != CUDA_SUCCESS || *n == 0 || cap < *n)
		return r;
	size_t k = cap;
	r = call((CUgraph)g, (CUgraphNode *)nodes, &k);
	if (r == CUDA_SUCCESS)
		*n = k < *n ? k : *n;
	return r;
}

/* gm_kernel_params fills a kernel node's parameters: the function, dims
 * as gm_launch_ex takes them, params as cuLaunchKernel's extra buffer
 * (extra and size must outlive p's use). */
static void gm_kernel_params(CUDA_KERNEL_NODE_PARAMS_v2 *p, void **extra, size_t *size, uintptr_t fn,
			     const unsigned int *dims, void *params, size_t nparams)
{
	memset(p, 0, sizeof *p);
	p->func = (CUfunction)fn;
	p->gridDimX = dims[0];
	p->gridDimY = dims[1];
	p->gridDimZ = dims[2];
	p->blockDimX = dims[3];
	p->blockDimY = dims[4];
	p->blockDimZ = dims[5];
	p->sharedMemBytes = dims[6];
	*size = nparams;
	extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
	extra[1] = params;
	extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
	extra[3] = size;
	extra[4] = CU_LAUNCH_PARAM_END;
	p->extra = nparams > 0 ? extra : NULL;
}

CUresult gm_graph_add_kernel(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, uintptr_t fn,
			     const unsigned int *dims, void *params, size_t nparams, uintptr_t *node)
{
	CUgraphNode out = NULL;
	*node = 0;
	if (t->cuGraphAddKernelNode_v2 == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUDA_KERNEL_NODE_PARAMS_v2 p;
	void *extra[5];
	size_t size;
	gm_kernel_params(&p, extra, &size, fn, dims, params, nparams);
	/* The driver copies the parameters into the node. */
	CUresult r = t->cuGraphAddKernelNode_v2(&out, (CUgraph)g, (const CUgraphNode *)deps, ndeps, &p);
	*node = (uintptr_t)out;
	return r;
}

CUresult gm_graph_add_memset(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, CUdeviceptr dst,
			     size_t pitch, unsigned int value, unsigned int elementSize, size_t width, size_t height,
			     uintptr_t *node)
{
	CUgraphNode out = NULL;
	CUcontext ctx = NULL;
	*node = 0;
	if (t->cuGraphAddMemsetNode == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuCtxGetCurrent(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	CUDA_MEMSET_NODE_PARAMS p = {.dst = dst, .pitch = pitch, .value = value, .elementSize = elementSize,
				     .width = width, .height = height};
	r = t->cuGraphAddMemsetNode(&out, (CUgraph)g, (const CUgraphNode *)deps, ndeps, &p, ctx);
	*node = (uintptr_t)out;
	return r;
}

CUresult gm_graph_add_memcpy(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps,
			     const unsigned long long *c, uintptr_t *node)
{
	CUgraphNode out = NULL;
	CUcontext ctx = NULL;
	*node = 0;
	if (t->cuGraphAddMemcpyNode == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuCtxGetCurrent(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	CUDA_MEMCPY3D p;
	memset(&p, 0, sizeof p);
	p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	p.srcDevice = c[0];
	p.srcXInBytes = c[1];
	p.srcY = c[2];
	p.srcZ = c[3];
	p.srcPitch = c[4];
	p.srcHeight = c[5];
	p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	p.dstDevice = c[6];
	p.dstXInBytes = c[7];
	p.dstY = c[8];
	p.dstZ = c[9];
	p.dstPitch = c[10];
	p.dstHeight = c[11];
	p.WidthInBytes = c[12];
	p.Height = c[13];
	p.Depth = c[14];
	r = t->cuGraphAddMemcpyNode(&out, (CUgraph)g, (const CUgraphNode *)deps, ndeps, &p, ctx);
	*node = (uintptr_t)out;
	return r;
}

CUresult gm_graph_add_empty(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, uintptr_t *node)
{
	CUgraphNode out = NULL;
	*node = 0;
	if (t->cuGraphAddEmptyNode == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuGraphAddEmptyNode(&out, (CUgraph)g, (const CUgraphNode *)deps, ndeps);
	*node = (uintptr_t)out;
	return r;
}

CUresult gm_graph_add_event(const gm_cuda *t, uintptr_t g, const uintptr_t *deps, size_t ndeps, uintptr_t ev,
			    int wait, uintptr_t *node)
{
	CUresult (*call)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUevent) =
		wait ? t->cuGraphAddEventWaitNode : t->cuGraphAddEventRecordNode;
	CUgraphNode out = NULL;
	*node = 0;
	if (call == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = call(&out, (CUgraph)g, (const CUgraphNode *)deps, ndeps, (CUevent)ev);
	*node = (uintptr_t)out;
	return r;
}

CUresult gm_graph_add_deps(const gm_cuda *t, uintptr_t g, const uintptr_t *from, const uintptr_t *to,
			   const void *edges, size_t n)
{
	if (t->cuGraphAddDependencies_v2 != NULL)
		return t->cuGraphAddDependencies_v2((CUgraph)g, (const CUgraphNode *)from, (const CUgraphNode *)to,
						    edges, n);
	if (t->cuGraphAddDependencies != NULL && (edges == NULL || gm_all_zero(edges, 8 * n)))
		return t->cuGraphAddDependencies((CUgraph)g, (const CUgraphNode *)from, (const CUgraphNode *)to, n);
	return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult gm_graph_instantiate(const gm_cuda *t, uintptr_t g, unsigned long long flags, uintptr_t *e)
{
	CUgraphExec exec = NULL;
	*e = 0;
	if (t->cuGraphInstantiateWithFlags == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUresult r = t->cuGraphInstantiateWithFlags(&exec, (CUgraph)g, flags);
	*e = (uintptr_t)exec;
	return r;
}

CUresult gm_graph_exec_destroy(const gm_cuda *t, uintptr_t e)
{
	GM_OPTIONAL(cuGraphExecDestroy, cuGraphExecDestroy((CUgraphExec)e));
}

CUresult gm_graph_launch(const gm_cuda *t, uintptr_t e, uintptr_t s, int upload)
{
	if (upload) {
		GM_OPTIONAL(cuGraphUpload, cuGraphUpload((CUgraphExec)e, (CUstream)s));
	}
	GM_OPTIONAL(cuGraphLaunch, cuGraphLaunch((CUgraphExec)e, (CUstream)s));
}

CUresult gm_graph_exec_kernel_params(const gm_cuda *t, uintptr_t e, uintptr_t node, uintptr_t fn,
				     const unsigned int *dims, void *params, size_t nparams)
{
	if (t->cuGraphExecKernelNodeSetParams_v2 == NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUDA_KERNEL_NODE_PARAMS_v2 p;
	void *extra[5];
	size_t size;
	gm_kernel_params(&p, extra, &size, fn, dims, params, nparams);
	return t->cuGraphExecKernelNodeSetParams_v2((CUgraphExec)e, (CUgraphNode)node, &p);
}
