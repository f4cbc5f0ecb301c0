/* globaladdr prints where the driver puts a module's global (and a
 * cuMemAlloc) in a fresh process, and the mapping of the process that holds
 * it: run.sh globals runs it twice per GPU, with and without address space
 * randomisation (setarch -R), to show why a migrated session's module
 * globals land elsewhere on the target (docs/design.md, live migration).
 *
 *	globaladdr DEVICE kernels.cubin
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUdeviceptr global, alloc;
	size_t size;
	if (argc != 3) {
		fprintf(stderr, "usage: globaladdr DEVICE kernels.cubin\n");
		return 2;
	}
	if (cuInit(0) || cuDeviceGet(&dev, atoi(argv[1])) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx) || cuModuleLoad(&mod, argv[2]) ||
	    cuModuleGetGlobal(&global, &size, mod, "counter") || cuMemAlloc(&alloc, 1 << 20)) {
		fprintf(stderr, "globaladdr: a CUDA call failed\n");
		return 1;
	}
	char line[512], where[512] = "not in /proc/self/maps\n";
	unsigned long long lo, hi;
	FILE *f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && global >= lo && global < hi)
			snprintf(where, sizeof where, "%s", line);
	printf("device %s global %#llx alloc %#llx in %s", argv[1], (unsigned long long)global,
	       (unsigned long long)alloc, where);
	return 0;
}
