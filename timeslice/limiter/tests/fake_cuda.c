/*
 * A fake CUDA driver for the limiter's tests: a libcuda.so.1 that
 * implements, on the CPU, the calls the limiter intercepts and a few
 * others, and counts every call. Device memory is address space only
 * (nothing is ever dereferenced); FAKE_CUDA_TOTAL is the device's size
 * (default 64 GiB); FAKE_CUDA_SHARED names a file where every process
 * adds what it holds and the highest total ever seen (the "GPU" the
 * processes share); FAKE_CUDA_PITCH is the pitch alignment (default 1024).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../lim.h"
#include "fake.h"

#define FAKE __attribute__((visibility("default")))

FAKE CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags);
FAKE CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
				  CUdriverProcAddressQueryResult *st);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- call counts ---- */

#define MAX_NAMES 256
static struct {
	const char *name;
	int n;
} counts[MAX_NAMES];

static void count(const char *name)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_NAMES; i++) {
		if (counts[i].name == NULL)
			counts[i].name = name;
		if (strcmp(counts[i].name, name) == 0) {
			counts[i].n++;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
}

FAKE int fake_calls(const char *name)
{
	int n = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_NAMES && counts[i].name; i++)
		if (strcmp(counts[i].name, name) == 0)
			n = counts[i].n;
	pthread_mutex_unlock(&mu);
	return n;
}

#define CALLED() count(__func__)

static struct fake_record rec;
FAKE struct fake_record *fake_record(void)
{
	return &rec;
}

/* ---- the device ---- */

static int inited;
static uint64_t total = 64ull << 30;
static uint64_t used;
static uint64_t next_addr = 0x100000000000ull;
static struct shared {
	uint64_t used, high;
} *shared;

static void setup(void)
{
	const char *t = getenv("FAKE_CUDA_TOTAL");
	if (t)
		total = strtoull(t, NULL, 0);
	const char *s = getenv("FAKE_CUDA_SHARED");
	if (s) {
		int fd = open(s, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
		if (fd >= 0 && ftruncate(fd, 4096) == 0) {
			void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (p != MAP_FAILED)
				shared = p;
		}
		if (fd >= 0)
			close(fd);
	}
}
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

/* Fork-safe, as the limiter's tests fork while other threads allocate. */
static pthread_mutex_t qmu;
static uint64_t enq, deq;
static int worker_started;

static void prefork(void)
{
	pthread_mutex_lock(&mu);
	pthread_mutex_lock(&qmu);
}

static void postfork(void)
{
	pthread_mutex_unlock(&qmu);
	pthread_mutex_unlock(&mu);
}

static void postfork_child(void)
{
	/* No worker thread in the child: it starts one when it launches. */
	enq = deq = 0;
	worker_started = 0;
	postfork();
}

__attribute__((constructor)) static void fake_init(void)
{
	pthread_atfork(prefork, postfork, postfork_child);
}

struct alloc {
	uint64_t addr, size;
	void *ctx;
	int kind;
};
static struct alloc *allocs;
static size_t nallocs, capallocs;

/* Contexts: 1 is device 0's primary context; created ones count up. */
#define PRIMARY ((CUcontext)(uintptr_t)0x1000)
static int primary_refs;
static int primary_active;
static uintptr_t next_ctx = 0x2000;
static __thread CUcontext current;

static CUresult fake_alloc(uint64_t *addr, uint64_t size, int kind)
{
	pthread_once(&setup_once, setup);
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	if (size > total - used) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (nallocs == capallocs) {
		capallocs = capallocs ? capallocs * 2 : 256;
		allocs = realloc(allocs, capallocs * sizeof *allocs);
	}
	*addr = next_addr;
	next_addr += (size + 0xfff) & ~0xfffull;
	allocs[nallocs++] = (struct alloc){*addr, size, current, kind};
	used += size;
	if (shared) {
		uint64_t now = __atomic_add_fetch(&shared->used, size, __ATOMIC_SEQ_CST);
		uint64_t high = __atomic_load_n(&shared->high, __ATOMIC_SEQ_CST);
		while (now > high && !__atomic_compare_exchange_n(&shared->high, &high, now, 0, __ATOMIC_SEQ_CST,
								  __ATOMIC_SEQ_CST))
			;
	}
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

static void forget_locked(size_t i)
{
	used -= allocs[i].size;
	if (shared)
		__atomic_sub_fetch(&shared->used, allocs[i].size, __ATOMIC_SEQ_CST);
	allocs[i] = allocs[--nallocs];
}

static CUresult fake_free(uint64_t addr, int kind)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nallocs; i++) {
		if (allocs[i].addr == addr && allocs[i].kind == kind) {
			forget_locked(i);
			pthread_mutex_unlock(&mu);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&mu);
	return CUDA_ERROR_INVALID_VALUE;
}

/* free_ctx frees everything of a destroyed context, as the driver does. */
static void free_ctx(CUcontext c)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nallocs;) {
		if (allocs[i].ctx == c && allocs[i].kind != 2)
			forget_locked(i);
		else
			i++;
	}
	pthread_mutex_unlock(&mu);
}

