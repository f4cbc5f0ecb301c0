/*
 * Loading the interposer, nvmlInit/nvmlShutdown, error strings and the
 * system queries.
 *
 * The library answers through the interposer's CUDA driver API, in the
 * same process: the libcuda.so.1 next to this file (the directory gpumux
 * mounts into the container), or else the one the dynamic linker finds.
 * A libcuda.so.1 without gpumux's export table (gm_share.h) is a real
 * driver, not the interposer, and is refused: this library answers only for
 * remote shares.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gm_share.h"
#include "nvml_internal.h"

void nvml_log(const char *fmt, ...)
{
	char buf[1024] = "gpumux: ";
	size_t n = strlen(buf);
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
	va_end(ap);
	n = k < 0 ? n : n + (size_t)k < sizeof buf - 1 ? n + (size_t)k : sizeof buf - 2;
	buf[n++] = '\n';
	if (write(STDERR_FILENO, buf, n) < 0) {
		/* nowhere else to say it */
	}
}

nvmlReturn_t nvml_not_supported(const char *name, unsigned char *once)
{
	if (__atomic_exchange_n(once, 1, __ATOMIC_RELAXED) == 0)
		nvml_log("%s is not supported by gpumux's NVML for remote GPUs; it returns NVML_ERROR_NOT_SUPPORTED",
			 name);
	return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvml_from_cuda(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return NVML_SUCCESS;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_DEVICE:
		return NVML_ERROR_INVALID_ARGUMENT;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return NVML_ERROR_MEMORY;
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
		return NVML_ERROR_UNINITIALIZED;
	case CUDA_ERROR_NO_DEVICE:
		return NVML_ERROR_DRIVER_NOT_LOADED;
	case CUDA_ERROR_NOT_PERMITTED: /* the share's token expired */
		return NVML_ERROR_NO_PERMISSION;
	case CUDA_ERROR_NOT_SUPPORTED:
		return NVML_ERROR_NOT_SUPPORTED;
	case CUDA_ERROR_UNKNOWN: /* the connection to the server is lost */
		return NVML_ERROR_GPU_IS_LOST;
	default:
		return NVML_ERROR_UNKNOWN;
	}
}

/* ---- the interposer ---- */

struct nvml_cuda nvml_cu;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int load_state;	 /* 0: not tried, 1: loaded, -1: failed (for the process's life) */
static int refs;	 /* successful nvmlInit calls not yet shut down; guarded by mu, read atomically */
static int devices_known;
static unsigned ndevices;
static struct nvmlDevice_st devices[NVML_MAX_DEVICES];

/* sibling_cuda writes the path of the libcuda.so.1 next to this library. */
static int sibling_cuda(char *path, size_t len)
{
	Dl_info info;
	if (dladdr((void *)nvmlInit_v2, &info) == 0 || info.dli_fname == NULL)
		return -1;
	const char *slash = strrchr(info.dli_fname, '/');
	if (slash == NULL)
		return -1;
	int n = snprintf(path, len, "%.*s/libcuda.so.1", (int)(slash - info.dli_fname), info.dli_fname);
	return n > 0 && (size_t)n < len ? 0 : -1;
}

/* load resolves the interposer's functions; on failure it logs why. Called
 * under mu. */
