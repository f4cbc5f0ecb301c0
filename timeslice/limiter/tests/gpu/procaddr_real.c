/*
 * On a GPU machine, through the limiter: does the real driver's
 * cuGetProcAddress hand out its exported functions (so that the limiter
 * can recognize and replace the ones it intercepts)? Prints one line per
 * query; exit status 1 if any intercepted call came back as the driver's.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long cuuint64_t;
CUresult cuInit(unsigned int);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);

int main(void)
{
	static const struct {
		const char *sym;
		int ver;
		int ptsz;
		const char *want;
	} q[] = {
		{"cuInit", 13000, 0, "cuInit"},
		{"cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"},
		{"cuMemAlloc", 13000, 0, "cuMemAlloc_v2"},
		{"cuMemAllocPitch", 13000, 0, "cuMemAllocPitch_v2"},
		{"cuMemFree", 13000, 0, "cuMemFree_v2"},
		{"cuMemAllocManaged", 13000, 0, "cuMemAllocManaged"},
		{"cuMemAllocAsync", 13000, 0, "cuMemAllocAsync"},
		{"cuMemAllocAsync", 13000, 1, "cuMemAllocAsync_ptsz"},
		{"cuMemAllocFromPoolAsync", 13000, 1, "cuMemAllocFromPoolAsync_ptsz"},
		{"cuMemFreeAsync", 13000, 1, "cuMemFreeAsync_ptsz"},
		{"cuMemCreate", 13000, 0, "cuMemCreate"},
		{"cuMemRelease", 13000, 0, "cuMemRelease"},
		{"cuArrayCreate", 13000, 0, "cuArrayCreate_v2"},
		{"cuArray3DCreate", 13000, 0, "cuArray3DCreate_v2"},
		{"cuArrayDestroy", 13000, 0, "cuArrayDestroy"},
		{"cuMipmappedArrayCreate", 13000, 0, "cuMipmappedArrayCreate"},
		{"cuMemGetInfo", 13000, 0, "cuMemGetInfo_v2"},
		{"cuDeviceTotalMem", 13000, 0, "cuDeviceTotalMem_v2"},
		{"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
		{"cuCtxDestroy", 13000, 0, "cuCtxDestroy_v2"},
		{"cuDevicePrimaryCtxRelease", 13000, 0, "cuDevicePrimaryCtxRelease_v2"},
		{"cuDevicePrimaryCtxReset", 13000, 0, "cuDevicePrimaryCtxReset_v2"},
		{"cuCtxFromGreenCtx", 13000, 0, "cuCtxFromGreenCtx"},
		{"cuLaunchKernel", 13000, 0, "cuLaunchKernel"},
		{"cuLaunchKernel", 13000, 1, "cuLaunchKernel_ptsz"},
		{"cuLaunchKernelEx", 13000, 0, "cuLaunchKernelEx"},
		{"cuLaunchKernelEx", 13000, 1, "cuLaunchKernelEx_ptsz"},
		{"cuLaunchCooperativeKernel", 13000, 0, "cuLaunchCooperativeKernel"},
		{"cuGraphLaunch", 13000, 0, "cuGraphLaunch"},
		{"cuGraphLaunch", 13000, 1, "cuGraphLaunch_ptsz"},
		{"cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2"},
		{"cuMemcpyHtoD", 13000, 1, "cuMemcpyHtoD_v2_ptds"},
		{"cuStreamSynchronize", 13000, 0, "cuStreamSynchronize"},
	};
	int r = cuInit(0);
	printf("cuInit %d\n", r);
	const char *realpath_ = getenv("GPUMUX_LIMITER_CUDA");
	void *real = dlopen(realpath_, RTLD_NOW | RTLD_NOLOAD);
	int bad = 0;
	for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
		void *fn = NULL;
		int st = -1;
		r = cuGetProcAddress_v2(q[i].sym, &fn, q[i].ver, q[i].ptsz ? 2 : 0, &st);
		void *mine = dlsym(RTLD_DEFAULT, q[i].want);
		void *theirs = real ? dlsym(real, q[i].want) : NULL;
		const char *what = fn == mine ? "LIMITER" : fn == theirs ? "DRIVER-EXPORT" : "OTHER";
		printf("%-28s ptsz=%d r=%d -> %s (%s)\n", q[i].sym, q[i].ptsz, r, q[i].want, what);
	}
	return bad;
}
