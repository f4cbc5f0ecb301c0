/*
 * A fake libcuda.so.1 for package cudabackend's tests: the entry points the
 * backend resolves, on host memory. Device pointers are malloc'd host
 * addresses; asynchronous copies and memsets are queued and run only when
 * something waits (a stream, event or context synchronize, or a synchronous
 * call), so a backend that reused a staging buffer too early would copy the
 * wrong bytes. Everything the calls see is recorded in struct fake_state,
 * which lives in the file named by $FAKECUDA_STATE (mapped shared), where
 * the Go test reads it (fakeState in fake_test.go mirrors it).
 *
 * Variants: -DFAKE_INIT_RESULT=n (cuInit's result), -DFAKE_OMIT_MEMALLOC
 * (no cuMemAlloc_v2), -DFAKE_OMIT_OPTIONAL (no cuFuncGetParamInfo,
 * cuEventElapsedTime_v2, cuDeviceGetUuid_v2, none of the peer calls, nor any
 * call of virtual memory management, memory pools or cuCtxSetLimit).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef FAKE_INIT_RESULT
#define FAKE_INIT_RESULT 0
#endif

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

#define FAKE_MAGIC 0x616475636b6166ULL /* "fakcuda" */

struct fake_state {
	uint64_t magic, size;
	uint64_t init_calls, init_flags;
	uint64_t device_gets, last_device;
	uint64_t ctx_creates, ctx_create_flags, ctx_destroys, ctx_pushes, ctx_pops, ctx_syncs, last_ctx;
	uint64_t allocs, frees, live_allocs;
	uint64_t host_allocs, host_frees, live_host;
	uint64_t htod, htod_async, dtoh, dtoh_async, dtod, dtod_async, memsets, memsets_async;
	uint64_t last_dst, last_src, last_n, last_stream, last_value, last_src_pinned, last_dst_pinned;
	uint64_t event_creates, event_destroys, event_records, event_syncs, last_event_flags;
	uint64_t stream_creates, stream_destroys, stream_syncs, stream_waits, last_stream_flags;
	uint64_t enqueued, ran;
	uint64_t module_loads, module_unloads, module_image_len;
	uint64_t launches, launch_fn, launch_grid[3], launch_block[3], launch_shmem, launch_stream;
	uint64_t launch_kernel_params, launch_extra_keys, launch_size;
	uint64_t elapsed_version, uuid_version;
	char last_name[64];
	unsigned char module_head[64];
	unsigned char launch_buf[4096];
	/* Virtual memory management, pools and limits: the last arguments. */
	uint64_t vmm_calls;
	uint64_t last_prop[7]; /* type, handle types, location type and id, compression, RDMA, usage */
	uint64_t last_size, last_align, last_addr, last_flags, last_handle, last_offset;
	uint64_t last_access[6], last_access_count; /* two descriptors: type, id, flags */
	uint64_t last_pool_props[6];		     /* alloc type, handle types, location type and id, max size, usage */
	uint64_t last_attr, last_attr_value;
	uint64_t last_limit, last_limit_value;
	uint64_t peer_queries, last_peer_dev, last_peer_attr;
	uint64_t peer_enables, peer_disables, last_peer_ctx, last_peer_flags;
	uint64_t peer_copies, peer_copies_async, last_dst_ctx, last_src_ctx;
	/* Stream capture and graphs. */
	uint64_t capture_begins, capture_mode, capture_stream, capture_ends;
	uint64_t update_n, update_flags, update_first, update_edge0;
	uint64_t graphs_created, graphs_destroyed, graph_clones;
	uint64_t node_adds, node_ndeps, node_first_dep, node_ctx, node_event, node_wait;
	uint64_t memset_dst, memset_pitch, memset_value, memset_elem, memset_width, memset_height;
	uint64_t memcpy_types, memcpy_f[15];
	uint64_t dep_adds, dep_n, dep_edge0;
	uint64_t instantiates, instantiate_flags, exec_destroys, graph_launches, graph_uploads, graph_stream;
	uint64_t exec_param_sets, exec_param_node;
};

static struct fake_state fallback_state;
static struct fake_state *S;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static struct fake_state *state(void)
{
	if (S != NULL)
		return S;
	const char *path = getenv("FAKECUDA_STATE");
	struct fake_state *s = &fallback_state;
	if (path != NULL && *path != 0) {
		int fd = open(path, O_RDWR | O_CREAT, 0600);
		if (fd >= 0 && ftruncate(fd, sizeof *s) == 0) {
			void *m = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (m != MAP_FAILED)
				s = m;
		}
		if (fd >= 0)
			close(fd);
	}
	s->magic = FAKE_MAGIC;
	s->size = sizeof *s;
	S = s;
	return S;
}

#define LOCK()                                                                 \
	pthread_mutex_lock(&mu);                                               \
	struct fake_state *st = state();                                       \
	(void)st
#define RET(r)                                                                 \
	do {                                                                   \
		CUresult r_ = (r);                                             \
		pthread_mutex_unlock(&mu);                                     \
		return r_;                                                     \
	} while (0)

/* ---- tracked allocations ---- */

struct block {
	void *p;
	size_t n;
};
#define MAXBLOCKS 256
static struct block dev_blocks[MAXBLOCKS], host_blocks[MAXBLOCKS];

static int track(struct block *t, void *p, size_t n)
{
	for (int i = 0; i < MAXBLOCKS; i++)
		if (t[i].p == NULL) {
			t[i].p = p;
			t[i].n = n;
			return 1;
		}
	return 0;
}

