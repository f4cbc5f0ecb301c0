/* What the CUDA runtime needs besides the documented API (gm_dark.c), on
 * the fake backend: cuGetExportTable's private tables (context-local
 * storage, the primary-context and module slots, the checks, the integrity
 * answer) and cuLibrary.../cuKernel... over forwarded modules. */
#include <pthread.h>

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
typedef CUresult (*tls_set_fn)(CUcontext);
typedef CUresult (*tls_get_fn)(CUcontext *);
typedef CUresult (*ctx_id_fn)(CUcontext, uint64_t *);
typedef CUresult (*stream_handle_fn)(CUcontext, CUstream, void **, uint8_t);
typedef CUresult (*stream_id_fn)(CUcontext, void *, uint64_t *);

static const void *const *toolsctx;

/* the per-thread stream of another thread: a stream of its own */
static void *other_thread(void *ctx)
{
	static uint64_t id;
	void *h = NULL;
	if (((stream_handle_fn)toolsctx[51])((CUcontext)ctx, NULL, &h, 1) != CUDA_SUCCESS ||
	    ((stream_id_fn)toolsctx[39])((CUcontext)ctx, h, &id) != CUDA_SUCCESS)
		return NULL;
	return &id;
}

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

	/* TOOLS_TLS: the thread's current context */
	CUcontext cur = NULL;
	CHECK(((tls_get_fn)tls[2])(&cur));
	ASSERT(cur == p1);
	CHECK(((tls_set_fn)tls[1])(NULL));
	CHECK(((tls_get_fn)tls[2])(&cur));
	ASSERT(cur == NULL);

	/* ToolsContext: context and stream IDs, unique and stable */
	toolsctx = table("21318c60971432488ca641ff7324c8f2");
	ASSERT((uintptr_t)toolsctx[0] == 93 * 8);
	for (int i = 1; i < 93; i++)
		ASSERT(toolsctx[i] != NULL);
	uint64_t id1 = 0, id2 = 0, id3 = 0;
	void *hs = NULL;
	EXPECT(((ctx_id_fn)toolsctx[4])(NULL, &id1), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(((stream_handle_fn)toolsctx[51])(NULL, NULL, &hs, 0), CUDA_ERROR_INVALID_CONTEXT);
	CHECK(((tls_set_fn)tls[1])(p1));
	CHECK(((ctx_id_fn)toolsctx[4])(p1, &id1));
	CHECK(((ctx_id_fn)toolsctx[4])(NULL, &id2));
	ASSERT(id1 != 0 && id1 == id2);
	EXPECT(((ctx_id_fn)toolsctx[4])(p1, NULL), CUDA_ERROR_INVALID_VALUE);
	CUcontext c3;
	CHECK(cuCtxCreate_v2(&c3, 0, 0));
	CHECK(((ctx_id_fn)toolsctx[4])(c3, &id3));
	ASSERT(id3 != id1);
	CUstream st3;
	CHECK(cuStreamCreate(&st3, 0));
	void *hs3 = NULL, *hsb = NULL;
	CHECK(((stream_handle_fn)toolsctx[51])(c3, st3, &hs3, 0));
	CHECK(((stream_handle_fn)toolsctx[51])(NULL, st3, &hsb, 0));
	ASSERT(hs3 != NULL && hs3 == hsb);
	CHECK(cuCtxDestroy_v2(c3));
	CHECK(cuCtxSetCurrent(p1));
	void *hl = NULL, *hl2 = NULL, *hp = NULL, *hp2 = NULL, *hn = NULL;
	CHECK(((stream_handle_fn)toolsctx[51])(p1, NULL, &hl, 0));
	CHECK(((stream_handle_fn)toolsctx[51])(p1, CU_STREAM_LEGACY, &hl2, 1));
	CHECK(((stream_handle_fn)toolsctx[51])(p1, NULL, &hp, 1));
	CHECK(((stream_handle_fn)toolsctx[51])(p1, CU_STREAM_PER_THREAD, &hp2, 0));
	ASSERT(hl == hl2 && hp == hp2 && hl != hp);
	EXPECT(((stream_handle_fn)toolsctx[51])(p1, NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	uint64_t sl = 0, sp = 0, s3 = 0, sn = 0, again = 0;
	CHECK(((stream_id_fn)toolsctx[39])(p1, hl, &sl));
	CHECK(((stream_id_fn)toolsctx[39])(p1, hp, &sp));
	CHECK(((stream_id_fn)toolsctx[39])(p1, hs3, &s3));
	CHECK(((stream_id_fn)toolsctx[39])(p1, hl, &again));
	ASSERT(sl != 0 && sp != 0 && s3 != 0 && sl != sp && sl != s3 && sp != s3 && again == sl);
	CUstream st;
	CHECK(cuStreamCreate(&st, 0));
	CHECK(((stream_handle_fn)toolsctx[51])(p1, st, &hn, 0));
	CHECK(((stream_id_fn)toolsctx[39])(p1, hn, &sn));
	ASSERT(hn != hl && hn != hs3 && sn != sl && sn != sp && sn != s3);
	CHECK(cuStreamDestroy_v2(st));
	EXPECT(((stream_id_fn)toolsctx[39])(p1, &sn, &again), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(((stream_id_fn)toolsctx[39])(p1, hl, NULL), CUDA_ERROR_INVALID_VALUE);
	pthread_t th;
	void *res = NULL;
	ASSERT(pthread_create(&th, NULL, other_thread, p1) == 0);
	ASSERT(pthread_join(th, &res) == 0);
	ASSERT(res != NULL);
	uint64_t so = *(uint64_t *)res;
	ASSERT(so != 0 && so != sp && so != sl && so != s3 && so != sn);

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
