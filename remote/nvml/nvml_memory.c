/*
 * Memory and processes: the share's memory as gpumux-remoted accounts it
 * (gm_share.h's memory call: forwarded, needs no context), and the one
 * process whose use of the GPU this library can see, the calling one.
 */
#include <string.h>
#include <unistd.h>

#include "nvml_internal.h"

/* The server's answer for one device. */
struct share_memory {
	unsigned long long total, used, own;
	unsigned int contexts;
};

static nvmlReturn_t share_memory(nvmlDevice_t device, struct share_memory *m)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	r = nvml_from_cuda(nvml_cu.ShareMemory(d->dev, &m->total, &m->used, &m->own, &m->contexts));
	if (r == NVML_SUCCESS && m->used > m->total) /* the server caps it; never trust a wrap */
		m->used = m->total;
	return r;
}

/* nvmlDeviceGetMemoryInfo_v2: total = the share (its quota, or the GPU if
 * smaller), used = what the share's processes hold together, free = the
 * rest; nothing of the share is reserved for the system. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	struct share_memory m;
	nvmlReturn_t r = share_memory(device, &m);
	if (r != NVML_SUCCESS)
		return r;
	if (memory == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	*memory = (nvmlMemory_v2_t){
		.version = nvmlMemory_v2, .total = m.total, .reserved = 0, .free = m.total - m.used, .used = m.used};
	return NVML_SUCCESS;
}

/* nvmlDeviceGetMemoryInfo: the same, in version 1's struct. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
	nvmlReturn_t r = nvmlDeviceGetMemoryInfo_v2(device, memory != NULL ? &m : NULL);
	if (r == NVML_SUCCESS)
		*memory = (nvmlMemory_t){.total = m.total, .free = m.free, .used = m.used};
	return r;
}

/* processes fills a list of running processes, NVML's way: *infoCount in
 * is the room in infos, out the number of entries (or, with
 * NVML_ERROR_INSUFFICIENT_SIZE, the room needed). The compute list holds
 * the calling process when it has a context on the server, with the memory
 * it holds; its pid is the one this process has (the container's
 * namespace). The share's other processes are not seen. Graphics and MPS
 * lists are empty: a remote share has neither. v2 selects
 * nvmlProcessInfo_v2_t entries. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, int v2, int compute)
{
	struct nvmlDevice_st *d;
	nvmlReturn_t r = nvml_device(device, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (infoCount == NULL || (infos == NULL && *infoCount != 0))
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned n = 0;
	struct share_memory m = {0};
	if (compute) {
		if ((r = share_memory(device, &m)) != NVML_SUCCESS)
			return r;
		n = m.contexts > 0;
	}
	unsigned room = *infoCount;
	*infoCount = n;
	if (n > room)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	if (n == 0)
		return NVML_SUCCESS;
	if (v2)
		*(nvmlProcessInfo_v2_t *)infos = (nvmlProcessInfo_v2_t){.pid = (unsigned)getpid(),
									.usedGpuMemory = m.own,
									.gpuInstanceId = 0xFFFFFFFFu,
									.computeInstanceId = 0xFFFFFFFFu};
	else
		*(nvmlProcessInfo_v1_t *)infos =
			(nvmlProcessInfo_v1_t){.pid = (unsigned)getpid(), .usedGpuMemory = m.own};
	return NVML_SUCCESS;
}

#define PROCESS_LIST(name, info_t, v2, compute)                                           \
	NVML_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, info_t *infos) \
	{                                                                                        \
		return processes(device, infoCount, infos, v2, compute);                        \
	}
NVML_PROCESS_LISTS(PROCESS_LIST)
