/*
 * nvml: the memory queries answer for the share; everything else passes
 * through. GM_TEST_LIMIT is memory_bytes, GM_TEST_USED what other
 * processes of the share hold; "self" also allocates GM_TEST_SELF bytes
 * through CUDA in this process (whose libcuda.so.1 and libnvidia-ml.so.1
 * then share the accounting file). "off"/"closed": policy=off and a bad
 * limits file.
 */
#include "nvml.h"
#include "t.h"

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "share";
	lim_test_name = mode;
	nvmlDevice_t d;
	EQ(nvmlInit_v2(), 0);
	EQ(nvmlDeviceGetHandleByIndex_v2(0, &d), 0);
	char name[64] = "";
	EQ(nvmlDeviceGetName(d, name, sizeof name), 0);
	ASSERT(strcmp(name, "Fake GPU") == 0);
	/* Not in the fake: the stub's fallback. */
	unsigned int temp;
	EQ(nvmlDeviceGetTemperature(d, 0, &temp), 13);
	ASSERT(strcmp(nvmlErrorString(0), "fake: Success") == 0);

	nvmlMemory_t m;
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	if (strcmp(mode, "closed") == 0) {
		EQ(nvmlDeviceGetMemoryInfo(d, &m), 4);
		EQ(nvmlDeviceGetMemoryInfo_v2(d, &m2), 4);
		return done();
	}
	if (strcmp(mode, "off") == 0) {
		EQ(nvmlDeviceGetMemoryInfo(d, &m), 0);
		EQ(m.total, 80ull << 30);
		EQ(m.used, 1ull << 30);
		EQ(nvmlDeviceGetMemoryInfo_v2(d, &m2), 0);
		EQ(m2.reserved, 512ull << 20);
		return done();
	}
	unsigned long long L = env_u64("GM_TEST_LIMIT"), used = env_u64("GM_TEST_USED");
	if (strcmp(mode, "self") == 0) {
		unsigned long long self = env_u64("GM_TEST_SELF");
		primary();
		CUdeviceptr p;
		CHECK(cuMemAlloc_v2(&p, self));
		used += self;
	}
	EQ(nvmlDeviceGetMemoryInfo(d, &m), 0);
	EQ(m.total, L);
	EQ(m.used, used);
	EQ(m.free, L - used);
	EQ(nvmlDeviceGetMemoryInfo_v2(d, &m2), 0);
	EQ(m2.total, L);
	EQ(m2.used, used);
	EQ(m2.free, L - used);
	EQ(m2.reserved, 0);
	EQ(nvmlShutdown(), 0);
	return done();
}
