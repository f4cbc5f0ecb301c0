/* What the CUDA runtime needs besides the documented API (gm_dark.c), on
 * the fake backend: cuGetExportTable's private tables (context-local
 * storage, the primary-context and module slots, the checks, the integrity
 * answer) and cuLibrary.../cuKernel... over forwarded modules. */
#include "t.h"

CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
			   unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
			   unsigned int numLibraryOptions);
CUresult cuLibraryUnload(CUlibrary library);
CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library);
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name);
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel);
CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize);
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode);

static const void *const *table(const char *hex)
{
	CUuuid id;
	for (int i = 0; i < 16; i++) {
		unsigned b;
		sscanf(hex + 2 * i, "%2x", &b);
		id.bytes[i] = (char)b;
	}
	const void *t = NULL;
	EXPECT(cuGetExportTable(&t, &id), CUDA_SUCCESS);
	ASSERT(t != NULL);
	return (const void *const *)t;
}

typedef CUresult (*primary_fn)(CUcontext *, CUdevice);
typedef CUresult (*cls_put_fn)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));
typedef CUresult (*cls_remove_fn)(CUcontext, void *);
typedef CUresult (*cls_get_fn)(void **, CUcontext, void *);
typedef CUresult (*checks2_fn)(CUcontext, unsigned *, void *, void *, uintptr_t, uintptr_t);
typedef CUresult (*integrity_fn)(unsigned, uint64_t, unsigned char *);
typedef CUresult (*module1_fn)(CUmodule *, const void *);
typedef CUresult (*stub_fn)(void);

