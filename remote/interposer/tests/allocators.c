/* What PyTorch's two other allocators do, within the token's quota
 * (GM_TEST_QUOTA bytes): expandable segments (virtual memory management)
 * and cudaMallocAsync (stream-ordered allocation from pools); and
 * cuCtxSetLimit charged to the quota. */
#include "t.h"

CUresult cuCtxSetLimit(CUlimit limit, size_t value);
CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit);
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option);
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr);
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev);
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev);
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count);
CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location);

#define MIB ((size_t)1 << 20)

/* PyTorch's ExpandableSegment: reserve addresses for more than the
 * device's memory, then create, map and grant access to 2 MiB pieces as
 * the segment grows; copy and set through them; unmap and release. */
static void expandable_segments(size_t quota)
{
	size_t total = 0, gran = 0;
	CHECK(cuDeviceTotalMem_v2(&total, 0));
	ASSERT(total == quota);

	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	ASSERT(gran == 2 * MIB);
	EXPECT(cuMemGetAllocationGranularity(&gran, NULL, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);

	/* Fabric first, as PyTorch tries it: not supported, so it falls back. */
	CUmemGenericAllocationHandle h[3];
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
	EXPECT(cuMemCreate(&h[0], gran, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
	prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

	size_t reserve = ((total + total / 8 + gran - 1) / gran) * gran;
	CUdeviceptr base = 0;
	REQUIRE(cuMemAddressReserve(&base, reserve, 0, 0, 0));
	for (int i = 0; i < 3; i++) {
		REQUIRE(cuMemCreate(&h[i], gran, &prop, 0));
		CHECK(cuMemMap(base + i * gran, gran, 0, h[i], 0));
	}
	CUmemAccessDesc desc;
	memset(&desc, 0, sizeof desc);
	desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	desc.location.id = 0;
	desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CHECK(cuMemSetAccess(base, 3 * gran, &desc, 1));
	EXPECT(cuMemSetAccess(base, 3 * gran, &desc, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemSetAccess(base, 3 * gran, NULL, 1), CUDA_ERROR_INVALID_VALUE);

	unsigned long long flags = 0;
	CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
	CHECK(cuMemGetAccess(&flags, &loc, base + gran));
	ASSERT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemAllocationProp got;
	CHECK(cuMemGetAllocationPropertiesFromHandle(&got, h[1]));
	ASSERT(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
	       got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

	/* A tensor across the first two pieces, copied and set, and a device
	 * copy into the third. */
	size_t n = 1 << 16;
	unsigned char *src = malloc(n), *dst = malloc(n);
	for (size_t i = 0; i < n; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	CUdeviceptr t = base + gran - n / 2;
	CHECK(cuMemcpyHtoD_v2(t, src, n));
	CHECK(cuMemcpyDtoD_v2(base + 2 * gran, t, n));
	memset(dst, 0, n);
	CHECK(cuMemcpyDtoH_v2(dst, base + 2 * gran, n));
	ASSERT(memcmp(src, dst, n) == 0);
	CHECK(cuMemsetD32_v2(t, 0x5a5a5a5a, n / 4));
	CHECK(cuMemcpyDtoH_v2(dst, t, n));
	ASSERT(dst[0] == 0x5a && dst[n / 2] == 0x5a && dst[n - 1] == 0x5a);
	CUdeviceptr rbase = 0;
	size_t rsize = 0;
	CHECK(cuMemGetAddressRange_v2(&rbase, &rsize, t + n - 1));
	ASSERT(rbase == base + gran && rsize == gran);
	/* Past the mapped pieces, the addresses are only reserved. */
	EXPECT(cuMemcpyHtoD_v2(base + 3 * gran, src, 1), CUDA_ERROR_INVALID_VALUE);

	/* Physical memory past the quota is refused before the driver. */
	CUmemGenericAllocationHandle big;
	EXPECT(cuMemCreate(&big, ((quota / gran) + 1) * gran, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);

	/* Shrink: unmap the last piece, release it; the retain of a mapped
	 * piece is released too. */
	CUmemGenericAllocationHandle again = 0;
	CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(base + 10)));
	ASSERT(again == h[0]);
	CHECK(cuMemRelease(again));
	CHECK(cuMemUnmap(base + 2 * gran, gran));
	CHECK(cuMemRelease(h[2]));
	EXPECT(cuMemRelease(h[2]), CUDA_ERROR_INVALID_VALUE);
	/* Release while mapped (as PyTorch does after unmapping, in either
	 * order), then unmap: the memory goes then. */
	CHECK(cuMemRelease(h[0]));
	CHECK(cuMemRelease(h[1]));
	CHECK(cuMemcpyDtoH_v2(dst, t, 16));
	CHECK(cuMemUnmap(base, 2 * gran));
	CHECK(cuMemAddressFree(base, reserve));
	free(src);
	free(dst);
}

/* PyTorch's cudaMallocAsync backend: the device's default pool, its
 * release threshold raised, allocations and frees on streams, statistics,
 * trimming; and a pool of its own. */
static void stream_ordered(size_t quota)
{
	CUstream s;
	CHECK(cuStreamCreate(&s, 0));
	CUmemoryPool pool = NULL, cur = NULL;
	CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
	CHECK(cuDeviceGetMemPool(&cur, 0));
	ASSERT(pool != NULL && pool == cur);
	cuuint64_t keep = ~(cuuint64_t)0, v = 0;
	CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
	ASSERT(v == keep);
	int reuse = 0;
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
	ASSERT(reuse == 1);
	EXPECT(cuMemPoolGetAttribute(pool, (CUmemPool_attribute)99, &v), CUDA_ERROR_INVALID_VALUE);

	CUdeviceptr a = 0, b = 0;
	CHECK(cuMemAllocAsync(&a, 4 * MIB, s));
	CHECK(cuMemAllocAsync_ptsz(&b, MIB, NULL));
	unsigned int pattern[256], back[256];
	for (int i = 0; i < 256; i++)
		pattern[i] = 0x1000u + (unsigned)i;
	CHECK(cuMemcpyHtoDAsync_v2(a + MIB, pattern, sizeof pattern, s));
	CHECK(cuMemcpyDtoHAsync_v2(back, a + MIB, sizeof back, s));
	ASSERT(memcmp(pattern, back, sizeof back) == 0);
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
	ASSERT(v == 5 * MIB);
	CUdeviceptr c = 0;
	EXPECT(cuMemAllocAsync(&c, quota, s), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cuMemFreeAsync(a, s));
	CHECK(cuMemFreeAsync_ptsz(b, NULL));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
	ASSERT(v == 0);
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
	ASSERT(v > 0 && v <= quota);
	CHECK(cuMemPoolTrimTo(pool, 0));
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
	ASSERT(v == 0);
	/* The freed memory is the quota's again: all of it, at once. */
	CHECK(cuMemAllocAsync(&c, quota, s));
	CHECK(cuMemFreeAsync(c, s));

	CUmemPoolProps props;
	memset(&props, 0, sizeof props);
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	CUmemoryPool mine = NULL;
	CHECK(cuMemPoolCreate(&mine, &props));
	CHECK(cuDeviceSetMemPool(0, mine));
	CHECK(cuMemAllocAsync(&a, MIB, s));
	CHECK(cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v));
	ASSERT(v == MIB);
	CHECK(cuMemFreeAsync(a, s));
	CHECK(cuMemAllocFromPoolAsync(&a, MIB, pool, s));
	CHECK(cuMemFree_v2(a));
	CUmemAccess_flags af = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
	CHECK(cuMemPoolGetAccess(&af, mine, &loc));
	ASSERT(af == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CUmemAccessDesc desc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK(cuMemPoolSetAccess(mine, &desc, 1));
	CHECK(cuMemPoolDestroy(mine));
	CHECK(cuDeviceGetMemPool(&cur, 0));
	ASSERT(cur == pool);
	EXPECT(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuStreamDestroy_v2(s));
}

/* cuCtxSetLimit: the heap's growth is charged to the quota. */
static void limits(size_t quota)
{
	size_t heap = 0, v = 0;
	CHECK(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
	CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap + quota / 2));
	CHECK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
	ASSERT(v == heap + quota / 2);
	CUdeviceptr p;
	EXPECT(cuMemAlloc_v2(&p, quota / 2 + 1), CUDA_ERROR_OUT_OF_MEMORY);
	EXPECT(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap + quota + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap));
	CHECK(cuMemAlloc_v2(&p, quota));
	CHECK(cuMemFree_v2(p));
	EXPECT(cuCtxSetLimit(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, 4), 215 /* CUDA_ERROR_UNSUPPORTED_LIMIT */);
}

/* Every new name is handed out by cuGetProcAddress, from the CUDA version
 * that introduced it (cudaTypedefs.h). */
static void proc_addresses(void)
{
	static const struct {
		const char *name;
		int version;
	} names[] = {
		{"cuMemCreate", 10020},	       {"cuMemAddressReserve", 10020}, {"cuMemMap", 10020},
		{"cuMemSetAccess", 10020},     {"cuMemRetainAllocationHandle", 11000},
		{"cuMemAllocAsync", 11020},    {"cuMemFreeAsync", 11020},      {"cuDeviceGetDefaultMemPool", 11020},
		{"cuMemPoolGetAttribute", 11020}, {"cuCtxSetLimit", 3010},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		void *fn = NULL;
		CUdriverProcAddressQueryResult st;
		CHECK(cuGetProcAddress_v2(names[i].name, &fn, names[i].version, 0, &st));
		ASSERT(fn != NULL && st == CU_GET_PROC_ADDRESS_SUCCESS);
		EXPECT(cuGetProcAddress_v2(names[i].name, &fn, names[i].version - 10, 0, &st), CUDA_ERROR_NOT_FOUND);
	}
	void *ptsz = NULL;
	CHECK(cuGetProcAddress("cuMemAllocAsync", &ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
	ASSERT(ptsz == (void *)cuMemAllocAsync_ptsz);
}

int main(void)
{
	size_t quota = t_quota();
	t_setup();
	expandable_segments(quota);
	stream_ordered(quota);
	limits(quota);
	proc_addresses();
	CUdeviceptr p;
	/* Everything came back. */
	CHECK(cuMemAlloc_v2(&p, quota));
	CHECK(cuMemFree_v2(p));
	return t_done("allocators");
}
