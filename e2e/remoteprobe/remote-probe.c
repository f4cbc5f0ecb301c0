/* remote-probe runs in the task of the remote e2e test (e2e/remote_e2e_test.go):
 * it loads libcuda.so.1 the way a CUDA program does (the dynamic linker,
 * LD_LIBRARY_PATH first), which on a node without GPUs is gpumux's
 * interposer mounted from the reservation, and uses the remote share through
 * it. One fact per line:
 *
 *	LIB <path>                 the libcuda.so.1 that was loaded
 *	DEVICES <n>                cuDeviceGetCount
 *	NAME <name>                cuDeviceGetName of device 0
 *	MEMORY <bytes>             cuDeviceTotalMem_v2 (the share's quota)
 *	ALLOC <bytes> <result>     cuMemAlloc_v2 of three quarters of it, then
 *	                           of half of it (past the quota)
 *	DEVNODE <path> <0|1>       whether /dev/nvidiactl exists in the task
 *
 * It exits 0 when every call it expects to succeed did. With the argument
 * "hold" (the multi-node test, e2e/cluster_e2e_test.go) it then writes a
 * pattern into the first 64 KiB of its memory, and every 100 ms asks the
 * server for its memory (cuMemGetInfo_v2) and reads the pattern back, until
 * a call fails or the pattern differs (the session moved to another server
 * must keep it), and prints
 *
 *	HOLD                       once, before the first of those calls
 *	LOST <ms> <result>         the failed call: how long it took (monotonic
 *	                           clock) and what it returned; exit 3
 *	CORRUPT <offset>           the first byte of the pattern that differs;
 *	                           exit 4
 *
 * Built by the test with the system C compiler:
 * cc -o remote-probe remote-probe.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static void *lib;

static void *sym(const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		printf("ERR no %s in libcuda.so.1: %s\n", name, dlerror());
		fflush(stdout);
		_exit(1);
	}
	return p;
}

static const char *errname(CUresult r)
{
	CUresult (*getErrorName)(CUresult, const char **) = sym("cuGetErrorName");
	const char *s = "?";
	if (getErrorName(r, &s) != 0 || !s)
		s = "?";
	return s;
}

#define CALL(name, ...)                                                              \
	do {                                                                         \
		CUresult r_ = ((CUresult(*)())sym(#name))(__VA_ARGS__);              \
		if (r_ != 0) {                                                       \
			printf("ERR %s: %s (%d)\n", #name, errname(r_), r_);         \
			return 1;                                                    \
		}                                                                    \
	} while (0)

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* hold keeps a pattern in memory at a and checks it (see above). */
static int hold(CUdeviceptr a)
{
	CUresult (*memGetInfo)(size_t *, size_t *) = sym("cuMemGetInfo_v2");
	CUresult (*htod)(CUdeviceptr, const void *, size_t) = sym("cuMemcpyHtoD_v2");
	CUresult (*dtoh)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");
	static unsigned char want[64 << 10], got[sizeof want];
	for (size_t i = 0; i < sizeof want; i++)
		want[i] = (unsigned char)(i * 131 + 7);
	CUresult r = htod(a, want, sizeof want);
	if (r != 0) {
		printf("ERR cuMemcpyHtoD_v2: %s (%d)\n", errname(r), r);
		return 1;
	}
	printf("HOLD\n");
	for (;;) {
		size_t free_ = 0, total = 0;
		double start = now_ms();
		r = memGetInfo(&free_, &total);
		if (r == 0)
			r = dtoh(got, a, sizeof got);
		if (r != 0) {
			printf("LOST %.0f %s\n", now_ms() - start, errname(r));
			return 3;
		}
		for (size_t i = 0; i < sizeof want; i++) {
			if (got[i] != want[i]) {
				printf("CORRUPT %zu\n", i);
				return 4;
			}
		}
		usleep(100 * 1000);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		printf("ERR dlopen libcuda.so.1: %s\n", dlerror());
		return 1;
	}
	struct link_map *lm = NULL;
	if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm)
		printf("LIB %s\n", lm->l_name);

	int n = 0;
	CUdevice dev = -1;
	char name[256] = "";
	size_t total = 0;
	CUcontext ctx = NULL;
	CALL(cuInit, 0u);
	CALL(cuDeviceGetCount, &n);
	printf("DEVICES %d\n", n);
	CALL(cuDeviceGet, &dev, 0);
	CALL(cuDeviceGetName, name, (int)sizeof name, dev);
	printf("NAME %s\n", name);
	CALL(cuDeviceTotalMem_v2, &total, dev);
	printf("MEMORY %zu\n", total);
	CALL(cuCtxCreate_v2, &ctx, 0u, dev);

	CUresult (*memAlloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
	CUdeviceptr a = 0, b = 0;
	size_t first = total / 4 * 3, second = total / 2;
	CUresult r = memAlloc(&a, first);
	printf("ALLOC %zu %s\n", first, errname(r));
	if (r != 0)
		return 1;
	r = memAlloc(&b, second);
	printf("ALLOC %zu %s\n", second, errname(r));

	printf("DEVNODE /dev/nvidiactl %d\n", access("/dev/nvidiactl", F_OK) == 0);
	if (argc > 1 && strcmp(argv[1], "hold") == 0)
		return hold(a);
	CALL(cuMemFree_v2, a);
	CALL(cuCtxDestroy_v2, ctx);
	return 0;
}
