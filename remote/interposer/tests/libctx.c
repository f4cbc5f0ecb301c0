/* A library on two GPUs, as the CUDA runtime (and so PyTorch) uses one:
 * cuLibraryLoadData once, cuLibraryGetKernel once, then the same CUkernel
 * launched with device 0's primary context current and with device 1's.
 * Each context gets its own module and function (cuKernelGetFunction,
 * cuLibraryGetModule, cuLibraryGetGlobal differ per context); a context's
 * own function does not run in the other; a graph kernel node, attributes,
 * occupancy and parameter layout take the CUkernel; two threads resolving
 * it at once in two fresh contexts; a destroyed context and a released
 * primary one drop their modules, so cuLibraryUnload unloads exactly the
 * live ones. After cuLibraryUnload the program prints "UNLOADED" and waits
 * for a line on stdin, while remote/ctest (TestLibraryTwoDevices) checks
 * that the server holds no module. */
#include <pthread.h>

#include "t.h"

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
			   unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
			   unsigned int numLibraryOptions);
CUresult cuLibraryUnload(CUlibrary library);
CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library);
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name);
CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name);
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel);
CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev);
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev);
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);

enum { N = 256 };

#define MAX_DYNAMIC_SHARED ((CUfunction_attribute)8) /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */

/* fill launches k (fill_u32) over n words of d with value, in the current
 * context, and checks them by copying back. */
static void fill(CUkernel k, CUdeviceptr d, uint32_t value)
{
	uint64_t n = N;
	void *args[] = {&d, &value, &n};
	CHECK(cuLaunchKernel((CUfunction)k, 1, 1, 1, N, 1, 1, 0, NULL, args, NULL));
	uint32_t h[N];
	CHECK(cuMemcpyDtoH_v2(h, d, sizeof h));
	ASSERT(h[0] == value && h[N - 1] == value);
}

struct worker {
	CUkernel k;
	CUdevice dev;
	uint32_t value;
	CUresult r;
};

/* work launches the kernel in a context of its own, made for the thread. */
static void *work(void *arg)
{
	struct worker *w = arg;
	CUcontext c;
	CUdeviceptr d;
	w->r = cuCtxCreate_v2(&c, 0, w->dev);
	if (w->r != CUDA_SUCCESS)
		return NULL;
	if ((w->r = cuMemAlloc_v2(&d, N * 4)) == CUDA_SUCCESS) {
		uint64_t n = N;
		void *args[] = {&d, &w->value, &n};
		uint32_t h[N];
		w->r = cuLaunchKernel((CUfunction)w->k, 1, 1, 1, N, 1, 1, 0, NULL, args, NULL);
		if (w->r == CUDA_SUCCESS)
			w->r = cuMemcpyDtoH_v2(h, d, sizeof h);
		if (w->r == CUDA_SUCCESS && (h[0] != w->value || h[N - 1] != w->value))
			w->r = CUDA_ERROR_UNKNOWN;
		CUresult f = cuMemFree_v2(d);
		if (w->r == CUDA_SUCCESS)
			w->r = f;
	}
	CUresult r = cuCtxDestroy_v2(c);
	if (w->r == CUDA_SUCCESS)
		w->r = r;
	return NULL;
}

