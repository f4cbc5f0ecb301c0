/*
 * bench: what remote forwarding costs, measured through the CUDA driver
 * API. Run once against the local driver and once with the interposer
 * first on LD_LIBRARY_PATH; run.sh turns the two into ratios.
 *
 *   cc -O2 -o bench bench.c -I/usr/local/cuda/include -lcuda
 *   ./bench DIR   # DIR holds kernels.cubin
 *
 * Prints key=value lines:
 *   sync_rtt_us    mean time of a synchronous call (cuCtxSynchronize, idle)
 *   launch_per_s   empty-kernel launches per second, then one synchronize
 *   h2d_gbps       pageable host-to-device bandwidth, 256 MiB copies
 *   d2h_gbps       device-to-host bandwidth, 256 MiB copies
 *   matmul_ms      upload + 20× 2048² matmul + download, end to end
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                          \
	do {                                                                           \
		CUresult r_ = (x);                                                     \
		if (r_ != CUDA_SUCCESS) {                                              \
			const char *s_ = "?";                                          \
			cuGetErrorName(r_, &s_);                                       \
			fprintf(stderr, "bench: %s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	char path[4096];
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction empty, matmul;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	snprintf(path, sizeof path, "%s/kernels.cubin", dir);
	CK(cuModuleLoad(&mod, path));
	CK(cuModuleGetFunction(&empty, mod, "empty"));
	CK(cuModuleGetFunction(&matmul, mod, "matmul"));

	/* Synchronous round trip. */
	int n = 20000;
	for (int i = 0; i < 1000; i++)
		CK(cuCtxSynchronize());
	double t0 = now();
	for (int i = 0; i < n; i++)
		CK(cuCtxSynchronize());
	printf("sync_rtt_us=%.2f\n", (now() - t0) / n * 1e6);

	/* Async launch rate. */
	n = 200000;
	CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	CK(cuCtxSynchronize());
	t0 = now();
	for (int i = 0; i < n; i++)
		CK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	CK(cuCtxSynchronize());
	printf("launch_per_s=%.0f\n", n / (now() - t0));

	/* Bandwidth, pageable memory as most programs use it. */
	size_t sz = 256u << 20;
	int reps = 8;
	char *h = malloc(sz);
	memset(h, 1, sz);
	CUdeviceptr d;
	CK(cuMemAlloc(&d, sz));
	CK(cuMemcpyHtoD(d, h, sz));
	t0 = now();
	for (int i = 0; i < reps; i++)
		CK(cuMemcpyHtoD(d, h, sz));
	printf("h2d_gbps=%.2f\n", (double)sz * reps / (now() - t0) / 1e9);
	CK(cuMemcpyDtoH(h, d, sz));
	t0 = now();
	for (int i = 0; i < reps; i++)
		CK(cuMemcpyDtoH(h, d, sz));
	printf("d2h_gbps=%.2f\n", (double)sz * reps / (now() - t0) / 1e9);
	CK(cuMemFree(d));
	free(h);

	/* A compute-bound program end to end. */
	int m = 2048, iters = 20;
	size_t msz = (size_t)m * m * sizeof(float);
	float *A = malloc(msz), *B = malloc(msz), *C = malloc(msz);
	for (size_t i = 0; i < (size_t)m * m; i++) {
		A[i] = (float)(i % 7) / 7;
		B[i] = (float)(i % 5) / 5;
	}
	t0 = now();
	CUdeviceptr dA, dB, dC;
	CK(cuMemAlloc(&dA, msz));
	CK(cuMemAlloc(&dB, msz));
	CK(cuMemAlloc(&dC, msz));
	CK(cuMemcpyHtoD(dA, A, msz));
	CK(cuMemcpyHtoD(dB, B, msz));
	void *args[] = {&dA, &dB, &dC, &m};
	for (int i = 0; i < iters; i++)
		CK(cuLaunchKernel(matmul, m / 16, m / 16, 1, 16, 16, 1, 0, NULL, args, NULL));
	CK(cuMemcpyDtoH(C, dC, msz));
	printf("matmul_ms=%.1f\n", (now() - t0) * 1e3);
	double sum = 0;
	for (size_t i = 0; i < (size_t)m * m; i += 4099)
		sum += C[i];
	printf("matmul_checksum=%.6e\n", sum);
	CK(cuMemFree(dA));
	CK(cuMemFree(dB));
	CK(cuMemFree(dC));
	CK(cuModuleUnload(mod));
	CK(cuDevicePrimaryCtxRelease(dev));
	return 0;
}
