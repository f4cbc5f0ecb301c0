/*
 * Device memory: every allocation is reserved in the share's accounting
 * (lim_acct.c) before the driver is called, and refused with
 * CUDA_ERROR_OUT_OF_MEMORY, without calling it, when the share would go
 * past memory_bytes. What this process holds is tracked here, per pointer
 * or handle, so that frees, and destroyed contexts, give the bytes back.
 * Sizes: README.md, "What is counted".
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "cuda_lim.h"

/* ---- tracking ---- */

struct ent {
	uint64_t key;
	uint64_t size;
	CUcontext ctx; /* NULL: not bound to a context (VMM handles) */
	CUdevice dev;
	uint8_t kind; /* 0: empty */
	uint8_t tomb;
};

/* Contexts created with cuCtxCreate* (not primary). */
#define MAX_CREATED 256

static struct {
	pthread_mutex_t mu;
	struct ent *tab;
	size_t cap, n, tombs;
	CUcontext created[MAX_CREATED];
	size_t ncreated;
} T = {.mu = PTHREAD_MUTEX_INITIALIZER};

static size_t hash(uint8_t kind, uint64_t key)
{
	uint64_t x = key ^ ((uint64_t)kind << 56);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (size_t)x;
}

static struct ent *find_locked(uint8_t kind, uint64_t key)
{
	if (T.cap == 0)
		return NULL;
	for (size_t i = hash(kind, key) & (T.cap - 1), k = 0; k < T.cap; i = (i + 1) & (T.cap - 1), k++) {
		struct ent *e = &T.tab[i];
		if (e->kind == 0 && !e->tomb)
			return NULL;
		if (e->kind == kind && e->key == key)
			return e;
	}
	return NULL;
}

static int grow_locked(void)
{
	size_t cap = T.cap ? T.cap : 64;
	if ((T.n + 1) * 2 > cap)
		cap *= 2;
	struct ent *tab = calloc(cap, sizeof *tab);
	if (tab == NULL)
		return -1;
	for (size_t j = 0; j < T.cap; j++) {
		struct ent *e = &T.tab[j];
		if (e->kind == 0)
			continue;
		size_t i = hash(e->kind, e->key) & (cap - 1);
		while (tab[i].kind != 0)
			i = (i + 1) & (cap - 1);
		tab[i] = *e;
		tab[i].tomb = 0;
	}
	free(T.tab);
	T.tab = tab;
	T.cap = cap;
	T.tombs = 0;
	return 0;
}

/* put records an allocation; it returns -1 when out of host memory, else
 * 0 with *replaced the size of an entry with the same key that it
 * replaced (memory freed behind the limiter's back, e.g. by a context
 * the limiter did not see go). */
static int put(uint8_t kind, uint64_t key, uint64_t size, CUcontext ctx, CUdevice dev, uint64_t *replaced)
{
	*replaced = 0;
	pthread_mutex_lock(&T.mu);
	struct ent *e = find_locked(kind, key);
	if (e != NULL) {
		*replaced = e->size;
	} else {
		if ((T.n + T.tombs + 1) * 2 > T.cap && grow_locked() != 0) {
			pthread_mutex_unlock(&T.mu);
			return -1;
		}
		size_t i = hash(kind, key) & (T.cap - 1);
		while (T.tab[i].kind != 0)
			i = (i + 1) & (T.cap - 1);
		e = &T.tab[i];
		if (e->tomb)
			T.tombs--;
		T.n++;
	}
	*e = (struct ent){.key = key, .size = size, .ctx = ctx, .dev = dev, .kind = kind};
	pthread_mutex_unlock(&T.mu);
	return 0;
}

static void remove_locked(struct ent *e)
{
	e->kind = 0;
	e->tomb = 1;
	T.n--;
	T.tombs++;
}

