/* Launches with a CUlaunchConfig and the cluster occupancy calls, on the
 * fake backend: cuLaunchKernelEx (kernelParams, extra, its _ptsz variant,
 * attributes: allow-listed, refused, events), cuOccupancyMaxActiveClusters,
 * cuOccupancyMaxPotentialClusterSize, cuCtxGetLimit, and the optional
 * outputs of cuModuleGetGlobal_v2 and cuFuncGetParamInfo. */
#include "t.h"

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config);
CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config);
CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit);

static CUlaunchConfig config(unsigned grid, unsigned block, CUstream s, CUlaunchAttribute *attrs, unsigned n)
{
	CUlaunchConfig c;
	memset(&c, 0, sizeof c);
	c.gridDimX = grid;
	c.gridDimY = c.gridDimZ = 1;
	c.blockDimX = block;
	c.blockDimY = c.blockDimZ = 1;
	c.hStream = s;
	c.attrs = attrs;
	c.numAttrs = n;
	return c;
}

static CUlaunchAttribute cluster(unsigned x)
{
	CUlaunchAttribute a;
	memset(&a, 0, sizeof a);
	a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	a.value.clusterDim.x = x;
	a.value.clusterDim.y = a.value.clusterDim.z = 1;
	return a;
}

static uint32_t word(CUdeviceptr d, size_t i)
{
	uint32_t v = 0;
	CHECK(cuMemcpyDtoH_v2(&v, d + 4 * i, 4));
	return v;
}

