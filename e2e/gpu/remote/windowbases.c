/* windowbases shows whether the driver of a fresh process leaves the
 * migration windows' bases free: it creates the primary context of DEVICE,
 * prints the process's mappings of 1 GiB or more, then reserves 1 TiB at
 * each of the 48 window bases (windowFirst, windowSize and windowSlots of
 * remote/server/backing.go) and maps, fills and reads 2 MiB there. With
 * "hold" it first maps the whole window range PROT_NONE and unmaps each
 * slot just before reserving it (what holding the windows from the start
 * would do). run.sh windows runs it in fresh processes (docs/validation.md,
 * issue 15).
 *
 *	windowbases DEVICE [hold]
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define TIB (1ull << 40)
#define FIRST 0x200000000000ull
#define SLOTS 48
#define PIECE (2u << 20)

static int placeholder(unsigned long long at, unsigned long long size)
{
	void *p = mmap((void *)at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	return p == (void *)at ? 0 : -1;
}

/* works maps PIECE bytes at base, fills them and reads one byte back. */
static int works(CUdeviceptr base, int dev)
{
	CUmemAllocationProp prop = {0};
	CUmemAccessDesc access = {0};
	CUmemGenericAllocationHandle h;
	unsigned char b[16] = {0};
	int ok;
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	if (cuMemCreate(&h, PIECE, &prop, 0))
		return 0;
	ok = !cuMemMap(base, PIECE, 0, h, 0) && !cuMemSetAccess(base, PIECE, &access, 1) &&
	     !cuMemsetD8(base, 0x5a, PIECE) && !cuMemcpyDtoH(b, base + 4096, sizeof b) && b[3] == 0x5a;
	cuMemUnmap(base, PIECE);
	cuMemRelease(h);
	return ok;
}

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	int hold, honoured = 0, elsewhere = 0, failed = 0, used = 0;
	char line[512];
	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "hold"))) {
		fprintf(stderr, "usage: windowbases DEVICE [hold]\n");
		return 2;
	}
	hold = argc == 3;
	if (hold && placeholder(FIRST, SLOTS * TIB)) {
		perror("windowbases: holding the window range");
		return 1;
	}
	if (cuInit(0) || cuDeviceGet(&dev, atoi(argv[1])) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "windowbases: a CUDA call failed\n");
		return 1;
	}
	FILE *f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f)) {
		unsigned long long a, b;
		if (sscanf(line, "%llx-%llx", &a, &b) == 2 && b - a >= (1ull << 30))
			printf("  mapped %s", line);
	}
	if (f)
		fclose(f);
	for (int s = 0; s < SLOTS; s++) {
		CUdeviceptr base = FIRST + s * TIB, p = 0;
		if (hold && munmap((void *)base, TIB)) {
			perror("windowbases: munmap");
			return 1;
		}
		if (cuMemAddressReserve(&p, TIB, 0, base, 0))
			failed++;
		else if (p != base)
			elsewhere++;
		else {
			honoured++;
			used += works(base, dev);
		}
		if (p)
			cuMemAddressFree(p, TIB);
		if (hold && placeholder(base, TIB)) {
			perror("windowbases: holding the slot again");
			return 1;
		}
	}
	printf("%s: %d of %d window bases honoured (%d mapped, filled and read back), %d given elsewhere, %d refused\n",
	       hold ? "hold" : "fresh", honoured, SLOTS, used, elsewhere, failed);
	return honoured == SLOTS && used == SLOTS ? 0 : 1;
}
