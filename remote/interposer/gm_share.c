/*
 * gpumux's own export table (gm_share.h), for gpumux's NVML library of
 * remote shares; cuGetExportTable (gm_dark.c) hands it out.
 */
#include "gm_internal.h"
#include "gm_share.h"
#include "zz_calls.h"

static CUresult gm_share_memory(CUdevice dev, unsigned long long *total, unsigned long long *used,
				unsigned long long *own, unsigned int *contexts)
{
	if (total == NULL || used == NULL || own == NULL || contexts == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return gm_rpc_cuGpumuxShareMemory(dev, total, used, own, contexts);
}

const gm_share_table gm_share = {
	.size = sizeof(gm_share_table),
	.memory = gm_share_memory,
};
