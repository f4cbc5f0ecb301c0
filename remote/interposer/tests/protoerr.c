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