int main(void)
{
	REQUIRE(cuInit(0));
	const void *const *cudart = table("6bd5fb6c5bf4e74a8987d93912fd9df9");
	const void *const *hooks = table("a094798c2e742e7493f20800200c0a66");
	const void *const *tls = table("42d85a8123f6cb478298f6e78a3aecdc");
	const void *const *cls = table("c693336e1121df11a8c368f355d89593");
	const void *const *checks = table("263e88607cd2614392f6bbd5006dfa7e");
	const void *const *integ = table("d4082055bde6704b8d34ba123c66e1f2");
	ASSERT((uintptr_t)cudart[0] == 13 * 8 && (uintptr_t)hooks[0] == 7 * 8 && (uintptr_t)tls[0] == 3 * 8);
	ASSERT((uintptr_t)checks[0] == 15 * 8 && (uintptr_t)integ[0] == 3 * 8 && cls[3] == NULL);
	const void *t = (const void *)1;
	CUuuid other;
	memset(&other, 0x5a, sizeof other);
	EXPECT(cuGetExportTable(&t, &other), CUDA_ERROR_NOT_SUPPORTED);
	ASSERT(t == NULL);
	EXPECT(cuGetExportTable(NULL, &other), CUDA_ERROR_INVALID_VALUE);
	EXPECT(((stub_fn)cudart[3])(), CUDA_ERROR_NOT_SUPPORTED);

	/* context-local storage: no current context, then keys per context */
	void *v = NULL;
	int key1, key2, val1, val2;
	EXPECT(((cls_get_fn)cls[2])(&v, NULL, &key1), CUDA_ERROR_INVALID_CONTEXT);
	CUcontext p1 = NULL, p2 = NULL;
	CHECK(((primary_fn)cudart[2])(&p1, 0));
	CHECK(((primary_fn)cudart[2])(&p2, 0));
	ASSERT(p1 != NULL && p1 == p2);
	EXPECT(((primary_fn)cudart[2])(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuCtxSetCurrent(p1));
	EXPECT(((cls_get_fn)cls[2])(&v, NULL, &key1), CUDA_ERROR_INVALID_HANDLE);
	CHECK(((cls_put_fn)cls[0])(NULL, &key1, &val1, NULL));
	CHECK(((cls_put_fn)cls[0])(p1, &key2, &val2, NULL));
	CHECK(((cls_get_fn)cls[2])(&v, p1, &key1));
	ASSERT(v == &val1);
	CHECK(((cls_get_fn)cls[2])(&v, NULL, &key2));
	ASSERT(v == &val2);
	CHECK(((cls_put_fn)cls[0])(NULL, &key1, &val2, NULL));
	CHECK(((cls_get_fn)cls[2])(&v, NULL, &key1));
	ASSERT(v == &val2);
	CHECK(((cls_remove_fn)cls[1])(NULL, &key1));
	EXPECT(((cls_get_fn)cls[2])(&v, NULL, &key1), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(((cls_remove_fn)cls[1])(NULL, &key1), CUDA_ERROR_INVALID_HANDLE);
	CUcontext c2;
	CHECK(cuCtxCreate_v2(&c2, 0, 0));
	EXPECT(((cls_get_fn)cls[2])(&v, NULL, &key2), CUDA_ERROR_INVALID_HANDLE); /* c2 is current */
	CHECK(((cls_get_fn)cls[2])(&v, p1, &key2));
	CHECK(cuCtxDestroy_v2(c2));
	CHECK(cuCtxSetCurrent(p1));

	unsigned kind = 7;
	CHECK(((checks2_fn)checks[2])(p1, &kind, NULL, NULL, 1, 0));
	ASSERT(kind == 0);

	/* integrity: a function of its inputs */
	unsigned char h1[16], h2[16], h3[16];
	CHECK(((integrity_fn)integ[1])(13000, 1700000000, h1));
	CHECK(((integrity_fn)integ[1])(13000, 1700000000, h2));
	CHECK(((integrity_fn)integ[1])(13001, 1700000000, h3));
	ASSERT(memcmp(h1, h2, 16) == 0 && memcmp(h1, h3, 16) != 0);
	EXPECT(((integrity_fn)integ[1])(13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);

	/* the module slot, and libraries: kernels launch through CUkernel */
	CUmodule m = NULL;
	CHECK(((module1_fn)cudart[1])(&m, t_fake_module));
	CHECK(cuModuleUnload(m));
	CUmoduleLoadingMode mode;
	CHECK(cuModuleGetLoadingMode(&mode));
	ASSERT(mode == CU_MODULE_EAGER_LOADING);
	CUlibrary lib = NULL;
	CHECK(cuLibraryLoadData(&lib, t_fake_module, NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuLibraryUnload(lib)); /* never used: no module was loaded */
	EXPECT(cuLibraryLoadData(&lib, "", NULL, NULL, 0, NULL, NULL, 0), CUDA_ERROR_INVALID_IMAGE);
	CHECK(cuLibraryLoadData(&lib, t_fake_module, NULL, NULL, 0, NULL, NULL, 0));
	CUkernel k;
	CHECK(cuLibraryGetKernel(&k, lib, "fill_u32"));
	EXPECT(cuLibraryGetKernel(&k, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	CHECK(cuLibraryGetKernel(&k, lib, "fill_u32"));
	CUfunction f;
	CHECK(cuKernelGetFunction(&f, k));
	size_t off = 0, size = 0;
	CHECK(cuKernelGetParamInfo(k, 2, &off, &size));
	ASSERT(off == 16 && size == 8);
	CUmodule lm;
	CHECK(cuLibraryGetModule(&lm, lib));
	CUfunction f2;
	CHECK(cuModuleGetFunction(&f2, lm, "fill_u32"));
	enum { N = 64 };
	CUdeviceptr d;
	CHECK(cuMemAlloc_v2(&d, N * 4));
	uint32_t value = 0xD00D;
	uint64_t n = N;
	void *args[] = {&d, &value, &n};
	CHECK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
	uint32_t h[N];
	CHECK(cuMemcpyDtoH_v2(h, d, sizeof h));
	ASSERT(h[0] == 0xD00D && h[N - 1] == 0xD00D);
	CHECK(cuLibraryUnload(lib));
	int junk = 0;
	EXPECT(cuLibraryGetKernel(&k, (CUlibrary)&junk, "fill_u32"), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuLibraryUnload(NULL), CUDA_ERROR_INVALID_HANDLE);
	void *fn = NULL;
	CHECK(cuGetProcAddress("cuLibraryLoadData", &fn, 12000, 0));
	ASSERT(fn == (void *)cuLibraryLoadData);
	return t_done("dark");
}
