/*
 * libcuda.so.1: loading the real driver, cuInit (where a bad limits file
 * fails closed) and cuGetProcAddress (which hands out the limiter's own
 * entry points for the calls it intercepts).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "cuda_lim.h"

/* ---- the real driver ---- */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded; /* 1: the real driver is loaded */

/* Fallbacks of slots that could not be resolved: every cu* call returns
 * CUresult in %eax, whatever its arguments. */
static CUresult missing_driver(void)
{
	return CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult missing_symbol(void)
{
	return CUDA_ERROR_NOT_SUPPORTED;
}

static void load(void)
{
	loaded = lim_load_table("GPUMUX_LIMITER_CUDA", "libcuda.so.1", "CUDA",
				lim_cu_names, lim_cu_table, LIM_CU_COUNT, (void *)missing_driver, (void *)missing_symbol);
}

void *lim_cu_resolve(unsigned i)
{
	pthread_once(&load_once, load);
	return __atomic_load_n(&lim_cu_table[i < LIM_CU_COUNT ? i : 0], __ATOMIC_ACQUIRE);
}

/* ---- initialization ---- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_SUCCESS;

static void atfork_prepare(void)
{
	lim_compute_prefork();
	lim_track_prefork();
	lim_acct_prefork();
}

static void atfork_parent(void)
{
	lim_acct_postfork_parent();
	lim_track_postfork_parent();
	lim_compute_postfork_parent();
}

static void atfork_child(void)
{
	lim_acct_forked();
	lim_track_forked();
	lim_compute_forked();
}

static void init(void)
{
	const struct lim_config *c = lim_config();
	if (!c->ok) {
		lim_log("%s; CUDA is disabled (cuInit returns CUDA_ERROR_NOT_PERMITTED)", c->err);
		init_result = CUDA_ERROR_NOT_PERMITTED;
		return;
	}
	if (c->policy == LIM_POLICY_OFF)
		return;
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	if (c->memory_bytes > 0) {
		char dir[LIM_PATH_MAX], why[LIM_PATH_MAX + 128];
		if (lim_env_path(dir, sizeof dir, "GPUMUX_LIMITER_STATE", LIM_DEFAULT_STATE) != 0) {
			lim_log("GPUMUX_LIMITER_STATE: the path is too long; CUDA is disabled (cuInit returns "
				"CUDA_ERROR_NOT_PERMITTED)");
			init_result = CUDA_ERROR_NOT_PERMITTED;
			return;
		}
		lim_acct_init(dir, c->memory_bytes);
		if (lim_acct_open(why, sizeof why) != 0) {
			lim_log("the accounting file: %s; CUDA is disabled (cuInit returns CUDA_ERROR_NOT_PERMITTED)",
				why);
			init_result = CUDA_ERROR_NOT_PERMITTED;
			return;
		}
	}
	lim_compute_init(c);
}

CUresult lim_cuda_init(void)
{
	pthread_once(&init_once, init);
	return init_result;
}

int lim_cuda_policy_off(void)
{
	const struct lim_config *c = lim_config();
	return c->ok && c->policy == LIM_POLICY_OFF;
}

LIM_EXPORT CUresult cuInit(unsigned int Flags)
{
	CUresult r = lim_cuda_init();
	if (r != CUDA_SUCCESS)
		return r;
	if (!loaded) {
		lim_cu_resolve(0);
		if (!loaded)
			return CUDA_ERROR_NO_DEVICE;
	}
	return LIM_REAL_CU(cuInit)(Flags);
}

/* ---- cuGetProcAddress ---- */

#define OWN(name) {LIM_CU_##name, (void *)name}
static const struct {
	unsigned idx;
	void *fn;
} own[] = {
	OWN(cuInit),
	OWN(cuGetProcAddress),
	OWN(cuGetProcAddress_v2),
	OWN(cuMemAlloc),
	OWN(cuMemAlloc_v2),
	OWN(cuMemAllocPitch),
	OWN(cuMemAllocPitch_v2),
	OWN(cuMemAllocManaged),
	OWN(cuMemAllocAsync),
	OWN(cuMemAllocAsync_ptsz),
	OWN(cuMemAllocFromPoolAsync),
	OWN(cuMemAllocFromPoolAsync_ptsz),
	OWN(cuMemFree),
	OWN(cuMemFree_v2),
	OWN(cuMemFreeAsync),
	OWN(cuMemFreeAsync_ptsz),
	OWN(cuMemCreate),
	OWN(cuMemRelease),
	OWN(cuArrayCreate),
	OWN(cuArrayCreate_v2),
	OWN(cuArray3DCreate),
	OWN(cuArray3DCreate_v2),
	OWN(cuArrayDestroy),
	OWN(cuMipmappedArrayCreate),
	OWN(cuMipmappedArrayDestroy),
	OWN(cuMemGetInfo),
	OWN(cuMemGetInfo_v2),
	OWN(cuDeviceTotalMem),
	OWN(cuDeviceTotalMem_v2),
	OWN(cuCtxCreate),
	OWN(cuCtxCreate_v2),
	OWN(cuCtxCreate_v3),
	OWN(cuCtxCreate_v4),
	OWN(cuCtxFromGreenCtx),
	OWN(cuCtxDestroy),
	OWN(cuCtxDestroy_v2),
	OWN(cuDevicePrimaryCtxRelease),
	OWN(cuDevicePrimaryCtxRelease_v2),
	OWN(cuDevicePrimaryCtxReset),
	OWN(cuDevicePrimaryCtxReset_v2),
	OWN(cuLaunchKernel),
	OWN(cuLaunchKernel_ptsz),
	OWN(cuLaunchKernelEx),
	OWN(cuLaunchKernelEx_ptsz),
	OWN(cuLaunchCooperativeKernel),
	OWN(cuLaunchCooperativeKernel_ptsz),
	OWN(cuLaunchCooperativeKernelMultiDevice),
	OWN(cuGraphLaunch),
	OWN(cuGraphLaunch_ptsz),
	OWN(cuLaunch),
	OWN(cuLaunchGrid),
	OWN(cuLaunchGridAsync),
};

/* swap replaces the real driver's function in *pfn by the limiter's own
 * when it is one the limiter intercepts. The driver hands out its
 * exported functions, so the comparison is by address; that also picks
 * the version (cuMemAlloc or cuMemAlloc_v2, _ptsz or not) the caller
 * asked for. */
static void swap(void **pfn)
{
	if (pfn == NULL || *pfn == NULL || lim_cuda_policy_off())
		return;
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
		if (*pfn == lim_cu_resolve(own[i].idx)) {
			*pfn = own[i].fn;
			return;
		}
	}
}

LIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	CUresult r = LIM_REAL_CU(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS)
		swap(pfn);
	return r;
}

LIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
					CUdriverProcAddressQueryResult *symbolStatus)
{
	CUresult r = LIM_REAL_CU(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
	if (r == CUDA_SUCCESS)
		swap(pfn);
	return r;
}