/* take removes an allocation: 1 with *out, or 0 if unknown. */
static int take(uint8_t kind, uint64_t key, struct ent *out)
{
	pthread_mutex_lock(&T.mu);
	struct ent *e = find_locked(kind, key);
	if (e != NULL) {
		*out = *e;
		remove_locked(e);
	}
	pthread_mutex_unlock(&T.mu);
	return e != NULL;
}

/* restore puts back what take removed when the driver refused the free. */
static void restore(const struct ent *e)
{
	uint64_t replaced;
	if (put(e->kind, e->key, e->size, e->ctx, e->dev, &replaced) != 0)
		lim_acct_release(e->size); /* cannot track it: stop counting it */
	else if (replaced)
		lim_acct_release(replaced);
}

static int is_created_locked(CUcontext ctx)
{
	for (size_t i = 0; i < T.ncreated; i++)
		if (T.created[i] == ctx)
			return 1;
	return 0;
}

static void created_add(CUcontext ctx)
{
	pthread_mutex_lock(&T.mu);
	if (!is_created_locked(ctx) && T.ncreated < MAX_CREATED)
		T.created[T.ncreated++] = ctx;
	pthread_mutex_unlock(&T.mu);
}

/* drop removes every allocation of a destroyed context (ctx), or of a
 * device's reset primary context (ctx NULL: every context of dev that was
 * not created with cuCtxCreate*), and returns their bytes. */
static uint64_t drop(CUcontext ctx, CUdevice dev)
{
	uint64_t sum = 0;
	pthread_mutex_lock(&T.mu);
	for (size_t i = 0; i < T.cap; i++) {
		struct ent *e = &T.tab[i];
		if (e->kind == 0 || e->ctx == NULL)
			continue;
		int match = ctx != NULL ? e->ctx == ctx : (e->dev == dev && !is_created_locked(e->ctx));
		if (match) {
			sum += e->size;
			remove_locked(e);
		}
	}
	if (ctx != NULL) {
		for (size_t i = 0; i < T.ncreated; i++) {
			if (T.created[i] == ctx) {
				T.created[i] = T.created[--T.ncreated];
				break;
			}
		}
	}
	pthread_mutex_unlock(&T.mu);
	return sum;
}

void lim_track_prefork(void)
{
	pthread_mutex_lock(&T.mu);
}

void lim_track_postfork_parent(void)
{
	pthread_mutex_unlock(&T.mu);
}

void lim_track_forked(void)
{
	/* The parent's allocations are not the child's. */
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	T.mu = fresh;
	if (T.tab != NULL)
		memset(T.tab, 0, T.cap * sizeof *T.tab);
	T.n = T.tombs = 0;
	T.ncreated = 0;
}

/* ---- the allocation protocol ---- */

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	if (a != 0 && b > UINT64_MAX / a)
		return UINT64_MAX;
	return a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* begin is called before an allocation of n bytes: CUDA_SUCCESS with
 * *counted set when the bytes were reserved (or 0 when nothing is
 * limited), else the error to return without calling the driver. */