/* ---- initialization and devices ---- */

FAKE CUresult cuInit(unsigned int Flags)
{
	CALLED();
	pthread_once(&setup_once, setup);
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	inited = 1;
	return CUDA_SUCCESS;
}

FAKE CUresult cuDriverGetVersion(int *v)
{
	CALLED();
	*v = 13000;
	return CUDA_SUCCESS;
}

FAKE CUresult cuDeviceGetCount(int *n)
{
	CALLED();
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	*n = 1;
	return CUDA_SUCCESS;
}

FAKE CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	CALLED();
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ordinal != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = 0;
	return CUDA_SUCCESS;
}

FAKE CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CALLED();
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = total;
	return CUDA_SUCCESS;
}

FAKE CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	CALLED();
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = total > 0xffffffffu ? 0xffffffffu : (unsigned int)total;
	return CUDA_SUCCESS;
}

FAKE CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
	CALLED();
	if (current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&mu);
	*f = total - used;
	*t = total;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

FAKE CUresult cuMemGetInfo(unsigned int *f, unsigned int *t)
{
	size_t f2, t2;
	CUresult r = cuMemGetInfo_v2(&f2, &t2);
	if (r == CUDA_SUCCESS) {
		*f = f2 > 0xffffffffu ? 0xffffffffu : (unsigned int)f2;
		*t = t2 > 0xffffffffu ? 0xffffffffu : (unsigned int)t2;
	}
	return r;
}

/* ---- contexts ---- */

FAKE CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice dev)
{
	CALLED();
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	primary_refs++;
	primary_active = 1;
	pthread_mutex_unlock(&mu);
	*c = PRIMARY;
	return CUDA_SUCCESS;
}

static CUresult primary_release(int reset)
{
	pthread_mutex_lock(&mu);
	if (reset)
		primary_refs = 0;
	else if (primary_refs > 0)
		primary_refs--;
	int gone = primary_refs == 0 && primary_active;
	if (gone)
		primary_active = 0;
	pthread_mutex_unlock(&mu);
	if (gone)
		free_ctx(PRIMARY);
	return CUDA_SUCCESS;
}

FAKE CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CALLED();
	return dev == 0 ? primary_release(0) : CUDA_ERROR_INVALID_DEVICE;
}

FAKE CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	CALLED();
	return dev == 0 ? primary_release(0) : CUDA_ERROR_INVALID_DEVICE;
}

FAKE CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CALLED();
	return dev == 0 ? primary_release(1) : CUDA_ERROR_INVALID_DEVICE;
}

FAKE CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	CALLED();
	return dev == 0 ? primary_release(1) : CUDA_ERROR_INVALID_DEVICE;
}

FAKE CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CALLED();
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*flags = 0;
	pthread_mutex_lock(&mu);
	*active = primary_active;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	*pctx = (CUcontext)next_ctx;
	next_ctx += 0x100;
	pthread_mutex_unlock(&mu);
	current = *pctx;
	return CUDA_SUCCESS;
}

FAKE CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CALLED();
	(void)flags;
	return ctx_create(pctx, dev);
}

FAKE CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CALLED();
	(void)flags;
	return ctx_create(pctx, dev);
}

