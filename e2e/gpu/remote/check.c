/*
 * check: a CUDA driver API program covering milestone 1 of the remote GPU
 * issue. It prints only deterministic results, so its output run against
 * the local driver and through gpumux-remoted must be identical (run.sh
 * diffs them).
 *
 *   cc -O2 -o check check.c -I/usr/local/cuda/include -lcuda
 *   ./check DIR   # DIR holds kernels.cubin, kernels.ptx, kernels.fatbin
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CK(x)                                                                  \
	do {                                                                   \
		CUresult r_ = (x);                                             \
		if (r_ != CUDA_SUCCESS) {                                      \
			const char *s_ = "?";                                  \
			cuGetErrorName(r_, &s_);                               \
			printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
			exit(1);                                               \
		}                                                              \
	} while (0)

static void expect(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		failures++;
}

static void *readfile(const char *dir, const char *name, size_t *n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(1);
	}
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(*n + 1);
	if (fread(b, 1, *n, f) != *n)
		exit(1);
	b[*n] = 0;
	fclose(f);
	return b;
}

static uint64_t fnv(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	int n, v;
	CUdevice dev;
	char name[256];
	size_t total;
	CUuuid uuid;

	/* Init, version, device queries. */
	CK(cuInit(0));
	CK(cuDriverGetVersion(&v));
	printf("driver version %d\n", v);
	CK(cuDeviceGetCount(&n));
	printf("devices %d\n", n);
	CK(cuDeviceGet(&dev, 0));
	CK(cuDeviceGetName(name, sizeof name, dev));
	CK(cuDeviceTotalMem(&total, dev));
	int major, minor, sms;
	CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	CK(cuDeviceGetUuid(&uuid, dev));
	printf("device 0: %s, %zu MiB, cc %d.%d, %d SMs, uuid %016llx\n", name, total >> 20, major, minor, sms,
	       (unsigned long long)fnv(uuid.bytes, 16));
	expect(cuDeviceGet(&dev, 4096) != CUDA_SUCCESS, "cuDeviceGet of a missing ordinal fails");
	CK(cuDeviceGet(&dev, 0));

	/* Contexts: primary, created, current, push/pop. */
	CUcontext pctx, cctx, cur, popped;
	CK(cuDevicePrimaryCtxRetain(&pctx, dev));
	CK(cuCtxSetCurrent(pctx));
	CK(cuCtxGetCurrent(&cur));
	expect(cur == pctx, "the primary context is current");
	CUdevice cdev;
	CK(cuCtxGetDevice(&cdev));
	expect(cdev == dev, "cuCtxGetDevice names device 0");
#if CUDA_VERSION >= 13000
	CK(cuCtxCreate(&cctx, NULL, 0, dev));
#else
	CK(cuCtxCreate(&cctx, 0, dev));
