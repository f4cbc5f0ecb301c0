/*
 * Shared by the interposer's C test programs: the CUDA driver API they
 * call (gm_abi.h has the types; CI has no cuda.h) and small checking
 * helpers. A program prints every failed check and exits non-zero if any
 * failed; remote/ctest runs them against gpumux-remoted on the fake
 * backend.
 */
#ifndef GPUMUX_TESTS_T_H
#define GPUMUX_TESTS_T_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gm_abi.h"

CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active);
CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
			CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuCtxSynchronize(void);
CUresult cuCtxSynchronize_v2(CUcontext ctx);
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx);
CUresult cuCtxGetDevice(CUdevice *device);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult cuModuleLoad(CUmodule *module, const char *fname);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
			    void **optionValues);
CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name);
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc);
CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value);
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
							     size_t dynamicSMemSize, unsigned int flags);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus);
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);

static int t_failures;

static inline const char *t_name(CUresult r)
{
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL)
		return "?";
	return s;
}

/* EXPECT(call, want): call must return want. */
#define EXPECT(call, want)                                                                                  \
	do {                                                                                                \
		CUresult t_r_ = (call), t_w_ = (want);                                                      \
		if (t_r_ != t_w_) {                                                                         \
			printf("FAIL %s:%d: %s = %d (%s), want %d (%s)\n", __FILE__, __LINE__, #call, (int)t_r_, \
			       t_name(t_r_), (int)t_w_, t_name(t_w_));                                       \
			fflush(stdout);                                                                     \
			t_failures++;                                                                       \
		}                                                                                           \
	} while (0)

#define CHECK(call) EXPECT(call, CUDA_SUCCESS)

/* ASSERT(cond): a plain condition. */
#define ASSERT(cond)                                                                     \
	do {                                                                             \
		if (!(cond)) {                                                           \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
			fflush(stdout);                                                  \
			t_failures++;                                                    \
		}                                                                        \
	} while (0)

/* REQUIRE: like CHECK, but the test cannot go on without it. */
#define REQUIRE(call)                                                     \
	do {                                                              \
		int t_before_ = t_failures;                               \
		CHECK(call);                                              \
		if (t_failures != t_before_) {                            \
			printf("FAIL: giving up after %s\n", #call);      \
			exit(1);                                          \
		}                                                         \
	} while (0)

static inline double t_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* t_done prints the verdict and returns the exit status. */
static inline int t_done(const char *name)
{
	if (t_failures) {
		printf("%s: %d check(s) failed\n", name, t_failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

/* t_quota returns the token's quota the test runs with (GM_TEST_QUOTA),
 * or exits if it is not set. */
static inline size_t t_quota(void)
{
	const char *q = getenv("GM_TEST_QUOTA");
	if (q == NULL) {
		printf("FAIL: GM_TEST_QUOTA is not set\n");
		exit(1);
	}
	return strtoull(q, NULL, 0);
}

/* t_setup: cuInit, device 0's primary context made current. */
static inline CUcontext t_setup(void)
{
	CUdevice dev;
	CUcontext ctx;
	REQUIRE(cuInit(0));
	REQUIRE(cuDeviceGet(&dev, 0));
	REQUIRE(cuDevicePrimaryCtxRetain(&ctx, dev));
	REQUIRE(cuCtxSetCurrent(ctx));
	return ctx;
}

/* The fake backend's module (remote/fakecuda/doc.go). */
static const char t_fake_module[] = "gpumux-fake-module 1\n"
				    "# the interposer's tests\n"
				    "kernel fill_u32 8,4,8\n"
				    "kernel vecadd_f32 8,8,8,4\n"
				    "kernel fault\n"
				    "kernel noop\n"
				    "kernel mixed 1,8,2,4\n"
				    "global counter 4\n";

#endif
