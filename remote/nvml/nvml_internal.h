/*
 * gpumux's libnvidia-ml.so.1 for remote shares: the internals its C files
 * share (the entry points it answers, and their types, are in
 * nvml_abi.h). Built
 * with -fvisibility=hidden: only NVML_EXPORT functions are visible.
 */
#ifndef GPUMUX_NVML_INTERNAL_H
#define GPUMUX_NVML_INTERNAL_H

#include "gm_abi.h"
#include "nvml_abi.h"

#define NVML_EXPORT __attribute__((visibility("default")))

/* The entry points the library answers (answered.list) are declared in
 * nvml_abi.h; their definitions are NVML_EXPORT. */

/* ---- internals ---- */

/* nvml_log writes "gpumux: <message>\n" to stderr in one write. */
__attribute__((visibility("hidden"), format(printf, 1, 2))) void nvml_log(const char *fmt, ...);

/* nvml_not_supported logs "<name> is not supported" once (through *once)
 * and returns NVML_ERROR_NOT_SUPPORTED: the body of every entry point
 * gpumux does not answer (zz_unsupported.c). */
__attribute__((visibility("hidden"))) nvmlReturn_t nvml_not_supported(const char *name, unsigned char *once);

/* nvml_from_cuda is NVML's name for a CUDA result of the interposer. */
__attribute__((visibility("hidden"))) nvmlReturn_t nvml_from_cuda(CUresult r);

/* The interposer's entry points the library calls (nvml_lib.c), resolved
 * by the first nvmlInit that loads it. */
struct nvml_cuda {
	CUresult (*Init)(unsigned int flags);
	CUresult (*DriverGetVersion)(int *version);
	CUresult (*DeviceGetCount)(int *count);
	CUresult (*DeviceGet)(CUdevice *dev, int ordinal);
	CUresult (*DeviceGetName)(char *name, int len, CUdevice dev);
	CUresult (*DeviceGetUuid)(CUuuid *uuid, CUdevice dev);
	CUresult (*DeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);
	CUresult (*GetExportTable)(const void **table, const CUuuid *id);
	CUresult (*GetErrorName)(CUresult error, const char **name);
	/* gm_share.h's memory call */
	CUresult (*ShareMemory)(CUdevice dev, unsigned long long *total, unsigned long long *used,
				unsigned long long *own, unsigned int *contexts);
};
__attribute__((visibility("hidden"))) extern struct nvml_cuda nvml_cu;

/* nvml_initialized: nvmlInit succeeded more often than nvmlShutdown was
 * called. */
__attribute__((visibility("hidden"))) int nvml_initialized(void);

/* The devices, found by the first nvmlInit that reached the server. */
#define NVML_MAX_DEVICES 64
struct nvmlDevice_st {
	unsigned index;
	CUdevice dev;
};
__attribute__((visibility("hidden"))) unsigned nvml_device_count(void);
/* nvml_device_at returns device i (i < nvml_device_count()). */
__attribute__((visibility("hidden"))) struct nvmlDevice_st *nvml_device_at(unsigned i);
/* nvml_device checks a handle: NVML_ERROR_UNINITIALIZED before nvmlInit,
 * NVML_ERROR_INVALID_ARGUMENT for anything but one of the devices. */
__attribute__((visibility("hidden"))) nvmlReturn_t nvml_device(nvmlDevice_t h, struct nvmlDevice_st **d);

#endif
