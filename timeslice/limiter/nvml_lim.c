/*
 * libnvidia-ml.so.1: every export of the real NVML passes through
 * (zz_nvml.c) except the memory queries, which answer for the share:
 * total = memory_bytes (or the device's, if smaller), used = what the
 * share's processes hold (the accounting file, read-only), free = what is
 * left, or the device's free memory if less.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "lim.h"
#include "zz_nvml.h"
#include "../../remote/nvml/nvml_abi.h"

LIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
LIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
LIM_EXPORT const char *nvmlErrorString(nvmlReturn_t result);

/* ---- the real library ---- */

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;

static nvmlReturn_t missing_library(void)
{
	return NVML_ERROR_LIBRARY_NOT_FOUND;
}

static nvmlReturn_t missing_function(void)
{
	return NVML_ERROR_FUNCTION_NOT_FOUND;
}

static void load(void)
{
	loaded = lim_load_table("GPUMUX_LIMITER_NVML", "libnvidia-ml.so.1", "NVML",
				lim_nvml_names, lim_nvml_table, LIM_NVML_COUNT, (void *)missing_library, (void *)missing_function);
}

void *lim_nvml_resolve(unsigned i)
{
	pthread_once(&load_once, load);
	return __atomic_load_n(&lim_nvml_table[i < LIM_NVML_COUNT ? i : 0], __ATOMIC_ACQUIRE);
}

/* ---- the share ---- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int limited; /* answer for the share */
static int closed;  /* the limits file is bad: refuse the memory queries */

static void init(void)
{
	const struct lim_config *c = lim_config();
	if (!c->ok) {
		lim_log("%s; NVML's memory queries return NVML_ERROR_NO_PERMISSION", c->err);
		closed = 1;
		return;
	}
	if (c->policy == LIM_POLICY_OFF || c->memory_bytes == 0)
		return;
	char dir[LIM_PATH_MAX];
	if (lim_env_path(dir, sizeof dir, "GPUMUX_LIMITER_STATE", LIM_DEFAULT_STATE) != 0) {
		lim_log("GPUMUX_LIMITER_STATE: the path is too long; NVML's memory queries return "
			"NVML_ERROR_NO_PERMISSION");
		closed = 1;
		return;
	}
	lim_acct_init_reader(dir, c->memory_bytes);
	pthread_atfork(lim_acct_prefork, lim_acct_postfork_parent, lim_acct_forked);
	limited = 1;
}

static void share_view(unsigned long long *total, unsigned long long *free, unsigned long long *used)
{
	uint64_t u, limit = lim_acct_limit();
	lim_acct_usage(&u); /* on error: the limit */
	uint64_t t = *total < limit ? *total : limit;
	if (u > t)
		u = t;
	*total = t;
	*used = u;
	if (*free > t - u)
		*free = t - u;
}

LIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	pthread_once(&init_once, init);
	if (closed)
		return NVML_ERROR_NO_PERMISSION;
	nvmlReturn_t r = LIM_REAL_NVML(nvmlDeviceGetMemoryInfo)(device, memory);
	if (r == NVML_SUCCESS && limited && memory != NULL)
		share_view(&memory->total, &memory->free, &memory->used);
	return r;
}

LIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	pthread_once(&init_once, init);
	if (closed)
		return NVML_ERROR_NO_PERMISSION;
	nvmlReturn_t r = LIM_REAL_NVML(nvmlDeviceGetMemoryInfo_v2)(device, memory);
	if (r == NVML_SUCCESS && limited && memory != NULL) {
		/* The driver's reservation is not the share's: the share's
		 * total is all its own. */
		memory->reserved = 0;
		share_view(&memory->total, &memory->free, &memory->used);
	}
	return r;
}

LIM_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	void *real = lim_nvml_resolve(LIM_NVML_nvmlErrorString);
	if (loaded && real != (void *)missing_function)
		return ((const char *(*)(nvmlReturn_t))real)(result);
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_LIBRARY_NOT_FOUND:
		return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return "Function Not Found";
	case NVML_ERROR_NO_PERMISSION:
		return "Insufficient Permissions";
	default:
		return "Unknown Error";
	}
}