int main(void)
{
	REQUIRE(cuInit(0));
	CUcontext c0, c1;
	REQUIRE(cuDevicePrimaryCtxRetain(&c0, 0));
	REQUIRE(cuDevicePrimaryCtxRetain(&c1, 1));

	/* Loaded and looked up once, without a context: nothing on the server
	 * until a context needs it. */
	CUlibrary lib;
	REQUIRE(cuLibraryLoadData(&lib, t_fake_module, NULL, NULL, 0, NULL, NULL, 0));
	CUkernel k, again;
	REQUIRE(cuLibraryGetKernel(&k, lib, "fill_u32"));
	EXPECT(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_CONTEXT);

	CUdeviceptr d0, d1;
	CHECK(cuCtxSetCurrent(c0));
	REQUIRE(cuMemAlloc_v2(&d0, N * 4));
	fill(k, d0, 0xA0A0);
	CHECK(cuLibraryGetKernel(&again, lib, "fill_u32"));
	ASSERT(again == k); /* one handle per name */
	EXPECT(cuLibraryGetKernel(&again, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	CUfunction f0, f1;
	CUmodule m0, m1;
	CUdeviceptr g0, g1;
	size_t gs = 0;
	CHECK(cuKernelGetFunction(&f0, k));
	CHECK(cuLibraryGetModule(&m0, lib));
	CHECK(cuLibraryGetGlobal(&g0, &gs, lib, "counter"));
	ASSERT(gs == 4);

	CHECK(cuCtxSetCurrent(c1));
	REQUIRE(cuMemAlloc_v2(&d1, N * 4));
	fill(k, d1, 0xB1B1);
	CHECK(cuKernelGetFunction(&f1, k));
	CHECK(cuLibraryGetModule(&m1, lib));
	CHECK(cuLibraryGetGlobal(&g1, &gs, lib, "counter"));
	ASSERT(f0 != f1 && m0 != m1 && g0 != g1);
	ASSERT((void *)f1 != (void *)k);
	/* A context's own function is not the other's (a launch's error comes
	 * with the next call that waits). */
	uint64_t n = N;
	uint32_t v = 1;
	void *args[] = {&d1, &v, &n};
	CHECK(cuLaunchKernel(f0, 1, 1, 1, N, 1, 1, 0, NULL, args, NULL));
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_HANDLE);
	CUfunction fm;
	CHECK(cuModuleGetFunction(&fm, m1, "fill_u32"));
	ASSERT(fm == f1 || fm != f0);

	/* Device 0's memory still holds its value: each launch ran in its own
	 * context. */
	uint32_t h[N];
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuMemcpyDtoH_v2(h, d0, sizeof h));
	ASSERT(h[0] == 0xA0A0 && h[N - 1] == 0xA0A0);

	/* The kernel calls and the calls that take a CUfunction take the
	 * CUkernel in each context. */
	size_t off = 0, size = 0;
	CHECK(cuKernelGetParamInfo(k, 2, &off, &size));
	ASSERT(off == 16 && size == 8);
	CHECK(cuFuncGetParamInfo((CUfunction)k, 1, &off, &size));
	ASSERT(off == 8 && size == 4);
	int a0 = 0, a1 = 0, blocks = 0;
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuKernelSetAttribute(MAX_DYNAMIC_SHARED, 1024, k, 1));
	CHECK(cuKernelGetAttribute(&a1, MAX_DYNAMIC_SHARED, k, 1));
	CHECK(cuFuncGetAttribute(&a0, MAX_DYNAMIC_SHARED, f1));
	ASSERT(a1 == 1024 && a0 == 1024);
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuFuncGetAttribute(&a0, MAX_DYNAMIC_SHARED, (CUfunction)k));
	ASSERT(a0 != 1024); /* set in device 1's context only */
	CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, (CUfunction)k, 64, 0, 0));
	ASSERT(blocks > 0);

	/* A graph kernel node given the CUkernel, in device 1's context. */
	CHECK(cuCtxSetCurrent(c1));
	CUgraph g;
	CUgraphNode node;
	CUgraphExec e;
	uint32_t gv = 0xC2C2;
	void *gargs[] = {&d1, &gv, &n};
	CUDA_KERNEL_NODE_PARAMS p;
	memset(&p, 0, sizeof p);
	p.kern = k;
	p.gridDimX = p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = N, p.blockDimY = p.blockDimZ = 1;
	p.kernelParams = gargs;
	REQUIRE(cuGraphCreate(&g, 0));
	CHECK(cuGraphAddKernelNode_v2(&node, g, NULL, 0, &p));
	CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
	CHECK(cuGraphLaunch(e, NULL));
	CHECK(cuMemcpyDtoH_v2(h, d1, sizeof h));
	ASSERT(h[0] == 0xC2C2 && h[N - 1] == 0xC2C2);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));

	/* Two threads resolve the kernel at once, each in a fresh context it
	 * then destroys. */
	struct worker w[2] = {{k, 0, 0xD0D0, CUDA_ERROR_UNKNOWN}, {k, 1, 0xD1D1, CUDA_ERROR_UNKNOWN}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		REQUIRE(pthread_create(&th[i], NULL, work, &w[i]) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
	for (int i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		CHECK(w[i].r);
	}

	/* Device 1's primary context released and retained again: a new
	 * context, where the library loads again. */
	CHECK(cuMemFree_v2(d1));
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuDevicePrimaryCtxRelease_v2(1));
	REQUIRE(cuDevicePrimaryCtxRetain(&c1, 1));
	CHECK(cuCtxSetCurrent(c1));
	REQUIRE(cuMemAlloc_v2(&d1, N * 4));
	fill(k, d1, 0xE1E1);
	CUfunction f1b;
	CHECK(cuKernelGetFunction(&f1b, k));
	ASSERT(f1b != f1);

	/* Unloaded in both live contexts: the handles are gone. */
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuLibraryUnload(lib));
	EXPECT(cuModuleGetFunction(&fm, m0, "fill_u32"), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuLaunchKernel((CUfunction)k, 1, 1, 1, N, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuKernelGetFunction(&fm, k), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuKernelGetFunction(&fm, (CUkernel)f0), CUDA_ERROR_INVALID_HANDLE); /* a function is no kernel */

	printf("UNLOADED 1\n");
	fflush(stdout);
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL)
		return 1;
	CHECK(cuMemFree_v2(d0));
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuMemFree_v2(d1));
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuDevicePrimaryCtxRelease_v2(0));
	CHECK(cuDevicePrimaryCtxRelease_v2(1));
	return t_done("libctx");
}