FAKE CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice dev)
{
	CALLED();
	(void)p, (void)n, (void)flags;
	return ctx_create(pctx, dev);
}

FAKE CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)
{
	CALLED();
	(void)p, (void)flags;
	return ctx_create(pctx, dev);
}

FAKE CUresult cuCtxFromGreenCtx(CUcontext *pctx, CUgreenCtx g)
{
	CALLED();
	(void)g;
	return ctx_create(pctx, 0);
}

FAKE CUresult cuCtxDestroy_v2(CUcontext c)
{
	CALLED();
	if (c == NULL || c == PRIMARY)
		return CUDA_ERROR_INVALID_CONTEXT;
	free_ctx(c);
	if (current == c)
		current = NULL;
	return CUDA_SUCCESS;
}

FAKE CUresult cuCtxDestroy(CUcontext c)
{
	return cuCtxDestroy_v2(c);
}

FAKE CUresult cuCtxSetCurrent(CUcontext c)
{
	CALLED();
	current = c;
	return CUDA_SUCCESS;
}

FAKE CUresult cuCtxGetCurrent(CUcontext *c)
{
	CALLED();
	*c = current;
	return CUDA_SUCCESS;
}

FAKE CUresult cuCtxGetDevice(CUdevice *d)
{
	CALLED();
	if (current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	*d = 0;
	return CUDA_SUCCESS;
}

static CUresult drain(void);

FAKE CUresult cuCtxSynchronize(void)
{
	CALLED();
	return current ? drain() : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- memory ---- */

#define NEED_CTX()                                  \
	do {                                        \
		if (!inited)                        \
			return CUDA_ERROR_NOT_INITIALIZED; \
		if (current == NULL)                \
			return CUDA_ERROR_INVALID_CONTEXT; \
	} while (0)

FAKE CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n)
{
	CALLED();
	NEED_CTX();
	uint64_t a;
	CUresult r = fake_alloc(&a, n, 0);
	if (r == CUDA_SUCCESS)
		*dptr = a;
	return r;
}

FAKE CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int n)
{
	CALLED();
	NEED_CTX();
	/* Version-1 pointers are 32 bits: hand out low addresses. */
	uint64_t a;
	CUresult r = fake_alloc(&a, n, 0);
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&mu);
		allocs[nallocs - 1].addr = a & 0xffffffffu;
		pthread_mutex_unlock(&mu);
		*dptr = (CUdeviceptr_v1)(a & 0xffffffffu);
	}
	return r;
}

static size_t pitch_align(void)
{
	const char *p = getenv("FAKE_CUDA_PITCH");
	return p ? strtoull(p, NULL, 0) : 1024;
}

FAKE CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h, unsigned int elem)
{
	CALLED();
	NEED_CTX();
	if (elem != 4 && elem != 8 && elem != 16)
		return CUDA_ERROR_INVALID_VALUE;
	size_t a = pitch_align();
	*pitch = (w + a - 1) / a * a;
	uint64_t addr;
	CUresult r = fake_alloc(&addr, *pitch * h, 0);
	if (r == CUDA_SUCCESS)
		*dptr = addr;
	return r;
}

FAKE CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pitch, unsigned int w, unsigned int h,
			      unsigned int elem)
{
	CALLED();
	CUdeviceptr d;
	size_t p;
	CUresult r = cuMemAllocPitch_v2(&d, &p, w, h, elem);
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&mu);
		allocs[nallocs - 1].addr = d & 0xffffffffu;
		pthread_mutex_unlock(&mu);
		*dptr = (CUdeviceptr_v1)(d & 0xffffffffu);
		*pitch = (unsigned int)p;
	}
	return r;
}

FAKE CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags)
{
	CALLED();
	NEED_CTX();
	(void)flags;
	uint64_t a;
	CUresult r = fake_alloc(&a, n, 0);
	if (r == CUDA_SUCCESS)
		*dptr = a;
	return r;
}

FAKE CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s)
{
	CALLED();
	(void)s;
	return cuMemAllocManaged(dptr, n, 0);
}

FAKE CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s)
{
	CALLED();
	(void)s;
	return cuMemAllocManaged(dptr, n, 0);
}

