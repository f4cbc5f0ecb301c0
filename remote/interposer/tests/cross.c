/* Isolation between clients. "cross owner" allocates, writes a pattern,
 * prints "PTR <address>" and waits for a line on stdin, then checks its
 * memory is intact. "cross intruder <address>" is another process (another
 * client) that tries to read, write and free that address: every attempt
 * must fail. */
#include "t.h"

#define SIZE 4096

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	t_setup();
	if (strcmp(argv[1], "owner") == 0) {
		unsigned char pat[SIZE], back[SIZE];
		for (int i = 0; i < SIZE; i++)
			pat[i] = (unsigned char)(i * 7 + 1);
		CUdeviceptr p;
		REQUIRE(cuMemAlloc_v2(&p, SIZE));
		REQUIRE(cuMemcpyHtoD_v2(p, pat, SIZE));
		printf("PTR 0x%llx\n", (unsigned long long)p);
		fflush(stdout);
		char line[64];
		if (fgets(line, sizeof line, stdin) == NULL)
			printf("FAIL: no go-ahead on stdin\n");
		CHECK(cuMemcpyDtoH_v2(back, p, SIZE));
		ASSERT(memcmp(pat, back, SIZE) == 0);
		CHECK(cuMemFree_v2(p));
		return t_done("cross owner");
	}
	if (argc < 3)
		return 2;
	CUdeviceptr p = strtoull(argv[2], NULL, 0);
	unsigned char buf[SIZE];
	memset(buf, 0, sizeof buf);
	EXPECT(cuMemcpyDtoH_v2(buf, p, SIZE), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyDtoH_v2(buf, p, 1), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyHtoD_v2(p, buf, SIZE), CUDA_ERROR_INVALID_VALUE);
	CUdeviceptr mine;
	CHECK(cuMemAlloc_v2(&mine, SIZE));
	EXPECT(cuMemcpyDtoD_v2(mine, p, SIZE), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyDtoD_v2(p, mine, SIZE), CUDA_ERROR_INVALID_VALUE);
	CUdeviceptr base;
	size_t size;
	EXPECT(cuMemGetAddressRange_v2(&base, &size, p), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemsetD8_v2(p, 0, SIZE)); /* async: the error comes next */
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
	/* A kernel that writes there faults in the intruder's own context. */
	CUmodule m;
	CUfunction fill;
	CHECK(cuModuleLoadData(&m, t_fake_module));
	CHECK(cuModuleGetFunction(&fill, m, "fill_u32"));
	uint32_t v = 0;
	uint64_t n = 16;
	void *args[] = {&p, &v, &n};
	CHECK(cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK(cuMemFree_v2(mine));
	return t_done("cross intruder");
}