static int untrack(struct block *t, void *p)
{
	for (int i = 0; i < MAXBLOCKS; i++)
		if (t[i].p == p && p != NULL) {
			t[i].p = NULL;
			return 1;
		}
	return 0;
}

static int within(struct block *t, const void *p, size_t n)
{
	for (int i = 0; i < MAXBLOCKS; i++)
		if (t[i].p != NULL && (const char *)p >= (const char *)t[i].p &&
		    (const char *)p + n <= (const char *)t[i].p + t[i].n)
			return 1;
	return 0;
}

/* ---- the queue of asynchronous work ---- */

enum { OP_COPY, OP_SET8, OP_SET32 };
struct op {
	int kind;
	void *dst;
	const void *src;
	size_t n;
	unsigned v;
};
#define MAXOPS 1024
static struct op ops[MAXOPS];

static void run_op(struct op *o)
{
	switch (o->kind) {
	case OP_COPY:
		memcpy(o->dst, o->src, o->n);
		break;
	case OP_SET8:
		memset(o->dst, (int)o->v, o->n);
		break;
	case OP_SET32:
		for (size_t i = 0; i < o->n; i++)
			((uint32_t *)o->dst)[i] = o->v;
		break;
	}
}

static void run_until(struct fake_state *st, uint64_t mark)
{
	while (st->ran < mark && st->ran < st->enqueued) {
		run_op(&ops[st->ran % MAXOPS]);
		st->ran++;
	}
}

static void run_all(struct fake_state *st) { run_until(st, st->enqueued); }

static void enqueue(struct fake_state *st, int kind, void *dst, const void *src, size_t n, unsigned v)
{
	if (st->enqueued - st->ran >= MAXOPS)
		run_until(st, st->ran + 1);
	ops[st->enqueued % MAXOPS] = (struct op){kind, dst, src, n, v};
	st->enqueued++;
}

/* ---- objects ---- */

struct obj {
	uint64_t magic;
	uint64_t mark; /* events: the work to finish first */
	int recorded;
	unsigned flags;
};
#define CTX_MAGIC 0xc7c7ULL
#define STREAM_MAGIC 0x5757ULL
#define EVENT_MAGIC 0xe7e7ULL
#define MOD_MAGIC 0x3d3dULL

static struct obj *new_obj(uint64_t magic, unsigned flags)
{
	struct obj *o = calloc(1, sizeof *o);
	o->magic = magic;
	o->flags = flags;
	return o;
}

static int is(const void *p, uint64_t magic) { return p != NULL && ((const struct obj *)p)->magic == magic; }

static int bad_stream(const void *s) { return s != NULL && !is(s, STREAM_MAGIC); }

static __thread void *ctx_stack[8];
static __thread int ctx_depth; /* ctx_stack[ctx_depth-1] is current */

static void *current(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

static void note_copy(struct fake_state *st, const void *dst, const void *src, size_t n, const void *s)
{
	st->last_dst = (uint64_t)(uintptr_t)dst;
	st->last_src = (uint64_t)(uintptr_t)src;
	st->last_n = n;
	st->last_stream = (uint64_t)(uintptr_t)s;
	st->last_src_pinned = within(host_blocks, src, n);
	st->last_dst_pinned = within(host_blocks, dst, n);
}

/* ---- the API ---- */

EXPORT CUresult cuInit(unsigned flags)
{
	LOCK();
	st->init_calls++;
	st->init_flags = flags;
	RET(FAKE_INIT_RESULT);
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	*v = 12080;
	return 0;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	*n = 2;
	return 0;
}

/* Device handles are ordinal+100, so a backend passing ordinals through
 * to the driver is caught. */
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	LOCK();
	st->device_gets++;
	if (ordinal < 0 || ordinal > 1)
		RET(101);
	*d = ordinal + 100;
	RET(0);
}

static int bad_dev(CUdevice d)
{
	state()->last_device = (uint64_t)d;
	return d != 100 && d != 101;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	LOCK();
	if (bad_dev(d))
		RET(101);
	const char *n = d == 100 ? "Fake GPU 0" : "Fake GPU 1";
	strncpy(name, n, len);
	RET(0);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
	LOCK();
	if (bad_dev(d))
		RET(101);
	*bytes = (size_t)80 << 30;
	RET(0);
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	LOCK();
	if (bad_dev(d))
		RET(101);
	switch (attr) {
	case 75:
		*v = 9;
		break;
	case 76:
		*v = 0;
		break;
	case 16:
		*v = 132;
		break;
	default:
		RET(1);
	}
	RET(0);
}

static CUresult uuid(char *u, CUdevice d, int version)
{
	LOCK();
	if (bad_dev(d))
		RET(101);
	st->uuid_version = version;
	for (int i = 0; i < 16; i++)
		u[i] = (char)((version == 2 ? 0xa0 : 0x10) + i);
	RET(0);
}

EXPORT CUresult cuDeviceGetUuid(char *u, CUdevice d) { return uuid(u, d, 1); }
#ifndef FAKE_OMIT_OPTIONAL
EXPORT CUresult cuDeviceGetUuid_v2(char *u, CUdevice d) { return uuid(u, d, 2); }
#endif

EXPORT CUresult cuCtxCreate_v2(void **pctx, unsigned flags, CUdevice d)
{
	LOCK();
	if (bad_dev(d))
		RET(101);
	st->ctx_creates++;
	st->ctx_create_flags = flags;
	void *c = new_obj(CTX_MAGIC, flags);
	if (ctx_depth == 0)
		ctx_depth = 1;
	ctx_stack[ctx_depth - 1] = c;
	*pctx = c;
	RET(0);
}