FAKE CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s)
{
	CALLED();
	(void)s, (void)pool;
	return cuMemAllocManaged(dptr, n, 0);
}

FAKE CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t n, CUmemoryPool pool, CUstream s)
{
	CALLED();
	(void)s, (void)pool;
	return cuMemAllocManaged(dptr, n, 0);
}

FAKE CUresult cuMemFree_v2(CUdeviceptr d)
{
	CALLED();
	return fake_free(d, 0);
}

FAKE CUresult cuMemFree(CUdeviceptr_v1 d)
{
	CALLED();
	return fake_free(d, 0);
}

FAKE CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s)
{
	CALLED();
	(void)s;
	return fake_free(d, 0);
}

FAKE CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s)
{
	CALLED();
	(void)s;
	return fake_free(d, 0);
}

FAKE CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
			  unsigned long long flags)
{
	CALLED();
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (prop == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t a;
	CUresult r = fake_alloc(&a, size, 2);
	if (r == CUDA_SUCCESS)
		*h = a;
	return r;
}

FAKE CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	CALLED();
	return fake_free(h, 2);
}

static uint64_t fake_array_bytes(uint64_t w, uint64_t h, uint64_t d)
{
	return (w ? w : 1) * (h ? h : 1) * (d ? d : 1) * 4;
}

FAKE CUresult cuArrayCreate_v2(CUarray *p, const CUDA_ARRAY_DESCRIPTOR *a)
{
	CALLED();
	NEED_CTX();
	uint64_t addr;
	CUresult r = fake_alloc(&addr, fake_array_bytes(a->Width, a->Height, 1), 1);
	if (r == CUDA_SUCCESS)
		*p = (CUarray)(uintptr_t)addr;
	return r;
}

FAKE CUresult cuArrayCreate(CUarray *p, const CUDA_ARRAY_DESCRIPTOR_v1 *a)
{
	CALLED();
	NEED_CTX();
	uint64_t addr;
	CUresult r = fake_alloc(&addr, fake_array_bytes(a->Width, a->Height, 1), 1);
	if (r == CUDA_SUCCESS)
		*p = (CUarray)(uintptr_t)addr;
	return r;
}

FAKE CUresult cuArray3DCreate_v2(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR *a)
{
	CALLED();
	NEED_CTX();
	uint64_t addr;
	CUresult r = fake_alloc(&addr, fake_array_bytes(a->Width, a->Height, a->Depth), 1);
	if (r == CUDA_SUCCESS)
		*p = (CUarray)(uintptr_t)addr;
	return r;
}

FAKE CUresult cuArray3DCreate(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR_v1 *a)
{
	CALLED();
	NEED_CTX();
	uint64_t addr;
	CUresult r = fake_alloc(&addr, fake_array_bytes(a->Width, a->Height, a->Depth), 1);
	if (r == CUDA_SUCCESS)
		*p = (CUarray)(uintptr_t)addr;
	return r;
}

FAKE CUresult cuArrayDestroy(CUarray a)
{
	CALLED();
	return fake_free((uint64_t)(uintptr_t)a, 1);
}

FAKE CUresult cuMipmappedArrayCreate(CUmipmappedArray *p, const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned int levels)
{
	CALLED();
	NEED_CTX();
	(void)levels;
	uint64_t addr;
	CUresult r = fake_alloc(&addr, fake_array_bytes(a->Width, a->Height, a->Depth), 3);
	if (r == CUDA_SUCCESS)
		*p = (CUmipmappedArray)(uintptr_t)addr;
	return r;
}

FAKE CUresult cuMipmappedArrayDestroy(CUmipmappedArray a)
{
	CALLED();
	return fake_free((uint64_t)(uintptr_t)a, 3);
}

FAKE CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags)
{
	CALLED();
	(void)flags;
	*pp = malloc(n ? n : 1);
	return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE CUresult cuMemFreeHost(void *p)
{
	CALLED();
	free(p);
	return CUDA_SUCCESS;
}

/* ---- pass-through witnesses ---- */

FAKE CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
							 CUoccupancyB2DSize b2d, size_t dynamicSMemSize,
							 int blockSizeLimit, unsigned int flags)
{
	CALLED();
	rec.minGridSize_in = *minGridSize;
	rec.func = func;
	rec.b2d = (void *)b2d;
	rec.dynamicSMemSize = dynamicSMemSize;
	rec.blockSizeLimit = blockSizeLimit;
	rec.flags = flags;
	*minGridSize = 132;
	*blockSize = 768;
	return CUDA_SUCCESS;
}