static int load(void)
{
	char path[PATH_MAX];
	void *h = NULL;
	if (sibling_cuda(path, sizeof path) == 0 && access(path, F_OK) == 0)
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(path, sizeof path, "libcuda.so.1");
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (h == NULL) {
		const char *why = dlerror();
		nvml_log("NVML cannot load gpumux's interposer (libcuda.so.1): %s; nvmlInit returns "
			 "NVML_ERROR_DRIVER_NOT_LOADED",
			 why != NULL ? why : "not found");
		return -1;
	}
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
		{"cuInit", offsetof(struct nvml_cuda, Init)},
		{"cuDriverGetVersion", offsetof(struct nvml_cuda, DriverGetVersion)},
		{"cuDeviceGetCount", offsetof(struct nvml_cuda, DeviceGetCount)},
		{"cuDeviceGet", offsetof(struct nvml_cuda, DeviceGet)},
		{"cuDeviceGetName", offsetof(struct nvml_cuda, DeviceGetName)},
		{"cuDeviceGetUuid", offsetof(struct nvml_cuda, DeviceGetUuid)},
		{"cuDeviceGetAttribute", offsetof(struct nvml_cuda, DeviceGetAttribute)},
		{"cuGetExportTable", offsetof(struct nvml_cuda, GetExportTable)},
		{"cuGetErrorName", offsetof(struct nvml_cuda, GetErrorName)},
	};
	struct nvml_cuda cu = {0};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *f = dlsym(h, syms[i].name);
		if (f == NULL) {
			nvml_log("NVML: %s has no %s; nvmlInit returns NVML_ERROR_DRIVER_NOT_LOADED", path, syms[i].name);
			return -1;
		}
		memcpy((char *)&cu + syms[i].off, &f, sizeof f);
	}
	static const CUuuid id = {GM_SHARE_TABLE_ID_BYTES};
	const void *t = NULL;
	if (cu.GetExportTable(&t, &id) != CUDA_SUCCESS || t == NULL ||
	    ((const gm_share_table *)t)->size < offsetof(gm_share_table, memory) + sizeof(void *) ||
	    ((const gm_share_table *)t)->memory == NULL) {
		nvml_log("NVML: %s is not gpumux's interposer (a real driver?): gpumux's NVML answers only for "
			 "remote GPUs; nvmlInit returns NVML_ERROR_DRIVER_NOT_LOADED",
			 path);
		return -1;
	}
	cu.ShareMemory = ((const gm_share_table *)t)->memory;
	nvml_cu = cu;
	return 0;
}

/* find_devices records the devices the server gives this process. Called
 * under mu, after cuInit succeeded. */
static CUresult find_devices(void)
{
	int n = 0;
	CUresult r = nvml_cu.DeviceGetCount(&n);
	if (r != CUDA_SUCCESS)
		return r;
	if (n < 0)
		n = 0;
	if (n > NVML_MAX_DEVICES)
		n = NVML_MAX_DEVICES;
	for (int i = 0; i < n; i++) {
		devices[i].index = (unsigned)i;
		if ((r = nvml_cu.DeviceGet(&devices[i].dev, i)) != CUDA_SUCCESS)
			return r;
	}
	__atomic_store_n(&ndevices, (unsigned)n, __ATOMIC_RELEASE);
	devices_known = 1;
	return CUDA_SUCCESS;
}

static nvmlReturn_t init(unsigned int flags)
{
	static unsigned char logged;
	pthread_mutex_lock(&mu);
	if (load_state == 0)
		load_state = load() == 0 ? 1 : -1;
	nvmlReturn_t ret = NVML_ERROR_DRIVER_NOT_LOADED;
	if (load_state > 0) {
		CUresult r = nvml_cu.Init(0);
		if (r == CUDA_SUCCESS && !devices_known)
			r = find_devices();
		ret = nvml_from_cuda(r);
		if (r != CUDA_SUCCESS && __atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED) == 0) {
			const char *name = NULL;
			if (nvml_cu.GetErrorName(r, &name) != CUDA_SUCCESS || name == NULL)
				name = "an unknown CUDA error";
			nvml_log("NVML: the remote GPU cannot be used (%s; the interposer's message says why); "
				 "nvmlInit returns %d (%s)",
				 name, (int)ret, nvmlErrorString(ret));
		}
	}
	/* NVML_INIT_FLAG_NO_GPUS: a share whose server is out of reach has no
	 * GPU, which this flag asks not to fail on. */
	if (ret == NVML_ERROR_DRIVER_NOT_LOADED && load_state > 0 && (flags & NVML_INIT_FLAG_NO_GPUS))
		ret = NVML_SUCCESS;
	if (ret == NVML_SUCCESS)
		__atomic_store_n(&refs, refs + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&mu);
	return ret;
}

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	return init(0);
}

NVML_EXPORT nvmlReturn_t nvmlInit(void)
{
	return init(0);
}

NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	return init(flags);
}

/* nvmlShutdown balances one nvmlInit. The interposer stays loaded: the
 * program may be using it for CUDA, and its connection is the process's. */
NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&mu);
	nvmlReturn_t ret = NVML_ERROR_UNINITIALIZED;
	if (refs > 0) {
		__atomic_store_n(&refs, refs - 1, __ATOMIC_RELEASE);
		ret = NVML_SUCCESS;
	}
	pthread_mutex_unlock(&mu);
	return ret;
}

int nvml_initialized(void)
{
	return __atomic_load_n(&refs, __ATOMIC_ACQUIRE) > 0;
}

