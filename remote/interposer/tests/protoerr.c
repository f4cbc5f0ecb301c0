/* A server that breaks the protocol (remote/ctest's protoStub): every
 * violation loses the connection with CUDA_ERROR_UNKNOWN, and nothing is
 * written past the caller's buffer. "protoerr CASE"; "protoerr cache"
 * makes repeated calls for the stub to count. */
#include "t.h"

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *c = argv[1];
	int v = 0;
	unsigned char buf[16 + 64];
	memset(buf, 0xEE, sizeof buf);
	if (strcmp(c, "cache") == 0) {
		/* repeats of a cached call are answered locally: the stub
		 * counts what reaches it */
		for (int i = 0; i < 5; i++) {
			int pi = 0;
			CHECK(cuDriverGetVersion(&v));
			CHECK(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
			CHECK(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1));
			CHECK(cuCtxSynchronize()); /* not cached */
			ASSERT(v == 12080 && pi == 12080);
		}
		/* replies about a function or module are cached until an
		 * unload or an attribute set forgets them (and only them) */
		CUmodule mod = (CUmodule)(uintptr_t)5;
		CUfunction f = NULL, g = NULL;
		int pass[] = {0, 1, 2};
		for (size_t k = 0; k < sizeof pass / sizeof pass[0]; k++) {
			for (int i = 0; i < 3; i++) {
				int pi = 0, nb = 0;
				CHECK(cuModuleGetFunction(&g, mod, "kernel"));
				CHECK(cuFuncGetAttribute(&pi, CU_FUNC_ATTRIBUTE_NUM_REGS, g));
				CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&nb, g, 128, 0, 0));
				CHECK(cuDeviceGetAttribute(&pi, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
				ASSERT(f == NULL || g == f);
				f = g;
			}
			if (pass[k] == 0)
				CHECK(cuFuncSetAttribute(f, (CUfunction_attribute)8 /* MAX_DYNAMIC_SHARED_SIZE_BYTES */, 1024));
			else if (pass[k] == 1)
				CHECK(cuModuleUnload(mod));
		}
		return t_done("protoerr cache");
	}
	if (strcmp(c, "overflow") == 0 || strcmp(c, "short") == 0) {
		EXPECT(cuMemcpyDtoH_v2(buf, 0x1000, 16), CUDA_ERROR_UNKNOWN);
		for (size_t i = 16; i < sizeof buf; i++)
			ASSERT(buf[i] == 0xEE);
	} else if (strcmp(c, "error-partial") == 0) {
		/* a failed copy may have delivered part of the data: that is
		 * no protocol error, and the connection stays */
		EXPECT(cuMemcpyDtoH_v2(buf, 0x1000, 16), CUDA_ERROR_INVALID_VALUE);
		CHECK(cuDriverGetVersion(&v));
		ASSERT(v == 12080);
		return t_done("protoerr error-partial");
	} else {
		EXPECT(cuDriverGetVersion(&v), CUDA_ERROR_UNKNOWN);
	}
	EXPECT(cuDriverGetVersion(&v), CUDA_ERROR_UNKNOWN);
	EXPECT(cuInit(0), CUDA_ERROR_UNKNOWN);
	return t_done("protoerr");
}
