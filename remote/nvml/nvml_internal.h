/*
 * gpumux's libnvidia-ml.so.1 for remote shares: the entry points it
 * answers (their types are in nvml_abi.h) and the internals its C files
 * share. Built
 * with -fvisibility=hidden: only NVML_EXPORT functions are visible.
 */
#ifndef GPUMUX_NVML_INTERNAL_H
#define GPUMUX_NVML_INTERNAL_H

#include "gm_abi.h"
#include "nvml_abi.h"

#define NVML_EXPORT __attribute__((visibility("default")))

/* ---- the entry points the library answers (answered.list) ---- */

/* nvml_lib.c */
NVML_EXPORT nvmlReturn_t nvmlInit(void);
NVML_EXPORT nvmlReturn_t nvmlInit_v2(void);
NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
NVML_EXPORT nvmlReturn_t nvmlShutdown(void);
NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result);
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion);
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion);
NVML_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length);

/* nvml_device.c */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
					      unsigned int *pendingMode);
NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type);

/* nvml_memory.c; the process lists of each kind in three versions, the
 * first with nvmlProcessInfo_v1_t entries, _v2 and _v3 nvmlProcessInfo_v2_t. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
#define NVML_PROCESS_LISTS(X)                                                     \
	X(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, 0, 1)        \
	X(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 1, 1)     \
	X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, 1, 1)     \
	X(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, 0, 0)       \
	X(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, 1, 0)    \
	X(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_v2_t, 1, 0)    \
	X(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, 0, 0)     \
	X(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 1, 0)  \
	X(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, 1, 0)
#define NVML_PROCESS_LIST_PROTO(name, info_t, v2, compute) \
	NVML_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, info_t *infos);
NVML_PROCESS_LISTS(NVML_PROCESS_LIST_PROTO)

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
