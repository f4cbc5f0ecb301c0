/*
 * fork: a forked child is a process of its own: it gets a slot of its
 * own, can allocate what the parent left, and its bytes come back when it
 * exits without freeing. Forks while other threads allocate never
 * deadlock the child.
 */
#include <pthread.h>
#include <sys/wait.h>

#include "t.h"

static unsigned long long L;
static CUcontext ctx;
static volatile int stop;

static void *churn(void *arg)
{
	(void)arg;
	CHECK(cuCtxSetCurrent(ctx));
	while (!stop) {
		CUdeviceptr p;
		if (cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS)
			CHECK(cuMemFree_v2(p));
	}
	return NULL;
}

int main(void)
{
	lim_test_name = "fork";
	L = env_u64("GM_TEST_LIMIT");
	ctx = primary();
	CUdeviceptr a;
	CHECK(cuMemAlloc_v2(&a, L / 4));
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		lim_test_name = "fork child";
		/* The parent's memory is not the child's, but it counts for
		 * the share. */
		primary();
		EQ(share_free(), L - L / 4);
		CUdeviceptr c;
		CHECK(cuMemAlloc_v2(&c, L - L / 4));
		EXPECT(cuMemAlloc_v2(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
		_exit(done());
	}
	int st;
	waitpid(pid, &st, 0);
	ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EQ(share_free(), L - L / 4);
	CUdeviceptr b;
	CHECK(cuMemAlloc_v2(&b, L - L / 4));
	CHECK(cuMemFree_v2(b));

	/* Forks under load. */
	pthread_t th[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, churn, NULL);
	for (int i = 0; i < 20; i++) {
		pid = fork();
		if (pid == 0) {
			CUdeviceptr c;
			CUresult r = cuMemAlloc_v2(&c, 1000);
			if (r == CUDA_SUCCESS)
				r = cuMemFree_v2(c);
			_exit(r == CUDA_SUCCESS ? 0 : 1);
		}
		waitpid(pid, &st, 0);
		ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	stop = 1;
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	EQ(share_free(), L - L / 4);
	CHECK(cuMemFree_v2(a));
	EQ(share_free(), L);
	return done();
}
