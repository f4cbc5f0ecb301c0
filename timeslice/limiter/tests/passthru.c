/*
 * passthru: calls the limiter does not intercept reach the driver with
 * their arguments intact, the first one through the lazy resolution:
 * seven arguments (one on the stack), a float (in %xmm0), and
 * cuGetExportTable.
 */
#include "t.h"

static size_t b2d(int bs)
{
	return (size_t)bs * 4;
}

int main(int argc, char **argv)
{
	lim_test_name = "passthru";
	const char *first = argc > 1 ? argv[1] : "occupancy";
	int mg = 7, bs = 0;
	CUresult r1 = CUDA_SUCCESS, r2 = CUDA_SUCCESS;
	/* The first call of the process resolves every slot. */
	if (strcmp(first, "float") == 0) {
		r2 = cuTexRefSetMipmapLevelBias((CUtexref)(uintptr_t)0x77, 1.25f);
		r1 = cuOccupancyMaxPotentialBlockSizeWithFlags(&mg, &bs, (CUfunction)(uintptr_t)0x1234, b2d, 4096,
								 1024, 0x5);
	} else {
		r1 = cuOccupancyMaxPotentialBlockSizeWithFlags(&mg, &bs, (CUfunction)(uintptr_t)0x1234, b2d, 4096,
								 1024, 0x5);
		r2 = cuTexRefSetMipmapLevelBias((CUtexref)(uintptr_t)0x77, 1.25f);
	}
	CHECK(r1);
	CHECK(r2);
	struct fake_record *(*recf)(void) = (struct fake_record * (*)(void)) fake_sym("fake_record");
	ASSERT(recf != NULL);
	if (recf == NULL)
		return done();
	struct fake_record *rec = recf();
	EQ(mg, 132);
	EQ(bs, 768);
	EQ(rec->minGridSize_in, 7);
	ASSERT(rec->func == (void *)(uintptr_t)0x1234);
	ASSERT(rec->b2d == (void *)b2d);
	EQ(rec->dynamicSMemSize, 4096);
	EQ(rec->blockSizeLimit, 1024);
	EQ(rec->flags, 0x5);
	ASSERT(rec->texref == (void *)(uintptr_t)0x77);
	ASSERT(rec->bias == 1.25f);
	EQ(fake_calls("cuOccupancyMaxPotentialBlockSizeWithFlags"), 1);

	CUuuid id;
	for (int i = 0; i < 16; i++)
		id.bytes[i] = (char)(0xa0 + i);
	const void *tbl = NULL;
	CHECK(cuGetExportTable(&tbl, &id));
	ASSERT(tbl != NULL && *(const uintptr_t *)tbl == 32);
	ASSERT(memcmp(&rec->export_id, &id, sizeof id) == 0);
	return done();
}
