/*
 * gpumux's limiter: internals shared by its two libraries, libcuda.so.1
 * (cuda_*.c, zz_cuda.c) and libnvidia-ml.so.1 (nvml_*.c, zz_nvml.c), and
 * by the C test programs that link the sources themselves (tests/).
 *
 * The CUDA ABI comes from the interposer's gm_abi.h (remote/interposer):
 * one declaration of the driver's types for all of gpumux. What it lacks
 * (arrays, VMM, pools) is declared here, with CUDA's names and values.
 */
#ifndef GPUMUX_LIM_H
#define GPUMUX_LIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../remote/interposer/gm_abi.h"

#define LIM_HIDDEN __attribute__((visibility("hidden")))
#define LIM_EXPORT GM_EXPORT

#ifndef GM_USE_CUDA_H
typedef unsigned int CUdeviceptr_v1;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef enum CUarray_format_enum {
	CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
	CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
	CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
	CU_AD_FORMAT_SIGNED_INT8 = 0x08,
	CU_AD_FORMAT_SIGNED_INT16 = 0x09,
	CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
	CU_AD_FORMAT_HALF = 0x10,
	CU_AD_FORMAT_FLOAT = 0x20
} CUarray_format;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
	size_t Width;
	size_t Height;
	CUarray_format Format;
	unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
	size_t Width;
	size_t Height;
	size_t Depth;
	CUarray_format Format;
	unsigned int NumChannels;
	unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

/* The version-1 descriptors (32-bit extents) of cuArrayCreate and
 * cuArray3DCreate, CUDA's names when __CUDA_API_VERSION_INTERNAL is set. */
typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st {
	unsigned int Width;
	unsigned int Height;
	CUarray_format Format;
	unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR_v1;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st {
	unsigned int Width;
	unsigned int Height;
	unsigned int Depth;
	CUarray_format Format;
	unsigned int NumChannels;
	unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR_v1;

typedef struct CUDA_LAUNCH_PARAMS_st CUDA_LAUNCH_PARAMS;

/* cuArray3DCreate flags that create an array without memory of its own. */
#define CUDA_ARRAY3D_SPARSE 0x40
#define CUDA_ARRAY3D_DEFERRED_MAPPING 0x80
#endif /* GM_USE_CUDA_H */

/* ---- logging ---- */

/* lim_log writes "gpumux limiter: <message>\n" to stderr in one write. */
LIM_HIDDEN void lim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the limits file (lim_conf.c) ---- */

enum lim_policy { LIM_POLICY_CAP = 0, LIM_POLICY_SHARE = 1, LIM_POLICY_OFF = 2 };

#define LIM_SHARE_MAX 256
#define LIM_PATH_MAX 4096

struct lim_config {
	int ok;                    /* 0: the file is missing or malformed (err says why) */
	uint64_t memory_bytes;     /* 0: no memory limit */
	unsigned compute_percent;  /* 1..100 */
	enum lim_policy policy;
	char share[LIM_SHARE_MAX]; /* the share's ID */
	char path[LIM_PATH_MAX];   /* the limits file */
	char err[512];             /* why not ok: "<path>: <problem>" */
};

/* lim_config_parse parses the text of a limits file (len bytes, need not
 * end in NUL) into c; on failure c->ok is 0 and c->err says why. */
LIM_HIDDEN void lim_config_parse(struct lim_config *c, const char *path, const char *text, size_t len);
/* lim_config_load reads and parses the file at path. */
LIM_HIDDEN void lim_config_load(struct lim_config *c, const char *path);
/* lim_config is the process's configuration, read once from
 * $GPUMUX_LIMITER_LIMITS (default /run/gpumux/limiter/limits). */
LIM_HIDDEN const struct lim_config *lim_config(void);
/* lim_env_path copies the environment variable name, or def when unset or
 * empty, into buf; 0 if it fits. */
LIM_HIDDEN int lim_env_path(char *buf, size_t size, const char *name, const char *def);

#define LIM_DEFAULT_LIMITS "/run/gpumux/limiter/limits"
#define LIM_DEFAULT_STATE "/run/gpumux/limiter/state"
#define LIM_DEFAULT_NODE "/run/gpumux/limiter/node"

/* lim_memory_limited: the limits file is good, the policy is not off and
 * memory_bytes is set. */
LIM_HIDDEN int lim_memory_limited(void);

/* ---- the shared files' fields (lim_io.c) ---- */

/* Little-endian 64- and 32-bit fields, and a pwrite of all n bytes at off
 * (0, or -1 on error). */
LIM_HIDDEN void lim_put64(unsigned char *p, uint64_t v);
LIM_HIDDEN uint64_t lim_get64(const unsigned char *p);
LIM_HIDDEN void lim_put32(unsigned char *p, uint32_t v);
LIM_HIDDEN uint32_t lim_get32(const unsigned char *p);
LIM_HIDDEN int lim_pwrite_all(int fd, const void *buf, size_t n, off_t off);

/* ---- loading the real library (lim_load.c) ---- */

/* lim_open_real dlopens the real library: the absolute path in the
 * environment variable env if set, else the first file named soname in
 * $GPUMUX_LIMITER_SEARCH_PATH (colon-separated) or the usual driver
 * directories, never the limiter's own file. NULL (logged once by the
 * caller with why) when none loads. */
LIM_HIDDEN void *lim_open_real(const char *env, const char *soname, char *why, size_t whysize);

/* lim_load_table opens the real library (lim_open_real) and fills table
 * with its count functions named in names: missing_symbol for a name it
 * lacks, missing_library for every slot when it does not load (logged
 * once, saying that the API called what fails). It returns whether the
 * library loaded. */
LIM_HIDDEN int lim_load_table(const char *env, const char *soname, const char *what, const char *const *names,
			      void **table, unsigned count, void *missing_library, void *missing_symbol);

/* ---- the shared accounting (lim_acct.c) ---- */

/* The accounting file in the state directory. Layout: README.md. */
#define LIM_ACCT_FILE "memory.v1"
#define LIM_ACCT_MAGIC "GPUMUXLM"
#define LIM_ACCT_VERSION 1u
#define LIM_ACCT_SLOTS 256u
#define LIM_ACCT_HDR 64u
#define LIM_ACCT_SLOT 64u
#define LIM_ACCT_SIZE (LIM_ACCT_HDR + LIM_ACCT_SLOTS * LIM_ACCT_SLOT)

/* Results of lim_acct_reserve. */
enum { LIM_ACCT_OK = 0, LIM_ACCT_OVER = 1, LIM_ACCT_ERROR = 2 };

/* lim_acct_init sets the state directory and the limit (tests call it
 * with their own; the libraries with the configuration's). */
LIM_HIDDEN void lim_acct_init(const char *dir, uint64_t limit);
/* lim_acct_init_reader is lim_acct_init for a process that only looks
 * (libnvidia-ml.so.1): it opens the file read-only, takes no lock and
 * writes nothing, so it can never disturb the locks of a libcuda.so.1 in
 * the same process (POSIX locks belong to the process). */
LIM_HIDDEN void lim_acct_init_reader(const char *dir, uint64_t limit);
/* lim_acct_open opens (creating it if needed) the accounting file: 0, or
 * -1 with why. */
LIM_HIDDEN int lim_acct_open(char *why, size_t whysize);
/* lim_acct_reserve adds n bytes to this process's usage if the share's
 * usage stays within the limit. */
LIM_HIDDEN int lim_acct_reserve(uint64_t n);
/* lim_acct_release gives back n bytes (at most what the process holds). */
LIM_HIDDEN void lim_acct_release(uint64_t n);
/* lim_acct_usage: the share's usage (every live process's, this one's
 * included), at most the limit; reclaims dead processes' slots. 0 on
 * success, -1 when the file cannot be read (*used is then the limit). */
LIM_HIDDEN int lim_acct_usage(uint64_t *used);
/* lim_acct_mine: this process's usage. */
LIM_HIDDEN uint64_t lim_acct_mine(void);
LIM_HIDDEN uint64_t lim_acct_limit(void);
/* lim_acct_forked resets the state in a forked child (no slot, no bytes). */
LIM_HIDDEN void lim_acct_forked(void);
/* pthread_atfork's prepare and parent handlers (the child's is
 * lim_acct_forked). */
LIM_HIDDEN void lim_acct_prefork(void);
LIM_HIDDEN void lim_acct_postfork_parent(void);
/* lim_acct_close closes the file (tests). */
LIM_HIDDEN void lim_acct_close(void);
/* lim_acct_slot_check is the check word of a slot (exposed for tests). */
LIM_HIDDEN uint64_t lim_acct_slot_check(uint32_t idx, uint64_t bytes, uint64_t tag);

/* ---- the node-wide view of a GPU's replicas (lim_sched.c) ---- */

struct lim_sched_share {
	char id[96];
	unsigned pct;
	int policy; /* LIM_POLICY_CAP or LIM_POLICY_SHARE */
	int active; /* launched, or waited to, recently */
	int procs;  /* its processes that are active, this one included */
};

/* lim_sched_open registers this process (its share, size and policy) in
 * dir's registry: 0, or -1 with why. */
LIM_HIDDEN int lim_sched_open(const char *dir, const char *share, unsigned pct, int policy, char *why,
			      size_t whysize);
/* lim_sched_touch records that this process's share is active at now. */
LIM_HIDDEN void lim_sched_touch(uint64_t now);
/* lim_sched_read lists the live replicas (at most max), this process's
 * first if alone, sorted by ID; active: seen within recent ns of now. */
LIM_HIDDEN size_t lim_sched_read(struct lim_sched_share *out, size_t max, uint64_t now, uint64_t recent);
/* lim_sched_layout is the window [*off, *off + *len) of the replica me in
 * each period, given the replicas (have_node: s is the registry's view;
 * else me alone, placed by its replica index). */
LIM_HIDDEN void lim_sched_layout(const struct lim_sched_share *s, size_t n, const char *me, int have_node,
				 uint64_t period, uint64_t *off, uint64_t *len);
LIM_HIDDEN void lim_sched_forked(void);

/* ---- helpers ---- */

/* lim_start_time: this process's start time in clock ticks after boot
 * (field 22 of /proc/self/stat), 0 if unknown. */
LIM_HIDDEN uint64_t lim_start_time(void);
LIM_HIDDEN uint64_t lim_now_ns(void);

#endif