static CUresult begin(uint64_t n, int *counted)
{
	*counted = 0;
	CUresult r = lim_cuda_init();
	if (r != CUDA_SUCCESS)
		return r;
	if (!lim_memory_limited())
		return CUDA_SUCCESS;
	if (lim_acct_reserve(n) != LIM_ACCT_OK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*counted = 1;
	return CUDA_SUCCESS;
}

static void where(CUcontext *ctx, CUdevice *dev)
{
	*ctx = NULL;
	*dev = -1;
	if (LIM_CALL(lim_ctx_get_current_fn, cuCtxGetCurrent)(ctx) != CUDA_SUCCESS)
		*ctx = NULL;
	if (*ctx != NULL && LIM_CALL(lim_ctx_get_device_fn, cuCtxGetDevice)(dev) != CUDA_SUCCESS)
		*dev = -1;
}

typedef CUresult (*undo_fn)(uint64_t key);

/* end finishes a counted allocation: on the driver's success it records
 * it (undoing it with undo when the host is out of memory to track it),
 * on failure it gives the reservation back. */
static CUresult end(CUresult r, uint8_t kind, uint64_t key, uint64_t n, CUcontext ctx, CUdevice dev, undo_fn undo)
{
	if (r != CUDA_SUCCESS) {
		lim_acct_release(n);
		return r;
	}
	uint64_t replaced;
	if (put(kind, key, n, ctx, dev, &replaced) != 0) {
		undo(key);
		lim_acct_release(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (replaced)
		lim_acct_release(replaced);
	return r;
}

/* finish ends a counted free: the bytes come back once the driver freed
 * them. */
static CUresult finish(CUresult r, int found, const struct ent *e)
{
	if (!found)
		return r;
	if (r == CUDA_SUCCESS)
		lim_acct_release(e->size);
	else
		restore(e);
	return r;
}

static CUresult undo_free(uint64_t key)
{
	return LIM_REAL_CU(cuMemFree_v2)((CUdeviceptr)key);
}

static CUresult undo_free_v1(uint64_t key)
{
	return LIM_REAL_CU(cuMemFree)((CUdeviceptr_v1)key);
}

static CUresult undo_release(uint64_t key)
{
	return LIM_REAL_CU(cuMemRelease)((CUmemGenericAllocationHandle)key);
}

static CUresult undo_array(uint64_t key)
{
	return LIM_REAL_CU(cuArrayDestroy)((CUarray)(uintptr_t)key);
}

static CUresult undo_mipmap(uint64_t key)
{
	return LIM_REAL_CU(cuMipmappedArrayDestroy)((CUmipmappedArray)(uintptr_t)key);
}

/* ---- linear memory ---- */

LIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	int counted;
	CUresult r = begin(bytesize, &counted);
	if (r != CUDA_SUCCESS || !counted)
		return r == CUDA_SUCCESS ? LIM_REAL_CU(cuMemAlloc_v2)(dptr, bytesize) : r;
	CUcontext ctx;
	CUdevice dev;
	where(&ctx, &dev);
	r = LIM_REAL_CU(cuMemAlloc_v2)(dptr, bytesize);
	return end(r, LIM_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0, bytesize, ctx, dev, undo_free);
}

LIM_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
	int counted;
	CUresult r = begin(bytesize, &counted);
	if (r != CUDA_SUCCESS || !counted)
		return r == CUDA_SUCCESS ? LIM_REAL_CU(cuMemAlloc)(dptr, bytesize) : r;
	CUcontext ctx;
	CUdevice dev;
	where(&ctx, &dev);
	r = LIM_REAL_CU(cuMemAlloc)(dptr, bytesize);
	return end(r, LIM_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0, bytesize, ctx, dev, undo_free_v1);
}

LIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	int counted;
	CUresult r = begin(bytesize, &counted);
	if (r != CUDA_SUCCESS || !counted)
		return r == CUDA_SUCCESS ? LIM_REAL_CU(cuMemAllocManaged)(dptr, bytesize, flags) : r;
	CUcontext ctx;
	CUdevice dev;
	where(&ctx, &dev);
	r = LIM_REAL_CU(cuMemAllocManaged)(dptr, bytesize, flags);
	return end(r, LIM_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0, bytesize, ctx, dev, undo_free);
}

/* Pitched allocations: the pitch is the driver's choice. The reservation
 * assumes rows rounded up to PITCH_GUESS bytes and is corrected once the
 * driver answered. */
#define PITCH_GUESS 512u

/* repitch corrects a reservation of guess bytes to the real size: 0, or
 * -1 when the share has no room for the difference. */
static int repitch(uint64_t guess, uint64_t real)
{
	if (real > guess)
		return lim_acct_reserve(real - guess) == LIM_ACCT_OK ? 0 : -1;
	if (real < guess)
		lim_acct_release(guess - real);
	return 0;
}

/* pitched records a pitched allocation the driver made: its real size
 * (pitch × height) replaces the guess counted before the call, or, when
 * that no longer fits, the allocation is undone and out of memory. */
