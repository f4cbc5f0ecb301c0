/*
 * gpumux's own export table: what the interposer offers gpumux's other
 * libraries in the same process (the NVML library of remote shares,
 * remote/nvml) besides the CUDA driver API. They find it with
 * cuGetExportTable(&table, &GM_SHARE_TABLE_ID); a libcuda.so.1 that is not
 * the interposer answers CUDA_ERROR_NOT_SUPPORTED (or anything but this
 * table), which is how they tell the interposer from a real driver.
 */
#ifndef GPUMUX_GM_SHARE_H
#define GPUMUX_GM_SHARE_H

#include <stddef.h>

#include "gm_abi.h"

/* "gpumux share v1" and a NUL. */
#define GM_SHARE_TABLE_ID_BYTES {'g', 'p', 'u', 'm', 'u', 'x', ' ', 's', 'h', 'a', 'r', 'e', ' ', 'v', '1', 0}

typedef struct gm_share_table {
	/* size: sizeof(gm_share_table) of the interposer; a caller uses a
	 * member only if the table is large enough to hold it. */
	size_t size;
	/* memory: the share's memory on device dev, as the server accounts
	 * it (forwarded cuGpumuxShareMemory, remote/proto/calls.def): total
	 * (cuDeviceTotalMem's answer), used (what the share's connections
	 * hold, or the part of the quota taken), own (what this process
	 * holds) and the number of contexts this process has. No context is
	 * needed. Every output must be non-NULL. */
	CUresult (*memory)(CUdevice dev, unsigned long long *total, unsigned long long *used, unsigned long long *own,
			   unsigned int *contexts);
} gm_share_table;

#endif
