/* The token's memory quota (GM_TEST_QUOTA bytes): allocations past it are
 * CUDA_ERROR_OUT_OF_MEMORY, and freeing makes room again. */
#include "t.h"

int main(void)
{
	size_t quota = t_quota();
	t_setup();

	size_t free_ = 0, total = 0, devtotal = 0;
	CHECK(cuMemGetInfo_v2(&free_, &total));
	ASSERT(total == quota);
	ASSERT(free_ <= quota);
	CHECK(cuDeviceTotalMem_v2(&devtotal, 0));
	ASSERT(devtotal == quota);

	CUdeviceptr a, b, c;
	CHECK(cuMemAlloc_v2(&a, quota / 2));
	CHECK(cuMemAlloc_v2(&b, quota / 4));
	EXPECT(cuMemAlloc_v2(&c, quota / 2), CUDA_ERROR_OUT_OF_MEMORY);
	EXPECT(cuMemAlloc_v2(&c, quota + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cuMemGetInfo_v2(&free_, &total));
	ASSERT(free_ <= quota - quota / 2 - quota / 4);
	CHECK(cuMemFree_v2(a));
	CHECK(cuMemAlloc_v2(&c, quota / 2));
	CHECK(cuMemFree_v2(b));
	CHECK(cuMemFree_v2(c));
	return t_done("quota");
}