EXPORT CUresult cuCtxDestroy_v2(void *ctx)
{
	LOCK();
	if (!is(ctx, CTX_MAGIC))
		RET(201);
	st->ctx_destroys++;
	st->last_ctx = (uint64_t)(uintptr_t)ctx;
	run_all(st);
	if (current() == ctx)
		ctx_depth--;
	((struct obj *)ctx)->magic = 0; /* leaked: a stale handle stays invalid */
	RET(0);
}

EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
	if (ctx != NULL && !is(ctx, CTX_MAGIC))
		return 201;
	if (ctx == NULL) {
		if (ctx_depth > 0)
			ctx_depth--;
		return 0;
	}
	if (ctx_depth == 0)
		ctx_depth = 1;
	ctx_stack[ctx_depth - 1] = ctx;
	return 0;
}

EXPORT CUresult cuCtxGetCurrent(void **ctx)
{
	*ctx = current();
	return 0;
}

EXPORT CUresult cuCtxPushCurrent_v2(void *ctx)
{
	LOCK();
	if (!is(ctx, CTX_MAGIC) || ctx_depth == 8)
		RET(201);
	st->ctx_pushes++;
	ctx_stack[ctx_depth++] = ctx;
	RET(0);
}

EXPORT CUresult cuCtxPopCurrent_v2(void **ctx)
{
	LOCK();
	if (ctx_depth == 0)
		RET(201);
	st->ctx_pops++;
	*ctx = ctx_stack[--ctx_depth];
	RET(0);
}

EXPORT CUresult cuCtxSynchronize(void)
{
	LOCK();
	if (current() == NULL)
		RET(201);
	st->ctx_syncs++;
	run_all(st);
	RET(0);
}

#ifndef FAKE_OMIT_MEMALLOC
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	LOCK();
	if (current() == NULL)
		RET(201);
	if (n == 0)
		RET(1);
	void *m = calloc(1, n);
	if (m == NULL || !track(dev_blocks, m, n)) {
		free(m);
		RET(2);
	}
	st->allocs++;
	st->live_allocs++;
	*p = (CUdeviceptr)(uintptr_t)m;
	RET(0);
}
#endif

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	LOCK();
	run_all(st);
	if (!untrack(dev_blocks, (void *)(uintptr_t)p))
		RET(1);
	free((void *)(uintptr_t)p);
	st->frees++;
	st->live_allocs--;
	RET(0);
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
	if (current() == NULL)
		return 201;
	*free_ = (size_t)79 << 30;
	*total = (size_t)80 << 30;
	return 0;
}

EXPORT CUresult cuMemAllocHost_v2(void **p, size_t n)
{
	LOCK();
	if (current() == NULL)
		RET(201);
	void *m = malloc(n);
	if (m == NULL || !track(host_blocks, m, n)) {
		free(m);
		RET(2);
	}
	memset(m, 0xee, n);
	st->host_allocs++;
	st->live_host++;
	*p = m;
	RET(0);
}

EXPORT CUresult cuMemFreeHost(void *p)
{
	LOCK();
	if (!untrack(host_blocks, p))
		RET(1);
	free(p);
	st->host_frees++;
	st->live_host--;
	RET(0);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	LOCK();
	run_all(st);
	st->htod++;
	note_copy(st, (void *)(uintptr_t)dst, src, n, NULL);
	memcpy((void *)(uintptr_t)dst, src, n);
	RET(0);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s)
{
	LOCK();
	if (bad_stream(s))
		RET(400);
	st->htod_async++;
	note_copy(st, (void *)(uintptr_t)dst, src, n, s);
	enqueue(st, OP_COPY, (void *)(uintptr_t)dst, src, n, 0);
	RET(0);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	LOCK();
	run_all(st);
	st->dtoh++;
	note_copy(st, dst, (void *)(uintptr_t)src, n, NULL);
	memcpy(dst, (void *)(uintptr_t)src, n);
	RET(0);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s)
{
	LOCK();
	if (bad_stream(s))
		RET(400);
	st->dtoh_async++;
	note_copy(st, dst, (void *)(uintptr_t)src, n, s);
	enqueue(st, OP_COPY, dst, (void *)(uintptr_t)src, n, 0);
	RET(0);
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	LOCK();
	run_all(st);
	st->dtod++;
	note_copy(st, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, NULL);
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	RET(0);
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s)
{
	LOCK();
	if (bad_stream(s))
		RET(400);
	st->dtod_async++;
	note_copy(st, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, s);
	enqueue(st, OP_COPY, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, 0);
	RET(0);
}

static CUresult memset_(CUdeviceptr dst, unsigned v, size_t n, void *s, int kind, int async)
{
	LOCK();
	if (bad_stream(s))
		RET(400);
	if (async)
		st->memsets_async++;
	else
		st->memsets++;
	note_copy(st, (void *)(uintptr_t)dst, NULL, n, s);
	st->last_value = v;
	if (async) {
		enqueue(st, kind, (void *)(uintptr_t)dst, NULL, n, v);
	} else {
		run_all(st);
		struct op o = {kind, (void *)(uintptr_t)dst, NULL, n, v};
		run_op(&o);
	}
	RET(0);
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
	return memset_(dst, v, n, NULL, OP_SET8, 0);
}

EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned v, size_t n)
{
	return memset_(dst, v, n, NULL, OP_SET32, 0);
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s)
{
	return memset_(dst, v, n, s, OP_SET8, 1);
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void *s)
{
	return memset_(dst, v, n, s, OP_SET32, 1);
}