FAKE CUresult cuTexRefSetMipmapLevelBias(CUtexref t, float bias)
{
	CALLED();
	rec.texref = t;
	rec.bias = bias;
	return CUDA_SUCCESS;
}

static const void *export_table[4] = {(void *)(uintptr_t)32, NULL, NULL, NULL};

FAKE CUresult cuGetExportTable(const void **pp, const CUuuid *id)
{
	CALLED();
	if (pp == NULL || id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	rec.export_id = *id;
	*pp = export_table;
	return CUDA_SUCCESS;
}

/* ---- the GPU: launches run in order on a worker thread ----
 *
 * A kernel "runs" for gridDimX microseconds (a graph for its handle's
 * value in microseconds), holding an exclusive lock on FAKE_CUDA_GPU if
 * set: the one GPU the test's processes share, which runs one kernel at a
 * time. Events complete when the worker has passed them. */

#define QCAP 1024
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcv = PTHREAD_COND_INITIALIZER;
static uint64_t queue[QCAP]; /* durations in ns; enq, deq: entries queued and completed, ever */
static uint64_t stamp[QCAP]; /* stamp[n % QCAP]: when deq reached n */
static int gpu_fd = -1;
static uint64_t gpu_ns, kernels;
static __thread int capture_mode;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&qmu);
	for (;;) {
		while (deq == enq)
			pthread_cond_wait(&qcv, &qmu);
		uint64_t d = queue[deq % QCAP];
		pthread_mutex_unlock(&qmu);
		if (d > 0) {
			if (gpu_fd >= 0)
				while (flock(gpu_fd, LOCK_EX) != 0)
					;
			uint64_t t0 = mono_ns(), t;
			while ((t = mono_ns()) < t0 + d) {
				uint64_t left = t0 + d - t;
				struct timespec ts = {0, (long)left};
				nanosleep(&ts, NULL);
			}
			if (gpu_fd >= 0)
				flock(gpu_fd, LOCK_UN);
			pthread_mutex_lock(&qmu);
			gpu_ns += t - t0;
			kernels++;
		} else {
			pthread_mutex_lock(&qmu);
		}
		deq++;
		stamp[deq % QCAP] = mono_ns();
		pthread_cond_broadcast(&qcv);
	}
	return NULL;
}

static void start_worker_locked(void)
{
	if (worker_started)
		return;
	worker_started = 1;
	const char *g = getenv("FAKE_CUDA_GPU");
	if (g)
		gpu_fd = open(g, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
	pthread_t th;
	pthread_create(&th, NULL, worker, NULL);
	pthread_detach(th);
}

static CUresult enqueue(uint64_t us)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&qmu);
	start_worker_locked();
	while (enq - deq >= QCAP)
		pthread_cond_wait(&qcv, &qmu);
	queue[enq % QCAP] = us * 1000;
	enq++;
	pthread_cond_broadcast(&qcv);
	pthread_mutex_unlock(&qmu);
	return CUDA_SUCCESS;
}

static CUresult drain(void)
{
	pthread_mutex_lock(&qmu);
	while (deq != enq)
		pthread_cond_wait(&qcv, &qmu);
	pthread_mutex_unlock(&qmu);
	return CUDA_SUCCESS;
}

FAKE uint64_t fake_gpu_ns(void)
{
	pthread_mutex_lock(&qmu);
	uint64_t v = gpu_ns;
	pthread_mutex_unlock(&qmu);
	return v;
}

FAKE CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			     unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,
			     void **extra)
{
	CALLED();
	(void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params, (void)extra;
	return enqueue(gx);
}

FAKE CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				  unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,
				  void **extra)
{
	CALLED();
	(void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params, (void)extra;
	return enqueue(gx);
}

FAKE CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	CALLED();
	(void)f, (void)params, (void)extra;
	return c ? enqueue(c->gridDimX) : CUDA_ERROR_INVALID_VALUE;
}

