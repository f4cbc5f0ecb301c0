/*
 * gpumux's NVML for remote shares, against gpumux-remoted on the fake
 * backend (run by remote/ctest's TestNVML*): linked with the library and
 * with the interposer, so that every answer can be compared with CUDA's.
 *
 *   nvml check       (GM_TEST_QUOTA: the token's quota) every answered call,
 *                    bad arguments, unsupported calls, shutdown
 *   nvml noserver    no server: nvmlInit fails clearly; NO_GPUS gives none
 *   nvml hold BYTES  allocate BYTES, print READY, wait for a line on stdin
 */
#include <pthread.h>
#include <unistd.h>

#include "nvml_internal.h"
#include "t.h"

/* Unanswered functions the program calls (answered ones: nvml_internal.h). */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, void *utilization);
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor);
NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);

/* NEXPECT(call, want): an NVML call must return want. */
#define NEXPECT(call, want)                                                                                  \
	do {                                                                                                 \
		nvmlReturn_t n_r_ = (call), n_w_ = (want);                                                   \
		if (n_r_ != n_w_) {                                                                          \
			printf("FAIL %s:%d: %s = %d (%s), want %d (%s)\n", __FILE__, __LINE__, #call, (int)n_r_, \
			       nvmlErrorString(n_r_), (int)n_w_, nvmlErrorString(n_w_));                     \
			fflush(stdout);                                                                      \
			t_failures++;                                                                        \
		}                                                                                            \
	} while (0)
#define NCHECK(call) NEXPECT(call, NVML_SUCCESS)