EXPORT CUresult cuModuleLoadData(void **mod, const void *image)
{
	LOCK();
	if (image == NULL)
		RET(1);
	st->module_loads++;
	st->module_image_len = strlen(image);
	memset(st->module_head, 0, sizeof st->module_head);
	strncpy((char *)st->module_head, image, sizeof st->module_head - 1);
	if (strncmp(image, "bad", 3) == 0)
		RET(218);
	*mod = new_obj(MOD_MAGIC, 0);
	RET(0);
}

EXPORT CUresult cuModuleUnload(void *mod)
{
	LOCK();
	if (!is(mod, MOD_MAGIC))
		RET(400);
	st->module_unloads++;
	((struct obj *)mod)->magic = 0;
	RET(0);
}

static int fake_fn; /* the one kernel's handle */

EXPORT CUresult cuModuleGetFunction(void **fn, void *mod, const char *name)
{
	LOCK();
	if (!is(mod, MOD_MAGIC))
		RET(400);
	strncpy(st->last_name, name, sizeof st->last_name - 1);
	st->last_name[sizeof st->last_name - 1] = 0;
	if (strcmp(name, "fill") != 0)
		RET(500);
	*fn = &fake_fn;
	RET(0);
}

EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *bytes, void *mod, const char *name)
{
	static uint32_t counter;
	LOCK();
	if (!is(mod, MOD_MAGIC))
		RET(400);
	strncpy(st->last_name, name, sizeof st->last_name - 1);
	st->last_name[sizeof st->last_name - 1] = 0;
	if (strcmp(name, "counter") != 0)
		RET(500);
	*p = (CUdeviceptr)(uintptr_t)&counter;
	*bytes = sizeof counter;
	RET(0);
}

#ifndef FAKE_OMIT_OPTIONAL
/* fill(u32 *p, u32 v, u32 n) */
EXPORT CUresult cuFuncGetParamInfo(void *fn, size_t i, size_t *off, size_t *size)
{
	static const size_t offs[] = {0, 8, 12}, sizes[] = {8, 4, 4};
	if (fn != &fake_fn)
		return 400;
	if (i >= 3)
		return 1;
	*off = offs[i];
	*size = sizes[i];
	return 0;
}
#endif

EXPORT CUresult cuFuncGetAttribute(int *v, int attr, void *fn)
{
	if (fn != &fake_fn)
		return 400;
	switch (attr) {
	case 0:
		*v = 1024;
		return 0;
	case 4:
		*v = 16;
		return 0;
	}
	return 1;
}

/* record_launch notes a launch (or a kernel node's launch) in the state:
 * its function, dimensions and extra's buffer. */
static CUresult record_launch(struct fake_state *st, void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			      unsigned by, unsigned bz, unsigned shmem, void *s, void **params, void **extra)
{
	if (fn != &fake_fn)
		return 400;
	if (bad_stream(s))
		return 400;
	st->launch_fn = (uint64_t)(uintptr_t)fn;
	st->launch_grid[0] = gx, st->launch_grid[1] = gy, st->launch_grid[2] = gz;
	st->launch_block[0] = bx, st->launch_block[1] = by, st->launch_block[2] = bz;
	st->launch_shmem = shmem;
	st->launch_stream = (uint64_t)(uintptr_t)s;
	st->launch_kernel_params = params != NULL;
	st->launch_extra_keys = 0;
	st->launch_size = 0;
	memset(st->launch_buf, 0, sizeof st->launch_buf);
	if (extra == NULL)
		return 0;
	/* Keys in the order CUDA documents: buffer, size, end. */
	void *buf = NULL;
	size_t size = 0;
	int i = 0;
	for (; extra[i] != (void *)0 && i < 16; i += 2) {
		st->launch_extra_keys = st->launch_extra_keys * 10 + (uint64_t)(uintptr_t)extra[i];
		if (extra[i] == (void *)1)
			buf = extra[i + 1];
		else if (extra[i] == (void *)2)
			size = *(size_t *)extra[i + 1];
		else
			return 1;
	}
	if (buf == NULL || size > sizeof st->launch_buf)
		return 1;
	st->launch_size = size;
	memcpy(st->launch_buf, buf, size);
	return 0;
}

