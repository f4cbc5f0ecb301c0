/*
 * What the CUDA runtime (libcudart, static or shared, CUDA 12/13) needs of
 * a driver besides the documented API:
 *
 *  - cuGetExportTable's private tables. Their layout and the calls a
 *    runtime makes into them were observed on the H200 with
 *    e2e/gpu/remote/darktrace.c (a libcuda.so.1 that forwards to the real
 *    driver and logs every table slot called); public reimplementations
 *    (ZLUDA and others) name them. Each table starts with its size in bytes
 *    (except context-local storage); a slot gpumux does not implement is a
 *    stub that logs its table and slot once and returns
 *    CUDA_ERROR_NOT_SUPPORTED.
 *  - cuLibrary... and cuKernel... (CUDA 12's context-independent loading, which the
 *    runtime uses for every fatbin it registers): a library is the image,
 *    kept here, and the module it becomes, loaded through the forwarded
 *    cuModuleLoadData in the context current at the first kernel or global
 *    looked up in it. A CUkernel is the forwarded CUfunction (cuLaunchKernel
 *    takes either).
 *
 * None of this adds wire calls: everything that needs the GPU goes through
 * the forwarded module, function and device calls, which the server
 * validates.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gm_internal.h"
#include "gm_share.h"
#include "gm_wire.h"
#include "zz_calls.h"

#ifndef GM_USE_CUDA_H
GM_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx);
GM_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx);
GM_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx);
GM_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx);
#endif

/* gm_cls_ctx_current: ctx, or the calling thread's current context when it
 * is NULL (CUDA_ERROR_INVALID_CONTEXT without one). */
static CUresult gm_cls_ctx_current(CUcontext *ctx)
{
	if (*ctx != NULL)
		return CUDA_SUCCESS;
	CUresult r = cuCtxGetCurrent(ctx);
	if (r == CUDA_SUCCESS && *ctx == NULL)
		r = CUDA_ERROR_INVALID_CONTEXT;
	return r;
}

/* ---- table stubs ---- */