FAKE CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem, CUstream s,
					void **params)
{
	CALLED();
	(void)f, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)s, (void)params;
	return enqueue(gx);
}

FAKE CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
	CALLED();
	(void)s;
	return enqueue((uint64_t)(uintptr_t)g);
}

FAKE CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream s)
{
	CALLED();
	(void)f, (void)h, (void)s;
	return enqueue((uint64_t)w);
}

struct fake_event {
	uint64_t seq;   /* complete once deq reaches it */
	uint64_t stamp; /* when it completed, if it was at once */
};

FAKE CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
	CALLED();
	(void)flags;
	if (current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct fake_event *ev = calloc(1, sizeof *ev);
	*e = (CUevent)ev;
	return ev ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE CUresult cuEventDestroy_v2(CUevent e)
{
	CALLED();
	free(e);
	return CUDA_SUCCESS;
}

FAKE CUresult cuEventRecord(CUevent e, CUstream s)
{
	CALLED();
	(void)s;
	if (e == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct fake_event *ev = (struct fake_event *)e;
	pthread_mutex_lock(&qmu);
	ev->seq = enq;
	ev->stamp = enq == deq ? mono_ns() : 0;
	pthread_mutex_unlock(&qmu);
	return CUDA_SUCCESS;
}

FAKE CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
	return cuEventRecord(e, s);
}

FAKE CUresult cuEventQuery(CUevent e)
{
	CALLED();
	if (e == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&qmu);
	int done = deq >= ((struct fake_event *)e)->seq;
	pthread_mutex_unlock(&qmu);
	return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* event_stamp: when the fake GPU passed an event, 0 if it has not (or too
 * long ago). With qmu held. */
static uint64_t event_stamp(const struct fake_event *ev)
{
	if (ev->stamp)
		return ev->stamp;
	if (deq < ev->seq || deq - ev->seq >= QCAP)
		return 0;
	return stamp[ev->seq % QCAP];
}

FAKE CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	CALLED();
	if (a == NULL || b == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&qmu);
	uint64_t ta = event_stamp((struct fake_event *)a), tb = event_stamp((struct fake_event *)b);
	pthread_mutex_unlock(&qmu);
	if (ta == 0 || tb == 0)
		return CUDA_ERROR_NOT_READY;
	*ms = (float)((double)((int64_t)(tb - ta)) / 1e6);
	return CUDA_SUCCESS;
}

FAKE CUresult cuStreamSynchronize(CUstream s)
{
	CALLED();
	(void)s;
	return drain();
}

FAKE CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
	CALLED();
	(void)s;
	*st = CU_STREAM_CAPTURE_STATUS_NONE;
	return CUDA_SUCCESS;
}

FAKE CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st)
{
	return cuStreamIsCapturing(s, st);
}

FAKE CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CALLED();
	int old = capture_mode;
	capture_mode = (int)*mode;
	*mode = (CUstreamCaptureMode)old;
	return CUDA_SUCCESS;
}

/* ---- cuGetProcAddress ---- */