static CUresult pitched(uint64_t key, uint64_t real, uint64_t guess, CUcontext ctx, CUdevice dev, undo_fn undo)
{
	if (repitch(guess, real) != 0) {
		undo(key);
		lim_acct_release(guess);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return end(CUDA_SUCCESS, LIM_KIND_PTR, key, real, ctx, dev, undo);
}

static uint64_t pitch_guess(uint64_t width, uint64_t height)
{
	uint64_t row = add_sat(width, PITCH_GUESS - 1) / PITCH_GUESS * PITCH_GUESS;
	return mul_sat(row, height);
}

LIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				       unsigned int ElementSizeBytes)
{
	uint64_t guess = pitch_guess(WidthInBytes, Height);
	int counted;
	CUresult r = begin(guess, &counted);
	if (r != CUDA_SUCCESS || !counted)
		return r == CUDA_SUCCESS ? LIM_REAL_CU(cuMemAllocPitch_v2)(dptr, pPitch, WidthInBytes, Height,
									   ElementSizeBytes)
					 : r;
	CUcontext ctx;
	CUdevice dev;
	where(&ctx, &dev);
	r = LIM_REAL_CU(cuMemAllocPitch_v2)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	return r == CUDA_SUCCESS ? pitched(*dptr, mul_sat(*pPitch, Height), guess, ctx, dev, undo_free)
				 : end(r, LIM_KIND_PTR, 0, guess, ctx, dev, undo_free);
}

LIM_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
				    unsigned int Height, unsigned int ElementSizeBytes)
{
	uint64_t guess = pitch_guess(WidthInBytes, Height);
	int counted;
	CUresult r = begin(guess, &counted);
	if (r != CUDA_SUCCESS || !counted)
		return r == CUDA_SUCCESS
			       ? LIM_REAL_CU(cuMemAllocPitch)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes)
			       : r;
	CUcontext ctx;
	CUdevice dev;
	where(&ctx, &dev);
	r = LIM_REAL_CU(cuMemAllocPitch)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	return r == CUDA_SUCCESS ? pitched(*dptr, mul_sat(*pPitch, Height), guess, ctx, dev, undo_free_v1)
				 : end(r, LIM_KIND_PTR, 0, guess, ctx, dev, undo_free_v1);
}

/* Stream-ordered allocations count from the call that allocates to the
 * call that frees, whatever the pool keeps reserved (README.md). */
#define ASYNC_ALLOC(name, ...)                                                                       \
	int counted;                                                                                 \
	CUresult r = begin(bytesize, &counted);                                                      \
	if (r != CUDA_SUCCESS || !counted)                                                           \
		return r == CUDA_SUCCESS ? LIM_REAL_CU(name)(__VA_ARGS__) : r;                       \
	CUcontext ctx;                                                                               \
	CUdevice dev;                                                                                \
	where(&ctx, &dev);                                                                           \
	r = LIM_REAL_CU(name)(__VA_ARGS__);                                                          \
	return end(r, LIM_KIND_PTR, r == CUDA_SUCCESS ? *dptr : 0, bytesize, ctx, dev, undo_free);

LIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	ASYNC_ALLOC(cuMemAllocAsync, dptr, bytesize, hStream)
}

LIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	ASYNC_ALLOC(cuMemAllocAsync_ptsz, dptr, bytesize, hStream)
}

LIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	ASYNC_ALLOC(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream)
}

LIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
						 CUstream hStream)
{
	ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream)
}

/* A free of a pointer the limiter did not count (another process's IPC
 * memory, a pool's imported pointer, or one allocated before the limit
 * applied) just passes through. */
#define FREE(kind, key, call)                                                 \
	CUresult r0 = lim_cuda_init();                                        \
	if (r0 != CUDA_SUCCESS)                                               \
		return r0;                                                    \
	struct ent e = {0};                                                   \
	int found = lim_memory_limited() && take((kind), (uint64_t)(key), &e); \
	return finish(call, found, &e);

LIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	FREE(LIM_KIND_PTR, dptr, LIM_REAL_CU(cuMemFree_v2)(dptr))
}

LIM_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
	FREE(LIM_KIND_PTR, dptr, LIM_REAL_CU(cuMemFree)(dptr))
}

LIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	FREE(LIM_KIND_PTR, dptr, LIM_REAL_CU(cuMemFreeAsync)(dptr, hStream))
}

LIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	FREE(LIM_KIND_PTR, dptr, LIM_REAL_CU(cuMemFreeAsync_ptsz)(dptr, hStream))
}

/* ---- virtual memory management ---- */

LIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
				unsigned long long flags)
{
	/* Physical memory on the host (CUDA 12.2's host locations) is not
	 * the GPU's. */
	uint64_t n = size;
	if (prop != NULL && (prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
			     prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
			     prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT))
		n = 0;
	int counted;
	CUresult r = begin(n, &counted);
	if (r != CUDA_SUCCESS || !counted || n == 0) {
		if (r != CUDA_SUCCESS)
			return r;
		return LIM_REAL_CU(cuMemCreate)(handle, size, prop, flags);
	}
	r = LIM_REAL_CU(cuMemCreate)(handle, size, prop, flags);
	return end(r, LIM_KIND_HANDLE, r == CUDA_SUCCESS ? *handle : 0, n, NULL,
		   prop != NULL ? prop->location.id : -1, undo_release);
}

LIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	FREE(LIM_KIND_HANDLE, handle, LIM_REAL_CU(cuMemRelease)(handle))
}

/* ---- arrays ---- */

/* elem_bytes is the size of one element of an array: the channel size
 * times the channels for the classic formats; any other format (block
 * compressed, video, packed) is counted as 16 bytes an element, more than
 * any of them takes. */
static uint64_t elem_bytes(unsigned format, unsigned channels)
{
	uint64_t ch = 0;
	switch (format) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		ch = 1;
		break;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		ch = 2;
		break;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		ch = 4;
		break;
	default:
		return 16;
	}
	return ch * (channels >= 1 && channels <= 4 ? channels : 4);
}

static uint64_t one(uint64_t v)
{
	return v ? v : 1;
}

static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned format, unsigned channels, unsigned flags)
{
	if (flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
		return 0; /* memory comes from cuMemCreate, counted there */
	return mul_sat(mul_sat(mul_sat(elem_bytes(format, channels), one(w)), one(h)), one(d));
}

/* Mipmap levels halve each extent (not the layers of a layered array),
 * down to 1. */
#define CUDA_ARRAY3D_LAYERED_FLAG 0x01
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned levels)
{
	if (a->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
		return 0;
	uint64_t sum = 0, w = a->Width, h = a->Height, d = a->Depth;
	int layered = (a->Flags & CUDA_ARRAY3D_LAYERED_FLAG) != 0;
	for (unsigned l = 0; l < levels && l < 64; l++) {
		sum = add_sat(sum, array_bytes(w, h, d, a->Format, a->NumChannels, 0));
		w = w > 1 ? w / 2 : w;
		h = h > 1 ? h / 2 : h;
		if (!layered)
			d = d > 1 ? d / 2 : d;
	}
	return sum;
}

#define ARRAY_CREATE(name, kind, undo, bytes, out, ...)                                        \
	uint64_t n = (bytes);                                                                  \
	int counted;                                                                           \
	CUresult r = begin(n, &counted);                                                       \
	if (r != CUDA_SUCCESS || !counted)                                                     \
		return r == CUDA_SUCCESS ? LIM_REAL_CU(name)(__VA_ARGS__) : r;                 \
	CUcontext ctx;                                                                         \
	CUdevice dev;                                                                          \
	where(&ctx, &dev);                                                                     \
	r = LIM_REAL_CU(name)(__VA_ARGS__);                                                    \
	return end(r, kind, r == CUDA_SUCCESS ? (uint64_t)(uintptr_t)*(out) : 0, n, ctx, dev, undo);

/* The bytes an array descriptor asks for; the _v1 descriptors have the
 * same fields in narrower types. */
#define ARRAY_BYTES(d) ((d) ? array_bytes((d)->Width, (d)->Height, 1, (d)->Format, (d)->NumChannels, 0) : 0)
#define ARRAY3D_BYTES(d) \
	((d) ? array_bytes((d)->Width, (d)->Height, (d)->Depth, (d)->Format, (d)->NumChannels, (d)->Flags) : 0)

LIM_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	ARRAY_CREATE(cuArrayCreate_v2, LIM_KIND_ARRAY, undo_array, ARRAY_BYTES(pAllocateArray), pHandle, pHandle,
		     pAllocateArray)
}

