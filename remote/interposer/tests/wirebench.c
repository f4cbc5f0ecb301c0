/* What the wire costs. "wirebench MIB ROUNDS": 2000 synchronous calls
 * (cuCtxSynchronize), then ROUNDS copies of MIB MiB each way (host to
 * device, device to host) of a buffer that repeats
 * "gpumux-plaintext-marker", checked on the way back; prints sync_rtt_us=…,
 * h2d_gbps=… and d2h_gbps=… (remote/ctest compares TLS and plain TCP, and
 * looks for the marker on the wire). */
#include "t.h"

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	size_t size = (size_t)atoi(argv[1]) << 20;
	int rounds = atoi(argv[2]);
	static const char marker[] = "gpumux-plaintext-marker";
	unsigned char *src = malloc(size), *dst = malloc(size);
	ASSERT(src != NULL && dst != NULL && size > 0 && rounds > 0);
	for (size_t i = 0; i < size; i++)
		src[i] = (unsigned char)marker[i % (sizeof marker - 1)];

	CUcontext ctx;
	CUdeviceptr p;
	CHECK(cuInit(0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuMemAlloc_v2(&p, size));
	CHECK(cuMemcpyHtoD_v2(p, src, size)); /* warm up */
	const int calls = 2000;
	double s0 = t_now();
	for (int i = 0; i < calls; i++)
		CHECK(cuCtxSynchronize());
	printf("sync_rtt_us=%.2f\n", (t_now() - s0) / calls * 1e6);
	double t0 = t_now();
	for (int i = 0; i < rounds; i++)
		CHECK(cuMemcpyHtoD_v2(p, src, size));
	double t1 = t_now();
	for (int i = 0; i < rounds; i++)
		CHECK(cuMemcpyDtoH_v2(dst, p, size));
	double t2 = t_now();
	ASSERT(memcmp(src, dst, size) == 0);
	double bytes = (double)size * rounds;
	printf("h2d_gbps=%.3f\nd2h_gbps=%.3f\n", bytes / (t1 - t0) / 1e9, bytes / (t2 - t1) / 1e9);
	CHECK(cuMemFree_v2(p));
	CHECK(cuDevicePrimaryCtxRelease_v2(0));
	free(src);
	free(dst);
	return t_done("wirebench");
}