#endif
	CK(cuCtxGetCurrent(&cur));
	expect(cur == cctx, "a created context becomes current");
	CK(cuCtxPopCurrent(&popped));
	expect(popped == cctx, "pop returns the created context");
	CK(cuCtxPushCurrent(cctx));
	CK(cuCtxSynchronize());
	CK(cuCtxDestroy(cctx));
	CK(cuCtxSetCurrent(pctx));

	/* Memory: alloc, copies of several sizes, async, memset, info. */
	size_t sizes[] = {1, 4096, (5u << 20) + 3, 64u << 20};
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		size_t sz = sizes[s];
		unsigned char *h = malloc(sz), *back = malloc(sz);
		for (size_t i = 0; i < sz; i++)
			h[i] = (unsigned char)(i * 131 + s);
		CUdeviceptr a, b;
		CK(cuMemAlloc(&a, sz));
		CK(cuMemAlloc(&b, sz));
		CK(cuMemcpyHtoD(a, h, sz));
		CK(cuMemcpyDtoD(b, a, sz));
		memset(back, 0, sz);
		CK(cuMemcpyDtoH(back, b, sz));
		char what[128];
		snprintf(what, sizeof what, "H2D/D2D/D2H round trip of %zu bytes (fnv %016llx)", sz,
			 (unsigned long long)fnv(back, sz));
		expect(memcmp(h, back, sz) == 0, what);
		CUstream st;
		CK(cuStreamCreate(&st, 0));
		CK(cuMemsetD8Async(b, 0x5a, sz, st));
		CK(cuMemcpyDtoHAsync(back, b, sz, st));
		CK(cuStreamSynchronize(st));
		int allset = 1;
		for (size_t i = 0; i < sz; i++)
			allset &= back[i] == 0x5a;
		snprintf(what, sizeof what, "async memset + D2H of %zu bytes", sz);
		expect(allset, what);
		CK(cuMemcpyHtoDAsync(b, h, sz, st));
		CK(cuMemcpyDtoDAsync(a, b, sz, st));
		CK(cuStreamSynchronize(st));
		CK(cuMemcpyDtoH(back, a, sz));
		snprintf(what, sizeof what, "async H2D + D2D of %zu bytes", sz);
		expect(memcmp(h, back, sz) == 0, what);
		CK(cuStreamDestroy(st));
		CK(cuMemFree(a));
		CK(cuMemFree(b));
		free(h);
		free(back);
	}
	CUdeviceptr d32;
	unsigned int words[1024];
	CK(cuMemAlloc(&d32, sizeof words));
	CK(cuMemsetD32(d32, 0xdeadbeef, 1024));
	CK(cuMemcpyDtoH(words, d32, sizeof words));
	expect(words[0] == 0xdeadbeef && words[1023] == 0xdeadbeef, "cuMemsetD32");
	CUdeviceptr base;
	size_t range;
	CK(cuMemGetAddressRange(&base, &range, d32 + 100));
	expect(base == d32 && range >= sizeof words, "cuMemGetAddressRange finds the allocation");
	size_t freeb, totalb;
	CK(cuMemGetInfo(&freeb, &totalb));
	expect(freeb <= totalb && totalb > 0, "cuMemGetInfo: free <= total");

	/* Modules in three forms, functions, launches, globals. */
	const char *forms[] = {"kernels.cubin", "kernels.ptx", "kernels.fatbin"};
	for (int fidx = 0; fidx < 3; fidx++) {
		size_t isz;
		void *img = readfile(dir, forms[fidx], &isz);
		CUmodule mod;
		CUfunction fill, saxpy;
		CK(cuModuleLoadData(&mod, img));
		CK(cuModuleGetFunction(&fill, mod, "fill"));
		CK(cuModuleGetFunction(&saxpy, mod, "saxpy"));
		size_t off, psz, poffs[4], psizes[4];
		int np = 0;
		while (np < 4 && cuFuncGetParamInfo(saxpy, np, &off, &psz) == CUDA_SUCCESS) {
			poffs[np] = off;
			psizes[np] = psz;
			np++;
		}
		printf("saxpy params (%s): %d:", forms[fidx], np);
		for (int i = 0; i < np; i++)
			printf(" %zu+%zu", poffs[i], psizes[i]);
		printf("\n");

		unsigned int count = 1 << 20, val = 7;
		CUdeviceptr p;
		CK(cuMemAlloc(&p, count * 4));
		void *fargs[] = {&p, &val, &count};
		CK(cuLaunchKernel(fill, (count + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, fargs, NULL));
		unsigned int *hv = malloc(count * 4);
		CK(cuMemcpyDtoH(hv, p, count * 4));
		int good = 1;
		for (unsigned i = 0; i < count; i++)
			good &= hv[i] == val + i;
		char what[128];
		snprintf(what, sizeof what, "fill kernel from %s over %u words", forms[fidx], count);
		expect(good, what);

		/* saxpy through the `extra` form of the parameters. */
		int nn = 1000;
		float a = 2.5f, *hx = malloc(nn * 4), *hy = malloc(nn * 4);
		for (int i = 0; i < nn; i++) {
			hx[i] = (float)i;
			hy[i] = 1.0f;
		}
		CUdeviceptr x, y;
		CK(cuMemAlloc(&x, nn * 4));
		CK(cuMemAlloc(&y, nn * 4));
		CK(cuMemcpyHtoD(x, hx, nn * 4));
		CK(cuMemcpyHtoD(y, hy, nn * 4));
		unsigned char buf[64] = {0};
		memcpy(buf + poffs[0], &a, 4);
		memcpy(buf + poffs[1], &x, 8);
		memcpy(buf + poffs[2], &y, 8);
		memcpy(buf + poffs[3], &nn, 4);
		size_t bsz = poffs[3] + psizes[3];
		void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &bsz, CU_LAUNCH_PARAM_END};
		CK(cuLaunchKernel(saxpy, (nn + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
		CK(cuMemcpyDtoH(hy, y, nn * 4));
		good = 1;
		for (int i = 0; i < nn; i++)
			good &= hy[i] == 2.5f * i + 1.0f;
		snprintf(what, sizeof what, "saxpy through `extra` from %s", forms[fidx]);
		expect(good, what);

		CUdeviceptr g;
		size_t gsz;
		unsigned int counter = 0;
		CK(cuModuleGetGlobal(&g, &gsz, mod, "counter"));
		CK(cuMemcpyDtoH(&counter, g, 4));
		snprintf(what, sizeof what, "module global `counter` (%zu bytes) counted the launch: %u", gsz, counter);
		expect(gsz == 4 && counter == 1, what);
		CUfunction missing;
		expect(cuModuleGetFunction(&missing, mod, "no_such_kernel") == CUDA_ERROR_NOT_FOUND,
		       "a missing kernel is CUDA_ERROR_NOT_FOUND");
		int regs;
		CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fill));
		expect(regs > 0, "cuFuncGetAttribute NUM_REGS");
		CK(cuMemFree(p));
		CK(cuMemFree(x));
		CK(cuMemFree(y));
		CK(cuModuleUnload(mod));
		free(hv);
		free(hx);
		free(hy);
		free(img);
	}

	/* Streams and events. */
	CUstream s1, s2;
	CUevent e1, e2;
	CK(cuStreamCreate(&s1, 0));
	CK(cuStreamCreate(&s2, 0));
	CK(cuEventCreate(&e1, 0));
	CK(cuEventCreate(&e2, 0));
	CK(cuEventRecord(e1, s1));
	CK(cuMemsetD32Async(d32, 1, 1024, s1));
	CK(cuEventRecord(e2, s1));
	CK(cuStreamWaitEvent(s2, e2, 0));
	CK(cuStreamSynchronize(s2));
	CK(cuEventSynchronize(e2));
	expect(cuEventQuery(e2) == CUDA_SUCCESS, "cuEventQuery after synchronize");
	expect(cuStreamQuery(s1) == CUDA_SUCCESS, "cuStreamQuery of an idle stream");
	float ms = -1;
	CK(cuEventElapsedTime(&ms, e1, e2));
	expect(ms >= 0, "cuEventElapsedTime");
	CK(cuEventDestroy(e1));
	CK(cuEventDestroy(e2));
	CK(cuStreamDestroy(s1));
	CK(cuStreamDestroy(s2));

	/* Errors and lookups. */
	const char *es = NULL, *en = NULL;
	CK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &es));
	CK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &en));
	printf("error strings: %s / %s\n", en, es);
	CUresult bad = cuMemFree(0xdead0000);
	cuGetErrorName(bad, &en);
	printf("cuMemFree of a bad pointer: %s\n", en);
	void *fn = NULL;
	CUdriverProcAddressQueryResult qr;
	CK(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &qr));
	CUdeviceptr viaproc;
	CK(((CUresult(*)(CUdeviceptr *, size_t))fn)(&viaproc, 256));
	expect(viaproc != 0, "cuGetProcAddress(cuMemAlloc) works");
	CK(cuMemFree(viaproc));
	CK(cuMemFree(d32));
	CK(cuDevicePrimaryCtxRelease(dev));
	printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
	return failures != 0;
}
