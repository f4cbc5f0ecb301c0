/*
 * Device memory beyond cuMemAlloc: the entry points of virtual memory
 * management, memory pools and cuCtxSetLimit whose signatures the
 * generated stubs cannot take (enums, arrays of descriptors, void *
 * values, structs other than CUmemAllocationProp), and the _ptsz variants
 * of the stream-ordered allocation calls. Each unpacks its arguments into
 * explicit fields for the server, which checks them (remote/server
 * virtual.go, pools.go, ctxlimit.go).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gm_internal.h"
#include "gm_wire.h"
#include "zz_calls.h"

#define GM_PTSZ(s) ((s) == NULL ? CU_STREAM_PER_THREAD : (s))

/* The most access descriptors one call carries (proto.MaxMemAccessDescs). */
#define GM_MAX_ACCESS_DESCS 64
/* One descriptor on the wire: location type, location id, flags, each 32
 * bits little-endian (proto.MemAccessDescSize). */
#define GM_ACCESS_DESC_SIZE 12

static void gm_put_le32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

/* gm_access_blob encodes count descriptors into buf (GM_MAX_ACCESS_DESCS
 * records); 0 when there are none or too many. */
static size_t gm_access_blob(unsigned char *buf, const CUmemAccessDesc *desc, size_t count)
{
	if (desc == NULL || count == 0 || count > GM_MAX_ACCESS_DESCS)
		return 0;
	for (size_t i = 0; i < count; i++) {
		unsigned char *r = buf + i * GM_ACCESS_DESC_SIZE;
		gm_put_le32(r, (uint32_t)desc[i].location.type);
		gm_put_le32(r + 4, (uint32_t)desc[i].location.id);
		gm_put_le32(r + 8, (uint32_t)desc[i].flags);
	}
	return count * GM_ACCESS_DESC_SIZE;
}

/* cuCtxSetLimit: the server charges what the limit costs in device memory
 * to the quota and refuses what does not fit (CUDA_ERROR_OUT_OF_MEMORY). */
GM_EXPORT CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value)
{
	return gm_rpc_cuCtxSetLimit((unsigned int)limit, value);
}

GM_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
							 CUmemAllocationGranularity_flags option)
{
	return gm_rpc_cuMemGetAllocationGranularity(granularity, prop, (unsigned int)option);
}

GM_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	unsigned char blob[GM_MAX_ACCESS_DESCS * GM_ACCESS_DESC_SIZE];
	size_t n = gm_access_blob(blob, desc, count);
	if (n == 0)
		return gm_refuse("cuMemSetAccess", "desc", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuMemSetAccess(ptr, size, blob, n);
}

GM_EXPORT CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	if (location == NULL)
		return gm_refuse("cuMemGetAccess", "location", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuMemGetAccess(flags, (unsigned int)location->type, location->id, ptr);
}

/* addr is any address of a mapping: a device address, whatever its type. */
GM_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	return gm_rpc_cuMemRetainAllocationHandle(handle, (CUdeviceptr)(uintptr_t)addr);
}

GM_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return gm_rpc_cuMemAllocAsync(dptr, bytesize, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	return gm_rpc_cuMemFreeAsync(dptr, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
							CUstream hStream)
{
	return gm_rpc_cuMemAllocFromPoolAsync(dptr, bytesize, pool, GM_PTSZ(hStream));
}

/* The pool's Windows security attributes do not travel (Linux has none),
 * nor its reserved bytes. */
GM_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	if (poolProps == NULL)
		return gm_refuse("cuMemPoolCreate", "poolProps", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuMemPoolCreate(pool, (unsigned int)poolProps->allocType, (unsigned int)poolProps->handleTypes,
				      (unsigned int)poolProps->location.type, poolProps->location.id,
				      poolProps->maxSize, poolProps->usage);
}

/* gm_pool_attr_size: the size of an attribute's value: the reuse policies
 * (1 to 3) are ints, the others cuuint64_t; 0 for an attribute gpumux does
 * not forward (newer ones, which describe the pool's creation). */
static int gm_pool_attr_size(CUmemPool_attribute attr)
{
	if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
	    attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
		return 4;
	if (attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && attr <= CU_MEMPOOL_ATTR_USED_MEM_HIGH)
		return 8;
	return 0;
}

GM_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	int n = gm_pool_attr_size(attr);
	if (value == NULL || n == 0)
		return gm_refuse("cuMemPoolSetAttribute", value == NULL ? "value" : "attr", CUDA_ERROR_INVALID_VALUE);
	uint64_t v = n == 4 ? (uint64_t)(int64_t) * (const int *)value : *(const cuuint64_t *)value;
	return gm_rpc_cuMemPoolSetAttribute(pool, (unsigned int)attr, v);
}

GM_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	int n = gm_pool_attr_size(attr);
	if (value == NULL || n == 0)
		return gm_refuse("cuMemPoolGetAttribute", value == NULL ? "value" : "attr", CUDA_ERROR_INVALID_VALUE);
	unsigned long long v = 0;
	CUresult r = gm_rpc_cuMemPoolGetAttribute(pool, (unsigned int)attr, &v);
	if (r != CUDA_SUCCESS)
		return r;
	if (n == 4)
		*(int *)value = (int)v;
	else
		*(cuuint64_t *)value = v;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	unsigned char blob[GM_MAX_ACCESS_DESCS * GM_ACCESS_DESC_SIZE];
	size_t n = gm_access_blob(blob, map, count);
	if (n == 0)
		return gm_refuse("cuMemPoolSetAccess", "map", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuMemPoolSetAccess(pool, blob, n);
}

GM_EXPORT CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
	if (flags == NULL || location == NULL)
		return gm_refuse("cuMemPoolGetAccess", flags == NULL ? "flags" : "location", CUDA_ERROR_INVALID_VALUE);
	unsigned int f = 0;
	CUresult r = gm_rpc_cuMemPoolGetAccess(&f, memPool, (unsigned int)location->type, location->id);
	if (r == CUDA_SUCCESS)
		*flags = (CUmemAccess_flags)f;
	return r;
}
