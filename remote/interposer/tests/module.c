/* Modules and kernels on the fake backend: loading (data, Ex, fat binary
 * entry point, file), functions, parameter layouts, launches with
 * kernelParams and with extra, globals, and asynchronous errors. */
#include <unistd.h>

#include "t.h"

static CUmodule load(void)
{
	CUmodule m = NULL;
	REQUIRE(cuModuleLoadData(&m, t_fake_module));
	return m;
}

int main(void)
{
	t_setup();
	CUmodule m = load();
	CUfunction fill, vecadd, fault, noop, mixed;
	CHECK(cuModuleGetFunction(&fill, m, "fill_u32"));
	CHECK(cuModuleGetFunction(&vecadd, m, "vecadd_f32"));
	CHECK(cuModuleGetFunction(&fault, m, "fault"));
	CHECK(cuModuleGetFunction(&noop, m, "noop"));
	CHECK(cuModuleGetFunction(&mixed, m, "mixed"));
	CUfunction nf;
	EXPECT(cuModuleGetFunction(&nf, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);

	size_t off = 0, size = 0;
	CHECK(cuFuncGetParamInfo(fill, 2, &off, &size));
	ASSERT(off == 16 && size == 8);
	CHECK(cuFuncGetParamInfo(fill, 2, &off, &size)); /* cached */
	ASSERT(off == 16 && size == 8);
	EXPECT(cuFuncGetParamInfo(fill, 3, &off, &size), CUDA_ERROR_INVALID_VALUE);

	/* fill_u32(dst, value, n) with kernelParams */
	enum { N = 1000 };
	CUdeviceptr d;
	CHECK(cuMemAlloc_v2(&d, N * 4));
	uint32_t value = 0xC0FFEE;
	uint64_t n = N;
	void *args[] = {&d, &value, &n};
	CHECK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	uint32_t *h = malloc(N * 4);
	CHECK(cuMemcpyDtoH_v2(h, d, N * 4));
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += h[i] != 0xC0FFEE;
	ASSERT(bad == 0);

	/* on a stream, through the per-thread entry point */
	CUstream s;
	CHECK(cuStreamCreate(&s, 0));
	value = 3;
	n = N / 2;
	CHECK(cuLaunchKernel_ptsz(fill, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuMemcpyDtoH_v2(h, d, N * 4));
	ASSERT(h[0] == 3 && h[N / 2 - 1] == 3 && h[N / 2] == 0xC0FFEE);

	/* vecadd_f32(a, b, c, n) with a packed buffer (extra) */
	CUdeviceptr a, b, c;
	float fa[N], fb[N], fc[N];
	for (int i = 0; i < N; i++) {
		fa[i] = (float)i;
		fb[i] = 0.5f * (float)i;
	}
	CHECK(cuMemAlloc_v2(&a, sizeof fa));
	CHECK(cuMemAlloc_v2(&b, sizeof fb));
	CHECK(cuMemAlloc_v2(&c, sizeof fc));
	CHECK(cuMemcpyHtoD_v2(a, fa, sizeof fa));
	CHECK(cuMemcpyHtoD_v2(b, fb, sizeof fb));
	unsigned char packed[28];
	uint32_t n32 = N;
	memcpy(packed + 0, &a, 8);
	memcpy(packed + 8, &b, 8);
	memcpy(packed + 16, &c, 8);
	memcpy(packed + 24, &n32, 4);
	size_t psize = sizeof packed;
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
			 CU_LAUNCH_PARAM_END};
	CHECK(cuLaunchKernel(vecadd, 4, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
	CHECK(cuMemcpyDtoH_v2(fc, c, sizeof fc));
	bad = 0;
	for (int i = 0; i < N; i++)
		bad += fc[i] != 1.5f * (float)i;
	ASSERT(bad == 0);

	/* A parameter layout with padding: sizes 1,8,2,4 at 0,8,16,20. The
	 * Go side checks the bytes the backend got. */
	uint8_t k0 = 0xAB;
	uint64_t k1 = 0x1122334455667788ull;
	uint16_t k2 = 0xBEEF;
	uint32_t k3 = 0xCAFEF00D;
	void *margs[] = {&k0, &k1, &k2, &k3};
	CHECK(cuLaunchKernel(mixed, 1, 1, 1, 1, 1, 1, 0, NULL, margs, NULL));
	CHECK(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	CHECK(cuCtxSynchronize());

	/* Launch arguments the interposer refuses itself. */
	EXPECT(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, extra), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
	void *bad_extra[] = {(void *)0x7, NULL, CU_LAUNCH_PARAM_END};
	EXPECT(cuLaunchKernel(vecadd, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, bad_extra), CUDA_ERROR_INVALID_VALUE);

	/* Asynchronous errors: the launch returns success, the next call
	 * that waits returns the error, and then the context works again
	 * (the fake's faults are not sticky). */
	CHECK(cuLaunchKernel(fault, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK(cuCtxSynchronize());
	psize = 20; /* the wrong length for vecadd: the server refuses it */
	CHECK(cuLaunchKernel(vecadd, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
	EXPECT(cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuLaunchKernel(fill, 0, 1, 1, 1, 1, 1, 0, NULL, args, NULL)); /* grid 0 */
	uint32_t one;
	EXPECT(cuMemcpyDtoH_v2(&one, d, 4), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemcpyDtoH_v2(&one, d, 4));
	ASSERT(one == 3);

	/* A global */
	CUdeviceptr g;
	size_t gsize = 0;
	CHECK(cuModuleGetGlobal_v2(&g, &gsize, m, "counter"));
	ASSERT(gsize == 4);
	uint32_t gv = 41;
	CHECK(cuMemcpyHtoD_v2(g, &gv, 4));
	gv = 0;
	CHECK(cuMemcpyDtoH_v2(&gv, g, 4));
	ASSERT(gv == 41);
	EXPECT(cuModuleGetGlobal_v2(&g, &gsize, m, "nope"), CUDA_ERROR_NOT_FOUND);

	int attr = -1;
	CHECK(cuFuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fill));
	ASSERT(attr > 0);

	/* Other ways to load a module. */
	CUmodule m2, m3, m4;
	char info[64], err[64];
	memset(info, 'x', sizeof info);
	memset(err, 'x', sizeof err);
	CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
			       CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_MAX_REGISTERS};
	void *vals[] = {info, (void *)(uintptr_t)sizeof info, err, (void *)(uintptr_t)sizeof err, (void *)(uintptr_t)32};
	CHECK(cuModuleLoadDataEx(&m2, t_fake_module, 5, opts, vals));
	ASSERT(info[0] == 0 && err[0] == 0);
	ASSERT(vals[1] == NULL && vals[3] == NULL);
	CHECK(cuModuleLoadFatBinary(&m3, t_fake_module));
	char path[] = "/tmp/gm-module-XXXXXX";
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	ASSERT(write(fd, t_fake_module, strlen(t_fake_module)) == (ssize_t)strlen(t_fake_module));
	close(fd);
	CHECK(cuModuleLoad(&m4, path));
	unlink(path);
	EXPECT(cuModuleLoad(&m4, "/nonexistent/module.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
	CUfunction f4;
	CHECK(cuModuleGetFunction(&f4, m4, "fill_u32"));
	CHECK(cuModuleUnload(m2));
	CHECK(cuModuleUnload(m3));
	CHECK(cuModuleUnload(m4));
	EXPECT(cuModuleGetFunction(&f4, m4, "fill_u32"), CUDA_ERROR_INVALID_HANDLE);

	/* Images that are not images. */
	CUmodule bad_m;
	static const unsigned char binary[] = {0x01, 0x02, 0x03, 0x00};
	EXPECT(cuModuleLoadData(&bad_m, binary), CUDA_ERROR_INVALID_IMAGE);
	EXPECT(cuModuleLoadData(&bad_m, ""), CUDA_ERROR_INVALID_IMAGE);
	EXPECT(cuModuleLoadData(&bad_m, NULL), CUDA_ERROR_INVALID_IMAGE);
	EXPECT(cuModuleLoadData(&bad_m, "gpumux-fake-module 1\nbogus line\n"), CUDA_ERROR_INVALID_IMAGE);
	/* A fatbin header whose payload the fake does not understand: sent
	 * (header + fat size bytes) and refused by the backend. */
	unsigned char fatbin[16 + 32];
	memset(fatbin, 0, sizeof fatbin);
	uint32_t magic = 0xBA55ED50u;
	uint16_t ver = 1, hs = 16;
	uint64_t fs = 32;
	memcpy(fatbin, &magic, 4);
	memcpy(fatbin + 4, &ver, 2);
	memcpy(fatbin + 6, &hs, 2);
	memcpy(fatbin + 8, &fs, 8);
	EXPECT(cuModuleLoadData(&bad_m, fatbin), CUDA_ERROR_INVALID_IMAGE);
	CHECK(cuCtxSynchronize()); /* the connection is fine */

	CHECK(cuModuleUnload(m));
	EXPECT(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_SUCCESS);
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_HANDLE);
	CHECK(cuMemFree_v2(d));
	CHECK(cuStreamDestroy_v2(s));
	free(h);
	return t_done("module");
}
