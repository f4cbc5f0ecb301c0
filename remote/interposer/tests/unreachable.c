/* No usable server. "unreachable nodevice SECONDS": nothing to connect to,
 * a refused token or a server that never answers the handshake: cuInit
 * and every forwarded call return CUDA_ERROR_NO_DEVICE within SECONDS.
 * "unreachable stall SECONDS": the server admits the client and then never
 * answers: the waiting call and the one queued behind it (another thread)
 * return CUDA_ERROR_UNKNOWN within the timeout, later calls at once. */
#include <pthread.h>

#include "t.h"

static CUresult queued;
static double queued_at;

static void *second(void *arg)
{
	(void)arg;
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL); /* let main's call go first */
	int n;
	queued = cuDeviceGetCount(&n);
	queued_at = t_now();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	double limit = atof(argv[2]);
	double t0 = t_now();
	if (strcmp(argv[1], "nodevice") == 0) {
		int n = -1;
		EXPECT(cuInit(0), CUDA_ERROR_NO_DEVICE);
		ASSERT(t_now() - t0 < limit);
		EXPECT(cuDeviceGetCount(&n), CUDA_ERROR_NO_DEVICE);
		EXPECT(cuDriverGetVersion(&n), CUDA_ERROR_NO_DEVICE);
		CUdeviceptr p;
		EXPECT(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NO_DEVICE);
		EXPECT(cuInit(0), CUDA_ERROR_NO_DEVICE);
		ASSERT(t_now() - t0 < limit); /* one attempt, not one per call */
		CUcontext c;
		CHECK(cuCtxGetCurrent(&c));
		const char *s;
		CHECK(cuGetErrorName(CUDA_ERROR_NO_DEVICE, &s));
		return t_done("unreachable nodevice");
	}
	pthread_t th;
	pthread_create(&th, NULL, second, NULL);
	EXPECT(cuInit(0), CUDA_ERROR_UNKNOWN);
	double t1 = t_now();
	ASSERT(t1 - t0 < limit);
	ASSERT(t1 - t0 > 0.5); /* it did wait for the timeout */
	pthread_join(th, NULL);
	EXPECT(queued, CUDA_ERROR_UNKNOWN);
	ASSERT(queued_at - t0 < limit + 1);
	EXPECT(cuInit(0), CUDA_ERROR_UNKNOWN);
	ASSERT(t_now() - t1 < 1.5);
	return t_done("unreachable stall");
}