int main(void)
{
	t_setup();
	CUmodule m;
	REQUIRE(cuModuleLoadData(&m, t_fake_module));
	CUfunction fill;
	REQUIRE(cuModuleGetFunction(&fill, m, "fill_u32"));
	CUdeviceptr d;
	REQUIRE(cuMemAlloc_v2(&d, 64));
	CHECK(cuMemsetD32_v2(d, 0, 16));
	CUstream s;
	CHECK(cuStreamCreate(&s, 0));

	/* kernelParams, with allow-listed attributes. */
	CUlaunchAttribute attrs[4];
	attrs[0] = cluster(2);
	memset(&attrs[1], 0, sizeof attrs[1]);
	attrs[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
	attrs[1].value.priority = -1;
	memset(&attrs[2], 0, sizeof attrs[2]);
	attrs[2].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
	memset(&attrs[3], 0, sizeof attrs[3]);
	attrs[3].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
	attrs[3].value.programmaticStreamSerializationAllowed = 1;
	CUdeviceptr dst = d;
	uint32_t v = 0x11111111;
	uint64_t n = 4;
	void *params[] = {&dst, &v, &n};
	CUlaunchConfig c = config(2, 32, s, attrs, 4);
	CHECK(cuLaunchKernelEx(&c, fill, params, NULL));
	CHECK(cuStreamSynchronize(s));
	ASSERT(word(d, 0) == 0x11111111 && word(d, 3) == 0x11111111 && word(d, 4) == 0);

	/* extra, and the per-thread default stream variant. */
	unsigned char buf[24]; /* fill_u32's layout: 8-byte pointer, 4-byte value, 8-byte count at 16 */
	CUdeviceptr dst2 = d + 16;
	uint32_t v2 = 0x22222222;
	uint64_t n2 = 2;
	memset(buf, 0, sizeof buf);
	memcpy(buf, &dst2, 8);
	memcpy(buf + 8, &v2, 4);
	memcpy(buf + 16, &n2, 8);
	size_t size = sizeof buf;
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	c = config(1, 1, NULL, NULL, 0);
	CHECK(cuLaunchKernelEx_ptsz(&c, fill, NULL, extra));
	CHECK(cuCtxSynchronize());
	ASSERT(word(d, 4) == 0x22222222 && word(d, 5) == 0x22222222 && word(d, 6) == 0);

	/* An event attribute names one of this client's events. */
	CUevent ev;
	CHECK(cuEventCreate(&ev, 0));
	CUlaunchAttribute e;
	memset(&e, 0, sizeof e);
	e.id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
	e.value.launchCompletionEvent.event = ev;
	c = config(1, 1, s, &e, 1);
	CHECK(cuLaunchKernelEx(&c, fill, params, NULL));
	CHECK(cuStreamSynchronize(s));
	e.value.launchCompletionEvent.event = (CUevent)(uintptr_t)0x7777;
	CHECK(cuLaunchKernelEx(&c, fill, params, NULL)); /* async: the next call that waits reports it */
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);

	/* Attributes off the allow-list are refused by the server. */
	CUlaunchAttribute bad;
	memset(&bad, 0, sizeof bad);
	bad.id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
	c = config(1, 1, s, &bad, 1);
	CHECK(cuLaunchKernelEx(&c, fill, params, NULL));
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_NOT_SUPPORTED);
	bad.id = (CUlaunchAttributeID)99;
	CHECK(cuLaunchKernelEx(&c, fill, params, NULL));
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_NOT_SUPPORTED);

	/* The fake's checks: a cluster must divide the grid. */
	attrs[0] = cluster(2);
	c = config(3, 32, s, attrs, 1);
	CHECK(cuLaunchKernelEx(&c, fill, params, NULL));
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_VALUE);

	/* Checked here, nothing sent. */
	EXPECT(cuLaunchKernelEx(NULL, fill, params, NULL), CUDA_ERROR_INVALID_VALUE);
	c = config(1, 1, s, NULL, 1);
	EXPECT(cuLaunchKernelEx(&c, fill, params, NULL), CUDA_ERROR_INVALID_VALUE);
	c = config(1, 1, s, attrs, 33);
	EXPECT(cuLaunchKernelEx(&c, fill, params, NULL), CUDA_ERROR_INVALID_VALUE);
	c = config(1, 1, s, NULL, 0);
	EXPECT(cuLaunchKernelEx(&c, fill, params, extra), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernelEx(&c, fill, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernelEx(&c, NULL, params, NULL), CUDA_ERROR_INVALID_HANDLE);
	CHECK(cuCtxSynchronize());

	/* Cluster occupancy: the fake's 132 multiprocessors, 8 blocks of 256
	 * threads each, over the cluster size. */
	int clusters = 0;
	attrs[0] = cluster(2);
	c = config(4, 256, s, attrs, 1);
	CHECK(cuOccupancyMaxActiveClusters(&clusters, fill, &c));
	ASSERT(clusters == 132 / 2 * 8);
	c = config(4, 256, NULL, NULL, 0);
	CHECK(cuOccupancyMaxActiveClusters(&clusters, fill, &c));
	ASSERT(clusters == 132 * 8);
	int csize = 0;
	CHECK(cuOccupancyMaxPotentialClusterSize(&csize, fill, &c));
	ASSERT(csize == 8);
	c = config(4, 256, s, &bad, 1);
	EXPECT(cuOccupancyMaxActiveClusters(&clusters, fill, &c), CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(cuOccupancyMaxActiveClusters(NULL, fill, &c), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuOccupancyMaxPotentialClusterSize(&csize, fill, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuOccupancyMaxActiveClusters(&clusters, (CUfunction)(uintptr_t)0x7777, &c),
	       CUDA_ERROR_INVALID_HANDLE);

	/* Limits: the fake's, an H200's defaults. */
	size_t lim = 0;
	CHECK(cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE));
	ASSERT(lim == 1024);
	CHECK(cuCtxGetLimit(&lim, CU_LIMIT_MALLOC_HEAP_SIZE));
	ASSERT(lim == 8u << 20);
	EXPECT(cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);

	/* Optional outputs, as CUDA allows them (cuBLAS passes NULL sizes). */
	CUdeviceptr g = 0;
	size_t gsize = 0;
	CHECK(cuModuleGetGlobal_v2(&g, NULL, m, "counter"));
	CHECK(cuModuleGetGlobal_v2(NULL, &gsize, m, "counter"));
	ASSERT(g != 0 && gsize == 4);
	size_t off = 99;
	CHECK(cuFuncGetParamInfo(fill, 1, &off, NULL));
	ASSERT(off == 8);

	/* cuGetProcAddress: the versions cudaTypedefs.h names. */
	void *fn = NULL;
	CUdriverProcAddressQueryResult qr;
	CHECK(cuGetProcAddress_v2("cuLaunchKernelEx", &fn, 12000, 0, &qr));
	ASSERT(fn == (void *)cuLaunchKernelEx);
	CHECK(cuGetProcAddress_v2("cuLaunchKernelEx", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &qr));
	ASSERT(fn == (void *)cuLaunchKernelEx_ptsz);
	EXPECT(cuGetProcAddress_v2("cuLaunchKernelEx", &fn, 11050, 0, &qr), CUDA_ERROR_NOT_FOUND);
	ASSERT(qr == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	CHECK(cuGetProcAddress_v2("cuOccupancyMaxActiveClusters", &fn, 11070, 0, &qr));
	ASSERT(fn == (void *)cuOccupancyMaxActiveClusters);
	CHECK(cuGetProcAddress_v2("cuOccupancyMaxPotentialClusterSize", &fn, 12000, 0, &qr));
	ASSERT(fn == (void *)cuOccupancyMaxPotentialClusterSize);
	CHECK(cuGetProcAddress_v2("cuCtxGetLimit", &fn, 12000, 0, &qr));
	ASSERT(fn == (void *)cuCtxGetLimit);

	CHECK(cuEventDestroy_v2(ev));
	CHECK(cuStreamDestroy_v2(s));
	CHECK(cuMemFree_v2(d));
	return t_done("launchex");
}
