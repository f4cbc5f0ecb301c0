/*
 * Shared by the limiter's C test programs (run by timeslice/ctest): the
 * CUDA driver and NVML calls they make (lim.h has the types; CI has no
 * cuda.h) and small checking helpers. A program prints every failed check
 * and exits non-zero if any failed.
 */
#ifndef GPUMUX_LIMITER_TESTS_T_H
#define GPUMUX_LIMITER_TESTS_T_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lim.h"
#include "fake.h"

CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
			    unsigned int ElementSizeBytes);
CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes, unsigned int Height,
			 unsigned int ElementSizeBytes);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuMemFree(CUdeviceptr_v1 dptr);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray);
CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray);
CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray);
CUresult cuArrayDestroy(CUarray hArray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
				unsigned int numMipmapLevels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemFreeHost(void *p);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus);
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);
CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
						   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
						   size_t dynamicSMemSize, int blockSizeLimit, unsigned int flags);
CUresult cuTexRefSetMipmapLevelBias(CUtexref hTexRef, float bias);

#define MiB (1024ull * 1024ull)

static int failures __attribute__((unused));

static const char *lim_test_name __attribute__((unused)) = "?";

#define EXPECT(call, want)                                                                            \
	do {                                                                                          \
		CUresult _r = (call);                                                                 \
		if (_r != (want)) {                                                                   \
			fprintf(stderr, "%s:%d: %s: %s = %d, want %d (%s)\n", __FILE__, __LINE__,     \
				lim_test_name, #call, (int)_r, (int)(want), #want);                   \
			failures++;                                                                   \
		}                                                                                     \
	} while (0)

#define CHECK(call) EXPECT(call, CUDA_SUCCESS)

#define ASSERT(cond)                                                                              \
	do {                                                                                      \
		if (!(cond)) {                                                                    \
			fprintf(stderr, "%s:%d: %s: %s is false\n", __FILE__, __LINE__, lim_test_name, \
				#cond);                                                           \
			failures++;                                                               \
		}                                                                                 \
	} while (0)

#define EQ(got, want)                                                                                     \
	do {                                                                                              \
		unsigned long long _g = (unsigned long long)(got), _w = (unsigned long long)(want);       \
		if (_g != _w) {                                                                           \
			fprintf(stderr, "%s:%d: %s: %s = %llu, want %s = %llu\n", __FILE__, __LINE__,     \
				lim_test_name, #got, _g, #want, _w);                                      \
			failures++;                                                                       \
		}                                                                                         \
	} while (0)

#define REQUIRE(call)                                                                         \
	do {                                                                                  \
		CUresult _r = (call);                                                         \
		if (_r != CUDA_SUCCESS) {                                                     \
			fprintf(stderr, "%s:%d: %s: %s = %d\n", __FILE__, __LINE__, lim_test_name, \
				#call, (int)_r);                                              \
			exit(2);                                                              \
		}                                                                             \
	} while (0)

static inline int done(void)
{
	if (failures) {
		fprintf(stderr, "%s: %d failures\n", lim_test_name, failures);
		return 1;
	}
	return 0;
}

static inline unsigned long long env_u64(const char *name)
{
	const char *v = getenv(name);
	if (v == NULL) {
		fprintf(stderr, "%s is not set\n", name);
		exit(2);
	}
	return strtoull(v, NULL, 0);
}

/* fake is the fake driver's handle: the same file the limiter loaded. */
static inline void *fake(void)
{
	const char *p = getenv("GM_TEST_FAKE_CUDA");
	void *h = p ? dlopen(p, RTLD_NOW | RTLD_NOLOAD) : NULL;
	if (h == NULL) {
		fprintf(stderr, "the fake driver is not loaded: %s\n", dlerror());
		exit(2);
	}
	return h;
}

/* fake_calls: how often the fake driver's function name was called. */
static inline int fake_calls(const char *name)
{
	int (*f)(const char *) = (int (*)(const char *))dlsym(fake(), "fake_calls");
	return f ? f(name) : -1;
}

static inline void *fake_sym(const char *name)
{
	return dlsym(fake(), name);
}

/* ctx makes the primary context of device 0 current. */
static inline CUcontext primary(void)
{
	CUdevice dev;
	CUcontext c;
	REQUIRE(cuInit(0));
	REQUIRE(cuDeviceGet(&dev, 0));
	REQUIRE(cuDevicePrimaryCtxRetain(&c, dev));
	REQUIRE(cuCtxSetCurrent(c));
	return c;
}

/* share_free is cuMemGetInfo_v2's free. */
static inline size_t share_free(void)
{
	size_t f = 0, t = 0;
	CHECK(cuMemGetInfo_v2(&f, &t));
	return f;
}

static inline void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

#endif
