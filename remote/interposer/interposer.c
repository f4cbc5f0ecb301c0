/*
 * The CUDA driver API entry points that are not generated from calls.def:
 * the thread's context stack (local: the current context travels in every
 * frame), context creation and destruction, kernel launches (parameters
 * packed by the function's layout), module loading variants, the image
 * size rules, error strings, cuGetProcAddress and the unsupported-call
 * plumbing. README.md describes the behaviour.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gm_internal.h"
#include "gm_wire.h"
#include "zz_calls.h"

#ifndef GM_USE_CUDA_H
/* The generated entry points (zz_calls.c), for the cuGetProcAddress table:
 * only their addresses are used here. */
#define GM_DECLARE(n) CUresult CUDAAPI n();
GM_GENERATED_EXPORTS(GM_DECLARE)
GM_MORE_PROCS(GM_DECLARE)
GM_GRAPH_PROCS(GM_DECLARE)
GM_MEM_PROCS(GM_DECLARE)
#undef GM_DECLARE
#endif

/* ---- the thread's context stack ---- */

#define GM_CTX_DEPTH 128

static __thread CUcontext gm_ctx_stack[GM_CTX_DEPTH];
static __thread int gm_ctx_depth;

uint64_t gm_current_ctx(void)
{
	return gm_ctx_depth > 0 ? (uint64_t)(uintptr_t)gm_ctx_stack[gm_ctx_depth - 1] : 0;
}

GM_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = gm_ctx_depth > 0 ? gm_ctx_stack[gm_ctx_depth - 1] : NULL;
	return CUDA_SUCCESS;
}

/* CUDA: replaces the top of the stack; NULL pops it (nothing to pop is
 * no error); an empty stack gets ctx pushed. */
GM_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	if (gm_ctx_depth == 0) {
		if (ctx != NULL)
			gm_ctx_stack[gm_ctx_depth++] = ctx;
	} else if (ctx == NULL) {
		gm_ctx_depth--;
	} else {
		gm_ctx_stack[gm_ctx_depth - 1] = ctx;
	}
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (gm_ctx_depth >= GM_CTX_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gm_ctx_stack[gm_ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
	if (gm_ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext c = gm_ctx_stack[--gm_ctx_depth];
	if (pctx != NULL)
		*pctx = c;
	return CUDA_SUCCESS;
}

/* A new context is pushed on the creating thread's stack, as in CUDA. */
GM_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (gm_ctx_depth >= GM_CTX_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUcontext c = NULL;
	CUresult r = gm_rpc_cuCtxCreate_v2(&c, flags, dev);
	if (r != CUDA_SUCCESS)
		return r;
	gm_ctx_stack[gm_ctx_depth++] = c;
	*pctx = c;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
					  unsigned int flags, CUdevice dev)
{
	static unsigned char once;
	if (numParams < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (paramsArray != NULL || numParams > 0) {
		if (gm_first(&once))
			gm_log("cuCtxCreate_v3 with execution affinity parameters is not supported; it returns CUDA_ERROR_NOT_SUPPORTED");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return cuCtxCreate_v2(pctx, flags, dev);
}

GM_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
					  CUdevice dev)
{
	static unsigned char once;
	if (ctxCreateParams != NULL) {
		if (gm_first(&once))
			gm_log("cuCtxCreate_v4 with CUctxCreateParams is not supported; it returns CUDA_ERROR_NOT_SUPPORTED");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return cuCtxCreate_v2(pctx, flags, dev);
}

/* ---- the current context's device ----
 * The runtime asks for it around nearly every call (cudaGetDevice: about
 * 300 times a training step of a small PyTorch model). A context's device
 * never changes and the server never reuses a handle within a connection,
 * so each context's device is asked of the server once; destroying a
 * context, or releasing or resetting a primary one, forgets the answers
 * (a forked child, a new connection, starts empty). The lock, which also
 * guards the primary contexts' state below, is never held across a round
 * trip. */
#define GM_CTXDEV 64
static pthread_mutex_t gm_ctxdev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t ctx;
	CUdevice dev;
} gm_ctxdev[GM_CTXDEV];
static int gm_nctxdev;

static void gm_ctxdev_forget(void)
{
	pthread_mutex_lock(&gm_ctxdev_mu);
	gm_nctxdev = 0;
	pthread_mutex_unlock(&gm_ctxdev_mu);
}

GM_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	uint64_t ctx = gm_current_ctx();
	if (device == NULL || ctx == 0)
		return gm_rpc_cuCtxGetDevice(device); /* the server's error */
	pthread_mutex_lock(&gm_ctxdev_mu);
	for (int i = 0; i < gm_nctxdev; i++) {
		if (gm_ctxdev[i].ctx == ctx) {
			*device = gm_ctxdev[i].dev;
			pthread_mutex_unlock(&gm_ctxdev_mu);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&gm_ctxdev_mu);
	CUresult r = gm_rpc_cuCtxGetDevice(device);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gm_ctxdev_mu);
	if (gm_nctxdev == GM_CTXDEV)
		gm_nctxdev = 0;
	gm_ctxdev[gm_nctxdev].ctx = ctx;
	gm_ctxdev[gm_nctxdev++].dev = *device;
	pthread_mutex_unlock(&gm_ctxdev_mu);
	return CUDA_SUCCESS;
}

/* ---- primary contexts' state ----
 * The runtime asks cuDevicePrimaryCtxGetState about as often as the
 * device (some 100 times a step). While this process holds a retain of a
 * device's primary context the context is active, and its flags are the
 * ones the server last answered: they change only by cuDevicePrimaryCtx-
 * SetFlags, after which the next question goes to the server again.
 * Without a retain held here (another process of the tenant may hold
 * one), every question goes to the server. */
#define GM_PRIMARY_DEVS 64
static struct {
	int held;	   /* retains this process holds */
	int known;	   /* flags below are the server's last answer */
	unsigned int flags;
	uint64_t ctx;	   /* the handle of the last retain */
} gm_prim[GM_PRIMARY_DEVS];

static int gm_prim_dev(CUdevice dev)
{
	return dev >= 0 && dev < GM_PRIMARY_DEVS;
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r = gm_rpc_cuDevicePrimaryCtxRetain(pctx, dev);
	if (r == CUDA_SUCCESS && gm_prim_dev(dev)) {
		pthread_mutex_lock(&gm_ctxdev_mu);
		gm_prim[dev].held++;
		gm_prim[dev].ctx = (uint64_t)(uintptr_t)*pctx;
		pthread_mutex_unlock(&gm_ctxdev_mu);
	}
	return r;
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	if (flags != NULL && active != NULL && gm_prim_dev(dev)) {
		pthread_mutex_lock(&gm_ctxdev_mu);
		int hit = gm_prim[dev].held > 0 && gm_prim[dev].known;
		if (hit) {
			*flags = gm_prim[dev].flags;
			*active = 1;
		}
		pthread_mutex_unlock(&gm_ctxdev_mu);
		if (hit)
			return CUDA_SUCCESS;
	}
	CUresult r = gm_rpc_cuDevicePrimaryCtxGetState(dev, flags, active);
	if (r == CUDA_SUCCESS && flags != NULL && gm_prim_dev(dev)) {
		pthread_mutex_lock(&gm_ctxdev_mu);
		gm_prim[dev].flags = *flags;
		gm_prim[dev].known = 1;
		pthread_mutex_unlock(&gm_ctxdev_mu);
	}
	return r;
}

/* gm_prim_change notes a change of dev's primary context: held retains
 * move by delta (down to none when reset), and its flags are asked again.
 * When the context is gone (the last retain released, or reset) the
 * libraries forget their modules in it. */
static void gm_prim_change(CUdevice dev, int delta, int reset)
{
	if (!gm_prim_dev(dev))
		return;
	uint64_t gone = 0;
	pthread_mutex_lock(&gm_ctxdev_mu);
	gm_prim[dev].held += delta;
	if (reset || gm_prim[dev].held < 0)
		gm_prim[dev].held = 0;
	gm_prim[dev].known = 0;
	if ((reset || delta < 0) && gm_prim[dev].held == 0) {
		gone = gm_prim[dev].ctx;
		gm_prim[dev].ctx = 0;
	}
	pthread_mutex_unlock(&gm_ctxdev_mu);
	if (gone != 0)
		gm_lib_forget_ctx(gone);
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	CUresult r = gm_rpc_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
	gm_prim_change(dev, 0, 0);
	return r;
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = gm_rpc_cuDevicePrimaryCtxRelease_v2(dev);
	gm_prim_change(dev, r == CUDA_SUCCESS ? -1 : 0, 0);
	gm_ctxdev_forget();
	return r;
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult r = gm_rpc_cuDevicePrimaryCtxReset_v2(dev);
	gm_prim_change(dev, 0, 1);
	gm_ctxdev_forget();
	return r;
}

/* The destroyed context leaves this thread's stack. Other threads that
 * still have it current get CUDA_ERROR_INVALID_CONTEXT from the server. */
GM_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gm_rpc_cuCtxDestroy_v2(ctx);
	gm_ctxdev_forget();
	if (r != CUDA_SUCCESS)
		return r;
	gm_lib_forget_ctx((uint64_t)(uintptr_t)ctx);
	int j = 0;
	for (int i = 0; i < gm_ctx_depth; i++)
		if (gm_ctx_stack[i] != ctx)
			gm_ctx_stack[j++] = gm_ctx_stack[i];
	gm_ctx_depth = j;
	return CUDA_SUCCESS;
}

/* CUDA 13's calls on an explicit context (NULL: the current one): the
 * context travels in the frame header, so they run with ctx current for
 * the one call. */
static CUresult gm_with_ctx(CUcontext ctx, int *pushed)
{
	*pushed = 0;
	if (ctx == NULL)
		return CUDA_SUCCESS;
	CUresult r = cuCtxPushCurrent_v2(ctx);
	*pushed = r == CUDA_SUCCESS;
	return r;
}

GM_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
	int pushed;
	CUresult r = gm_with_ctx(ctx, &pushed);
	if (r == CUDA_SUCCESS)
		r = gm_rpc_cuCtxSynchronize();
	if (pushed)
		gm_ctx_depth--;
	return r;
}

