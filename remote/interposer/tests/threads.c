/* Many threads at once, each with its own context and stream, copying and
 * launching; every result must be its own. */
#include <pthread.h>

#include "t.h"

#define THREADS 8
#define ITERS 40
#define WORDS 4096

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	CUcontext ctx;
	CUstream s;
	CUdeviceptr d;
	uint32_t *h = malloc(WORDS * 4);
	CHECK(cuCtxCreate_v2(&ctx, 0, 0));
	CUmodule m;
	CUfunction f;
	CHECK(cuModuleLoadData(&m, t_fake_module));
	CHECK(cuModuleGetFunction(&f, m, "fill_u32"));
	CHECK(cuStreamCreate(&s, 0));
	CHECK(cuMemAlloc_v2(&d, WORDS * 4));
	for (int it = 0; it < ITERS; it++) {
		uint32_t v = (uint32_t)(id << 16 | it);
		if (it % 2 == 0) {
			uint64_t n = WORDS;
			void *args[] = {&d, &v, &n};
			CHECK(cuLaunchKernel(f, 1, 1, 1, 64, 1, 1, 0, s, args, NULL));
		} else {
			CHECK(cuMemsetD32Async(d, v, WORDS, s));
		}
		memset(h, 0, WORDS * 4);
		CHECK(cuMemcpyDtoHAsync_v2(h, d, WORDS * 4, s));
		CHECK(cuStreamSynchronize(s));
		int bad = 0;
		for (int i = 0; i < WORDS; i++)
			bad += h[i] != v;
		if (bad) {
			printf("FAIL: thread %d iteration %d: %d words wrong\n", id, it, bad);
			t_failures++;
		}
		int pi;
		CHECK(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
	}
	CHECK(cuMemFree_v2(d));
	CHECK(cuStreamDestroy_v2(s));
	CHECK(cuModuleUnload(m));
	CHECK(cuCtxDestroy_v2(ctx));
	free(h);
	return NULL;
}

int main(void)
{
	REQUIRE(cuInit(0));
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	return t_done("threads");
}
