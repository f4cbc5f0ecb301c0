/* Init, device queries (and their cache), the primary context, streams
 * and events. */
#include "t.h"

int main(void)
{
	int v = 0, n = 0, pi = 0;
	CUdevice dev = -1;
	char name[256];
	size_t total = 0, free_ = 0, mtotal = 0;

	CHECK(cuInit(0));
	CHECK(cuInit(0));
	CHECK(cuDriverGetVersion(&v));
	ASSERT(v >= 12000);
	EXPECT(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuDeviceGetCount(&n));
	ASSERT(n == 1); /* a token shows one device */
	CHECK(cuDeviceGet(&dev, 0));
	ASSERT(dev == 0);
	EXPECT(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
	CHECK(cuDeviceGetName(name, sizeof name, 0));
	ASSERT(strlen(name) > 0);
	char small[4] = "xxx";
	CHECK(cuDeviceGetName(small, sizeof small, 0));
	ASSERT(strlen(small) == 3 && strncmp(small, name, 3) == 0);
	EXPECT(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuDeviceTotalMem_v2(&total, 0));
	ASSERT(total > 0);

	CHECK(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
	ASSERT(pi == 9);
	CHECK(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
	ASSERT(pi == 0);
	/* Cached repeats answer the same, for every attribute. */
	for (int a = 1; a < 120; a++) {
		int x = -1, y = -2;
		CUresult r1 = cuDeviceGetAttribute(&x, (CUdevice_attribute)a, 0);
		CUresult r2 = cuDeviceGetAttribute(&y, (CUdevice_attribute)a, 0);
		ASSERT(r1 == r2);
		ASSERT(r1 != CUDA_SUCCESS || x == y);
	}
	CHECK(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
	ASSERT(pi == 132);
	EXPECT(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 7), CUDA_ERROR_INVALID_DEVICE);

	CUuuid u1, u2;
	memset(&u1, 0, sizeof u1);
	memset(&u2, 1, sizeof u2);
	CHECK(cuDeviceGetUuid(&u1, 0));
	CHECK(cuDeviceGetUuid_v2(&u2, 0));
	ASSERT(memcmp(&u1, &u2, sizeof u1) == 0);

	/* No context yet. */
	CUcontext cur = (CUcontext)1;
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == NULL);
	CUdeviceptr p;
	EXPECT(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);

	CUcontext ctx = NULL;
	unsigned int flags = 99;
	int active = 99;
	CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
	ASSERT(ctx != NULL);
	CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	ASSERT(active == 1);
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == ctx);
	CHECK(cuCtxGetDevice(&dev));
	ASSERT(dev == 0);
	CHECK(cuMemGetInfo_v2(&free_, &mtotal));
	ASSERT(free_ <= mtotal && mtotal > 0);

	CUstream s;
	CUevent e1, e2;
	float ms = -1;
	CHECK(cuStreamCreate(&s, 0));
	CHECK(cuEventCreate(&e1, 0));
	CHECK(cuEventCreate(&e2, 0));
	CHECK(cuEventRecord(e1, s));
	CHECK(cuStreamQuery(s));
	CHECK(cuEventRecord(e2, s));
	CHECK(cuStreamWaitEvent(s, e2, 0));
	CHECK(cuEventSynchronize(e2));
	CHECK(cuEventQuery(e2));
	CHECK(cuEventElapsedTime(&ms, e1, e2));
	ASSERT(ms >= 0);
	CHECK(cuStreamSynchronize(s));
	CHECK(cuStreamSynchronize(NULL));
	CHECK(cuStreamSynchronize(CU_STREAM_LEGACY));
	CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
	CHECK(cuEventDestroy_v2(e1));
	CHECK(cuEventDestroy_v2(e2));
	EXPECT(cuEventQuery(e2), CUDA_ERROR_INVALID_HANDLE);
	CHECK(cuStreamDestroy_v2(s));
	EXPECT(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
	CHECK(cuCtxSynchronize());

	/* The primary context's state, answered here while it is retained:
	 * new flags and the last release are seen. */
	CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	ASSERT(active == 1);
	CHECK(cuDevicePrimaryCtxSetFlags_v2(0, 0x4)); /* CU_CTX_SCHED_BLOCKING_SYNC */
	CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	ASSERT(active == 1 && flags == 0x4);
	CHECK(cuDevicePrimaryCtxRelease_v2(0));
	CHECK(cuDevicePrimaryCtxGetState(0, &flags, &active));
	ASSERT(active == 0);
	return t_done("basic");
}
