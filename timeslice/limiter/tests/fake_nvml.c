/*
 * A fake libnvidia-ml.so.1 for the limiter's tests: one device of
 * FAKE_NVML_TOTAL bytes (default 80 GiB) with 1 GiB used, a name, and
 * nothing else (every other call of the limiter's stubs then has no real
 * function to reach).
 */
#include <stdlib.h>
#include <string.h>

#include "nvml.h"

#define FAKE __attribute__((visibility("default")))
#define DEV ((nvmlDevice_t)(unsigned long)0x4000)

static int inited;

static unsigned long long total(void)
{
	const char *t = getenv("FAKE_NVML_TOTAL");
	return t ? strtoull(t, NULL, 0) : 80ull << 30;
}

FAKE nvmlReturn_t nvmlInit_v2(void)
{
	inited = 1;
	return 0;
}

FAKE nvmlReturn_t nvmlShutdown(void)
{
	inited = 0;
	return 0;
}

FAKE nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	if (!inited)
		return 1;
	*n = 1;
	return 0;
}

FAKE nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (!inited)
		return 1;
	if (i != 0)
		return 2;
	*d = DEV;
	return 0;
}

FAKE nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len)
{
	if (d != DEV || len < 9)
		return 2;
	strcpy(name, "Fake GPU");
	return 0;
}

FAKE nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	if (d != DEV || m == NULL)
		return 2;
	m->total = total();
	m->used = 1ull << 30;
	m->free = m->total - m->used;
	return 0;
}

FAKE nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	if (d != DEV || m == NULL || m->version != nvmlMemory_v2)
		return 2;
	m->total = total();
	m->reserved = 512ull << 20;
	m->used = 1ull << 30;
	m->free = m->total - m->used - m->reserved;
	return 0;
}

FAKE const char *nvmlErrorString(nvmlReturn_t r)
{
	return r == 0 ? "fake: Success" : "fake: error";
}