LIM_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray)
{
	ARRAY_CREATE(cuArrayCreate, LIM_KIND_ARRAY, undo_array, ARRAY_BYTES(pAllocateArray), pHandle, pHandle,
		     pAllocateArray)
}

LIM_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	ARRAY_CREATE(cuArray3DCreate_v2, LIM_KIND_ARRAY, undo_array, ARRAY3D_BYTES(pAllocateArray), pHandle, pHandle,
		     pAllocateArray)
}

LIM_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray)
{
	ARRAY_CREATE(cuArray3DCreate, LIM_KIND_ARRAY, undo_array, ARRAY3D_BYTES(pAllocateArray), pHandle, pHandle,
		     pAllocateArray)
}

LIM_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
					   unsigned int numMipmapLevels)
{
	ARRAY_CREATE(cuMipmappedArrayCreate, LIM_KIND_MIPMAP, undo_mipmap,
		     pMipmappedArrayDesc ? mipmap_bytes(pMipmappedArrayDesc, numMipmapLevels) : 0, pHandle,
		     pHandle, pMipmappedArrayDesc, numMipmapLevels)
}

LIM_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
	FREE(LIM_KIND_ARRAY, (uintptr_t)hArray, LIM_REAL_CU(cuArrayDestroy)(hArray))
}

LIM_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	FREE(LIM_KIND_MIPMAP, (uintptr_t)hMipmappedArray, LIM_REAL_CU(cuMipmappedArrayDestroy)(hMipmappedArray))
}

/* ---- queries ---- */

/* share_view: the share's total (the limit, or the device's if smaller)
 * and free bytes (the device's free bytes, or what the share has left if
 * less). */
static void share_view(uint64_t real_free, uint64_t real_total, uint64_t *free, uint64_t *total)
{
	uint64_t used;
	lim_acct_usage(&used); /* on error: the limit, nothing free */
	uint64_t limit = lim_acct_limit();
	*total = real_total < limit ? real_total : limit;
	uint64_t left = used < *total ? *total - used : 0;
	*free = real_free < left ? real_free : left;
}

LIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	CUresult r = lim_cuda_init();
	if (r != CUDA_SUCCESS)
		return r;
	r = LIM_REAL_CU(cuMemGetInfo_v2)(free, total);
	if (r != CUDA_SUCCESS || !lim_memory_limited() || free == NULL || total == NULL)
		return r;
	uint64_t f, t;
	share_view(*free, *total, &f, &t);
	*free = f;
	*total = t;
	return r;
}

LIM_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	CUresult r = lim_cuda_init();
	if (r != CUDA_SUCCESS)
		return r;
	r = LIM_REAL_CU(cuMemGetInfo)(free, total);
	if (r != CUDA_SUCCESS || !lim_memory_limited() || free == NULL || total == NULL)
		return r;
	uint64_t f, t;
	share_view(*free, *total, &f, &t);
	*free = (unsigned int)f;
	*total = (unsigned int)t;
	return r;
}

LIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult r = lim_cuda_init();
	if (r != CUDA_SUCCESS)
		return r;
	r = LIM_REAL_CU(cuDeviceTotalMem_v2)(bytes, dev);
	if (r == CUDA_SUCCESS && lim_memory_limited() && bytes != NULL && *bytes > lim_acct_limit())
		*bytes = lim_acct_limit();
	return r;
}

LIM_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	CUresult r = lim_cuda_init();
	if (r != CUDA_SUCCESS)
		return r;
	r = LIM_REAL_CU(cuDeviceTotalMem)(bytes, dev);
	if (r == CUDA_SUCCESS && lim_memory_limited() && bytes != NULL && *bytes > lim_acct_limit())
		*bytes = (unsigned int)lim_acct_limit();
	return r;
}

/* ---- contexts ---- */

#define CTX_CREATE(call)                                            \
	CUresult r = (call);                                        \
	if (r == CUDA_SUCCESS && pctx != NULL && lim_memory_limited()) \
		created_add(*pctx);                                 \
	return r;

LIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CTX_CREATE(LIM_REAL_CU(cuCtxCreate_v2)(pctx, flags, dev))
}

LIM_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CTX_CREATE(LIM_REAL_CU(cuCtxCreate)(pctx, flags, dev))
}

LIM_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
				   unsigned int flags, CUdevice dev)
{
	CTX_CREATE(LIM_REAL_CU(cuCtxCreate_v3)(pctx, paramsArray, numParams, flags, dev))
}

LIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
				   CUdevice dev)
{
	CTX_CREATE(LIM_REAL_CU(cuCtxCreate_v4)(pctx, ctxCreateParams, flags, dev))
}

LIM_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
	CUcontext *pctx = pContext;
	CTX_CREATE(LIM_REAL_CU(cuCtxFromGreenCtx)(pContext, hCtx))
}

#define CTX_DESTROY(call)                                  \
	CUresult r = (call);                               \
	if (r == CUDA_SUCCESS && lim_memory_limited()) {   \
		uint64_t n = drop(ctx, -1);                \
		if (n)                                     \
			lim_acct_release(n);               \
	}                                                  \
	return r;

LIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	if (ctx == NULL)
		return LIM_REAL_CU(cuCtxDestroy_v2)(ctx);
	lim_compute_ctx_gone(ctx);
	CTX_DESTROY(LIM_REAL_CU(cuCtxDestroy_v2)(ctx))
}

LIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
	if (ctx == NULL)
		return LIM_REAL_CU(cuCtxDestroy)(ctx);
	lim_compute_ctx_gone(ctx);
	CTX_DESTROY(LIM_REAL_CU(cuCtxDestroy)(ctx))
}

/* primary_gone gives back the memory of dev's primary context once the
 * driver says it is no longer active (released for the last time, or
 * reset). */
static CUresult primary_gone(CUresult r, CUdevice dev)
{
	if (r != CUDA_SUCCESS || !lim_memory_limited())
		return r;
	unsigned int flags;
	int active = 1;
	if (LIM_CALL(lim_primary_state_fn, cuDevicePrimaryCtxGetState)(dev, &flags, &active) != CUDA_SUCCESS ||
	    active)
		return r;
	uint64_t n = drop(NULL, dev);
	if (n)
		lim_acct_release(n);
	return r;
}

LIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	lim_compute_ctx_gone(NULL); /* the primary context's events may go */
	return primary_gone(LIM_REAL_CU(cuDevicePrimaryCtxRelease_v2)(dev), dev);
}

LIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	lim_compute_ctx_gone(NULL); /* the primary context's events may go */
	return primary_gone(LIM_REAL_CU(cuDevicePrimaryCtxRelease)(dev), dev);
}

LIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	lim_compute_ctx_gone(NULL); /* the primary context's events may go */
	return primary_gone(LIM_REAL_CU(cuDevicePrimaryCtxReset_v2)(dev), dev);
}

LIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	lim_compute_ctx_gone(NULL); /* the primary context's events may go */
	return primary_gone(LIM_REAL_CU(cuDevicePrimaryCtxReset)(dev), dev);
}