#define GM_STUB(tab, slot)                                                                            \
	static CUresult gm_stub_##tab##_##slot(void)                                                  \
	{                                                                                             \
		static unsigned char once;                                                            \
		return gm_not_supported("private table " #tab " slot " #slot " (cuGetExportTable)", &once); \
	}

/* ---- CUDART_INTERFACE {6bd5fb6c-5bf4-e74a-8987-d93912fd9df9}: 13 slots ---- */

static CUresult gm_load_wrapper(CUmodule *mod, const void *fatbin)
{
	if (mod == NULL || fatbin == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return gm_rpc_cuModuleLoadData(mod, fatbin);
}

/* slot 1: (CUmodule *, fatbin wrapper) */
static CUresult gm_cudart_module1(CUmodule *mod, const void *fatbin)
{
	return gm_load_wrapper(mod, fatbin);
}

/* slot 6: (CUmodule *, fatbin wrapper, host-var tables, flags); the extra
 * tables (host variables) are not supported. */
static CUresult gm_cudart_module6(CUmodule *mod, const void *fatbin, void *a3, void *a4, unsigned a5)
{
	(void)a5;
	if (a3 != NULL || a4 != NULL) {
		gm_debug_local("CUDART_INTERFACE slot 6 with host-variable tables", CUDA_ERROR_NOT_SUPPORTED);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return gm_load_wrapper(mod, fatbin);
}

/* slot 8: (fatbin header, CUmodule *, ...). */
static CUresult gm_cudart_module8(const void *fatbin, CUmodule *mod, void *a3, void *a4, unsigned a5)
{
	if (a3 != NULL || a4 != NULL || a5 != 0) {
		gm_debug_local("CUDART_INTERFACE slot 8 with host-variable tables", CUDA_ERROR_NOT_SUPPORTED);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return gm_load_wrapper(mod, fatbin);
}

/* slot 2: the device's primary context, retained once per process (the
 * runtime asks before it retains the context itself). */
#define GM_DARK_DEVS 64
static pthread_mutex_t gm_dark_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext gm_primary[GM_DARK_DEVS];

static CUresult gm_cudart_primary(CUcontext *pctx, CUdevice dev)
{
	if (pctx == NULL || dev < 0 || dev >= GM_DARK_DEVS)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gm_dark_mu);
	CUresult r = CUDA_SUCCESS;
	if (gm_primary[dev] == NULL)
		r = cuDevicePrimaryCtxRetain(&gm_primary[dev], dev);
	*pctx = gm_primary[dev];
	pthread_mutex_unlock(&gm_dark_mu);
	return r;
}

/* slot 7: takes one argument, returns nothing the runtime uses. */
static CUresult gm_cudart_slot7(uintptr_t a)
{
	(void)a;
	return CUDA_SUCCESS;
}

GM_STUB(cudart, 3)
GM_STUB(cudart, 4)
GM_STUB(cudart, 5)
GM_STUB(cudart, 9)
GM_STUB(cudart, 11)
GM_STUB(cudart, 12)

static const void *gm_tab_cudart[13] = {
	(const void *)(uintptr_t)sizeof gm_tab_cudart,
	(const void *)gm_cudart_module1,
	(const void *)gm_cudart_primary,
	(const void *)gm_stub_cudart_3,
	(const void *)gm_stub_cudart_4,
	(const void *)gm_stub_cudart_5,
	(const void *)gm_cudart_module6,
	(const void *)gm_cudart_slot7,
	(const void *)gm_cudart_module8,
	(const void *)gm_stub_cudart_9,
	NULL,
	(const void *)gm_stub_cudart_11,
	(const void *)gm_stub_cudart_12,
};

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS {a094798c-2e74-2e74-93f2-0800200c0a66}: 7 ---- */

/* Slots 2 and 6 hand the runtime a buffer and its size, where tools would
 * register callbacks; zeros mean none. */
static uint64_t gm_hooks_buf2[1024];
static unsigned char gm_hooks_buf6[16];

static void *gm_hooks2(void **p, size_t *n)
{
	if (p != NULL)
		*p = gm_hooks_buf2;
	if (n != NULL)
		*n = sizeof gm_hooks_buf2 / sizeof gm_hooks_buf2[0];
	return gm_hooks_buf2;
}

static void *gm_hooks6(void **p, size_t *n)
{
	if (p != NULL)
		*p = gm_hooks_buf6;
	if (n != NULL)
		*n = 14;
	return gm_hooks_buf6;
}

GM_STUB(hooks, 1)
GM_STUB(hooks, 3)
GM_STUB(hooks, 4)
GM_STUB(hooks, 5)

static const void *gm_tab_hooks[7] = {
	(const void *)(uintptr_t)sizeof gm_tab_hooks,
	(const void *)gm_stub_hooks_1,
	(const void *)gm_hooks2,
	(const void *)gm_stub_hooks_3,
	(const void *)gm_stub_hooks_4,
	(const void *)gm_stub_hooks_5,
	(const void *)gm_hooks6,
};

/* ---- TOOLS_TLS {42d85a81-23f6-cb47-8298-f6e78a3aecdc}: 3 ----
 * The tools' view of the calling thread's current context: slot 1 sets it
 * (CUcontext), slot 2 gets it (CUcontext *), as cuCtxSetCurrent and
 * cuCtxGetCurrent do. cuBLAS(Lt) asks slot 2 for the context it then hands
 * to the ToolsContext table below; on the H200 the driver's answer is the
 * context cuCtxGetCurrent returns (run.sh cublas, darktrace's check). */

static CUresult gm_tls_set(CUcontext ctx)
{
	return cuCtxSetCurrent(ctx);
}

static CUresult gm_tls_get(CUcontext *pctx)
{
	return cuCtxGetCurrent(pctx);
}

static const void *gm_tab_tls[3] = {
	(const void *)(uintptr_t)sizeof gm_tab_tls,
	(const void *)gm_tls_set,
	(const void *)gm_tls_get,
};

/* ---- ToolsContext {21318c60-9714-3248-8ca6-41ff7324c8f2}: 93 ----
 * Per-context and per-stream queries for tools. cuBLAS(Lt)'s GEMMs call
 * three, with the context TOOLS_TLS slot 2 gave:
 *   slot 4  (CUcontext, uint64_t *id): the context's unique ID, IDs
 *           increasing and never reused in the process (what cuCtxGetId
 *           returns);
 *   slot 51 (CUcontext, CUstream, handle *out, uint8_t per_thread): the
 *           tools' handle for a public stream (0 is the legacy stream, or
 *           the thread's per-thread stream when per_thread is set);
 *   slot 39 (CUcontext, handle, uint64_t *id): that stream's unique ID in
 *           the process (what cuStreamGetId returns).
 * The IDs are the interposer's own, with the same contract: distinct
 * contexts and distinct streams get distinct IDs, the same one always the
 * same, counting from 1 (the server never reuses a handle within a
 * connection, so a handle names one context or stream for the life of the
 * process). A handle is one of the records below and means nothing to the
 * server. Every other slot is a stub. */

#define GM_TOOLS_CTXS 256
#define GM_TOOLS_STREAMS 4096
static struct {
	CUcontext ctx;
	uint64_t id;
} gm_tctx[GM_TOOLS_CTXS];
static int gm_ntctx;
static uint64_t gm_tctx_next = 1;

struct gm_tstream {
	CUcontext ctx;
	CUstream stream; /* CU_STREAM_LEGACY or CU_STREAM_PER_THREAD for the special ones */
	uint64_t thread; /* the per-thread stream's thread, else 0 */
	uint64_t id;
};
static struct gm_tstream gm_tstreams[GM_TOOLS_STREAMS];
static int gm_ntstreams;
static uint64_t gm_tstream_next = 1;
static uint64_t gm_thread_next = 1;
static __thread uint64_t gm_thread_serial;

static CUresult gm_tools_ctx(CUcontext *ctx)
{
	return gm_cls_ctx_current(ctx);
}

static CUresult gm_toolsctx_id(CUcontext ctx, uint64_t *id)
{
	if (id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gm_tools_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&gm_dark_mu);
	int i = 0;
	while (i < gm_ntctx && gm_tctx[i].ctx != ctx)
		i++;
	if (i == gm_ntctx && gm_ntctx < GM_TOOLS_CTXS) {
		gm_tctx[i].ctx = ctx;
		gm_tctx[i].id = gm_tctx_next++;
		gm_ntctx++;
	}
	if (i < gm_ntctx) {
		*id = gm_tctx[i].id;
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&gm_dark_mu);
	return r;
}

static CUresult gm_toolsctx_stream(CUcontext ctx, CUstream stream, struct gm_tstream **out, uint8_t per_thread)
{
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gm_tools_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t thread = 0;
	if (stream == NULL)
		stream = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
	pthread_mutex_lock(&gm_dark_mu);
	if (stream == CU_STREAM_PER_THREAD) {
		if (gm_thread_serial == 0)
			gm_thread_serial = gm_thread_next++;
		thread = gm_thread_serial;
	}
	int i = 0;
	while (i < gm_ntstreams &&
	       !(gm_tstreams[i].ctx == ctx && gm_tstreams[i].stream == stream && gm_tstreams[i].thread == thread))
		i++;
	if (i == gm_ntstreams && gm_ntstreams < GM_TOOLS_STREAMS) {
		gm_tstreams[i].ctx = ctx;
		gm_tstreams[i].stream = stream;
		gm_tstreams[i].thread = thread;
		gm_tstreams[i].id = gm_tstream_next++;
		gm_ntstreams++;
	}
	r = i < gm_ntstreams ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	*out = i < gm_ntstreams ? &gm_tstreams[i] : NULL;
	pthread_mutex_unlock(&gm_dark_mu);
	return r;
}

static CUresult gm_toolsctx_stream_id(CUcontext ctx, const struct gm_tstream *h, uint64_t *id)
{
	(void)ctx;
	if (id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&gm_dark_mu);
	int ok = h >= gm_tstreams && h < gm_tstreams + gm_ntstreams;
	if (ok)
		*id = h->id;
	pthread_mutex_unlock(&gm_dark_mu);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

#define GM_TC_STUB(n) GM_STUB(toolsctx, n)
#define GM_TC_10(d) GM_TC_STUB(d##0) GM_TC_STUB(d##1) GM_TC_STUB(d##2) GM_TC_STUB(d##3) GM_TC_STUB(d##4) \
	GM_TC_STUB(d##5) GM_TC_STUB(d##6) GM_TC_STUB(d##7) GM_TC_STUB(d##8) GM_TC_STUB(d##9)
GM_TC_STUB(1) GM_TC_STUB(2) GM_TC_STUB(3) GM_TC_STUB(5) GM_TC_STUB(6) GM_TC_STUB(7) GM_TC_STUB(8) GM_TC_STUB(9)
GM_TC_10(1) GM_TC_10(2)
GM_TC_STUB(30) GM_TC_STUB(31) GM_TC_STUB(32) GM_TC_STUB(33) GM_TC_STUB(34) GM_TC_STUB(35) GM_TC_STUB(36)
GM_TC_STUB(37) GM_TC_STUB(38)
GM_TC_10(4)
GM_TC_STUB(50) GM_TC_STUB(52) GM_TC_STUB(53) GM_TC_STUB(54) GM_TC_STUB(55) GM_TC_STUB(56) GM_TC_STUB(57)
GM_TC_STUB(58) GM_TC_STUB(59)
GM_TC_10(6) GM_TC_10(7) GM_TC_10(8)
GM_TC_STUB(90) GM_TC_STUB(91) GM_TC_STUB(92)

#define GM_TC(n) (const void *)gm_stub_toolsctx_##n
#define GM_TC10(d) GM_TC(d##0), GM_TC(d##1), GM_TC(d##2), GM_TC(d##3), GM_TC(d##4), GM_TC(d##5), GM_TC(d##6), \
	GM_TC(d##7), GM_TC(d##8), GM_TC(d##9)

static const void *gm_tab_toolsctx[93] = {
	(const void *)(uintptr_t)sizeof gm_tab_toolsctx,
	GM_TC(1), GM_TC(2), GM_TC(3), (const void *)gm_toolsctx_id, GM_TC(5), GM_TC(6), GM_TC(7), GM_TC(8), GM_TC(9),
	GM_TC10(1), GM_TC10(2),
	GM_TC(30), GM_TC(31), GM_TC(32), GM_TC(33), GM_TC(34), GM_TC(35), GM_TC(36), GM_TC(37), GM_TC(38),
	(const void *)gm_toolsctx_stream_id,
	GM_TC10(4),
	GM_TC(50), (const void *)gm_toolsctx_stream, GM_TC(52), GM_TC(53), GM_TC(54), GM_TC(55), GM_TC(56), GM_TC(57),
	GM_TC(58), GM_TC(59),
	GM_TC10(6), GM_TC10(7), GM_TC10(8),
	GM_TC(90), GM_TC(91), GM_TC(92),
};

/* ---- CONTEXT_LOCAL_STORAGE {c693336e-1121-df11-a8c3-68f355d89593}: 4 ----
 * The runtime keeps its per-context state here: put(ctx, key, value, dtor),
 * remove(ctx, key), get(&value, ctx, key); ctx NULL is the calling thread's
 * current context. get reports CUDA_ERROR_INVALID_CONTEXT without one and
 * CUDA_ERROR_INVALID_HANDLE for a key not stored (as the driver does). */

#define GM_CLS_MAX 256
typedef void (*gm_cls_dtor)(CUcontext, void *, void *);
static struct {
	CUcontext ctx;
	void *key, *value;
	gm_cls_dtor dtor;
} gm_cls[GM_CLS_MAX];
static int gm_ncls;

static CUresult gm_cls_ctx(CUcontext *ctx)
{
	return gm_cls_ctx_current(ctx);
}

static int gm_cls_find(CUcontext ctx, void *key)
{
	for (int i = 0; i < gm_ncls; i++)
		if (gm_cls[i].ctx == ctx && gm_cls[i].key == key)
			return i;
	return -1;
}

static CUresult gm_cls_put(CUcontext ctx, void *key, void *value, gm_cls_dtor dtor)
{
	CUresult r = gm_cls_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gm_dark_mu);
	int i = gm_cls_find(ctx, key);
	if (i < 0 && gm_ncls < GM_CLS_MAX)
		i = gm_ncls++;
	if (i >= 0) {
		gm_cls[i].ctx = ctx;
		gm_cls[i].key = key;
		gm_cls[i].value = value;
		gm_cls[i].dtor = dtor;
	}
	pthread_mutex_unlock(&gm_dark_mu);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult gm_cls_remove(CUcontext ctx, void *key)
{
	CUresult r = gm_cls_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gm_dark_mu);
	int i = gm_cls_find(ctx, key);
	if (i >= 0)
		gm_cls[i] = gm_cls[--gm_ncls];
	pthread_mutex_unlock(&gm_dark_mu);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult gm_cls_get(void **value, CUcontext ctx, void *key)
{
	if (value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gm_cls_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gm_dark_mu);
	int i = gm_cls_find(ctx, key);
	if (i >= 0)
		*value = gm_cls[i].value;
	pthread_mutex_unlock(&gm_dark_mu);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static const void *gm_tab_cls[4] = {
	(const void *)gm_cls_put,
	(const void *)gm_cls_remove,
	(const void *)gm_cls_get,
	NULL,
};

/* ---- CONTEXT_CHECKS {263e8860-7cd2-6143-92f6-bbd5006dfa7e}: 15 ----
 * slot 2 (ctx, unsigned *out, ...) is asked before the runtime adopts a
 * context: 0 means an ordinary context. slot 3 is called once at start. */

static CUresult gm_checks2(CUcontext ctx, unsigned *out, void *a3, void *a4, uintptr_t a5, uintptr_t a6)
{
	(void)ctx, (void)a3, (void)a4, (void)a5, (void)a6;
	if (out != NULL)
		*out = 0;
	return CUDA_SUCCESS;
}

static CUresult gm_checks3(void)
{
	return CUDA_SUCCESS;
}

GM_STUB(checks, 1)
GM_STUB(checks, 4)
GM_STUB(checks, 5)
GM_STUB(checks, 6)
GM_STUB(checks, 7)
GM_STUB(checks, 8)
GM_STUB(checks, 9)
GM_STUB(checks, 10)
GM_STUB(checks, 11)
GM_STUB(checks, 12)
GM_STUB(checks, 13)
GM_STUB(checks, 14)

static const void *gm_tab_checks[15] = {
	(const void *)(uintptr_t)sizeof gm_tab_checks,
	(const void *)gm_stub_checks_1,
	(const void *)gm_checks2,
	(const void *)gm_checks3,
	(const void *)gm_stub_checks_4,
	(const void *)gm_stub_checks_5,
	(const void *)gm_stub_checks_6,
	(const void *)gm_stub_checks_7,
	(const void *)gm_stub_checks_8,
	(const void *)gm_stub_checks_9,
	(const void *)gm_stub_checks_10,
	(const void *)gm_stub_checks_11,
	(const void *)gm_stub_checks_12,
	(const void *)gm_stub_checks_13,
	(const void *)gm_stub_checks_14,
};

/* ---- {1734dc26-800d-4745-8726-c0f1e7dd8bca}: 17 slots ----
 * Asked by cuBLASLt (bf16 and fp16 matmuls under autocast). Traced on the
 * H200 (run.sh corpus with CORPUS_TRACE=1): slot 4 writes two new host
 * objects through its first two arguments, slot 13 takes them back; what
 * they hold is not known, so nothing is answered: every slot is a stub
 * that fails (logged once), which cuBLASLt takes as "not available",
 * whereas refusing the whole table crashes it (a NULL table it does not
 * check). */
GM_STUB(lt, 1)
GM_STUB(lt, 2)
GM_STUB(lt, 3)
GM_STUB(lt, 4)
GM_STUB(lt, 5)
GM_STUB(lt, 6)
GM_STUB(lt, 7)
GM_STUB(lt, 8)
GM_STUB(lt, 9)
GM_STUB(lt, 10)
GM_STUB(lt, 11)
GM_STUB(lt, 12)
GM_STUB(lt, 13)
GM_STUB(lt, 14)
GM_STUB(lt, 15)
GM_STUB(lt, 16)

static const void *gm_tab_lt[17] = {
	(const void *)(uintptr_t)sizeof gm_tab_lt,
	(const void *)gm_stub_lt_1,
	(const void *)gm_stub_lt_2,
	(const void *)gm_stub_lt_3,
	(const void *)gm_stub_lt_4,
	(const void *)gm_stub_lt_5,
	(const void *)gm_stub_lt_6,
	(const void *)gm_stub_lt_7,
	(const void *)gm_stub_lt_8,
	(const void *)gm_stub_lt_9,
	(const void *)gm_stub_lt_10,
	(const void *)gm_stub_lt_11,
	(const void *)gm_stub_lt_12,
	(const void *)gm_stub_lt_13,
	(const void *)gm_stub_lt_14,
	(const void *)gm_stub_lt_15,
	(const void *)gm_stub_lt_16,
};

/* ---- INTEGRITY {d4082055-bde6-704b-8d34-ba123c66e1f2}: 3 ----
 * slot 1 (runtime version, unix seconds, out[16]) answers an HMAC-MD2 (RFC
 * 1319 MD2, RFC 2104 HMAC over its 16-byte block) keyed with a constant the
 * runtime shares, over: the driver version, the runtime version, the pid,
 * the thread, the addresses of the CUDART_INTERFACE and INTEGRITY tables
 * and of slot 1 itself, the seconds; then per device its UUID and PCI
 * domain, bus and device. The runtime computes the same and refuses a
 * driver that answers otherwise (cudaErrorSoftwareValidityNotEstablished). */


static const void *gm_tab_integrity[3];

static CUresult gm_integrity(unsigned version, uint64_t secs, unsigned char *out)
{
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct {
		uint32_t driver, runtime, pid, tid;
		const void *cudart, *integrity, *fn;
		uint64_t secs;
	} h;
	struct {
		CUuuid uuid;
		int32_t domain, bus, device;
	} d[GM_DARK_DEVS];
	memset(&h, 0, sizeof h);
	memset(d, 0, sizeof d);
	int drv = 0, n = 0;
	CUresult r = gm_rpc_cuDriverGetVersion(&drv);
	if (r == CUDA_SUCCESS)
		r = gm_rpc_cuDeviceGetCount(&n);
	if (n > GM_DARK_DEVS)
		n = GM_DARK_DEVS;
	for (int i = 0; i < n && r == CUDA_SUCCESS; i++) {
		r = gm_rpc_cuDeviceGetUuid(&d[i].uuid, i);
		if (r == CUDA_SUCCESS)
			r = gm_rpc_cuDeviceGetAttribute(&d[i].domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, i);
		if (r == CUDA_SUCCESS)
			r = gm_rpc_cuDeviceGetAttribute(&d[i].bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i);
		if (r == CUDA_SUCCESS)
			r = gm_rpc_cuDeviceGetAttribute(&d[i].device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, i);
	}
	if (r != CUDA_SUCCESS)
		return r;
	h.driver = (uint32_t)drv;
	h.runtime = version;
	h.pid = (uint32_t)getpid();
	h.tid = (uint32_t)(uintptr_t)pthread_self();
	h.cudart = gm_tab_cudart;
	h.integrity = gm_tab_integrity;
	h.fn = gm_tab_integrity[1];
	h.secs = secs;
	gm_hmac_md2(gm_integrity_key, &h, sizeof h, d, sizeof d[0] * (size_t)n, out);
	return CUDA_SUCCESS;
}

static CUresult gm_integrity2(int enable)
{
	(void)enable;
	return CUDA_SUCCESS;
}

static const void *gm_tab_integrity[3] = {
	(const void *)(uintptr_t)sizeof gm_tab_integrity,
	(const void *)gm_integrity,
	(const void *)gm_integrity2,
};

/* ---- cuGetExportTable ---- */

static const struct {
	unsigned char id[16];
	const void *const *table;
} gm_tables[] = {
	{{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, gm_tab_cudart},
	{{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}, gm_tab_hooks},
	{{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, gm_tab_tls},
	{{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, gm_tab_cls},
	{{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}, gm_tab_checks},
	{{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
	 gm_tab_integrity},
	{{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, gm_tab_toolsctx},
	{{0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca}, gm_tab_lt},
	/* gpumux's own (gm_share.c), for its NVML library. */
	{GM_SHARE_TABLE_ID_BYTES, (const void *const *)&gm_share},
};

GM_EXPORT CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static CUuuid seen[32];
	static int nseen;
	if (ppExportTable == NULL || pExportTableId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*ppExportTable = NULL;
	for (size_t i = 0; i < sizeof gm_tables / sizeof gm_tables[0]; i++)
		if (memcmp(gm_tables[i].id, pExportTableId->bytes, 16) == 0) {
			*ppExportTable = (const void *)gm_tables[i].table;
			return CUDA_SUCCESS;
		}
	pthread_mutex_lock(&mu);
	int fresh = 1;
	for (int i = 0; i < nseen && fresh; i++)
		fresh = memcmp(seen[i].bytes, pExportTableId->bytes, 16) != 0;
	if (fresh && nseen < 32)
		seen[nseen++] = *pExportTableId;
	pthread_mutex_unlock(&mu);
	if (fresh || gm_debug()) {
		const unsigned char *u = (const unsigned char *)pExportTableId->bytes;
		gm_log("cuGetExportTable(%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x) is not "
		       "supported by gpumux's remote CUDA; it returns CUDA_ERROR_NOT_SUPPORTED",
		       u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
	}
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- libraries and kernels ----
 * A library is context-independent, as in CUDA: it keeps its image and
 * loads a module from it, through the forwarded cuModuleLoadData, in each
 * context that needs one (the current context when a kernel is resolved or
 * a global or the module asked for). A CUkernel is an object here, not a
 * server handle: its name, its library and the function it resolved to in
 * each context. CUkernel handles are tagged numbers (GM_KERNEL_TAG in the
 * high 32 bits, an index in the low ones; never a valid pointer, and far
 * above any server handle, which counts up from 1), so every call that
 * takes a CUfunction tells one from the other without a lookup:
 * gm_kernel_function, which the generated stubs call for each function
 * they send, swaps a CUkernel for the current context's function.
 *
 * gm_lib_mu guards every table (libraries' modules, kernels' functions,
 * the kernel index) and is never held across a round trip; a library's
 * load mutex serializes the round trips that load its module or look up
 * its functions, so two threads do not load it twice in one context. Lock
 * order: load, then gm_lib_mu. Destroying a context, or releasing the last
 * retain of a primary one or resetting it, drops its modules and
 * functions (gm_lib_forget_ctx); a forked child starts with none. */

#define GM_KERNEL_TAG 0x676d6b00ull /* "gmk": the handle's high 32 bits */

struct gm_ctxh {
	uint64_t ctx;
	uint64_t h; /* the module or function in ctx */
};

/* gm_ctxhs: a small table from context to server handle. */
struct gm_ctxhs {
	struct gm_ctxh *e;
	int n, cap;
};

struct gm_kernel {
	struct CUlib_st *lib;
	char *name;
	uint32_t index; /* in gm_kernels */
	struct gm_ctxhs fns;
};

struct CUlib_st {
	void *image; /* a copy of the image (the fatbin a wrapper points to) */
	struct gm_ctxhs mods;
	struct gm_kernel **kernels; /* the ones handed out, by name */
	int nkernels, capkernels;
	pthread_mutex_t load;
	struct CUlib_st *next; /* in gm_libs */
};

static pthread_mutex_t gm_lib_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUlib_st *gm_libs;
static struct gm_kernel **gm_kernels; /* by index; NULL once unloaded (indexes are never reused) */
static uint32_t gm_nkernels, gm_capkernels;

/* gm_lib returns the library l names, NULL if it is none (never loaded,
 * or unloaded): l is looked up, never read. */
static struct CUlib_st *gm_lib(CUlibrary l)
{
	pthread_mutex_lock(&gm_lib_mu);
	struct CUlib_st *p = gm_libs;
	while (p != NULL && p != l)
		p = p->next;
	pthread_mutex_unlock(&gm_lib_mu);
	return p;
}

/* gm_grow makes room for one more element of size sz in *v (holding n of
 * cap); 0 when out of memory. */
static int gm_grow(void **v, int n, int *cap, size_t sz)
{
	if (n < *cap)
		return 1;
	int c = *cap > 0 ? *cap * 2 : 4;
	void *p = realloc(*v, (size_t)c * sz);
	if (p == NULL)
		return 0;
	*v = p;
	*cap = c;
	return 1;
}

/* gm_ctxhs_find returns ctx's handle, 0 if none (gm_lib_mu held). */
static uint64_t gm_ctxhs_find(const struct gm_ctxhs *t, uint64_t ctx)
{
	for (int i = 0; i < t->n; i++)
		if (t->e[i].ctx == ctx)
			return t->e[i].h;
	return 0;
}

/* gm_ctxhs_add records ctx's handle (gm_lib_mu held). */
static CUresult gm_ctxhs_add(struct gm_ctxhs *t, uint64_t ctx, uint64_t h)
{
	if (!gm_grow((void **)&t->e, t->n, &t->cap, sizeof t->e[0]))
		return CUDA_ERROR_OUT_OF_MEMORY;
	t->e[t->n].ctx = ctx;
	t->e[t->n++].h = h;
	return CUDA_SUCCESS;
}

/* gm_ctxhs_drop forgets ctx's entry (gm_lib_mu held). */
static void gm_ctxhs_drop(struct gm_ctxhs *t, uint64_t ctx)
{
	int j = 0;
	for (int i = 0; i < t->n; i++)
		if (t->e[i].ctx != ctx)
			t->e[j++] = t->e[i];
	t->n = j;
}

/* gm_current: the calling thread's current context, or
 * CUDA_ERROR_INVALID_CONTEXT. */
static CUresult gm_current(uint64_t *ctx)
{
	*ctx = gm_current_ctx();
	return *ctx != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* gm_lib_module_locked returns l's module in ctx, loading it there first
 * if it has none (l->load held; ctx current). */
static CUresult gm_lib_module_locked(struct CUlib_st *l, uint64_t ctx, CUmodule *mod)
{
	pthread_mutex_lock(&gm_lib_mu);
	uint64_t h = gm_ctxhs_find(&l->mods, ctx);
	pthread_mutex_unlock(&gm_lib_mu);
	if (h != 0) {
		*mod = (CUmodule)(uintptr_t)h;
		return CUDA_SUCCESS;
	}
	CUresult r = gm_rpc_cuModuleLoadData(mod, l->image);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&gm_lib_mu);
	r = gm_ctxhs_add(&l->mods, ctx, (uint64_t)(uintptr_t)*mod);
	pthread_mutex_unlock(&gm_lib_mu);
	if (r != CUDA_SUCCESS)
		(void)gm_rpc_cuModuleUnload(*mod);
	return r;
}

/* gm_lib_module returns l's module in the current context. */
static CUresult gm_lib_module(struct CUlib_st *l, CUmodule *mod)
{
	uint64_t ctx;
	CUresult r = gm_current(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&l->load);
	r = gm_lib_module_locked(l, ctx, mod);
	pthread_mutex_unlock(&l->load);
	return r;
}

/* gm_kernel_of returns the kernel a tagged handle names, NULL for anything
 * else (gm_lib_mu held). */
static struct gm_kernel *gm_kernel_of(uint64_t h)
{
	uint32_t i = (uint32_t)h;
	if (h >> 32 != GM_KERNEL_TAG || i == 0 || i > gm_nkernels)
		return NULL;
	return gm_kernels[i - 1];
}

static CUkernel gm_kernel_handle(const struct gm_kernel *k)
{
	return (CUkernel)(uintptr_t)(GM_KERNEL_TAG << 32 | (uint64_t)(k->index + 1));
}

/* gm_kernel_resolve returns k's function in ctx (current), looking it up
 * in the library's module there on first use. */
static CUresult gm_kernel_resolve(struct gm_kernel *k, uint64_t ctx, CUfunction *f)
{
	struct CUlib_st *l = k->lib;
	pthread_mutex_lock(&l->load);
	pthread_mutex_lock(&gm_lib_mu);
	uint64_t h = gm_ctxhs_find(&k->fns, ctx);
	pthread_mutex_unlock(&gm_lib_mu);
	CUresult r = CUDA_SUCCESS;
	if (h != 0) {
		*f = (CUfunction)(uintptr_t)h;
	} else {
		CUmodule mod;
		r = gm_lib_module_locked(l, ctx, &mod);
		if (r == CUDA_SUCCESS)
			r = gm_rpc_cuModuleGetFunction(f, mod, k->name);
		if (r == CUDA_SUCCESS) {
			pthread_mutex_lock(&gm_lib_mu);
			r = gm_ctxhs_add(&k->fns, ctx, (uint64_t)(uintptr_t)*f);
			pthread_mutex_unlock(&gm_lib_mu);
		}
	}
	pthread_mutex_unlock(&l->load);
	return r;
}

CUresult gm_kernel_function_in(CUfunction *f, uint64_t ctx)
{
	uint64_t h = (uint64_t)(uintptr_t)*f;
	if (h >> 32 != GM_KERNEL_TAG)
		return CUDA_SUCCESS; /* a function: the server checks it */
	if (ctx == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&gm_lib_mu);
	struct gm_kernel *k = gm_kernel_of(h);
	uint64_t fh = k != NULL ? gm_ctxhs_find(&k->fns, ctx) : 0;
	pthread_mutex_unlock(&gm_lib_mu);
	if (k == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (fh != 0) {
		*f = (CUfunction)(uintptr_t)fh;
		return CUDA_SUCCESS;
	}
	if (ctx != gm_current_ctx()) {
		/* A graph's kernel node names its context: look the function up
		 * there. */
		CUresult r = cuCtxPushCurrent_v2((CUcontext)(uintptr_t)ctx);
		if (r != CUDA_SUCCESS)
			return r;
		r = gm_kernel_resolve(k, ctx, f);
		CUcontext popped;
		(void)cuCtxPopCurrent_v2(&popped);
		return r;
	}
	return gm_kernel_resolve(k, ctx, f);
}

CUresult gm_kernel_function(CUfunction *f)
{
	if ((uint64_t)(uintptr_t)*f >> 32 != GM_KERNEL_TAG)
		return CUDA_SUCCESS;
	return gm_kernel_function_in(f, gm_current_ctx());
}

/* gm_kernel_free frees k (gm_lib_mu held, k out of the index). */
static void gm_kernel_free(struct gm_kernel *k)
{
	free(k->fns.e);
	free(k->name);
	free(k);
}

void gm_lib_forget_ctx(uint64_t ctx)
{
	pthread_mutex_lock(&gm_lib_mu);
	for (struct CUlib_st *l = gm_libs; l != NULL; l = l->next) {
		gm_ctxhs_drop(&l->mods, ctx);
		for (int i = 0; i < l->nkernels; i++)
			gm_ctxhs_drop(&l->kernels[i]->fns, ctx);
	}
	pthread_mutex_unlock(&gm_lib_mu);
}

/* gm_more.c: the calls whose outputs are optional. */
GM_EXPORT CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name);
GM_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
					      size_t *paramSize);

GM_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
					     void **jitOptionsValues, unsigned int numJitOptions,
					     CUlibraryOption *libraryOptions, void **libraryOptionValues,
					     unsigned int numLibraryOptions)
{
	(void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
	(void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
	if (library == NULL || code == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*library = NULL;
	size_t n = gm_image_size(code);
	if (n == 0) {
		gm_debug_local("cuLibraryLoadData", CUDA_ERROR_INVALID_IMAGE);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	struct CUlib_st *l = calloc(1, sizeof *l);
	void *img = malloc(n);
	if (l == NULL || img == NULL) {
		free(l);
		free(img);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(img, gm_image_data(code), n);
	l->image = img;
	pthread_mutex_init(&l->load, NULL);
	pthread_mutex_lock(&gm_lib_mu);
	l->next = gm_libs;
	gm_libs = l;
	pthread_mutex_unlock(&gm_lib_mu);
	*library = l;
	return CUDA_SUCCESS;
}

/* cuLibraryUnload unloads the library's module in every context that has
 * one; its kernels' handles stop working. Using a library while another
 * thread unloads it is the caller's error, as in CUDA. */
GM_EXPORT CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
	struct CUlib_st *l = gm_lib(library);
	if (l == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&l->load);
	pthread_mutex_lock(&gm_lib_mu);
	for (struct CUlib_st **p = &gm_libs; *p != NULL; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	for (int i = 0; i < l->nkernels; i++) {
		gm_kernels[l->kernels[i]->index] = NULL;
		gm_kernel_free(l->kernels[i]);
	}
	pthread_mutex_unlock(&gm_lib_mu);
	CUresult r = CUDA_SUCCESS;
	for (int i = 0; i < l->mods.n; i++) {
		/* Each module is unloaded in its own context. */
		CUcontext ctx = (CUcontext)(uintptr_t)l->mods.e[i].ctx, popped;
		CUresult u = cuCtxPushCurrent_v2(ctx);
		if (u == CUDA_SUCCESS) {
			u = gm_rpc_cuModuleUnload((CUmodule)(uintptr_t)l->mods.e[i].h);
			(void)cuCtxPopCurrent_v2(&popped);
		}
		if (r == CUDA_SUCCESS)
			r = u;
	}
	pthread_mutex_unlock(&l->load);
	pthread_mutex_destroy(&l->load);
	free(l->mods.e);
	free(l->kernels);
	free(l->image);
	free(l);
	return r;
}

GM_EXPORT CUresult CUDAAPI cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	struct CUlib_st *l = gm_lib(library);
	if (pMod == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (l == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return gm_lib_module(l, pMod);
}

/* gm_lib_kernel returns l's kernel called name, made on first use: one
 * handle per name, as in CUDA. */
static CUresult gm_lib_kernel(struct CUlib_st *l, const char *name, struct gm_kernel **out)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&gm_lib_mu);
	*out = NULL;
	for (int i = 0; i < l->nkernels && *out == NULL; i++)
		if (strcmp(l->kernels[i]->name, name) == 0)
			*out = l->kernels[i];
	if (*out != NULL)
		goto done;
	int cap = (int)gm_capkernels;
	struct gm_kernel *k = calloc(1, sizeof *k);
	if (k == NULL || (k->name = strdup(name)) == NULL || gm_nkernels == UINT32_MAX - 1 ||
	    !gm_grow((void **)&gm_kernels, (int)gm_nkernels, &cap, sizeof gm_kernels[0]) ||
	    !gm_grow((void **)&l->kernels, l->nkernels, &l->capkernels, sizeof l->kernels[0])) {
		gm_capkernels = (uint32_t)cap;
		if (k != NULL)
			free(k->name);
		free(k);
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto done;
	}
	gm_capkernels = (uint32_t)cap;
	k->lib = l;
	k->index = gm_nkernels;
	gm_kernels[gm_nkernels++] = k;
	l->kernels[l->nkernels++] = k;
	*out = k;
done:
	pthread_mutex_unlock(&gm_lib_mu);
	return r;
}

/* cuLibraryGetKernel hands out the kernel's handle; with a context current
 * it also looks the kernel up there, so that a name the library lacks is
 * CUDA_ERROR_NOT_FOUND at once, as in CUDA. */
GM_EXPORT CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	struct CUlib_st *l = gm_lib(library);
	if (pKernel == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (l == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (strlen(name) >= GM_MAX_STRING)
		return CUDA_ERROR_INVALID_VALUE;
	struct gm_kernel *k;
	CUresult r = gm_lib_kernel(l, name, &k);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t ctx = gm_current_ctx();
	if (ctx != 0) {
		CUfunction f;
		r = gm_kernel_resolve(k, ctx, &f);
		if (r != CUDA_SUCCESS)
			return r;
	}
	*pKernel = gm_kernel_handle(k);
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	struct CUlib_st *l = gm_lib(library);
	CUmodule mod;
	if (l == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = gm_lib_module(l, &mod);
	if (r != CUDA_SUCCESS)
		return r;
	return cuModuleGetGlobal_v2(dptr, bytes, mod, name);
}

/* cuKernelGetFunction: the kernel's function in the current context. */
GM_EXPORT CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	if (pFunc == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUfunction f = (CUfunction)kernel;
	if ((uint64_t)(uintptr_t)f >> 32 != GM_KERNEL_TAG)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = gm_kernel_function(&f);
	if (r == CUDA_SUCCESS)
		*pFunc = f;
	return r;
}

/* The kernel calls below run on the current context's function (the
 * generated stubs resolve a CUkernel): dev is the current context's device
 * in what the runtime asks. */
GM_EXPORT CUresult CUDAAPI cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	(void)dev;
	return gm_rpc_cuFuncGetAttribute(pi, attrib, (CUfunction)kernel);
}

GM_EXPORT CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
						size_t *paramSize)
{
	return cuFuncGetParamInfo((CUfunction)kernel, paramIndex, paramOffset, paramSize);
}

/* ---- fork ---- */

void gm_dark_atfork_prepare(void)
{
	pthread_mutex_lock(&gm_lib_mu);
}

void gm_dark_atfork_parent(void)
{
	pthread_mutex_unlock(&gm_lib_mu);
}

/* The child is a new client: the parent's modules and functions mean
 * nothing on its connection. Its libraries and kernel handles stay, and
 * load again in the child's contexts. */
void gm_dark_atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	for (struct CUlib_st *l = gm_libs; l != NULL; l = l->next) {
		l->mods.n = 0;
		for (int i = 0; i < l->nkernels; i++)
			l->kernels[i]->fns.n = 0;
		memcpy(&l->load, &fresh, sizeof fresh); /* its holder, if any, is not in the child */
	}
	pthread_mutex_unlock(&gm_lib_mu);
}

/* Every library is loaded whole when first used in a context. */
GM_EXPORT CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	if (mode == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = CU_MODULE_EAGER_LOADING;
	return CUDA_SUCCESS;
}
