/*
 * Memory limit checks, one process at a time (mem basic|ctx|off|small|
 * failclosed|nodriver) and building blocks of the multi-process tests
 * (mem hold|grab|try). GM_TEST_LIMIT is memory_bytes.
 */
#include "t.h"

static unsigned long long L;

static CUdeviceptr alloc(size_t n)
{
	CUdeviceptr p = 0;
	CHECK(cuMemAlloc_v2(&p, n));
	return p;
}

static void basic(void)
{
	primary();
	size_t f = 0, t = 0;
	CHECK(cuMemGetInfo_v2(&f, &t));
	EQ(t, L);
	EQ(f, L);
	size_t tm = 0;
	CHECK(cuDeviceTotalMem_v2(&tm, 0));
	EQ(tm, L);
	unsigned int f1 = 0, t1 = 0, tm1 = 0;
	CHECK(cuMemGetInfo(&f1, &t1));
	CHECK(cuDeviceTotalMem(&tm1, 0));
	if (L < 0xffffffffull) {
		EQ(t1, L);
		EQ(f1, L);
		EQ(tm1, L);
	}

	/* The exact boundary: the remaining bytes fit, one more does not,
	 * and a refused allocation never reaches the driver. */
	CUdeviceptr a = alloc(L / 2);
	EQ(share_free(), L - L / 2);
	CUdeviceptr b = alloc(L - L / 2);
	EQ(share_free(), 0);
	int before = fake_calls("cuMemAlloc_v2");
	CUdeviceptr c = 0;
	EXPECT(cuMemAlloc_v2(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
	EQ(fake_calls("cuMemAlloc_v2"), before);
	CHECK(cuMemFree_v2(b));
	EQ(share_free(), L - L / 2);
	EXPECT(cuMemAlloc_v2(&c, L - L / 2 + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cuMemFree_v2(a));
	EQ(share_free(), L);
	EXPECT(cuMemAlloc_v2(&c, (size_t)-1), CUDA_ERROR_OUT_OF_MEMORY);
	EQ(fake_calls("cuMemAlloc_v2"), before + 0);

	/* A failed driver call gives the reservation back; so does a free
	 * of memory the limiter did not count, which passes through. */
	EXPECT(cuMemAlloc_v2(&c, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemFree_v2(0xdead0000), CUDA_ERROR_INVALID_VALUE);
	EQ(share_free(), L);

	/* Version-1 entry points. */
	CUdeviceptr_v1 p1 = 0;
	CHECK(cuMemAlloc(&p1, 1000));
	EQ(share_free(), L - 1000);
	CHECK(cuMemFree(p1));
	EQ(share_free(), L);

	/* Pitched: the driver's pitch (the fake's: 1024) times the height. */
	CUdeviceptr p;
	size_t pitch = 0;
	CHECK(cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 4));
	EQ(pitch, 1024);
	EQ(share_free(), L - 10240);
	CHECK(cuMemFree_v2(p));
	unsigned int pitch1 = 0;
	CHECK(cuMemAllocPitch(&p1, &pitch1, 100, 3, 4));
	EQ(share_free(), L - 3072);
	CHECK(cuMemFree(p1));
	EQ(share_free(), L);
	/* A guess that fits but a real size that does not is refused, and
	 * the driver's allocation undone. */
	CUdeviceptr big = alloc(L - 2000);
	before = fake_calls("cuMemFree_v2");
	EXPECT(cuMemAllocPitch_v2(&p, &pitch, 500, 3, 4), CUDA_ERROR_OUT_OF_MEMORY);
	EQ(fake_calls("cuMemFree_v2"), before + 1);
	CHECK(cuMemFree_v2(big));
	EQ(share_free(), L);

	/* Managed memory counts. */
	CHECK(cuMemAllocManaged(&p, L, 1));
	EQ(share_free(), 0);
	EXPECT(cuMemAllocManaged(&c, 1, 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cuMemFree_v2(p));

	/* Stream-ordered allocations. */
	CHECK(cuMemAllocAsync(&p, 4096, NULL));
	CHECK(cuMemAllocAsync_ptsz(&c, 8192, NULL));
	EQ(share_free(), L - 4096 - 8192);
	CHECK(cuMemFreeAsync(p, NULL));
	CHECK(cuMemFreeAsync_ptsz(c, NULL));
	CHECK(cuMemAllocFromPoolAsync(&p, 1 * MiB, (CUmemoryPool)0x1, NULL));
	EQ(share_free(), L - MiB);
	CHECK(cuMemFree_v2(p)); /* cuMemFree takes stream-ordered memory too */
	EQ(share_free(), L);

	/* Virtual memory management: device memory counts, host does not. */
	CUmemAllocationProp prop = {0};
	prop.type = 1;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	CUmemGenericAllocationHandle h, hh;
	CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0));
	EQ(share_free(), L - 2 * MiB);
	prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	CHECK(cuMemCreate(&hh, 2 * MiB, &prop, 0));
	EQ(share_free(), L - 2 * MiB);
	CHECK(cuMemRelease(hh));
	CHECK(cuMemRelease(h));
	EQ(share_free(), L);

	/* Arrays: format × channels × extent. */
	CUarray arr;
	CUDA_ARRAY_DESCRIPTOR ad = {100, 10, CU_AD_FORMAT_FLOAT, 4};
	CHECK(cuArrayCreate_v2(&arr, &ad));
	EQ(share_free(), L - 100 * 10 * 16);
	CHECK(cuArrayDestroy(arr));
	CUDA_ARRAY_DESCRIPTOR_v1 ad1 = {100, 10, CU_AD_FORMAT_HALF, 1};
	CHECK(cuArrayCreate(&arr, &ad1));
	EQ(share_free(), L - 2000);
	CHECK(cuArrayDestroy(arr));
	CUDA_ARRAY3D_DESCRIPTOR a3 = {64, 64, 8, CU_AD_FORMAT_UNSIGNED_INT8, 2, 0};
	CHECK(cuArray3DCreate_v2(&arr, &a3));
	EQ(share_free(), L - 64 * 64 * 8 * 2);
	CHECK(cuArrayDestroy(arr));
	a3.Flags = CUDA_ARRAY3D_SPARSE; /* memory comes from cuMemCreate */
	CHECK(cuArray3DCreate_v2(&arr, &a3));
	EQ(share_free(), L);
	CHECK(cuArrayDestroy(arr));
	CUDA_ARRAY_DESCRIPTOR nv12 = {10, 10, (CUarray_format)0xb0, 1};
	CHECK(cuArrayCreate_v2(&arr, &nv12));
	EQ(share_free(), L - 100 * 16);
	CHECK(cuArrayDestroy(arr));
	CUmipmappedArray mm;
	CUDA_ARRAY3D_DESCRIPTOR md = {64, 32, 0, CU_AD_FORMAT_FLOAT, 1, 0};
	CHECK(cuMipmappedArrayCreate(&mm, &md, 3));
	EQ(share_free(), L - (64 * 32 * 4 + 32 * 16 * 4 + 16 * 8 * 4));
	CHECK(cuMipmappedArrayDestroy(mm));
	EQ(share_free(), L);

	/* Page-locked host memory is not the GPU's. */
	void *hp;
	CHECK(cuMemHostAlloc(&hp, MiB, 0));
	EQ(share_free(), L);
	CHECK(cuMemFreeHost(hp));
}

/* small: a device smaller than the limit reports the device. */
static void small(void)
{
	primary();
	unsigned long long total = env_u64("FAKE_CUDA_TOTAL");
	size_t f, t, tm;
	CHECK(cuMemGetInfo_v2(&f, &t));
	EQ(t, total);
	EQ(f, total);
	CHECK(cuDeviceTotalMem_v2(&tm, 0));
	EQ(tm, total);
	CUdeviceptr p;
	EXPECT(cuMemAlloc_v2(&p, total + 1), CUDA_ERROR_OUT_OF_MEMORY);
	EQ(share_free(), total);
}

/* ctx: destroyed contexts give their memory back. */
static void ctx(void)
{
	CUcontext pc = primary();
	CUdeviceptr x = alloc(1000);
	(void)x;
	CUcontext c;
	CHECK(cuCtxCreate_v2(&c, 0, 0));
	alloc(2000);
	EQ(share_free(), L - 3000);
	CHECK(cuCtxDestroy_v2(c));
	CHECK(cuCtxSetCurrent(pc));
	EQ(share_free(), L - 1000);
	CHECK(cuDevicePrimaryCtxRelease_v2(0));
	EQ(share_free(), L);
	primary();
	alloc(4000);
	CHECK(cuCtxCreate_v2(&c, 0, 0));
	alloc(500);
	CHECK(cuCtxSetCurrent(pc));
	EQ(share_free(), L - 4500);
	CHECK(cuDevicePrimaryCtxReset_v2(0));
	EQ(share_free(), L - 500); /* the created context keeps its memory */
	CHECK(cuCtxDestroy_v2(c));
	CHECK(cuCtxSetCurrent(pc));
	EQ(share_free(), L);
}

/* off: policy=off, or memory_bytes=0: no memory limit. */
static void off(void)
{
	primary();
	unsigned long long total = env_u64("FAKE_CUDA_TOTAL");
	size_t f, t, tm;
	CHECK(cuMemGetInfo_v2(&f, &t));
	EQ(t, total);
	CHECK(cuDeviceTotalMem_v2(&tm, 0));
	EQ(tm, total);
	CUdeviceptr p;
	CHECK(cuMemAlloc_v2(&p, L + 1));
	CHECK(cuMemGetInfo_v2(&f, &t));
	EQ(f, total - L - 1);
	if (getenv("GM_TEST_POLICY_OFF") != NULL) {
		/* Even cuGetProcAddress hands out the driver's functions. */
		void *fn = NULL;
		CHECK(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, NULL));
		ASSERT(fn == fake_sym("cuMemAlloc_v2"));
	}
}

/* failclosed: a bad limits file: cuInit and every counted call fail, and
 * the driver is never initialized. */
static void failclosed(void)
{
	int v;
	CHECK(cuDriverGetVersion(&v)); /* a pass-through call loads the driver */
	EXPECT(cuInit(0), CUDA_ERROR_NOT_PERMITTED);
	EXPECT(cuInit(0), CUDA_ERROR_NOT_PERMITTED);
	CUdeviceptr p;
	EXPECT(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NOT_PERMITTED);
	size_t f, t;
	EXPECT(cuMemGetInfo_v2(&f, &t), CUDA_ERROR_NOT_PERMITTED);
	EQ(fake_calls("cuInit"), 0);
	EQ(fake_calls("cuMemAlloc_v2"), 0);
}

/* nodriver: no real driver to load. */
static void nodriver(void)
{
	EXPECT(cuInit(0), CUDA_ERROR_NO_DEVICE);
	int v;
	EXPECT(cuDriverGetVersion(&v), CUDA_ERROR_NOT_INITIALIZED);
	CUdeviceptr p;
	EXPECT(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
}

static void wait_stdin(void)
{
	char line[64];
	while (fgets(line, sizeof line, stdin) != NULL) {
		if (strncmp(line, "touch", 5) == 0) {
			size_t f, t;
			CHECK(cuMemGetInfo_v2(&f, &t));
			printf("TOUCHED %zu\n", f);
			fflush(stdout);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: mem basic|small|ctx|off|failclosed|nodriver|hold N|grab N|try N\n");
		return 2;
	}
	lim_test_name = argv[1];
	const char *cmd = argv[1];
	if (strcmp(cmd, "failclosed") == 0) {
		failclosed();
		return done();
	}
	if (strcmp(cmd, "nodriver") == 0) {
		nodriver();
		return done();
	}
	L = env_u64("GM_TEST_LIMIT");
	if (strcmp(cmd, "basic") == 0) {
		basic();
	} else if (strcmp(cmd, "small") == 0) {
		small();
	} else if (strcmp(cmd, "ctx") == 0) {
		ctx();
	} else if (strcmp(cmd, "off") == 0) {
		off();
	} else if (strcmp(cmd, "hold") == 0 && argc == 3) {
		/* Holds N bytes until stdin closes; "touch" asks for
		 * cuMemGetInfo (which rewrites this process's slot). */
		primary();
		CUdeviceptr p;
		CHECK(cuMemAlloc_v2(&p, strtoull(argv[2], NULL, 0)));
		printf("HELD\n");
		fflush(stdout);
		wait_stdin();
	} else if (strcmp(cmd, "grab") == 0 && argc == 3) {
		/* Allocates N bytes at a time until refused; prints what it
		 * got, holds it until stdin closes. */
		primary();
		size_t chunk = strtoull(argv[2], NULL, 0), got = 0;
		CUdeviceptr p;
		CUresult r;
		while ((r = cuMemAlloc_v2(&p, chunk)) == CUDA_SUCCESS)
			got += chunk;
		EXPECT(r, CUDA_ERROR_OUT_OF_MEMORY);
		printf("GOT %zu\n", got);
		fflush(stdout);
		wait_stdin();
	} else if (strcmp(cmd, "try") == 0 && argc == 3) {
		primary();
		printf("FREE %zu\n", share_free());
		CUdeviceptr p;
		printf("RESULT %d\n", (int)cuMemAlloc_v2(&p, strtoull(argv[2], NULL, 0)));
	} else {
		fprintf(stderr, "mem: unknown command %s\n", cmd);
		return 2;
	}
	return done();
}
