/*
 * steal: can one tenant's kernel write another tenant's memory through
 * gpumux-remoted? The server checks every pointer that crosses the wire,
 * but a kernel's arguments are opaque to it, so this runs a kernel (not a
 * copy) on the victim's address.
 *
 *   steal victim DIR        allocate, store 1234, print the address, wait
 *                           for a line on stdin, print what is stored then
 *   steal thief DIR ADDR    launch `fill` on ADDR, print the result
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                      \
	do {                                                                       \
		CUresult r_ = (x);                                                 \
		if (r_ != CUDA_SUCCESS) {                                          \
			const char *s_ = "?";                                      \
			cuGetErrorName(r_, &s_);                                   \
			fprintf(stderr, "steal: %s: %s\n", #x, s_);                \
			return 1;                                                  \
		}                                                                  \
	} while (0)

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	CUdevice dev;
	CUcontext ctx;
	char path[4096];
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	if (strcmp(argv[1], "victim") == 0) {
		CUdeviceptr p;
		unsigned v = 1234;
		CK(cuMemAlloc(&p, 4096));
		CK(cuMemcpyHtoD(p, &v, 4));
		printf("%llu\n", (unsigned long long)p);
		fflush(stdout);
		char line[16];
		if (!fgets(line, sizeof line, stdin))
			return 1;
		CK(cuMemcpyDtoH(&v, p, 4));
		printf("victim's value: %u\n", v);
		return 0;
	}
	CUmodule mod;
	CUfunction fill;
	snprintf(path, sizeof path, "%s/kernels.cubin", argv[2]);
	CK(cuModuleLoad(&mod, path));
	CK(cuModuleGetFunction(&fill, mod, "fill"));
	CUdeviceptr p = strtoull(argv[3], NULL, 10);
	unsigned v = 999, n = 1;
	void *args[] = {&p, &v, &n};
	CUresult r = cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
	if (r == CUDA_SUCCESS)
		r = cuCtxSynchronize();
	const char *name = "?";
	cuGetErrorName(r, &name);
	printf("thief's kernel on the victim's address: %s\n", name);
	return 0;
}
