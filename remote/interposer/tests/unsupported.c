/* Entry points that are not forwarded, cuGetProcAddress, cuGetExportTable
 * and the local error strings. Runs without a server too: none of this
 * needs one. */
#include "t.h"

CUresult cuGraphAddHostNode(void *phGraphNode, void *hGraph, const void *dependencies, size_t numDependencies,
			    const void *nodeParams);
CUresult cuMemAlloc(unsigned int *dptr, unsigned int bytesize); /* version 1 */
CUresult cuCtxPushCurrent(CUcontext ctx);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuLibraryLoadFromFile(void *library, const char *fileName, void *jitOptions, void **jitOptionsValues,
			       unsigned int numJitOptions, void *libraryOptions, void **libraryOptionValues,
			       unsigned int numLibraryOptions);

typedef CUresult (*host_node_fn)(void *, void *, const void *, size_t, const void *);

static void *proc(const char *sym, int version, cuuint64_t flags, CUresult want_r,
		  CUdriverProcAddressQueryResult want_status)
{
	void *fn = (void *)1;
	CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)77;
	CUresult r = cuGetProcAddress_v2(sym, &fn, version, flags, &st);
	if (r != want_r || st != want_status) {
		printf("FAIL: cuGetProcAddress_v2(%s, %d, %llu) = %d status %d, want %d status %d\n", sym, version,
		       (unsigned long long)flags, (int)r, (int)st, (int)want_r, (int)want_status);
		t_failures++;
	}
	if (r != CUDA_SUCCESS && fn != NULL) {
		printf("FAIL: cuGetProcAddress_v2(%s) failed but set pfn\n", sym);
		t_failures++;
	}
	return fn;
}

#define OK CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS

int main(void)
{
	/* Unsupported calls: NOT_SUPPORTED, whatever their arguments. */
	EXPECT(cuGraphAddHostNode(NULL, NULL, NULL, 0, NULL), CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(cuGraphAddHostNode((void *)&t_failures, NULL, NULL, 3, NULL), CUDA_ERROR_NOT_SUPPORTED);
	unsigned int p32;
	EXPECT(cuMemAlloc(&p32, 16), CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(cuLibraryLoadFromFile(NULL, NULL, NULL, NULL, 0, NULL, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
	const void *table = (const void *)1;
	CUuuid id;
	memset(&id, 0, sizeof id);
	EXPECT(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
	ASSERT(table == NULL);

	/* cuGetProcAddress: the newest version not newer than asked for. */
	ASSERT(proc("cuMemAlloc", 12000, 0, OK) == (void *)cuMemAlloc_v2);
	ASSERT(proc("cuMemAlloc", 3020, 0, OK) == (void *)cuMemAlloc_v2);
	ASSERT(proc("cuMemAlloc", 2000, 0, OK) == (void *)cuMemAlloc);
	ASSERT(proc("cuCtxCreate", 3020, 0, OK) == (void *)cuCtxCreate_v2);
	ASSERT(proc("cuCtxCreate", 12000, 0, OK) == (void *)cuCtxCreate_v3);
	ASSERT(proc("cuCtxCreate", 12080, 0, OK) == (void *)cuCtxCreate_v4);
	ASSERT(proc("cuCtxCreate", 2000, 0, OK) == (void *)cuCtxCreate);
	ASSERT(proc("cuStreamDestroy", 12000, 0, OK) == (void *)cuStreamDestroy_v2);
	ASSERT(proc("cuStreamDestroy", 3020, 0, OK) == (void *)cuStreamDestroy);
	ASSERT(proc("cuCtxPushCurrent", 12000, 0, OK) == (void *)cuCtxPushCurrent_v2);
	ASSERT(proc("cuDeviceGetUuid", 11040, 0, OK) == (void *)cuDeviceGetUuid_v2);
	ASSERT(proc("cuDeviceGetUuid", 11000, 0, OK) == (void *)cuDeviceGetUuid);
	ASSERT(proc("cuEventElapsedTime", 12080, 0, OK) == (void *)cuEventElapsedTime_v2);
	ASSERT(proc("cuEventElapsedTime", 12000, 0, OK) == (void *)cuEventElapsedTime);
	ASSERT(proc("cuInit", 12000, 0, OK) == (void *)cuInit);
	ASSERT(proc("cuCtxSynchronize", 13000, 0, OK) == (void *)cuCtxSynchronize_v2);
	ASSERT(proc("cuCtxSynchronize", 12080, 0, OK) == (void *)cuCtxSynchronize);
	ASSERT(proc("cuCtxGetDevice", 13000, 0, OK) == (void *)cuCtxGetDevice_v2);
	ASSERT(proc("cuGetProcAddress", 12000, 0, OK) == (void *)cuGetProcAddress_v2);
	ASSERT(proc("cuGetProcAddress", 11030, 0, OK) == (void *)cuGetProcAddress);
	ASSERT(proc("cuGetErrorString", 12000, 0, OK) == (void *)cuGetErrorString);
	ASSERT(proc("cuLaunchKernel", 12000, 0, OK) == (void *)cuLaunchKernel);
	ASSERT(proc("cuMemAlloc_v2", 12000, 0, OK) == (void *)cuMemAlloc_v2);
	/* per-thread default stream */
	ASSERT(proc("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, OK) ==
	       (void *)cuLaunchKernel_ptsz);
	ASSERT(proc("cuMemsetD8", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, OK) ==
	       (void *)cuMemsetD8_v2_ptds);
	ASSERT(proc("cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, OK) ==
	       (void *)cuMemcpyHtoDAsync_v2_ptsz);
	ASSERT(proc("cuMemcpyHtoDAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, OK) ==
	       (void *)cuMemcpyHtoDAsync_v2);
	ASSERT(proc("cuInit", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, OK) == (void *)cuInit);

	/* An unsupported call: its stub, which answers NOT_SUPPORTED. */
	void *g = proc("cuGraphAddHostNode", 12000, 0, OK);
	ASSERT(g == (void *)cuGraphAddHostNode);
	if (g != NULL)
		EXPECT(((host_node_fn)g)(NULL, NULL, NULL, 0, NULL), CUDA_ERROR_NOT_SUPPORTED);
	ASSERT(proc("cuGraphInstantiate", 12000, 0, OK) != NULL);
	ASSERT(proc("cuStreamBeginCapture", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, OK) != NULL);

	/* Unknown, or newer than asked for. */
	proc("cuNoSuchCall", 12000, 0, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	proc("cuMemAllo", 12000, 0, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	proc("", 12000, 0, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	proc("cuFuncGetParamInfo", 12000, 0, CUDA_ERROR_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	ASSERT(proc("cuFuncGetParamInfo", 12040, 0, OK) == (void *)cuFuncGetParamInfo);
	void *fn = (void *)1;
	EXPECT(cuGetProcAddress(NULL, &fn, 12000, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuGetProcAddress("cuInit", NULL, 12000, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuGetProcAddress("cuInit", &fn, 12000, 0));
	ASSERT(fn == (void *)cuInit);

	/* Error strings, answered locally. */
	const char *s = NULL;
	CHECK(cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
	ASSERT(s != NULL && strcmp(s, "an illegal memory access was encountered") == 0);
	CHECK(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &s));
	ASSERT(s != NULL && strcmp(s, "CUDA_ERROR_NOT_SUPPORTED") == 0);
	CHECK(cuGetErrorName(CUDA_SUCCESS, &s));
	ASSERT(s != NULL && strcmp(s, "CUDA_SUCCESS") == 0);
	EXPECT(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	ASSERT(s == NULL);
	EXPECT(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
	return t_done("unsupported");
}
