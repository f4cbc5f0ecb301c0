/*
 * threads: 16 threads allocate and free at random, each keeping up to 4
 * allocations; the share never holds more than the limit (the fake
 * driver's high-water mark, checked by the Go test) and everything comes
 * back at the end.
 */
#include <pthread.h>

#include "t.h"

#define THREADS 16
#define ITERS 1500

static unsigned long long L;
static CUcontext ctx;
static int refused, wrong;

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
	CHECK(cuCtxSetCurrent(ctx));
	CUdeviceptr held[4] = {0};
	for (int i = 0; i < ITERS; i++) {
		int k = (int)(rand_r(&seed) % 4);
		if (held[k]) {
			CHECK(cuMemFree_v2(held[k]));
			held[k] = 0;
			continue;
		}
		size_t n = 1 + rand_r(&seed) % (L / 6);
		CUresult r = cuMemAlloc_v2(&held[k], n);
		if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			__atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
			held[k] = 0;
		} else if (r != CUDA_SUCCESS) {
			__atomic_add_fetch(&wrong, 1, __ATOMIC_RELAXED);
			held[k] = 0;
		}
	}
	for (int k = 0; k < 4; k++)
		if (held[k])
			CHECK(cuMemFree_v2(held[k]));
	return NULL;
}

int main(void)
{
	lim_test_name = "threads";
	L = env_u64("GM_TEST_LIMIT");
	ctx = primary();
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	EQ(wrong, 0);
	EQ(share_free(), L);
	printf("REFUSED %d\n", refused);
	return done();
}
