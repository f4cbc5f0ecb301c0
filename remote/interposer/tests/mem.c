/* Memory: round trips of 0, 1, 4096 and 5 MiB + 3 bytes (crossing the
 * 1 MiB data frames) through every copy call, memsets, address ranges,
 * and copies the server must refuse. Host buffers carry guard bytes: the
 * interposer must never write past what it was given. */
#include "t.h"

#define GUARD 64

static unsigned char *host(size_t n)
{
	unsigned char *p = malloc(n + 2 * GUARD);
	if (p == NULL) {
		printf("FAIL: out of host memory\n");
		exit(1);
	}
	memset(p, 0xA5, n + 2 * GUARD);
	return p + GUARD;
}

static int guards_ok(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < GUARD; i++)
		if (p[-1 - (long)i] != 0xA5 || p[n + i] != 0xA5)
			return 0;
	return 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (unsigned char)(x >> 24);
	}
}

static void round_trip(size_t n, CUstream s)
{
	size_t alloc = n ? n : 1;
	CUdeviceptr d1, d2;
	unsigned char *src = host(n), *dst = host(n);
	fill(src, n, (unsigned)n);
	CHECK(cuMemAlloc_v2(&d1, alloc));
	CHECK(cuMemAlloc_v2(&d2, alloc));

	/* synchronous */
	CHECK(cuMemcpyHtoD_v2(d1, src, n));
	CHECK(cuMemcpyDtoH_v2(dst, d1, n));
	ASSERT(memcmp(src, dst, n) == 0);
	ASSERT(guards_ok(dst, n));
	CHECK(cuMemcpyDtoD_v2(d2, d1, n));
	memset(dst, 0, n);
	CHECK(cuMemcpyDtoH_v2(dst, d2, n));
	ASSERT(memcmp(src, dst, n) == 0);
	ASSERT(guards_ok(dst, n));

	/* on a stream */
	fill(src, n, (unsigned)n + 7);
	CHECK(cuMemcpyHtoDAsync_v2(d2, src, n, s));
	CHECK(cuMemcpyDtoDAsync_v2(d1, d2, n, s));
	memset(dst, 0, n);
	CHECK(cuMemcpyDtoHAsync_v2(dst, d1, n, s));
	CHECK(cuStreamSynchronize(s));
	ASSERT(memcmp(src, dst, n) == 0);
	ASSERT(guards_ok(dst, n));

	/* per-thread default stream variants */
	fill(src, n, (unsigned)n + 9);
	CHECK(cuMemcpyHtoD_v2_ptds(d1, src, n));
	memset(dst, 0, n);
	CHECK(cuMemcpyDtoHAsync_v2_ptsz(dst, d1, n, NULL));
	ASSERT(memcmp(src, dst, n) == 0);

	/* memsets */
	if (n >= 1) {
		CHECK(cuMemsetD8_v2(d1, 0x5A, n));
		CHECK(cuMemcpyDtoH_v2(dst, d1, n));
		size_t bad = 0;
		for (size_t i = 0; i < n; i++)
			bad += dst[i] != 0x5A;
		ASSERT(bad == 0);
		CHECK(cuMemsetD8Async(d1, 0x11, n, s));
		CHECK(cuMemcpyDtoH_v2(dst, d1, n));
		ASSERT(dst[0] == 0x11 && dst[n - 1] == 0x11);
	}
	if (n >= 4) {
		size_t words = n / 4;
		CHECK(cuMemsetD32_v2(d1, 0xDEADBEEFu, words));
		CHECK(cuMemcpyDtoH_v2(dst, d1, words * 4));
		size_t bad = 0;
		for (size_t i = 0; i < words; i++) {
			uint32_t w;
			memcpy(&w, dst + 4 * i, 4);
			bad += w != 0xDEADBEEFu;
		}
		ASSERT(bad == 0);
		CHECK(cuMemsetD32Async(d1, 7, words, s));
		CHECK(cuStreamSynchronize(s));
		uint32_t w = 0;
		CHECK(cuMemcpyDtoH_v2(&w, d1 + 4 * (words - 1), 4));
		ASSERT(w == 7);
	}

	/* address range of an interior pointer */
	CUdeviceptr base = 0;
	size_t size = 0;
	CHECK(cuMemGetAddressRange_v2(&base, &size, d1 + alloc / 2));
	ASSERT(base == d1 && size == alloc);

	/* past the end: refused, never a partial copy */
	unsigned char *big = host(alloc + 1);
	EXPECT(cuMemcpyDtoH_v2(big, d1, alloc + 1), CUDA_ERROR_INVALID_VALUE);
	ASSERT(guards_ok(big, alloc + 1));
	EXPECT(cuMemcpyHtoD_v2(d1 + 1, big, alloc), CUDA_ERROR_INVALID_VALUE);
	free(big - GUARD);

	CHECK(cuMemFree_v2(d1));
	CHECK(cuMemFree_v2(d2));
	EXPECT(cuMemcpyDtoH_v2(dst, d1, n ? n : 1), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemFree_v2(d1), CUDA_ERROR_INVALID_VALUE);
	free(src - GUARD);
	free(dst - GUARD);
}

int main(void)
{
	t_setup();
	CUstream s;
	CHECK(cuStreamCreate(&s, 0));
	size_t sizes[] = {0, 1, 4096, (5u << 20) + 3};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		round_trip(sizes[i], s);

	/* Arguments the interposer refuses itself. */
	CUdeviceptr d;
	CHECK(cuMemAlloc_v2(&d, 16));
	EXPECT(cuMemcpyHtoD_v2(d, NULL, 4), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyDtoH_v2(NULL, d, 4), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemAlloc_v2(NULL, 4), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemcpyHtoD_v2(d, NULL, 0));

	/* An async failure surfaces at the next call that waits, once. */
	CHECK(cuMemsetD8_v2(0x10, 1, 1));
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuCtxSynchronize());
	CHECK(cuMemFree_v2(d));
	CHECK(cuStreamDestroy_v2(s));
	return t_done("mem");
}
