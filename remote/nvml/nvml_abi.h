/*
 * The part of NVML's ABI gpumux's libraries use: names, values and layouts
 * are nvml.h's (NVML API 13 of driver 580, as go-nvml ships it). Included
 * by the NVML library of remote shares (nvml_internal.h) and by the
 * time-slice limiter's NVML (timeslice/limiter/nvml_lim.c), so that the
 * two cannot disagree on a layout.
 */
#ifndef GPUMUX_NVML_ABI_H
#define GPUMUX_NVML_ABI_H

typedef enum nvmlReturn_enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_IRQ_ISSUE = 11,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_CORRUPTED_INFOROM = 14,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_MEMORY = 20,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
	NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_DEPRECATED = 26,
	NVML_ERROR_NOT_READY = 27,
	NVML_ERROR_GPU_NOT_FOUND = 28,
	NVML_ERROR_INVALID_STATE = 29,
	NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
	NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* A device handle: opaque to callers; each library defines the struct
 * (gpumux's NVML for remote shares: one of its own records, found among
 * them before it is dereferenced, nvml_device.c). */
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_INIT_FLAG_NO_GPUS 1u

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

typedef struct nvmlPciInfo_st {
	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2) */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct nvmlProcessInfo_v1_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_v2_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

typedef enum nvmlBrandType_enum { NVML_BRAND_UNKNOWN = 0 } nvmlBrandType_t;

#define NVML_DEVICE_MIG_DISABLE 0u

#endif /* GPUMUX_NVML_ABI_H */
