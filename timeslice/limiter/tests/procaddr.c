/*
 * procaddr: cuGetProcAddress hands out the limiter's own entry points for
 * the calls it intercepts, in the version and stream flavour asked for,
 * and the driver's for the others.
 */
#include "t.h"

static void *mine(const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name);
	if (p == NULL || p == fake_sym(name)) {
		fprintf(stderr, "%s: not the limiter's\n", name);
		failures++;
	}
	return p;
}

static void *get(const char *sym, int ver, cuuint64_t flags)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult st = 99;
	CHECK(cuGetProcAddress_v2(sym, &fn, ver, flags, &st));
	EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
	return fn;
}

int main(void)
{
	lim_test_name = "procaddr";
	unsigned long long L = env_u64("GM_TEST_LIMIT");
	primary();
	static const struct {
		const char *sym;
		int ver;
		cuuint64_t flags;
		const char *want;
	} cases[] = {
		{"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
		{"cuMemAlloc", 2000, 0, "cuMemAlloc"},
		{"cuMemFree", 12000, 0, "cuMemFree_v2"},
		{"cuMemAllocPitch", 12000, 0, "cuMemAllocPitch_v2"},
		{"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2"},
		{"cuMemGetInfo", 3000, 0, "cuMemGetInfo"},
		{"cuDeviceTotalMem", 12000, 0, "cuDeviceTotalMem_v2"},
		{"cuMemAllocAsync", 12000, 0, "cuMemAllocAsync"},
		{"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAllocAsync_ptsz"},
		{"cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemFreeAsync_ptsz"},
		{"cuMemAllocFromPoolAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
		 "cuMemAllocFromPoolAsync_ptsz"},
		{"cuMemAllocManaged", 12000, 0, "cuMemAllocManaged"},
		{"cuMemCreate", 12000, 0, "cuMemCreate"},
		{"cuMemRelease", 12000, 0, "cuMemRelease"},
		{"cuArrayCreate", 12000, 0, "cuArrayCreate_v2"},
		{"cuArray3DCreate", 12000, 0, "cuArray3DCreate_v2"},
		{"cuArrayDestroy", 12000, 0, "cuArrayDestroy"},
		{"cuMipmappedArrayCreate", 12000, 0, "cuMipmappedArrayCreate"},
		{"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
		{"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
		{"cuCtxDestroy", 12000, 0, "cuCtxDestroy_v2"},
		{"cuDevicePrimaryCtxReset", 12000, 0, "cuDevicePrimaryCtxReset_v2"},
		{"cuDevicePrimaryCtxRelease", 10000, 0, "cuDevicePrimaryCtxRelease"},
		{"cuInit", 12000, 0, "cuInit"},
		{"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
		{"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		void *got = get(cases[i].sym, cases[i].ver, cases[i].flags);
		if (got != mine(cases[i].want)) {
			fprintf(stderr, "cuGetProcAddress(%s, %d, %llu) = %p, want the limiter's %s %p\n",
				cases[i].sym, cases[i].ver, (unsigned long long)cases[i].flags, got, cases[i].want,
				mine(cases[i].want));
			failures++;
		}
	}
	/* Not intercepted: the driver's own function, not the stub. */
	void *sync = get("cuCtxSynchronize", 12000, 0);
	ASSERT(sync == fake_sym("cuCtxSynchronize"));
	ASSERT(sync != dlsym(RTLD_DEFAULT, "cuCtxSynchronize"));
	/* The version-1 entry point swaps too. */
	void *fn = NULL;
	CHECK(cuGetProcAddress("cuMemFree", &fn, 12000, 0));
	ASSERT(fn == mine("cuMemFree_v2"));
	/* Unknown names are the driver's answer. */
	EXPECT(cuGetProcAddress_v2("cuNoSuchCall", &fn, 12000, 0, NULL), CUDA_ERROR_NOT_FOUND);

	/* What it hands out counts. */
	CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))get("cuMemAlloc", 12000, 0);
	CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))get("cuMemFree", 12000, 0);
	CUdeviceptr p;
	CHECK(alloc(&p, L));
	EXPECT(alloc(&p, 1), CUDA_ERROR_OUT_OF_MEMORY);
	EQ(share_free(), 0);
	CHECK(release(p));
	EQ(share_free(), L);
	return done();
}