EXPORT CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
			       unsigned bz, unsigned shmem, void *s, void **params, void **extra)
{
	LOCK();
	CUresult r = record_launch(st, fn, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
	if (r == 0)
		st->launches++;
	RET(r);
}

EXPORT CUresult cuStreamCreate(void **s, unsigned flags)
{
	LOCK();
	if (current() == NULL)
		RET(201);
	st->stream_creates++;
	st->last_stream_flags = flags;
	*s = new_obj(STREAM_MAGIC, flags);
	RET(0);
}

EXPORT CUresult cuStreamDestroy_v2(void *s)
{
	LOCK();
	if (!is(s, STREAM_MAGIC))
		RET(400);
	st->stream_destroys++;
	((struct obj *)s)->magic = 0;
	RET(0);
}

EXPORT CUresult cuStreamSynchronize(void *s)
{
	LOCK();
	if (bad_stream(s))
		RET(400);
	st->stream_syncs++;
	st->last_stream = (uint64_t)(uintptr_t)s;
	run_all(st);
	RET(0);
}

EXPORT CUresult cuStreamQuery(void *s)
{
	LOCK();
	if (bad_stream(s))
		RET(400);
	RET(st->ran < st->enqueued ? 600 : 0);
}

EXPORT CUresult cuStreamWaitEvent(void *s, void *ev, unsigned flags)
{
	LOCK();
	if (bad_stream(s) || !is(ev, EVENT_MAGIC) || flags != 0)
		RET(400);
	st->stream_waits++;
	RET(0);
}

EXPORT CUresult cuEventCreate(void **ev, unsigned flags)
{
	LOCK();
	if (current() == NULL)
		RET(201);
	st->event_creates++;
	st->last_event_flags = flags;
	*ev = new_obj(EVENT_MAGIC, flags);
	RET(0);
}

EXPORT CUresult cuEventDestroy_v2(void *ev)
{
	LOCK();
	if (!is(ev, EVENT_MAGIC))
		RET(400);
	st->event_destroys++;
	((struct obj *)ev)->magic = 0;
	RET(0);
}

EXPORT CUresult cuEventRecord(void *ev, void *s)
{
	LOCK();
	if (!is(ev, EVENT_MAGIC) || bad_stream(s))
		RET(400);
	st->event_records++;
	((struct obj *)ev)->mark = st->enqueued;
	((struct obj *)ev)->recorded = 1;
	RET(0);
}

EXPORT CUresult cuEventSynchronize(void *ev)
{
	LOCK();
	if (!is(ev, EVENT_MAGIC))
		RET(400);
	st->event_syncs++;
	run_until(st, ((struct obj *)ev)->mark);
	RET(0);
}

EXPORT CUresult cuEventQuery(void *ev)
{
	LOCK();
	if (!is(ev, EVENT_MAGIC))
		RET(400);
	RET(st->ran < ((struct obj *)ev)->mark ? 600 : 0);
}

static CUresult elapsed(float *ms, void *a, void *b, int version)
{
	LOCK();
	if (!is(a, EVENT_MAGIC) || !is(b, EVENT_MAGIC))
		RET(400);
	st->elapsed_version = version;
	*ms = version == 2 ? 2.5f : 1.5f;
	RET(0);
}

EXPORT CUresult cuEventElapsedTime(float *ms, void *a, void *b) { return elapsed(ms, a, b, 1); }
#ifndef FAKE_OMIT_OPTIONAL
EXPORT CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { return elapsed(ms, a, b, 2); }
#endif

#ifndef FAKE_OMIT_OPTIONAL
/* Virtual memory management, memory pools, cuCtxSetLimit: they record
 * their arguments and answer fixed values; the structs have CUDA's layout. */
typedef struct {
	int type, id;
} fake_loc;
typedef struct {
	int type, handle_types;
	fake_loc loc;
	void *win32;
	unsigned char compression, rdma;
	unsigned short usage;
	unsigned char reserved[4];
} fake_prop;
typedef struct {
	fake_loc loc;
	int flags;
} fake_access;
typedef struct {
	int alloc_type, handle_types;
	fake_loc loc;
	void *win32;
	size_t max_size;
	unsigned short usage;
	unsigned char reserved[54];
} fake_pool_props;
_Static_assert(sizeof(fake_prop) == 32 && sizeof(fake_access) == 12 && sizeof(fake_pool_props) == 88,
	       "CUDA's layouts");
#define POOL_MAGIC 0x6c6f6f70ULL

static void record_prop(struct fake_state *st, const fake_prop *p)
{
	uint64_t v[7] = {(uint64_t)p->type, (uint64_t)p->handle_types, (uint64_t)p->loc.type, (uint64_t)p->loc.id,
			 p->compression, p->rdma, p->usage};
	memcpy(st->last_prop, v, sizeof v);
	st->vmm_calls++;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const fake_prop *p, int option)
{
	LOCK();
	record_prop(st, p);
	st->last_flags = (uint64_t)option;
	*g = option == 1 ? 2 << 20 : 64 << 10;
	RET(0);
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
				    unsigned long long flags)
{
	LOCK();
	st->vmm_calls++;
	st->last_size = size;
	st->last_align = align;
	st->last_addr = addr;
	st->last_flags = flags;
	*ptr = 0x700000000000ULL + (st->vmm_calls << 32);
	RET(0);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	LOCK();
	st->vmm_calls++;
	st->last_addr = ptr;
	st->last_size = size;
	RET(ptr == 0 ? 1 : 0);
}

EXPORT CUresult cuMemCreate(unsigned long long *h, size_t size, const fake_prop *p, unsigned long long flags)
{
	LOCK();
	record_prop(st, p);
	st->last_size = size;
	st->last_flags = flags;
	*h = 0x4200 + st->vmm_calls;
	RET(0);
}

EXPORT CUresult cuMemRelease(unsigned long long h)
{
	LOCK();
	st->vmm_calls++;
	st->last_handle = h;
	RET(0);
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long h, unsigned long long flags)
{
	LOCK();
	st->vmm_calls++;
	st->last_addr = ptr;
	st->last_size = size;
	st->last_offset = offset;
	st->last_handle = h;
	st->last_flags = flags;
	RET(0);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	LOCK();
	st->vmm_calls++;
	st->last_addr = ptr;
	st->last_size = size;
	RET(0);
}

static void record_access(struct fake_state *st, const fake_access *d, size_t n)
{
	st->vmm_calls++;
	st->last_access_count = n;
	for (size_t i = 0; i < n && i < 2; i++) {
		st->last_access[3 * i] = (uint64_t)d[i].loc.type;
		st->last_access[3 * i + 1] = (uint64_t)d[i].loc.id;
		st->last_access[3 * i + 2] = (uint64_t)d[i].flags;
	}
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const fake_access *d, size_t n)
{
	LOCK();
	record_access(st, d, n);
	st->last_addr = ptr;
	st->last_size = size;
	RET(0);
}

EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const fake_loc *loc, CUdeviceptr ptr)
{
	LOCK();
	fake_access d = {*loc, 0};
	record_access(st, &d, 1);
	st->last_addr = ptr;
	*flags = 3;
	RET(0);
}