unsigned nvml_device_count(void)
{
	return __atomic_load_n(&ndevices, __ATOMIC_ACQUIRE);
}

struct nvmlDevice_st *nvml_device_at(unsigned i)
{
	return &devices[i];
}

nvmlReturn_t nvml_device(nvmlDevice_t h, struct nvmlDevice_st **d)
{
	if (!nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	/* Compared as integers: h may point anywhere. */
	uintptr_t p = (uintptr_t)h, base = (uintptr_t)devices;
	unsigned n = nvml_device_count();
	if (p < base || (p - base) % sizeof devices[0] != 0 || (p - base) / sizeof devices[0] >= n)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &devices[(p - base) / sizeof devices[0]];
	return NVML_SUCCESS;
}

/* ---- errors ---- */

NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	static const char *const text[] = {
		[NVML_SUCCESS] = "Success",
		[NVML_ERROR_UNINITIALIZED] = "Uninitialized",
		[NVML_ERROR_INVALID_ARGUMENT] = "Invalid Argument",
		[NVML_ERROR_NOT_SUPPORTED] = "Not Supported",
		[NVML_ERROR_NO_PERMISSION] = "Insufficient Permissions",
		[NVML_ERROR_ALREADY_INITIALIZED] = "Already Initialized",
		[NVML_ERROR_NOT_FOUND] = "Not Found",
		[NVML_ERROR_INSUFFICIENT_SIZE] = "Insufficient Size",
		[NVML_ERROR_INSUFFICIENT_POWER] = "Insufficient External Power",
		[NVML_ERROR_DRIVER_NOT_LOADED] = "Driver Not Loaded",
		[NVML_ERROR_TIMEOUT] = "Timeout",
		[NVML_ERROR_IRQ_ISSUE] = "Interrupt Request Issue",
		[NVML_ERROR_LIBRARY_NOT_FOUND] = "NVML Shared Library Not Found",
		[NVML_ERROR_FUNCTION_NOT_FOUND] = "Function Not Found",
		[NVML_ERROR_CORRUPTED_INFOROM] = "Corrupted infoROM",
		[NVML_ERROR_GPU_IS_LOST] = "GPU is lost",
		[NVML_ERROR_RESET_REQUIRED] = "GPU requires restart",
		[NVML_ERROR_OPERATING_SYSTEM] = "The operating system has blocked the request",
		[NVML_ERROR_LIB_RM_VERSION_MISMATCH] = "RM has detected an NVML/RM version mismatch",
		[NVML_ERROR_IN_USE] = "In use by another client",
		[NVML_ERROR_MEMORY] = "Insufficient Memory",
		[NVML_ERROR_NO_DATA] = "No data",
		[NVML_ERROR_VGPU_ECC_NOT_SUPPORTED] = "vGPU ECC not supported",
		[NVML_ERROR_INSUFFICIENT_RESOURCES] = "Insufficient resources",
		[NVML_ERROR_FREQ_NOT_SUPPORTED] = "Frequency not supported",
		[NVML_ERROR_ARGUMENT_VERSION_MISMATCH] = "Argument version mismatch",
		[NVML_ERROR_DEPRECATED] = "Deprecated",
		[NVML_ERROR_NOT_READY] = "Not ready",
		[NVML_ERROR_GPU_NOT_FOUND] = "GPU not found",
		[NVML_ERROR_INVALID_STATE] = "Invalid state",
		[NVML_ERROR_RESET_TYPE_NOT_SUPPORTED] = "Reset type not supported",
	};
	if ((unsigned)result < sizeof text / sizeof text[0] && text[result] != NULL)
		return text[result];
	return "Unknown Error";
}

/* ---- system ---- */

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
	if (!nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (cudaDriverVersion == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvml_from_cuda(nvml_cu.DriverGetVersion(cudaDriverVersion));
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
	return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* nvmlSystemGetProcessName knows one process: this one (the only one whose
 * GPU use the library sees, nvml_memory.c). */
NVML_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
	if (!nvml_initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (name == NULL || length == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (pid != (unsigned int)getpid())
		return NVML_ERROR_NOT_FOUND;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return NVML_ERROR_NOT_FOUND;
	exe[n] = 0;
	/* As NVML does, a name longer than the buffer is cut. */
	snprintf(name, length, "%s", exe);
	return NVML_SUCCESS;
}
