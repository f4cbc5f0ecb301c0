/* What the limiter's tests and the fake driver (fake_cuda.c) share. */
#ifndef GPUMUX_LIMITER_TESTS_FAKE_H
#define GPUMUX_LIMITER_TESTS_FAKE_H

#include "../lim.h"

typedef struct CUtexref_st *CUtexref;
typedef size_t (*CUoccupancyB2DSize)(int blockSize);

/* What the fake driver recorded of the last pass-through calls
 * (fake_record()). */
struct fake_record {
	int minGridSize_in;
	void *func;
	void *b2d;
	size_t dynamicSMemSize;
	int blockSizeLimit;
	unsigned int flags;
	void *texref;
	float bias;
	CUuuid export_id;
};

#endif
