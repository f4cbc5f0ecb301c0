/* The server dies while two threads are busy with calls: both must get
 * CUDA_ERROR_UNKNOWN promptly (no hang), and so must every later call,
 * sync or async. Prints READY when the remote-controlled part starts. */
#include <pthread.h>

#include "t.h"

static CUcontext ctx;
static CUresult ended[2];
static double ended_at[2];

static void *loop(void *arg)
{
	int id = (int)(intptr_t)arg;
	cuCtxSetCurrent(ctx);
	CUdeviceptr p;
	CUresult r = cuMemAlloc_v2(&p, 1 << 20);
	static unsigned char buf[2][1 << 20];
	double deadline = t_now() + 30;
	while (r == CUDA_SUCCESS && t_now() < deadline) {
		r = cuMemcpyHtoD_v2(p, buf[id], sizeof buf[id]);
		if (r == CUDA_SUCCESS)
			r = cuMemcpyDtoH_v2(buf[id], p, sizeof buf[id]);
	}
	ended[id] = r;
	ended_at[id] = t_now();
	return NULL;
}

int main(void)
{
	ctx = t_setup();
	CUdeviceptr p;
	REQUIRE(cuMemAlloc_v2(&p, 64));
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, loop, (void *)(intptr_t)i);
	printf("READY\n");
	fflush(stdout);
	double t0 = t_now();
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++) {
		EXPECT(ended[i], CUDA_ERROR_UNKNOWN);
		ASSERT(ended_at[i] - t0 < 20);
	}
	double t1 = t_now();
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_UNKNOWN);
	EXPECT(cuMemsetD8_v2(p, 0, 64), CUDA_ERROR_UNKNOWN); /* async: nothing to send on */
	EXPECT(cuMemAlloc_v2(&p, 64), CUDA_ERROR_UNKNOWN);
	EXPECT(cuInit(0), CUDA_ERROR_UNKNOWN);
	int n;
	EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_UNKNOWN); /* the cache is gone too */
	ASSERT(t_now() - t1 < 1);
	const char *s;
	CHECK(cuGetErrorString(CUDA_ERROR_UNKNOWN, &s));
	return t_done("dead");
}