EXPORT CUresult cuMemPoolCreate(void **pool, const fake_pool_props *p)
{
	LOCK();
	uint64_t v[6] = {(uint64_t)p->alloc_type, (uint64_t)p->handle_types, (uint64_t)p->loc.type,
			 (uint64_t)p->loc.id, p->max_size, p->usage};
	memcpy(st->last_pool_props, v, sizeof v);
	st->vmm_calls++;
	*pool = new_obj(POOL_MAGIC, 0);
	RET(0);
}

EXPORT CUresult cuMemPoolDestroy(void *pool)
{
	LOCK();
	if (!is(pool, POOL_MAGIC))
		RET(1);
	st->vmm_calls++;
	((struct obj *)pool)->magic = 0;
	free(pool);
	RET(0);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, void *s)
{
	LOCK();
	if (!is(pool, POOL_MAGIC) || bad_stream(s))
		RET(400);
	st->vmm_calls++;
	st->last_size = n;
	st->last_stream = (uint64_t)(uintptr_t)s;
	*p = 0x500000000000ULL + n;
	RET(0);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, void *s)
{
	LOCK();
	if (bad_stream(s))
		RET(400);
	st->vmm_calls++;
	st->last_addr = p;
	st->last_stream = (uint64_t)(uintptr_t)s;
	RET(0);
}

/* The reuse policies (1 to 3) are ints: only 4 bytes are read or written. */
EXPORT CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value)
{
	LOCK();
	if (!is(pool, POOL_MAGIC))
		RET(400);
	st->vmm_calls++;
	st->last_attr = (uint64_t)attr;
	st->last_attr_value = attr <= 3 ? (uint64_t)(uint32_t) * (int *)value : *(uint64_t *)value;
	RET(0);
}

EXPORT CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value)
{
	LOCK();
	if (!is(pool, POOL_MAGIC))
		RET(400);
	st->vmm_calls++;
	st->last_attr = (uint64_t)attr;
	if (attr <= 3)
		*(int *)value = 1;
	else
		*(uint64_t *)value = 0x123456789ULL;
	RET(0);
}

EXPORT CUresult cuMemPoolTrimTo(void *pool, size_t keep)
{
	LOCK();
	if (!is(pool, POOL_MAGIC))
		RET(400);
	st->vmm_calls++;
	st->last_size = keep;
	RET(0);
}

EXPORT CUresult cuMemPoolSetAccess(void *pool, const fake_access *d, size_t n)
{
	LOCK();
	if (!is(pool, POOL_MAGIC))
		RET(400);
	record_access(st, d, n);
	RET(0);
}

EXPORT CUresult cuMemPoolGetAccess(int *flags, void *pool, fake_loc *loc)
{
	LOCK();
	if (!is(pool, POOL_MAGIC))
		RET(400);
	fake_access d = {*loc, 0};
	record_access(st, &d, 1);
	*flags = 1;
	RET(0);
}

EXPORT CUresult cuCtxSetLimit(int limit, size_t value)
{
	LOCK();
	if (current() == NULL)
		RET(201);
	st->last_limit = (uint64_t)limit;
	st->last_limit_value = value;
	RET(0);
}

/* ---- several devices: devices 100 and 101 are peers; a device is not
 * its own. Peer copies are queued like the other copies. ---- */

EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
	LOCK();
	st->peer_queries++;
	if (bad_dev(d) || bad_dev(peer))
		RET(101);
	st->last_peer_dev = (uint64_t)peer;
	*can = d != peer;
	RET(0);
}

EXPORT CUresult cuDeviceGetP2PAttribute(int *value, int attrib, CUdevice src, CUdevice dst)
{
	LOCK();
	st->peer_queries++;
	if (bad_dev(src) || bad_dev(dst) || src == dst)
		RET(101);
	st->last_peer_dev = (uint64_t)dst;
	st->last_peer_attr = (uint64_t)attrib;
	*value = attrib == 1 ? 0 : 1;
	RET(attrib >= 1 && attrib <= 4 ? 0 : 1);
}

EXPORT CUresult cuCtxEnablePeerAccess(void *peer, unsigned flags)
{
	LOCK();
	if (current() == NULL || !is(peer, CTX_MAGIC))
		RET(201);
	st->peer_enables++;
	st->last_peer_ctx = (uint64_t)(uintptr_t)peer;
	st->last_peer_flags = flags;
	RET(flags != 0 ? 1 : 0);
}

EXPORT CUresult cuCtxDisablePeerAccess(void *peer)
{
	LOCK();
	if (current() == NULL || !is(peer, CTX_MAGIC))
		RET(201);
	st->peer_disables++;
	st->last_peer_ctx = (uint64_t)(uintptr_t)peer;
	RET(0);
}

EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n)
{
	LOCK();
	if (!is(dst_ctx, CTX_MAGIC) || !is(src_ctx, CTX_MAGIC))
		RET(201);
	run_all(st);
	st->peer_copies++;
	st->last_dst_ctx = (uint64_t)(uintptr_t)dst_ctx;
	st->last_src_ctx = (uint64_t)(uintptr_t)src_ctx;
	note_copy(st, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, NULL);
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	RET(0);
}

EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n, void *s)
{
	LOCK();
	if (!is(dst_ctx, CTX_MAGIC) || !is(src_ctx, CTX_MAGIC))
		RET(201);
	if (bad_stream(s))
		RET(400);
	st->peer_copies_async++;
	st->last_dst_ctx = (uint64_t)(uintptr_t)dst_ctx;
	st->last_src_ctx = (uint64_t)(uintptr_t)src_ctx;
	note_copy(st, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, s);
	enqueue(st, OP_COPY, (void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, 0);
	RET(0);
}
#endif

/* ---- stream capture and graphs: recorded, nothing captured ---- */
#ifndef FAKE_OMIT_OPTIONAL

#define GRAPH_MAGIC 0x6767ULL
#define EXEC_MAGIC 0x6e6eULL
#define FAKE_DEPS 20 /* more than the backend's first guess */

static char fake_nodes[FAKE_DEPS];
static void *fake_node_list[FAKE_DEPS]; /* node i is &fake_nodes[i] */
static unsigned char fake_edges[FAKE_DEPS][8];
static __thread int thread_mode;

static void **node_list(void)
{
	for (int i = 0; i < FAKE_DEPS; i++)
		fake_node_list[i] = &fake_nodes[i];
	return fake_node_list;
}

static int is_node(const void *n) { return (const char *)n >= fake_nodes && (const char *)n < fake_nodes + FAKE_DEPS; }

EXPORT CUresult cuStreamBeginCapture_v2(void *s, int mode)
{
	LOCK();
	if (!is(s, STREAM_MAGIC))
		RET(900);
	st->capture_begins++;
	st->capture_mode = (uint64_t)mode;
	st->capture_stream = (uint64_t)(uintptr_t)s;
	((struct obj *)s)->recorded = 1; /* capturing */
	RET(0);
}

EXPORT CUresult cuStreamEndCapture(void *s, void **g)
{
	LOCK();
	if (!is(s, STREAM_MAGIC) || !((struct obj *)s)->recorded)
		RET(401);
	((struct obj *)s)->recorded = 0;
	st->capture_ends++;
	st->graphs_created++;
	*g = new_obj(GRAPH_MAGIC, 0);
	RET(0);
}

EXPORT CUresult cuStreamGetCaptureInfo_v3(void *s, int *status, unsigned long long *id, void **g, void ***deps,
					  const void **edges, size_t *n)
{
	static struct obj capture_graph = {GRAPH_MAGIC, 0, 0, 0};
	LOCK();
	if (bad_stream(s))
		RET(400);
	*status = s != NULL && ((struct obj *)s)->recorded;
	if (!*status)
		RET(0);
	*id = 77;
	*g = &capture_graph;
	fake_edges[FAKE_DEPS - 1][2] = 1; /* one programmatic edge */
	*deps = node_list();
	*edges = fake_edges;
	*n = FAKE_DEPS;
	RET(0);
}

EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(void *s, void **deps, const unsigned char *edges, size_t n,
						     unsigned flags)
{
	LOCK();
	if (bad_stream(s) || (n > 0 && !is_node(deps[0])))
		RET(1);
	st->update_n = n;
	st->update_flags = flags;
	st->update_first = n > 0 ? (uint64_t)(uintptr_t)deps[0] : 0;
	st->update_edge0 = edges != NULL ? edges[2] + 1 : 0;
	RET(0);
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
	int old = thread_mode;
	thread_mode = *mode;
	*mode = old;
	return 0;
}

EXPORT CUresult cuGraphCreate(void **g, unsigned flags)
{
	LOCK();
	if (flags != 0)
		RET(1);
	st->graphs_created++;
	*g = new_obj(GRAPH_MAGIC, 0);
	RET(0);
}

EXPORT CUresult cuGraphDestroy(void *g)
{
	LOCK();
	if (!is(g, GRAPH_MAGIC))
		RET(400);
	st->graphs_destroyed++;
	((struct obj *)g)->magic = 0;
	RET(0);
}

EXPORT CUresult cuGraphClone(void **clone, void *g)
{
	LOCK();
	if (!is(g, GRAPH_MAGIC))
		RET(400);
	st->graph_clones++;
	st->graphs_created++;
	*clone = new_obj(GRAPH_MAGIC, 0);
	RET(0);
}

/* Every graph has 3 nodes, the first its root. */
static CUresult get_nodes(void *g, void **nodes, size_t *n, size_t have)
{
	if (!is(g, GRAPH_MAGIC))
		return 400;
	if (nodes == NULL) {
		*n = have;
		return 0;
	}
	size_t k = *n < have ? *n : have;
	for (size_t i = 0; i < k; i++)
		nodes[i] = &fake_nodes[i];
	*n = k;
	return 0;
}

EXPORT CUresult cuGraphGetNodes(void *g, void **nodes, size_t *n) { return get_nodes(g, nodes, n, 3); }
EXPORT CUresult cuGraphGetRootNodes(void *g, void **nodes, size_t *n) { return get_nodes(g, nodes, n, 1); }

/* note_node checks and notes a node's graph and dependencies and returns
 * a new node; the caller holds mu. */
static CUresult note_node(struct fake_state *st, void **out, void *g, void **deps, size_t n)
{
	if (!is(g, GRAPH_MAGIC) || (n > 0 && !is_node(deps[0])))
		return 400;
	st->node_adds++;
	st->node_ndeps = n;
	st->node_first_dep = n > 0 ? (uint64_t)(uintptr_t)deps[0] : 0;
	*out = &fake_nodes[st->node_adds % FAKE_DEPS];
	return 0;
}

struct kernel_params {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, shmem;
	void **params, **extra;
	void *kern, *ctx;
};

EXPORT CUresult cuGraphAddKernelNode_v2(void **node, void *g, void **deps, size_t n, const struct kernel_params *p)
{
	LOCK();
	CUresult r = note_node(st, node, g, deps, n);
	if (r == 0)
		r = record_launch(st, p->func, p->gx, p->gy, p->gz, p->bx, p->by, p->bz, p->shmem, NULL, p->params, p->extra);
	RET(r);
}

struct memset_params {
	CUdeviceptr dst;
	size_t pitch;
	unsigned value, elem;
	size_t width, height;
};

EXPORT CUresult cuGraphAddMemsetNode(void **node, void *g, void **deps, size_t n, const struct memset_params *p,
				     void *ctx)
{
	LOCK();
	CUresult r = note_node(st, node, g, deps, n);
	if (r != 0)
		RET(r);
	st->node_ctx = (uint64_t)(uintptr_t)ctx;
	st->memset_dst = p->dst;
	st->memset_pitch = p->pitch;
	st->memset_value = p->value;
	st->memset_elem = p->elem;
	st->memset_width = p->width;
	st->memset_height = p->height;
	RET(0);
}

struct memcpy3d {
	size_t srcX, srcY, srcZ, srcLOD;
	int srcType;
	const void *srcHost;
	CUdeviceptr src;
	void *srcArray, *reserved0;
	size_t srcPitch, srcHeight;
	size_t dstX, dstY, dstZ, dstLOD;
	int dstType;
	void *dstHost;
	CUdeviceptr dst;
	void *dstArray, *reserved1;
	size_t dstPitch, dstHeight;
	size_t width, height, depth;
};

EXPORT CUresult cuGraphAddMemcpyNode(void **node, void *g, void **deps, size_t n, const struct memcpy3d *p, void *ctx)
{
	LOCK();
	CUresult r = note_node(st, node, g, deps, n);
	if (r != 0)
		RET(r);
	st->node_ctx = (uint64_t)(uintptr_t)ctx;
	st->memcpy_types = (uint64_t)(p->srcType * 10 + p->dstType);
	uint64_t f[15] = {p->src, p->srcX, p->srcY, p->srcZ, p->srcPitch, p->srcHeight, p->dst, p->dstX, p->dstY,
			  p->dstZ, p->dstPitch, p->dstHeight, p->width, p->height, p->depth};
	memcpy(st->memcpy_f, f, sizeof f);
	RET(0);
}

EXPORT CUresult cuGraphAddEmptyNode(void **node, void *g, void **deps, size_t n)
{
	LOCK();
	RET(note_node(st, node, g, deps, n));
}

static CUresult event_node(void **node, void *g, void **deps, size_t n, void *ev, int wait)
{
	LOCK();
	if (!is(ev, EVENT_MAGIC))
		RET(400);
	CUresult r = note_node(st, node, g, deps, n);
	st->node_event = (uint64_t)(uintptr_t)ev;
	st->node_wait = (uint64_t)wait;
	RET(r);
}

EXPORT CUresult cuGraphAddEventRecordNode(void **node, void *g, void **deps, size_t n, void *ev)
{
	return event_node(node, g, deps, n, ev, 0);
}

EXPORT CUresult cuGraphAddEventWaitNode(void **node, void *g, void **deps, size_t n, void *ev)
{
	return event_node(node, g, deps, n, ev, 1);
}

EXPORT CUresult cuGraphAddDependencies_v2(void *g, void **from, void **to, const unsigned char *edges, size_t n)
{
	LOCK();
	if (!is(g, GRAPH_MAGIC) || (n > 0 && (!is_node(from[0]) || !is_node(to[n - 1]))))
		RET(400);
	st->dep_adds++;
	st->dep_n = n;
	st->dep_edge0 = edges != NULL ? edges[0] + 1 : 0;
	RET(0);
}

EXPORT CUresult cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long flags)
{
	LOCK();
	if (!is(g, GRAPH_MAGIC))
		RET(400);
	st->instantiates++;
	st->instantiate_flags = flags;
	*e = new_obj(EXEC_MAGIC, 0);
	RET(0);
}

EXPORT CUresult cuGraphExecDestroy(void *e)
{
	LOCK();
	if (!is(e, EXEC_MAGIC))
		RET(400);
	st->exec_destroys++;
	((struct obj *)e)->magic = 0;
	RET(0);
}

static CUresult launch_graph(void *e, void *s, int upload)
{
	LOCK();
	if (!is(e, EXEC_MAGIC) || bad_stream(s))
		RET(400);
	if (upload)
		st->graph_uploads++;
	else
		st->graph_launches++;
	st->graph_stream = (uint64_t)(uintptr_t)s;
	RET(0);
}

EXPORT CUresult cuGraphLaunch(void *e, void *s) { return launch_graph(e, s, 0); }
EXPORT CUresult cuGraphUpload(void *e, void *s) { return launch_graph(e, s, 1); }

EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(void *e, void *node, const struct kernel_params *p)
{
	LOCK();
	if (!is(e, EXEC_MAGIC) || !is_node(node))
		RET(400);
	st->exec_param_sets++;
	st->exec_param_node = (uint64_t)(uintptr_t)node;
	RET(record_launch(st, p->func, p->gx, p->gy, p->gz, p->bx, p->by, p->bz, p->shmem, NULL, p->params, p->extra));
}
#endif