static void identity(nvmlDevice_t h)
{
	char name[96], cname[256];
	NCHECK(nvmlDeviceGetName(h, name, sizeof name));
	CHECK(cuDeviceGetName(cname, sizeof cname, 0));
	ASSERT(strcmp(name, cname) == 0);
	NEXPECT(nvmlDeviceGetName(h, name, (unsigned)strlen(cname)), NVML_ERROR_INSUFFICIENT_SIZE);
	NEXPECT(nvmlDeviceGetName(h, NULL, 96), NVML_ERROR_INVALID_ARGUMENT);

	char uuid[80], want[80];
	CUuuid u;
	CHECK(cuDeviceGetUuid(&u, 0));
	const unsigned char *b = (const unsigned char *)u.bytes;
	snprintf(want, sizeof want, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
		 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	NCHECK(nvmlDeviceGetUUID(h, uuid, sizeof uuid));
	ASSERT(strcmp(uuid, want) == 0);
	NEXPECT(nvmlDeviceGetUUID(h, uuid, 40), NVML_ERROR_INSUFFICIENT_SIZE);
	NCHECK(nvmlDeviceGetUUID(h, uuid, 41));
	nvmlDevice_t byUUID = NULL;
	NCHECK(nvmlDeviceGetHandleByUUID(want, &byUUID));
	ASSERT(byUUID == h);
	for (char *p = want; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	NCHECK(nvmlDeviceGetHandleByUUID(want, &byUUID));
	NEXPECT(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &byUUID), NVML_ERROR_NOT_FOUND);
	NEXPECT(nvmlDeviceGetHandleByUUID(NULL, &byUUID), NVML_ERROR_INVALID_ARGUMENT);

	int dom, bus, dev;
	CHECK(cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0));
	CHECK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
	CHECK(cuDeviceGetAttribute(&dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0));
	nvmlPciInfo_t pci;
	memset(&pci, 0x5a, sizeof pci);
	NCHECK(nvmlDeviceGetPciInfo_v3(h, &pci));
	ASSERT(pci.domain == (unsigned)dom && pci.bus == (unsigned)bus && pci.device == (unsigned)dev);
	char busId[32];
	snprintf(busId, sizeof busId, "%08X:%02X:%02X.0", dom, bus, dev);
	ASSERT(strcmp(pci.busId, busId) == 0);
	nvmlDevice_t byPci = NULL;
	char shortId[32];
	snprintf(shortId, sizeof shortId, "%x:%x.0", bus, dev);
	const char *ids[] = {pci.busId, pci.busIdLegacy, shortId};
	for (int i = 0; i < 3; i++) {
		byPci = NULL;
		NCHECK(nvmlDeviceGetHandleByPciBusId_v2(ids[i], &byPci));
		ASSERT(byPci == h);
	}
	snprintf(busId, sizeof busId, "%08X:%02X:%02X.0", dom, bus + 1, dev);
	NEXPECT(nvmlDeviceGetHandleByPciBusId_v2(busId, &byPci), NVML_ERROR_NOT_FOUND);
	NEXPECT(nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &byPci), NVML_ERROR_INVALID_ARGUMENT);

	int major, minor, cmaj, cmin;
	NCHECK(nvmlDeviceGetCudaComputeCapability(h, &major, &minor));
	CHECK(cuDeviceGetAttribute(&cmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
	CHECK(cuDeviceGetAttribute(&cmin, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
	ASSERT(major == cmaj && minor == cmin);

	unsigned cur = 9, pend = 9, isMig = 9, index = 9;
	NCHECK(nvmlDeviceGetMigMode(h, &cur, &pend));
	ASSERT(cur == NVML_DEVICE_MIG_DISABLE && pend == NVML_DEVICE_MIG_DISABLE);
	NCHECK(nvmlDeviceIsMigDeviceHandle(h, &isMig));
	ASSERT(isMig == 0);
	NCHECK(nvmlDeviceGetIndex(h, &index));
	ASSERT(index == 0);
	nvmlBrandType_t brand = (nvmlBrandType_t)7;
	NCHECK(nvmlDeviceGetBrand(h, &brand));
	ASSERT(brand == NVML_BRAND_UNKNOWN);
}

/* memory checks the share's memory and the process list with want bytes
 * held by this process, which has a context or not. */
static void memory(nvmlDevice_t h, unsigned long long quota, unsigned long long want, int withContext)
{
	nvmlMemory_t m;
	NCHECK(nvmlDeviceGetMemoryInfo(h, &m));
	ASSERT(m.total == quota && m.used == want && m.free == quota - want);
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	NCHECK(nvmlDeviceGetMemoryInfo_v2(h, &m2));
	ASSERT(m2.total == quota && m2.used == want && m2.free == quota - want && m2.reserved == 0);
	m2.version = 1;
	NEXPECT(nvmlDeviceGetMemoryInfo_v2(h, &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
	NEXPECT(nvmlDeviceGetMemoryInfo(h, NULL), NVML_ERROR_INVALID_ARGUMENT);

	unsigned n = 0;
	NEXPECT(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL),
		withContext ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
	ASSERT(n == (unsigned)withContext);
	nvmlProcessInfo_v2_t p[4];
	memset(p, 0, sizeof p);
	n = 4;
	NCHECK(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, p));
	ASSERT(n == (unsigned)withContext);
	if (withContext)
		ASSERT(p[0].pid == (unsigned)getpid() && p[0].usedGpuMemory == want && p[0].gpuInstanceId == 0xFFFFFFFFu &&
		       p[0].computeInstanceId == 0xFFFFFFFFu);
	nvmlProcessInfo_v1_t p1[2];
	n = 2;
	NCHECK(nvmlDeviceGetComputeRunningProcesses(h, &n, p1));
	ASSERT(n == (unsigned)withContext);
	if (withContext)
		ASSERT(p1[0].pid == (unsigned)getpid() && p1[0].usedGpuMemory == want);
	n = 4;
	NCHECK(nvmlDeviceGetGraphicsRunningProcesses_v3(h, &n, p));
	ASSERT(n == 0);
	NEXPECT(nvmlDeviceGetComputeRunningProcesses_v3(h, NULL, p), NVML_ERROR_INVALID_ARGUMENT);
	n = 1;
	NEXPECT(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, NULL), NVML_ERROR_INVALID_ARGUMENT);
}

/* hammer: a thread's nvmlInit, queries and nvmlShutdown, over and over,
 * beside the others'; it counts its failures in *arg. */
static void *hammer(void *arg)
{
	int *bad = arg;
	for (int i = 0; i < 50; i++) {
		nvmlDevice_t h;
		nvmlMemory_t m;
		unsigned n;
		char uuid[80];
		if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS || n != 1 ||
		    nvmlDeviceGetHandleByIndex_v2(0, &h) != NVML_SUCCESS || nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS ||
		    nvmlDeviceGetUUID(h, uuid, sizeof uuid) != NVML_SUCCESS || nvmlShutdown() != NVML_SUCCESS)
			(*bad)++;
	}
	return NULL;
}

static int check(void)
{
	const char *q = getenv("GM_TEST_QUOTA");
	if (q == NULL) {
		printf("FAIL: GM_TEST_QUOTA is not set\n");
		return 1;
	}
	unsigned long long quota = strtoull(q, NULL, 0);
	unsigned n = 9;
	nvmlDevice_t h = NULL;
	NEXPECT(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	NEXPECT(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);

	NCHECK(nvmlInit_v2());
	NCHECK(nvmlDeviceGetCount_v2(&n));
	int cn = 0;
	CHECK(cuDeviceGetCount(&cn));
	ASSERT(n == (unsigned)cn && n == 1);
	NCHECK(nvmlDeviceGetCount(&n));
	NEXPECT(nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);
	NEXPECT(nvmlDeviceGetHandleByIndex_v2(1, &h), NVML_ERROR_INVALID_ARGUMENT);
	NCHECK(nvmlDeviceGetHandleByIndex_v2(0, &h));
	ASSERT(h != NULL);

	int v = 0, cv = 0;
	NCHECK(nvmlSystemGetCudaDriverVersion_v2(&v));
	CHECK(cuDriverGetVersion(&cv));
	ASSERT(v == cv && v > 0);
	char pname[4096];
	NCHECK(nvmlSystemGetProcessName((unsigned)getpid(), pname, sizeof pname));
	ASSERT(strstr(pname, "/nvml") != NULL);
	NEXPECT(nvmlSystemGetProcessName((unsigned)getpid() + 1, pname, sizeof pname), NVML_ERROR_NOT_FOUND);

	identity(h);
	memory(h, quota, 0, 0);

	/* A context and an allocation: this process is listed, with it. */
	t_setup();
	memory(h, quota, 0, 1);
	CUdeviceptr p;
	CHECK(cuMemAlloc_v2(&p, quota / 4));
	memory(h, quota, quota / 4, 1);
	CHECK(cuMemFree_v2(p));
	memory(h, quota, 0, 1);

	/* Handles that are not the library's: refused, never followed. */
	unsigned index;
	nvmlDevice_t bad[] = {NULL, (nvmlDevice_t)1, (nvmlDevice_t)((char *)h + 1), (nvmlDevice_t)&index};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		NEXPECT(nvmlDeviceGetIndex(bad[i], &index), NVML_ERROR_INVALID_ARGUMENT);
		nvmlMemory_t m;
		NEXPECT(nvmlDeviceGetMemoryInfo(bad[i], &m), NVML_ERROR_INVALID_ARGUMENT);
	}

	/* Unsupported: NOT_SUPPORTED whatever the arguments, logged once. */
	unsigned power = 0, temp = 0, minorNum = 0;
	char drv[80];
	for (int i = 0; i < 2; i++) {
		NEXPECT(nvmlDeviceGetPowerUsage(h, &power), NVML_ERROR_NOT_SUPPORTED);
		NEXPECT(nvmlDeviceGetTemperature(h, 0, &temp), NVML_ERROR_NOT_SUPPORTED);
		NEXPECT(nvmlDeviceGetUtilizationRates(NULL, NULL), NVML_ERROR_NOT_SUPPORTED);
		NEXPECT(nvmlDeviceGetMinorNumber(h, &minorNum), NVML_ERROR_NOT_SUPPORTED);
		NEXPECT(nvmlSystemGetDriverVersion(drv, sizeof drv), NVML_ERROR_NOT_SUPPORTED);
	}
	ASSERT(strcmp(nvmlErrorString(NVML_ERROR_NOT_SUPPORTED), "Not Supported") == 0);
	ASSERT(strcmp(nvmlErrorString((nvmlReturn_t)12345), "Unknown Error") == 0);

	/* Threads: each initializes and shuts down on its own. */
	pthread_t th[8];
	int failures[8] = {0};
	for (int i = 0; i < 8; i++)
		ASSERT(pthread_create(&th[i], NULL, hammer, &failures[i]) == 0);
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		ASSERT(failures[i] == 0);
	}

	/* Reference counted: every nvmlInit needs its nvmlShutdown. */
	NCHECK(nvmlInit());
	NCHECK(nvmlInitWithFlags(0));
	NCHECK(nvmlShutdown());
	NCHECK(nvmlShutdown());
	NCHECK(nvmlDeviceGetIndex(h, &index));
	NCHECK(nvmlShutdown());
	NEXPECT(nvmlDeviceGetIndex(h, &index), NVML_ERROR_UNINITIALIZED);
	NEXPECT(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_ERROR_UNINITIALIZED);
	NEXPECT(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	NCHECK(nvmlInit_v2());
	NCHECK(nvmlDeviceGetIndex(h, &index));
	NCHECK(nvmlShutdown());
	return t_done("nvml check");
}

static int noserver(void)
{
	unsigned n = 9;
	for (int i = 0; i < 2; i++)
		NEXPECT(nvmlInit_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
	NEXPECT(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	NCHECK(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS));
	NCHECK(nvmlDeviceGetCount_v2(&n));
	ASSERT(n == 0);
	nvmlDevice_t h;
	NEXPECT(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_ERROR_INVALID_ARGUMENT);
	NCHECK(nvmlShutdown());
	return t_done("nvml noserver");
}

static int hold(const char *bytes)
{
	t_setup();
	CUdeviceptr p;
	REQUIRE(cuMemAlloc_v2(&p, strtoull(bytes, NULL, 0)));
	printf("READY\n");
	fflush(stdout);
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL)
		printf("stdin closed\n");
	CHECK(cuMemFree_v2(p));
	return t_done("nvml hold");
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "check") == 0)
		return check();
	if (argc == 2 && strcmp(argv[1], "noserver") == 0)
		return noserver();
	if (argc == 3 && strcmp(argv[1], "hold") == 0)
		return hold(argv[2]);
	fprintf(stderr, "usage: nvml check | noserver | hold BYTES\n");
	return 2;
}