#define FN(name) {#name, (void *)name}
static const struct {
	const char *name;
	void *fn;
} fns[] = {
	FN(cuInit), FN(cuDriverGetVersion), FN(cuDeviceGetCount), FN(cuDeviceGet), FN(cuDeviceTotalMem),
	FN(cuDeviceTotalMem_v2), FN(cuMemGetInfo), FN(cuMemGetInfo_v2), FN(cuDevicePrimaryCtxRetain),
	FN(cuDevicePrimaryCtxRelease), FN(cuDevicePrimaryCtxRelease_v2), FN(cuDevicePrimaryCtxReset),
	FN(cuDevicePrimaryCtxReset_v2), FN(cuDevicePrimaryCtxGetState), FN(cuCtxCreate), FN(cuCtxCreate_v2),
	FN(cuCtxCreate_v3), FN(cuCtxCreate_v4), FN(cuCtxFromGreenCtx), FN(cuCtxDestroy), FN(cuCtxDestroy_v2),
	FN(cuCtxSetCurrent), FN(cuCtxGetCurrent), FN(cuCtxGetDevice), FN(cuCtxSynchronize), FN(cuMemAlloc),
	FN(cuMemAlloc_v2), FN(cuMemAllocPitch), FN(cuMemAllocPitch_v2), FN(cuMemAllocManaged), FN(cuMemAllocAsync),
	FN(cuMemAllocAsync_ptsz), FN(cuMemAllocFromPoolAsync), FN(cuMemAllocFromPoolAsync_ptsz), FN(cuMemFree),
	FN(cuMemFree_v2), FN(cuMemFreeAsync), FN(cuMemFreeAsync_ptsz), FN(cuMemCreate), FN(cuMemRelease),
	FN(cuArrayCreate), FN(cuArrayCreate_v2), FN(cuArray3DCreate), FN(cuArray3DCreate_v2), FN(cuArrayDestroy),
	FN(cuMipmappedArrayCreate), FN(cuMipmappedArrayDestroy), FN(cuMemHostAlloc), FN(cuMemFreeHost),
	FN(cuOccupancyMaxPotentialBlockSizeWithFlags), FN(cuTexRefSetMipmapLevelBias), FN(cuGetExportTable),
	FN(cuGetProcAddress), FN(cuGetProcAddress_v2), FN(cuLaunchKernel), FN(cuLaunchKernel_ptsz),
	FN(cuLaunchKernelEx), FN(cuLaunchCooperativeKernel), FN(cuGraphLaunch), FN(cuLaunchGridAsync),
	FN(cuEventCreate), FN(cuEventDestroy_v2), FN(cuEventRecord), FN(cuEventRecord_ptsz), FN(cuEventQuery), FN(cuEventElapsedTime),
	FN(cuStreamSynchronize), FN(cuStreamIsCapturing), FN(cuStreamIsCapturing_ptsz),
	FN(cuThreadExchangeStreamCaptureMode),
};

/* The newest version of a base name not newer than the caller's CUDA
 * (cudaTypedefs.h's PFN versions), and per-thread variants. */
static const struct {
	const char *base, *name;
	int since;
} versions[] = {
	{"cuMemAlloc", "cuMemAlloc_v2", 3020},
	{"cuMemAllocPitch", "cuMemAllocPitch_v2", 3020},
	{"cuMemFree", "cuMemFree_v2", 3020},
	{"cuMemGetInfo", "cuMemGetInfo_v2", 3020},
	{"cuDeviceTotalMem", "cuDeviceTotalMem_v2", 3020},
	{"cuArrayCreate", "cuArrayCreate_v2", 3020},
	{"cuArray3DCreate", "cuArray3DCreate_v2", 3020},
	{"cuCtxCreate", "cuCtxCreate_v4", 12050},
	{"cuCtxCreate", "cuCtxCreate_v3", 11040},
	{"cuCtxCreate", "cuCtxCreate_v2", 3020},
	{"cuCtxDestroy", "cuCtxDestroy_v2", 4000},
	{"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", 11000},
	{"cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset_v2", 11000},
	{"cuGetProcAddress", "cuGetProcAddress_v2", 12000},
};

static void *lookup(const char *name)
{
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
		if (strcmp(fns[i].name, name) == 0)
			return fns[i].fn;
	return NULL;
}

static CUresult proc(const char *symbol, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st)
{
	if (symbol == NULL || pfn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	const char *name = symbol;
	for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
		if (strcmp(versions[i].base, symbol) == 0 && ver >= versions[i].since) {
			name = versions[i].name;
			break;
		}
	}
	char ptsz[128];
	if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && strlen(name) < 100) {
		snprintf(ptsz, sizeof ptsz, "%s_ptsz", name);
		if (lookup(ptsz))
			name = ptsz;
	}
	*pfn = lookup(name);
	if (st)
		*st = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE CUresult cuGetProcAddress(const char *symbol, void **pfn, int ver, cuuint64_t flags)
{
	CALLED();
	return proc(symbol, pfn, ver, flags, NULL);
}

FAKE CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int ver, cuuint64_t flags,
				  CUdriverProcAddressQueryResult *st)
{
	CALLED();
	return proc(symbol, pfn, ver, flags, st);
}