GM_EXPORT CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	int pushed;
	CUresult r = gm_with_ctx(ctx, &pushed);
	if (r == CUDA_SUCCESS)
		r = cuCtxGetDevice(device);
	if (pushed)
		gm_ctx_depth--;
	return r;
}

/* ---- kernel launches ---- */

/* A function's parameter layout, from cuFuncGetParamInfo. Handles are
 * never reused within a connection (the server's rule), so an entry stays
 * right until the process forks or loses the connection. */
struct gm_layout {
	struct gm_layout *next;
	uint64_t fn;
	uint32_t n, total;
	uint32_t *off, *size; /* n each, after the struct */
};

#define GM_LAYOUT_BUCKETS 256
static pthread_mutex_t gm_layout_mu = PTHREAD_MUTEX_INITIALIZER;
static struct gm_layout *gm_layouts[GM_LAYOUT_BUCKETS];
static __thread int gm_layout_fork_locked;

static struct gm_layout *gm_layout_find_locked(uint64_t fn)
{
	for (struct gm_layout *l = gm_layouts[(fn >> 3) % GM_LAYOUT_BUCKETS]; l; l = l->next)
		if (l->fn == fn)
			return l;
	return NULL;
}

static CUresult gm_layout_query(CUfunction f, struct gm_layout **out)
{
	uint64_t fn = (uint64_t)(uintptr_t)f;
	pthread_mutex_lock(&gm_layout_mu);
	struct gm_layout *l = gm_layout_find_locked(fn);
	pthread_mutex_unlock(&gm_layout_mu);
	if (l != NULL) {
		*out = l;
		return CUDA_SUCCESS;
	}

	/* Query outside the lock: it is a round trip per parameter. */
	size_t cap = 16, n = 0;
	uint32_t *off = malloc(cap * sizeof *off), *size = malloc(cap * sizeof *size);
	uint32_t total = 0;
	CUresult r = CUDA_SUCCESS;
	if (off == NULL || size == NULL)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	while (r == CUDA_SUCCESS) {
		size_t po = 0, ps = 0;
		CUresult q = gm_rpc_cuFuncGetParamInfo(f, n, &po, &ps);
		if (q == CUDA_ERROR_INVALID_VALUE)
			break; /* past the last parameter */
		if (q != CUDA_SUCCESS) {
			r = q;
			break;
		}
		if (po > GM_MAX_BLOB || ps > GM_MAX_BLOB - po || n >= GM_MAX_BLOB) {
			gm_log("cuFuncGetParamInfo: parameter %zu at offset %zu, %zu bytes: past the %u bytes of a launch",
			       n, po, ps, GM_MAX_BLOB);
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		if (n == cap) {
			cap *= 2;
			uint32_t *o2 = realloc(off, cap * sizeof *off);
			if (o2 != NULL)
				off = o2;
			uint32_t *s2 = realloc(size, cap * sizeof *size);
			if (s2 != NULL)
				size = s2;
			if (o2 == NULL || s2 == NULL) {
				r = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
		}
		off[n] = (uint32_t)po;
		size[n] = (uint32_t)ps;
		if (po + ps > total)
			total = (uint32_t)(po + ps);
		n++;
	}
	if (r == CUDA_SUCCESS) {
		l = malloc(sizeof *l + 2 * n * sizeof(uint32_t));
		if (l == NULL)
			r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (r != CUDA_SUCCESS) {
		free(off);
		free(size);
		return r;
	}
	l->fn = fn;
	l->n = (uint32_t)n;
	l->total = total;
	l->off = (uint32_t *)(l + 1);
	l->size = l->off + n;
	if (n) {
		memcpy(l->off, off, n * sizeof *off);
		memcpy(l->size, size, n * sizeof *size);
	}
	free(off);
	free(size);

	pthread_mutex_lock(&gm_layout_mu);
	struct gm_layout *prev = gm_layout_find_locked(fn);
	if (prev != NULL) {
		free(l); /* another thread was first */
		l = prev;
	} else {
		unsigned b = (unsigned)((fn >> 3) % GM_LAYOUT_BUCKETS);
		l->next = gm_layouts[b];
		gm_layouts[b] = l;
	}
	pthread_mutex_unlock(&gm_layout_mu);
	*out = l;
	return CUDA_SUCCESS;
}

void gm_params_free(struct gm_params *p)
{
	free(p->owned);
	p->owned = NULL;
}

CUresult gm_params_pack(struct gm_params *p, CUfunction f, void **kernelParams, void **extra)
{
	p->buf = NULL;
	p->len = 0;
	p->owned = NULL;
	if (kernelParams != NULL && extra != NULL)
		return CUDA_ERROR_INVALID_VALUE;

	if (extra != NULL) {
		/* CU_LAUNCH_PARAM_BUFFER_POINTER, p, CU_LAUNCH_PARAM_BUFFER_SIZE,
		 * &size, CU_LAUNCH_PARAM_END: already in the server's layout. */
		void *buf = NULL;
		size_t *psize = NULL;
		for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (i >= 64)
				return CUDA_ERROR_INVALID_VALUE;
			if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				buf = extra[i + 1];
			else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
				psize = extra[i + 1];
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (psize == NULL || (buf == NULL && *psize != 0) || *psize > GM_MAX_BLOB)
			return CUDA_ERROR_INVALID_VALUE;
		p->buf = buf;
		p->len = *psize;
		return CUDA_SUCCESS;
	}

	struct gm_layout *l;
	CUresult r = gm_layout_query(f, &l);
	if (r != CUDA_SUCCESS)
		return r;
	if (l->n > 0 && kernelParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned char *buf = p->small;
	if (l->total > sizeof p->small) {
		buf = p->owned = malloc(l->total);
		if (buf == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memset(buf, 0, l->total);
	for (uint32_t i = 0; i < l->n; i++) {
		if (l->size[i] == 0)
			continue;
		if (kernelParams[i] == NULL) {
			gm_params_free(p);
			return CUDA_ERROR_INVALID_VALUE;
		}
		memcpy(buf + l->off[i], kernelParams[i], l->size[i]);
	}
	p->buf = buf;
	p->len = l->total;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					  unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					  unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					  void **kernelParams, void **extra)
{
	if (f == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct gm_params p;
	CUresult r = gm_params_pack(&p, f, kernelParams, extra);
	if (r != CUDA_SUCCESS)
		return r;
	r = gm_rpc_cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
				  hStream, p.buf, p.len);
	gm_params_free(&p);
	return r;
}

/* ---- launches with a CUlaunchConfig ---- */

/* A configuration's attributes as the wire carries them: records of
 * CUlaunchAttribute's own layout (id, 4 zero bytes, the 64-byte value;
 * proto.LaunchAttrSize), at most GM_MAX_LAUNCH_ATTRS. The server checks
 * them against its allow-list and maps event handles. */
#define GM_MAX_LAUNCH_ATTRS 32
#define GM_LAUNCH_ATTR_SIZE 72

struct gm_attrs {
	unsigned char buf[GM_MAX_LAUNCH_ATTRS * GM_LAUNCH_ATTR_SIZE];
	size_t len;
};

static CUresult gm_attrs_pack(struct gm_attrs *a, const CUlaunchConfig *config)
{
	_Static_assert(sizeof(CUlaunchAttribute) == GM_LAUNCH_ATTR_SIZE, "CUlaunchAttribute is 72 bytes");
	_Static_assert(sizeof(CUlaunchAttributeValue) == 64, "CUlaunchAttributeValue is 64 bytes");
	a->len = 0;
	if (config->numAttrs > GM_MAX_LAUNCH_ATTRS) {
		gm_log("a launch configuration with %u attributes (gpumux forwards at most %d)", config->numAttrs,
		       GM_MAX_LAUNCH_ATTRS);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (config->numAttrs > 0 && config->attrs == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < config->numAttrs; i++) {
		unsigned char *rec = a->buf + a->len;
		uint32_t id = (uint32_t)config->attrs[i].id;
		memcpy(rec, &id, 4);
		memset(rec + 4, 0, 4);
		memcpy(rec + 8, &config->attrs[i].value, 64);
		a->len += GM_LAUNCH_ATTR_SIZE;
	}
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
					    void **extra)
{
	if (config == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (f == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct gm_attrs a;
	CUresult r = gm_attrs_pack(&a, config);
	if (r != CUDA_SUCCESS)
		return r;
	struct gm_params p;
	r = gm_params_pack(&p, f, kernelParams, extra);
	if (r != CUDA_SUCCESS)
		return r;
	r = gm_rpc_cuLaunchKernelEx(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
				    config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, a.buf,
				    a.len, p.buf, p.len);
	gm_params_free(&p);
	return r;
}

/* The cluster occupancy queries: the same arguments, one number out. */
typedef CUresult (*gm_cluster_rpc)(int *, CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
				   unsigned int, unsigned int, unsigned int, CUstream, const void *, size_t);

static CUresult gm_cluster_query(gm_cluster_rpc rpc, int *out, CUfunction func, const CUlaunchConfig *config)
{
	if (out == NULL || config == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (func == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct gm_attrs a;
	CUresult r = gm_attrs_pack(&a, config);
	if (r != CUDA_SUCCESS)
		return r;
	return rpc(out, func, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
		   config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream, a.buf, a.len);
}

GM_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
							const CUlaunchConfig *config)
{
	return gm_cluster_query(gm_rpc_cuOccupancyMaxActiveClusters, numClusters, func, config);
}

GM_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
							      const CUlaunchConfig *config)
{
	return gm_cluster_query(gm_rpc_cuOccupancyMaxPotentialClusterSize, clusterSize, func, config);
}

/* ---- modules ---- */

static uint16_t gm_u16(const unsigned char *p)
{
	uint16_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

static uint32_t gm_u32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

static uint64_t gm_u64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* The end of a table of num entries of entsize bytes at off, 0 if it is
 * past limit (the most an image may be, or the bytes there are). */
static uint64_t gm_table_end(uint64_t off, uint64_t num, uint64_t entsize, uint64_t limit)
{
	if (off > limit || num > limit || entsize > limit)
		return 0;
	uint64_t end = off + num * entsize;
	return end > limit ? 0 : end;
}

/* An ELF64 (little-endian) cubin ends at the last of its header, program
 * and section header tables, segments and (non-NOBITS) sections. Only
 * headers inside limit are read. */
static size_t gm_elf_size(const unsigned char *p, uint64_t limit)
{
	if (limit < 64 || p[4] != 2 /* ELFCLASS64 */ || p[5] != 1 /* ELFDATA2LSB */)
		return 0;
	uint64_t phoff = gm_u64(p + 0x20), shoff = gm_u64(p + 0x28);
	uint64_t ehsize = gm_u16(p + 0x34), phentsize = gm_u16(p + 0x36), phnum = gm_u16(p + 0x38);
	uint64_t shentsize = gm_u16(p + 0x3a), shnum = gm_u16(p + 0x3c);
	if (ehsize < 64)
		return 0;
	uint64_t end = ehsize;
	if (shoff != 0) {
		if (shentsize < 64 || gm_table_end(shoff, 1, shentsize, limit) == 0)
			return 0;
		const unsigned char *s0 = p + shoff;
		if (shnum == 0) /* extended numbering: the count is in section 0 */
			shnum = gm_u64(s0 + 0x20);
		if (phnum == 0xffff)
			phnum = gm_u32(s0 + 0x2c);
	}
	if (phnum != 0) {
		uint64_t t = gm_table_end(phoff, phnum, phentsize, limit);
		if (phentsize < 56 || t == 0)
			return 0;
		if (t > end)
			end = t;
		for (uint64_t i = 0; i < phnum; i++) {
			const unsigned char *ph = p + phoff + i * phentsize;
			uint64_t e = gm_table_end(gm_u64(ph + 0x08), 1, gm_u64(ph + 0x20), limit);
			if (e == 0 && gm_u64(ph + 0x20) != 0)
				return 0;
			if (e > end)
				end = e;
		}
	}
	if (shoff != 0 && shnum != 0) {
		uint64_t t = gm_table_end(shoff, shnum, shentsize, limit);
		if (t == 0)
			return 0;
		if (t > end)
			end = t;
		for (uint64_t i = 0; i < shnum; i++) {
			const unsigned char *sh = p + shoff + i * shentsize;
			if (gm_u32(sh + 0x04) == 8 /* SHT_NOBITS */ || gm_u32(sh + 0x04) == 0 /* SHT_NULL */)
				continue;
			uint64_t e = gm_table_end(gm_u64(sh + 0x18), 1, gm_u64(sh + 0x20), limit);
			if (e == 0 && gm_u64(sh + 0x20) != 0)
				return 0;
			if (e > end)
				end = e;
		}
	}
	return (size_t)end;
}

static size_t gm_fatbin_size(const unsigned char *p, uint64_t limit)
{
	if (limit < 16)
		return 0;
	uint64_t hs = gm_u16(p + 6), fs = gm_u64(p + 8);
	if (hs < 16 || fs > limit || hs + fs > limit)
		return 0;
	return (size_t)(hs + fs);
}

/* PTX (and other text images): printable text up to a NUL, sent with it. */
static size_t gm_text_size(const unsigned char *p, uint64_t limit)
{
	size_t n = 0;
	for (; p[n] != 0; n++) {
		unsigned char c = p[n];
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v')
			return 0;
		if (c == 0x7f || n + 1 >= limit)
			return 0;
	}
	return n == 0 ? 0 : n + 1;
}

/* The magic checks read byte by byte and stop at the first mismatch, so a
 * short text image is never read past its NUL. */
static int gm_is_wrapper(const unsigned char *p)
{
	return p[0] == 0xb1 && p[1] == 0x43 && p[2] == 0x62 && p[3] == 0x46;
}

static int gm_is_fatbin(const unsigned char *p)
{
	return p[0] == 0x50 && p[1] == 0xed && p[2] == 0x55 && p[3] == 0xba;
}

static int gm_is_elf(const unsigned char *p)
{
	return p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F';
}

const void *gm_image_data(const void *image)
{
	const unsigned char *p = image;
	if (p != NULL && gm_is_wrapper(p)) {
		const void *data;
		memcpy(&data, p + 8, sizeof data);
		return data;
	}
	return image;
}

/* gm_image_size_within sizes an image of at most limit bytes (whose first
 * 64 bytes may be read); a wrapper's fatbin is in process memory. */
static size_t gm_image_size_within(const unsigned char *p, uint64_t limit)
{
	if (p == NULL)
		return 0;
	if (gm_is_wrapper(p)) {
		const unsigned char *data = gm_image_data(p);
		return data != NULL && gm_is_fatbin(data) ? gm_fatbin_size(data, GM_MAX_IMAGE) : 0;
	}
	if (gm_is_fatbin(p))
		return gm_fatbin_size(p, limit);
	if (gm_is_elf(p))
		return gm_elf_size(p, limit);
	return gm_text_size(p, limit);
}

size_t gm_image_size(const void *image)
{
	return gm_image_size_within(image, GM_MAX_IMAGE);
}

/* JIT options are the server's business; the interposer only answers the
 * output options so a caller reads empty logs, not stale memory. */
GM_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
					      CUjit_option *options, void **optionValues)
{
	if (numOptions > 0 && (options == NULL || optionValues == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gm_rpc_cuModuleLoadData(module, image);
	for (unsigned int i = 0; i < numOptions; i++) {
		switch ((int)options[i]) {
		case CU_JIT_WALL_TIME: {
			float t = 0;
			memcpy(&optionValues[i], &t, sizeof t);
			break;
		}
		case CU_JIT_INFO_LOG_BUFFER:
		case CU_JIT_ERROR_LOG_BUFFER: {
			int want = options[i] == CU_JIT_INFO_LOG_BUFFER ? CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
									: CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
			for (unsigned int j = 0; j < numOptions; j++)
				if ((int)options[j] == want && (uintptr_t)optionValues[j] > 0 && optionValues[i] != NULL)
					((char *)optionValues[i])[0] = 0;
			break;
		}
		default:
			break;
		}
	}
	for (unsigned int i = 0; i < numOptions; i++)
		if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			optionValues[i] = (void *)(uintptr_t)0;
	return r;
}

GM_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return gm_rpc_cuModuleLoadData(module, fatCubin);
}

GM_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
	if (module == NULL || fname == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = open(fname, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return CUDA_ERROR_FILE_NOT_FOUND;
	}
	if (st.st_size <= 0 || (uint64_t)st.st_size > GM_MAX_IMAGE) {
		close(fd);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	size_t size = (size_t)st.st_size;
	/* Room for a NUL so a PTX file is a C string, and for the 64 bytes
	 * of header the checks read. */
	unsigned char *buf = calloc(1, size + 64);
	if (buf == NULL) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	size_t got = 0;
	while (got < size) {
		ssize_t k = read(fd, buf + got, size - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	CUresult r;
	/* Headers are read only within the file; a wrapper (which points into
	 * some process's memory) is no image file. */
	size_t want = gm_is_wrapper(buf) ? 0 : gm_image_size_within(buf, size + 1);
	if (got != size)
		r = CUDA_ERROR_FILE_NOT_FOUND;
	else if (want == 0 || want > size + 1)
		r = CUDA_ERROR_INVALID_IMAGE;
	else
		r = gm_rpc_cuModuleLoadData(module, buf);
	free(buf);
	return r;
}

/* ---- error strings ---- */

static const struct gm_err {
	int code;
	const char *name, *desc;
} gm_errors[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	{5, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
	{6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", "profiler not initialized: call cudaProfilerInitialize()"},
	{7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", "profiler already started"},
	{8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", "profiler already stopped"},
	{34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{102, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
	{200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	{205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
	{206, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
	{207, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
	{208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
	{209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	{210, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
	{211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
	{212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array"},
	{213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer"},
	{214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	{215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
	{216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"},
	{217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
	{218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context"},
	{220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"},
	{221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	{222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
	{223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
	{224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"},
	{225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize"},
	{300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
	{301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	{302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
	{303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
	{304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	{400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{402, "CUDA_ERROR_LOSSY_QUERY", "attempted introspection would be semantically lossy"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{600, "CUDA_ERROR_NOT_READY", "device not ready"},
	{700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	{702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	{703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"},
	{704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
	{705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
	{708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
	{709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	{710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
	{711, "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
	{712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
	{713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
	{714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	{715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	{716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	{717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	{718, "CUDA_ERROR_INVALID_PC", "invalid program counter"},
	{719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
	{800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	{803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	{804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
	{805, "CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"},
	{806, "CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed"},
	{807, "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests"},
	{808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the hardware resources required to create MPS client have been exhausted"},
	{809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "the hardware resources required to support device connections have been exhausted"},
	{810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server"},
	{811, "CUDA_ERROR_CDP_NOT_SUPPORTED", "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it"},
	{812, "CUDA_ERROR_CDP_VERSION_MISMATCH", "the module uses CUDA Dynamic Parallelism of an unsupported version"},
	{900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	{901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	{902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
	{903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
	{904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
	{905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
	{906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
	{907, "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
	{908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
	{909, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
	{910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
	{911, "CUDA_ERROR_EXTERNAL_DEVICE", "an async error has occurred in external entity outside of CUDA"},
	{912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "a kernel launch error has occurred due to cluster misconfiguration"},
	{913, "CUDA_ERROR_FUNCTION_NOT_LOADED", "the function handle is not loaded when calling an API that requires a loaded function"},
	{914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", "one or more resources passed in are not valid resource types for the operation"},
	{915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "one or more resources are insufficient or non-applicable for the operation"},
	{999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct gm_err *gm_find_error(CUresult error)
{
	for (size_t i = 0; i < sizeof gm_errors / sizeof gm_errors[0]; i++)
		if (gm_errors[i].code == (int)error)
			return &gm_errors[i];
	return NULL;
}

GM_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	const struct gm_err *e = gm_find_error(error);
	*pStr = e ? e->desc : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GM_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	const struct gm_err *e = gm_find_error(error);
	*pStr = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

const char *gm_error_name(CUresult r)
{
	const struct gm_err *e = gm_find_error(r);
	return e ? e->name : "an unknown CUresult";
}

/* ---- unsupported calls ---- */

CUresult gm_not_supported(const char *name, unsigned char *once)
{
	if (gm_first(once))
		gm_log("%s is not supported by gpumux's remote CUDA; it returns CUDA_ERROR_NOT_SUPPORTED", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- older names and per-thread-stream variants ---- */

/* The version-1 names whose signature is the current one's (the others,
 * with 32-bit sizes or pointers, are in unsupported.list). */
GM_EXPORT CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v2(pctx, flags, dev);
}

GM_EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
	return cuCtxDestroy_v2(ctx);
}

GM_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
	return cuCtxPushCurrent_v2(ctx);
}

GM_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
	return cuCtxPopCurrent_v2(pctx);
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return cuDevicePrimaryCtxRelease_v2(dev);
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

GM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
	return cuDevicePrimaryCtxReset_v2(dev);
}

GM_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
	return gm_rpc_cuStreamDestroy_v2(hStream);
}

GM_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
	return gm_rpc_cuEventDestroy_v2(hEvent);
}

GM_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	return gm_rpc_cuEventElapsedTime(pMilliseconds, hStart, hEnd);
}

/* _ptds/_ptsz: what programs built with --default-stream per-thread call.
 * Stream 0 there means the per-thread default stream. */
#define GM_PTSZ(s) ((s) == NULL ? CU_STREAM_PER_THREAD : (s))

GM_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return gm_rpc_cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

GM_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return gm_rpc_cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

GM_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return gm_rpc_cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

GM_EXPORT CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return gm_rpc_cuMemsetD8_v2(dstDevice, uc, N);
}

GM_EXPORT CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	return gm_rpc_cuMemsetD32_v2(dstDevice, ui, N);
}

GM_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
						     CUstream hStream)
{
	return gm_rpc_cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
						     CUstream hStream)
{
	return gm_rpc_cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
						     CUstream hStream)
{
	return gm_rpc_cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return gm_rpc_cuMemsetD8Async(dstDevice, uc, N, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	return gm_rpc_cuMemsetD32Async(dstDevice, ui, N, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	return gm_rpc_cuStreamWaitEvent(GM_PTSZ(hStream), hEvent, Flags);
}

GM_EXPORT CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
	return gm_rpc_cuStreamQuery(GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
	return gm_rpc_cuStreamSynchronize(GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	return gm_rpc_cuEventRecord(hEvent, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					       void **kernelParams, void **extra)
{
	return cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
			      GM_PTSZ(hStream), kernelParams, extra);
}

GM_EXPORT CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
						 void **extra)
{
	if (config == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUlaunchConfig c = *config;
	c.hStream = GM_PTSZ(c.hStream);
	return cuLaunchKernelEx(&c, f, kernelParams, extra);
}

/* ---- cuGetProcAddress ---- */

GM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
					       CUdriverProcAddressQueryResult *symbolStatus);
GM_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

#define GM_PROC(n) {#n, (void *)n},

static const gm_proc gm_generated_procs[] = {GM_GENERATED_EXPORTS(GM_PROC)};

static const gm_proc gm_manual_procs[] = {
	GM_PROC(cuCtxGetCurrent)
	GM_PROC(cuCtxSetCurrent)
	GM_PROC(cuCtxPushCurrent_v2)
	GM_PROC(cuCtxPopCurrent_v2)
	GM_PROC(cuCtxCreate_v2)
	GM_PROC(cuCtxCreate_v3)
	GM_PROC(cuCtxCreate_v4)
	GM_PROC(cuCtxDestroy_v2)
	GM_PROC(cuCtxSynchronize_v2)
	GM_PROC(cuCtxGetDevice_v2)
	GM_PROC(cuCtxGetDevice)
	GM_PROC(cuDevicePrimaryCtxRelease_v2)
	GM_PROC(cuDevicePrimaryCtxReset_v2)
	GM_PROC(cuDevicePrimaryCtxRetain)
	GM_PROC(cuDevicePrimaryCtxGetState)
	GM_PROC(cuDevicePrimaryCtxSetFlags_v2)
	GM_PROC(cuLaunchKernel)
	GM_PROC(cuModuleLoadDataEx)
	GM_PROC(cuModuleLoadFatBinary)
	GM_PROC(cuModuleLoad)
	GM_PROC(cuGetErrorString)
	GM_PROC(cuGetErrorName)
	GM_PROC(cuGetProcAddress)
	GM_PROC(cuGetProcAddress_v2)
	GM_PROC(cuGetExportTable)
	GM_PROC(cuLibraryLoadData)
	GM_PROC(cuLibraryUnload)
	GM_PROC(cuLibraryGetModule)
	GM_PROC(cuLibraryGetKernel)
	GM_PROC(cuLibraryGetGlobal)
	GM_PROC(cuKernelGetFunction)
	GM_PROC(cuKernelGetAttribute)
	GM_PROC(cuKernelGetParamInfo)
	GM_PROC(cuModuleGetLoadingMode)
	GM_PROC(cuCtxCreate)
	GM_PROC(cuCtxDestroy)
	GM_PROC(cuCtxPushCurrent)
	GM_PROC(cuCtxPopCurrent)
	GM_PROC(cuDevicePrimaryCtxRelease)
	GM_PROC(cuDevicePrimaryCtxSetFlags)
	GM_PROC(cuDevicePrimaryCtxReset)
	GM_PROC(cuStreamDestroy)
	GM_PROC(cuEventDestroy)
	GM_PROC(cuEventElapsedTime_v2)
	GM_PROC(cuMemcpyHtoD_v2_ptds)
	GM_PROC(cuMemcpyDtoH_v2_ptds)
	GM_PROC(cuMemcpyDtoD_v2_ptds)
	GM_PROC(cuMemsetD8_v2_ptds)
	GM_PROC(cuMemsetD32_v2_ptds)
	GM_PROC(cuMemcpyHtoDAsync_v2_ptsz)
	GM_PROC(cuMemcpyDtoHAsync_v2_ptsz)
	GM_PROC(cuMemcpyDtoDAsync_v2_ptsz)
	GM_PROC(cuMemsetD8Async_ptsz)
	GM_PROC(cuMemsetD32Async_ptsz)
	GM_PROC(cuStreamWaitEvent_ptsz)
	GM_PROC(cuStreamQuery_ptsz)
	GM_PROC(cuStreamSynchronize_ptsz)
	GM_PROC(cuEventRecord_ptsz)
	GM_PROC(cuLaunchKernel_ptsz)
	GM_PROC(cuLaunchKernelEx)
	GM_PROC(cuLaunchKernelEx_ptsz)
	GM_PROC(cuOccupancyMaxActiveClusters)
	GM_PROC(cuOccupancyMaxPotentialClusterSize)
	GM_MORE_PROCS(GM_PROC)
	GM_GRAPH_PROCS(GM_PROC)
	GM_MEM_PROCS(GM_PROC)
};

/* The CUDA version that introduced each name where the suffix rule
 * (none 2000, _v2 3020, _v3 11040, _v4 12050) is wrong; cudaTypedefs.h's
 * PFN_<name>_v<version> are the source. */
static const struct {
	const char *name;
	int version;
} gm_versions[] = {
	{"cuDriverGetVersion", 2020},
	{"cuDeviceGetUuid", 9020},
	{"cuDeviceGetUuid_v2", 11040},
	{"cuDevicePrimaryCtxRetain", 7000},
	{"cuDevicePrimaryCtxRelease", 7000},
	{"cuDevicePrimaryCtxRelease_v2", 11000},
	{"cuDevicePrimaryCtxSetFlags", 7000},
	{"cuDevicePrimaryCtxSetFlags_v2", 11000},
	{"cuDevicePrimaryCtxGetState", 7000},
	{"cuDevicePrimaryCtxReset", 7000},
	{"cuDevicePrimaryCtxReset_v2", 11000},
	{"cuCtxDestroy_v2", 4000},
	{"cuCtxPushCurrent_v2", 4000},
	{"cuCtxPopCurrent_v2", 4000},
	{"cuCtxSetCurrent", 4000},
	{"cuCtxGetCurrent", 4000},
	{"cuCtxSynchronize_v2", 13000},
	{"cuCtxGetDevice_v2", 13000},
	{"cuModuleLoadDataEx", 2010},
	{"cuFuncGetAttribute", 2020},
	{"cuFuncGetParamInfo", 12040},
	{"cuLaunchKernel", 4000},
	{"cuStreamWaitEvent", 3020},
	{"cuStreamDestroy_v2", 4000},
	{"cuEventDestroy_v2", 4000},
	{"cuEventElapsedTime_v2", 12080},
	{"cuMemsetD8Async", 3020},
	{"cuMemsetD32Async", 3020},
	{"cuGetErrorString", 6000},
	{"cuGetErrorName", 6000},
	{"cuGetProcAddress", 11030},
	{"cuGetProcAddress_v2", 12000},
	{"cuGetExportTable", 3000},
	{"cuLibraryLoadData", 12000},
	{"cuLibraryUnload", 12000},
	{"cuLibraryGetModule", 12000},
	{"cuLibraryGetKernel", 12000},
	{"cuLibraryGetGlobal", 12000},
	{"cuKernelGetFunction", 12000},
	{"cuKernelGetAttribute", 12000},
	{"cuKernelGetParamInfo", 12040},
	{"cuModuleGetLoadingMode", 11070},
	{"cuCtxGetStreamPriorityRange", 5050},
	{"cuStreamCreateWithPriority", 5050},
	{"cuStreamGetPriority", 5050},
	{"cuStreamGetFlags", 5050},
	{"cuStreamIsCapturing", 10000},
	{"cuStreamGetCaptureInfo", 10010},
	{"cuStreamGetCaptureInfo_v2", 11030},
	{"cuStreamGetCaptureInfo_v3", 12030},
	{"cuStreamBeginCapture", 10000},
	{"cuStreamBeginCapture_v2", 10010},
	{"cuStreamEndCapture", 10000},
	{"cuThreadExchangeStreamCaptureMode", 10010},
	{"cuStreamUpdateCaptureDependencies", 11030},
	{"cuStreamUpdateCaptureDependencies_v2", 12030},
	{"cuGraphCreate", 10000},
	{"cuGraphDestroy", 10000},
	{"cuGraphClone", 10000},
	{"cuGraphGetNodes", 10000},
	{"cuGraphGetRootNodes", 10000},
	{"cuGraphAddKernelNode", 10000},
	{"cuGraphAddKernelNode_v2", 12000},
	{"cuGraphAddMemsetNode", 10000},
	{"cuGraphAddMemcpyNode", 10000},
	{"cuGraphAddEmptyNode", 10000},
	{"cuGraphAddEventRecordNode", 11010},
	{"cuGraphAddEventWaitNode", 11010},
	{"cuGraphAddDependencies", 10000},
	{"cuGraphAddDependencies_v2", 12030},
	{"cuGraphInstantiate", 10000},
	{"cuGraphInstantiate_v2", 11000},
	{"cuGraphInstantiateWithFlags", 11040},
	{"cuGraphInstantiateWithParams", 12000},
	{"cuGraphLaunch", 10000},
	{"cuGraphUpload", 11010},
	{"cuGraphExecDestroy", 10000},
	{"cuGraphExecKernelNodeSetParams", 10010},
	{"cuGraphExecKernelNodeSetParams_v2", 12000},
	{"cuEventRecordWithFlags", 11010},
	{"cuFuncSetAttribute", 9000},
	{"cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050},
	{"cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000},
	{"cuOccupancyAvailableDynamicSMemPerBlock", 10020},
	{"cuKernelSetAttribute", 12000},
	{"cuMemHostAlloc", 2020},
	{"cuMemHostGetFlags", 2030},
	{"cuMemHostRegister", 6050},
	{"cuMemHostUnregister", 4000},
	{"cuPointerGetAttribute", 4000},
	{"cuPointerGetAttributes", 7000},
	{"cuCtxGetApiVersion", 3020},
	{"cuMemcpy", 4000},
	{"cuMemcpyAsync", 4000},
	{"cuDeviceCanAccessPeer", 4000},
	{"cuCtxEnablePeerAccess", 4000},
	{"cuCtxDisablePeerAccess", 4000},
	{"cuMemcpyPeer", 4000},
	{"cuMemcpyPeerAsync", 4000},
	{"cuDeviceGetP2PAttribute", 8000},
	{"cuLaunchKernelEx", 11060},
	{"cuCtxGetLimit", 3010},
	{"cuOccupancyMaxActiveClusters", 11070},
	{"cuOccupancyMaxPotentialClusterSize", 11070},
	{"cuCtxSetLimit", 3010},
	{"cuMemHostGetDevicePointer_v2", 3020},
	{"cuMemGetAllocationGranularity", 10020},
	{"cuMemAddressReserve", 10020},
	{"cuMemAddressFree", 10020},
	{"cuMemCreate", 10020},
	{"cuMemRelease", 10020},
	{"cuMemMap", 10020},
	{"cuMemUnmap", 10020},
	{"cuMemSetAccess", 10020},
	{"cuMemGetAccess", 10020},
	{"cuMemGetAllocationPropertiesFromHandle", 10020},
	{"cuMemRetainAllocationHandle", 11000},
	{"cuMemAllocAsync", 11020},
	{"cuMemFreeAsync", 11020},
	{"cuMemAllocFromPoolAsync", 11020},
	{"cuDeviceGetDefaultMemPool", 11020},
	{"cuDeviceGetMemPool", 11020},
	{"cuDeviceSetMemPool", 11020},
	{"cuMemPoolCreate", 11020},
	{"cuMemPoolDestroy", 11020},
	{"cuMemPoolSetAttribute", 11020},
	{"cuMemPoolGetAttribute", 11020},
	{"cuMemPoolTrimTo", 11020},
	{"cuMemPoolSetAccess", 11020},
	{"cuMemPoolGetAccess", 11020},
};

static int gm_proc_version(const char *name)
{
	for (size_t i = 0; i < sizeof gm_versions / sizeof gm_versions[0]; i++)
		if (strcmp(gm_versions[i].name, name) == 0)
			return gm_versions[i].version;
	const char *v = strrchr(name, '_');
	if (v != NULL && v[1] == 'v') {
		switch (atoi(v + 2)) {
		case 2:
			return 3020;
		case 3:
			return 11040;
		case 4:
			return 12050;
		}
	}
	return 2000;
}

/* gm_base_match: name is symbol or symbol + "_v<digits>". */
static int gm_base_match(const char *name, const char *symbol, size_t sl)
{
	if (strncmp(name, symbol, sl) != 0)
		return 0;
	const char *rest = name + sl;
	if (*rest == 0)
		return 1;
	if (rest[0] != '_' || rest[1] != 'v' || rest[2] == 0)
		return 0;
	for (rest += 2; *rest; rest++)
		if (*rest < '0' || *rest > '9')
			return 0;
	return 1;
}

struct gm_lookup {
	const gm_proc *best;
	int best_version;
	int found; /* the base name exists in some version */
};

static void gm_lookup_in(struct gm_lookup *lk, const gm_proc *procs, int n, const char *symbol, size_t sl,
			 int cudaVersion)
{
	for (int i = 0; i < n; i++) {
		if (!gm_base_match(procs[i].name, symbol, sl))
			continue;
		lk->found = 1;
		int v = gm_proc_version(procs[i].name);
		if (v <= cudaVersion && v > lk->best_version) {
			lk->best = &procs[i];
			lk->best_version = v;
		}
	}
}

static const gm_proc *gm_lookup_exact(const char *name)
{
	const gm_proc *tables[] = {gm_generated_procs, gm_manual_procs, gm_unsupported_procs};
	int counts[] = {(int)(sizeof gm_generated_procs / sizeof gm_generated_procs[0]),
			(int)(sizeof gm_manual_procs / sizeof gm_manual_procs[0]), gm_unsupported_count};
	for (int t = 0; t < 3; t++)
		for (int i = 0; i < counts[t]; i++)
			if (strcmp(tables[t][i].name, name) == 0)
				return &tables[t][i];
	return NULL;
}

/* Base names that from some CUDA version name another call with another
 * signature (cuda.h: #define cuGraphInstantiate cuGraphInstantiateWithFlags
 * from CUDA 12, whose cudaTypedefs.h PFN_cuGraphInstantiate is
 * cuGraphInstantiateWithFlags'). */
static const struct {
	const char *symbol;
	int version;
	const char *target;
} gm_aliases[] = {
	{"cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags"},
};

GM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
					       CUdriverProcAddressQueryResult *symbolStatus)
{
	if (symbol == NULL || pfn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (size_t i = 0; i < sizeof gm_aliases / sizeof gm_aliases[0]; i++)
		if (cudaVersion >= gm_aliases[i].version && strcmp(symbol, gm_aliases[i].symbol) == 0)
			symbol = gm_aliases[i].target;
	size_t sl = strnlen(symbol, 256);
	struct gm_lookup lk = {.best = NULL, .best_version = -1, .found = 0};
	if (sl < 256) {
		gm_lookup_in(&lk, gm_generated_procs, (int)(sizeof gm_generated_procs / sizeof gm_generated_procs[0]),
			     symbol, sl, cudaVersion);
		gm_lookup_in(&lk, gm_manual_procs, (int)(sizeof gm_manual_procs / sizeof gm_manual_procs[0]), symbol,
			     sl, cudaVersion);
		gm_lookup_in(&lk, gm_unsupported_procs, gm_unsupported_count, symbol, sl, cudaVersion);
	}
	if (lk.best == NULL) {
		if (gm_debug())
			gm_log("debug: cuGetProcAddress(%s, %d, %llu): %s", symbol, cudaVersion, (unsigned long long)flags,
			       lk.found ? "version not sufficient" : "not found");
		if (symbolStatus != NULL)
			*symbolStatus = lk.found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
						 : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return CUDA_ERROR_NOT_FOUND;
	}
	const gm_proc *p = lk.best;
	if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
		static const char *const sfx[] = {"_ptsz", "_ptds"};
		for (int i = 0; i < 2; i++) {
			char name[300];
			snprintf(name, sizeof name, "%s%s", lk.best->name, sfx[i]);
			const gm_proc *v = gm_lookup_exact(name);
			if (v != NULL)
				p = v;
		}
	}
	*pfn = p->fn;
	if (symbolStatus != NULL)
		*symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/* ---- fork ---- */

void gm_interposer_atfork_prepare(void)
{
	gm_more_atfork_prepare();
	gm_dark_atfork_prepare();
	pthread_mutex_lock(&gm_ctxdev_mu);
	gm_layout_fork_locked = pthread_mutex_trylock(&gm_layout_mu) == 0;
}

void gm_interposer_atfork_parent(void)
{
	gm_more_atfork_parent();
	gm_dark_atfork_parent();
	pthread_mutex_unlock(&gm_ctxdev_mu);
	if (gm_layout_fork_locked)
		pthread_mutex_unlock(&gm_layout_mu);
	gm_layout_fork_locked = 0;
}

/* The child is a new client of the server: the parent's handles (its
 * contexts, functions) mean nothing on the child's connection. */
void gm_interposer_atfork_child(void)
{
	gm_more_atfork_child();
	gm_dark_atfork_child();
	gm_nctxdev = 0;
	memset(gm_prim, 0, sizeof gm_prim); /* a new connection: nothing retained */
	pthread_mutex_unlock(&gm_ctxdev_mu);
	for (int i = 0; i < GM_LAYOUT_BUCKETS; i++) {
		struct gm_layout *l = gm_layouts[i];
		while (gm_layout_fork_locked && l != NULL) {
			struct gm_layout *next = l->next;
			free(l);
			l = next;
		}
		gm_layouts[i] = NULL;
	}
	gm_layout_fork_locked = 0;
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	memcpy(&gm_layout_mu, &fresh, sizeof fresh);
	gm_ctx_depth = 0;
}
