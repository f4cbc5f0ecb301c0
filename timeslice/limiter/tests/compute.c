/*
 * compute: the compute limit on the fake GPU.
 *   compute run SECONDS KERNEL_US   launch kernels of KERNEL_US back to back
 *                                   for SECONDS (from GM_TEST_START_AT, a
 *                                   CLOCK_REALTIME ns, if set); print the
 *                                   fake GPU's time spent on them and the wall
 *                                   time: "GPU_NS g WALL_NS w LAUNCHES n"
 *   compute bench N                 N launches of empty kernels: "NS_PER_LAUNCH x"
 *   compute graph                   graphs, cooperative and Ex launches are gated too
 */
#include "t.h"

typedef struct CUgraphExec_st *CUgraphExec;
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				   unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params);
CUresult cuGraphLaunch(CUgraphExec g, CUstream s);

static uint64_t mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t gpu_ns(void)
{
	uint64_t (*f)(void) = (uint64_t(*)(void))fake_sym("fake_gpu_ns");
	return f ? f() : 0;
}

static void wait_start(void)
{
	const char *s = getenv("GM_TEST_START_AT");
	if (s == NULL)
		return;
	uint64_t at = strtoull(s, NULL, 10);
	for (;;) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		if (now >= at)
			return;
		sleep_ms((unsigned)((at - now) / 1000000 + 1) > 50 ? 50 : (unsigned)((at - now) / 1000000 + 1));
	}
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	lim_test_name = argv[1];
	primary();
	if (strcmp(argv[1], "run") == 0 && argc == 4) {
		double secs = atof(argv[2]);
		unsigned us = (unsigned)atoi(argv[3]);
		wait_start();
		uint64_t t0 = mono(), end = t0 + (uint64_t)(secs * 1e9), n = 0;
		uint64_t g0 = gpu_ns();
		while (mono() < end) {
			CHECK(cuLaunchKernel(NULL, us, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
			n++;
		}
		CHECK(cuCtxSynchronize());
		printf("GPU_NS %llu WALL_NS %llu LAUNCHES %llu\n", (unsigned long long)(gpu_ns() - g0),
		       (unsigned long long)(mono() - t0), (unsigned long long)n);
	} else if (strcmp(argv[1], "bench") == 0 && argc == 3) {
		unsigned long n = strtoul(argv[2], NULL, 10);
		uint64_t t0 = mono();
		for (unsigned long i = 0; i < n; i++)
			cuLaunchKernel(NULL, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
		uint64_t t = mono() - t0;
		CHECK(cuCtxSynchronize());
		printf("NS_PER_LAUNCH %.1f\n", (double)t / (double)n);
	} else if (strcmp(argv[1], "graph") == 0) {
		/* Each kind of launch, 1 ms each, 200 of them: with a 25%
		 * cap they take about 4 times their GPU time. */
		wait_start();
		uint64_t t0 = mono();
		CUlaunchConfig cfg = {0};
		cfg.gridDimX = 1000;
		for (int i = 0; i < 50; i++) {
			CHECK(cuGraphLaunch((CUgraphExec)(uintptr_t)1000, NULL));
			CHECK(cuLaunchKernelEx(&cfg, NULL, NULL, NULL));
			CHECK(cuLaunchCooperativeKernel(NULL, 1000, 1, 1, 1, 1, 1, 0, NULL, NULL));
			CHECK(cuLaunchKernel(NULL, 1000, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
		}
		CHECK(cuCtxSynchronize());
		printf("GPU_NS %llu WALL_NS %llu\n", (unsigned long long)gpu_ns(), (unsigned long long)(mono() - t0));
	} else {
		return 2;
	}
	return done();
}
