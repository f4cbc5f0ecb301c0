/*
 * The compute limit (README.md, "Compute"): each replica of a GPU owns a
 * window of every period (GPUMUX_LIMITER_PERIOD_MS, default 50 ms) laid
 * out from the node-wide registry (lim_sched.c); a process launches work
 * (kernels, cooperative kernels, graphs) only inside its share's window,
 * and keeps the work it has queued on the GPU short enough to drain before
 * the window closes: it counts its launches, records a marker event after
 * some of them, learns from the markers' completions how long a launch
 * keeps the GPU busy, and holds launches back while the estimated queue
 * exceeds QUEUE_NS or what is left of the window.
 *
 * The per-launch cost is an atomic increment, a clock read and two
 * comparisons: the slow path (the registry, the markers, waiting) runs
 * when the launches or the time allowed since the last one ran out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cuda_lim.h"

#define MARK_NS 250000ull   /* the slow path runs at least this often in part of a period */
#define MARK_WHOLE_NS 2000000ull /* and this often with the whole period, where allow bounds the queue */
#define QUEUE_NS 10000000ull /* queued work kept under 10 ms in a partial window */
#define WAIT_STEP_NS 100000ull
#define BOOT_OUTSTANDING 4 /* launches in flight before a launch's cost is known */
#define BOOT_MAX 1024        /* launches between markers while the GPU keeps up, cost unknown */
#define MAX_ALLOW 4096
#define MAX_MARKERS 64
#define MAX_POOL 64
#define MAX_SHARES 64
#define CU_EVENT_DEFAULT 0x0

typedef CUresult (*ev_create_fn)(CUevent *, unsigned int);
typedef CUresult (*ev_record_fn)(CUevent, CUstream);
typedef CUresult (*ev_query_fn)(CUevent);
typedef CUresult (*ev_elapsed_fn)(float *, CUevent, CUevent);
typedef CUresult (*capturing_fn)(CUstream, CUstreamCaptureStatus *);
typedef CUresult (*capture_mode_fn)(CUstreamCaptureMode *);

struct marker {
	CUevent ev;
	CUcontext ctx;
	uint64_t seq; /* after launch number seq */
	int cont;     /* the marker before was still queued when this one's
		       * launches were: the GPU ran them without a gap */
};

struct pooled {
	CUevent ev;
	CUcontext ctx;
};

static struct {
	pthread_mutex_t mu;
	int on;
	int have_node;
	int registered;
	char node[LIM_PATH_MAX];
	char share[96]; /* the share's ID as the registry holds it */
	unsigned pct;
	int policy;
	uint64_t period;
	uint64_t refreshed; /* period index of the layout, +1 (0: none) */
	uint64_t off, len;
	uint64_t procs; /* the share's active processes, which split its queue */
	uint64_t touched;
	/* What the markers told: launches known done, and the GPU time a
	 * launch takes (ns, 0: not known yet), from the time between two
	 * markers the GPU passed without a gap (prev: the last one passed). */
	uint64_t done_seq, cost;
	uint64_t boot;   /* launches allowed in flight while cost is 0 */
	uint64_t mark_t;     /* when the last marker was recorded */
	uint64_t mark_every; /* the fast path's time after it: MARK_NS or MARK_WHOLE_NS */
	struct marker prev;
	struct marker m[MAX_MARKERS];
	int nm;
	struct pooled pool[MAX_POOL];
	int np;
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .mark_every = MARK_NS};

/* The fast path: launches numbered up to fast_launches may go before
 * fast_until (CLOCK_MONOTONIC ns) without the slow path. */
static uint64_t launched, fast_launches, fast_until;
/* What a launch that went through the slow path marks after itself: its
 * number, and MARK_CONT if the GPU had work queued (0: no marker). */
#define MARK_CONT (1ull << 63)

/* GPUMUX_LIMITER_DEBUG: counts, printed when the process exits. */
static int debug;
static uint64_t n_slow, n_waits, n_marks;

static void report(void);

void lim_compute_init(const struct lim_config *c)
{
	C.pct = c->compute_percent;
	C.policy = c->policy;
	/* As the registry holds it: at most 95 bytes. */
	memcpy(C.share, c->share, strnlen(c->share, sizeof C.share - 1));
	C.period = 50000000ull;
	const char *p = getenv("GPUMUX_LIMITER_PERIOD_MS");
	if (p != NULL && p[0] != '\0') {
		char *end;
		unsigned long ms = strtoul(p, &end, 10);
		if (*end == '\0' && ms >= 1 && ms <= 1000)
			C.period = ms * 1000000ull;
		else
			lim_log("GPUMUX_LIMITER_PERIOD_MS=%s is not in 1..1000; using 50", p);
	}
	if (lim_env_path(C.node, sizeof C.node, "GPUMUX_LIMITER_NODE", LIM_DEFAULT_NODE) != 0)
		C.node[0] = '\0';
	struct stat st;
	C.have_node = C.node[0] != '\0' && stat(C.node, &st) == 0 && S_ISDIR(st.st_mode);
	if (!C.have_node && (C.pct < 100 || C.policy == LIM_POLICY_SHARE))
		lim_log("no node directory %s (GPUMUX_LIMITER_NODE): the share's time window is placed by its "
			"replica index, as for equal replicas, and policy=share acts as cap",
			C.node);
	const char *d = getenv("GPUMUX_LIMITER_DEBUG");
	if (d != NULL && d[0] != '\0' && strcmp(d, "0") != 0) {
		debug = 1;
		atexit(report);
	}
	__atomic_store_n(&C.on, 1, __ATOMIC_RELEASE);
}

/* ---- marker events ---- */

static void relaxed(CUstreamCaptureMode *mode)
{
	/* The limiter's own event calls must not break a stream capture
	 * running in another thread (global capture mode forbids them). */
	LIM_CALL(capture_mode_fn, cuThreadExchangeStreamCaptureMode)(mode);
}

/* poll drops the markers the GPU has passed, in the order they were
 * recorded, and learns a launch's cost. With C.mu held. */
static void poll_locked(void)
{
	if (C.nm == 0)
		return;
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	relaxed(&mode);
	int k = 0;
	while (k < C.nm) {
		struct marker *b = &C.m[k];
		CUresult r = LIM_CALL(ev_query_fn, cuEventQuery)(b->ev);
		if (r == CUDA_ERROR_NOT_READY)
			break;
		k++;
		if (b->seq > C.done_seq)
			C.done_seq = b->seq;
		if (r != CUDA_SUCCESS) /* gone with its context */
			continue;
		float ms;
		if (b->cont && C.prev.ev != NULL && C.prev.ctx == b->ctx && b->seq > C.prev.seq &&
		    LIM_CALL(ev_elapsed_fn, cuEventElapsedTime)(&ms, C.prev.ev, b->ev) == CUDA_SUCCESS && ms >= 0) {
			uint64_t sample = (uint64_t)((double)ms * 1e6) / (b->seq - C.prev.seq);
			C.cost = C.cost ? (3 * C.cost + sample) / 4 : sample;
			if (C.cost == 0)
				C.cost = 1;
		}
		if (C.prev.ev != NULL && C.np < MAX_POOL)
			C.pool[C.np++] = (struct pooled){C.prev.ev, C.prev.ctx};
		C.prev = *b;
	}
	memmove(C.m, C.m + k, (size_t)(C.nm - k) * sizeof C.m[0]);
	C.nm -= k;
	relaxed(&mode);
}

/* settle counts as done the launches after the last marker once they
 * must have run: the fast path issued them within mark_every of it. Without
 * it they would count as queued until the next marker. With C.mu held. */
static void settle_locked(uint64_t now, uint64_t cur)
{
	if (C.nm > 0 || cur <= C.done_seq + 1)
		return;
	uint64_t after = cur - 1 - C.done_seq;
	uint64_t need = C.cost ? (after > UINT64_MAX / 2 / C.cost ? UINT64_MAX / 2 : after * C.cost) : 0;
	if (now >= C.mark_t + C.mark_every + need)
		C.done_seq = cur - 1;
}

static void mark_locked(CUstream s, int ptsz, uint64_t seq, int cont)
{
	if (C.nm == MAX_MARKERS)
		return;
	CUcontext ctx = NULL;
	if (LIM_CALL(lim_ctx_get_current_fn, cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || ctx == NULL)
		return;
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	relaxed(&mode);
	CUevent ev = NULL;
	for (int i = C.np - 1; i >= 0; i--) {
		if (C.pool[i].ctx == ctx) {
			ev = C.pool[i].ev;
			C.pool[i] = C.pool[--C.np];
			break;
		}
	}
	if (ev == NULL && LIM_CALL(ev_create_fn, cuEventCreate)(&ev, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
		ev = NULL;
	if (ev != NULL) {
		ev_record_fn rec = ptsz ? LIM_CALL(ev_record_fn, cuEventRecord_ptsz) : LIM_CALL(ev_record_fn, cuEventRecord);
		if (rec(ev, s) == CUDA_SUCCESS) {
			C.m[C.nm++] = (struct marker){ev, ctx, seq, cont};
			C.mark_t = lim_now_ns();
		}
		else if (C.np < MAX_POOL)
			C.pool[C.np++] = (struct pooled){ev, ctx};
	}
	relaxed(&mode);
}

/* ---- the gate ---- */

static void refresh_locked(uint64_t now, uint64_t p)
{
	if (C.have_node && !C.registered) {
		char why[LIM_PATH_MAX + 128];
		C.registered = 1;
		if (lim_sched_open(C.node, C.share, C.pct, C.policy, why, sizeof why) != 0) {
			lim_log("%s; the share's time window is placed by its replica index and policy=share acts as cap",
				why);
			C.have_node = 0;
		}
	}
	static struct lim_sched_share v[MAX_SHARES];
	size_t n;
	if (C.have_node) {
		n = lim_sched_read(v, MAX_SHARES, now, 2 * C.period);
	} else {
		memset(&v[0], 0, sizeof v[0]);
		memcpy(v[0].id, C.share, sizeof v[0].id);
		v[0].pct = C.pct;
		v[0].policy = C.policy;
		v[0].active = 1;
		v[0].procs = 1;
		n = 1;
	}
	lim_sched_layout(v, n, C.share, C.have_node, C.period, &C.off, &C.len);
	C.procs = 1;
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].id, C.share) == 0 && v[i].procs > 1)
			C.procs = (uint64_t)v[i].procs;
	C.refreshed = p + 1;
}

static int capturing(CUstream s, int ptsz)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	capturing_fn f = ptsz ? LIM_CALL(capturing_fn, cuStreamIsCapturing_ptsz) : LIM_CALL(capturing_fn, cuStreamIsCapturing);
	return f(s, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static void nap(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* unlock_nap sleeps ns without the lock. */
static void unlock_nap(uint64_t ns)
{
	n_waits++;
	pthread_mutex_unlock(&C.mu);
	nap(ns);
	pthread_mutex_lock(&C.mu);
}

static uint64_t slow(CUstream s, int ptsz, uint64_t seq)
{
	uint64_t mark = 0;
	/* Work captured into a graph does not run now: no wait, no marker
	 * (the graph's launch is gated). */
	if (capturing(s, ptsz))
		return 0;
	pthread_mutex_lock(&C.mu);
	n_slow++;
	for (;;) {
		uint64_t now = lim_now_ns(), P = C.period, p = now / P;
		if (C.refreshed != p + 1)
			refresh_locked(now, p);
		if (now - C.touched >= 1000000ull) {
			lim_sched_touch(now);
			C.touched = now;
		}
		uint64_t ws = p * P + C.off, we = ws + C.len, next = (p + 1) * P;
		if (C.len == 0 || now >= we) {
			unlock_nap(next - now);
			continue;
		}
		if (now < ws) {
			unlock_nap(ws - now);
			continue;
		}
		poll_locked();
		int whole = C.len >= P;
		uint64_t left = (whole ? next : we) - now;
		/* What may be queued: up to the window's end (at most
		 * QUEUE_NS, in case a launch's cost rises), or, with the whole
		 * period, one period (another replica that turns up waits no
		 * longer than that for its window). */
		uint64_t room = whole ? P : left > QUEUE_NS ? QUEUE_NS : left;
		room /= C.procs; /* the share's other processes queue too */
		/* Launches in flight, this one included, and the GPU time they
		 * hold. */
		uint64_t cur = __atomic_load_n(&launched, __ATOMIC_RELAXED);
		settle_locked(now, cur);
		uint64_t out = cur > C.done_seq ? cur - C.done_seq : 1;
		uint64_t allow;
		if (C.cost == 0) {
			/* Not known yet: a marker after every launch while the
			 * GPU is behind, until two in a row show what a launch
			 * costs; more launches at a time while it keeps up. */
			if (C.nm == 0 && C.boot < BOOT_MAX)
				C.boot = C.boot ? 2 * C.boot : 1;
			if (out > BOOT_OUTSTANDING && C.nm > 0) {
				unlock_nap(WAIT_STEP_NS);
				continue;
			}
			allow = C.nm > 0 ? 0 : C.boot;
		} else {
			/* Rounded to the nearest launch: one that fits by half
			 * goes, so that what is lost at a window's end and what
			 * runs past it even out. Alone in flight at the start of
			 * the window, a launch always goes. */
			uint64_t queued = out > UINT64_MAX / C.cost ? UINT64_MAX : out * C.cost;
			if (queued > room + C.cost / 2 && !(out <= 1 && now < ws + C.cost / 4)) {
				unlock_nap(left < WAIT_STEP_NS ? left : WAIT_STEP_NS);
				continue;
			}
			/* Half of what fits: the next marker goes in before the
			 * queue drains. */
			allow = queued < room ? (room - queued) / C.cost / 2 : 0;
			if (allow > MAX_ALLOW)
				allow = MAX_ALLOW;
		}
		/* The slow path's cost (a marker, event queries) spread
		 * over more launches when nothing ends the window early. */
		C.mark_every = whole ? MARK_WHOLE_NS : MARK_NS;
		uint64_t until = now + C.mark_every;
		if (!whole && until > we)
			until = we;
		mark = seq | (C.nm > 0 ? MARK_CONT : 0);
		__atomic_store_n(&fast_launches, cur + allow, __ATOMIC_RELAXED);
		__atomic_store_n(&fast_until, until, __ATOMIC_RELAXED);
		break;
	}
	pthread_mutex_unlock(&C.mu);
	return mark;
}

/* gate holds a launch until its share's window allows it; it returns
 * what after() marks (0: nothing). */
static inline uint64_t gate(CUstream s, int ptsz)
{
	if (!__atomic_load_n(&C.on, __ATOMIC_ACQUIRE))
		return 0;
	uint64_t n = __atomic_add_fetch(&launched, 1, __ATOMIC_RELAXED);
	if (n <= __atomic_load_n(&fast_launches, __ATOMIC_RELAXED) &&
	    lim_now_ns() < __atomic_load_n(&fast_until, __ATOMIC_RELAXED))
		return 0;
	return slow(s, ptsz, n);
}

static inline CUresult after(CUresult r, CUstream s, int ptsz, uint64_t mark)
{
	if (mark != 0 && r == CUDA_SUCCESS) {
		pthread_mutex_lock(&C.mu);
		mark_locked(s, ptsz, mark & ~MARK_CONT, (mark & MARK_CONT) != 0);
		n_marks++;
		pthread_mutex_unlock(&C.mu);
	}
	return r;
}

static void report(void)
{
	pthread_mutex_lock(&C.mu);
	lim_log("debug: %llu launches gated, %llu slow paths, %llu waits, %llu markers; a launch costs %llu ns of GPU "
		"time; window %llu+%llu of %llu ns",
		(unsigned long long)__atomic_load_n(&launched, __ATOMIC_RELAXED), (unsigned long long)n_slow,
		(unsigned long long)n_waits, (unsigned long long)n_marks, (unsigned long long)C.cost,
		(unsigned long long)C.off, (unsigned long long)C.len, (unsigned long long)C.period);
	pthread_mutex_unlock(&C.mu);
}

/* ---- contexts going away, fork ---- */

void lim_compute_ctx_gone(CUcontext ctx)
{
	/* Forgotten before the driver destroys them: their handles may be
	 * reused for the program's own events. */
	pthread_mutex_lock(&C.mu);
	int k = 0;
	for (int i = 0; i < C.nm; i++)
		if (ctx != NULL && C.m[i].ctx != ctx)
			C.m[k++] = C.m[i];
	C.nm = k;
	k = 0;
	for (int i = 0; i < C.np; i++)
		if (ctx != NULL && C.pool[i].ctx != ctx)
			C.pool[k++] = C.pool[i];
	C.np = k;
	if (ctx == NULL || C.prev.ctx == ctx)
		C.prev = (struct marker){0};
	pthread_mutex_unlock(&C.mu);
}

void lim_compute_prefork(void)
{
	pthread_mutex_lock(&C.mu);
}

void lim_compute_postfork_parent(void)
{
	pthread_mutex_unlock(&C.mu);
}

void lim_compute_forked(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	C.mu = fresh;
	C.nm = C.np = 0;
	C.registered = 0;
	C.refreshed = 0;
	C.touched = 0;
	C.done_seq = C.boot = C.mark_t = 0;
	C.prev = (struct marker){0};
	launched = fast_launches = fast_until = 0;
	lim_sched_forked();
}

/* ---- the launches ---- */

LIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
				   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
				   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	uint64_t mark = gate(hStream, 0);
	return after(LIM_REAL_CU(cuLaunchKernel)(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
						  sharedMemBytes, hStream, kernelParams, extra),
		     hStream, 0, mark);
}

LIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					void **kernelParams, void **extra)
{
	uint64_t mark = gate(hStream, 1);
	return after(LIM_REAL_CU(cuLaunchKernel_ptsz)(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
						       blockDimZ, sharedMemBytes, hStream, kernelParams, extra),
		     hStream, 1, mark);
}

LIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	CUstream s = config ? config->hStream : NULL;
	uint64_t mark = gate(s, 0);
	return after(LIM_REAL_CU(cuLaunchKernelEx)(config, f, kernelParams, extra), s, 0, mark);
}

LIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
					  void **extra)
{
	CUstream s = config ? config->hStream : NULL;
	uint64_t mark = gate(s, 1);
	return after(LIM_REAL_CU(cuLaunchKernelEx_ptsz)(config, f, kernelParams, extra), s, 1, mark);
}

LIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					      unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					      unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					      void **kernelParams)
{
	uint64_t mark = gate(hStream, 0);
	return after(LIM_REAL_CU(cuLaunchCooperativeKernel)(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
							     blockDimZ, sharedMemBytes, hStream, kernelParams),
		     hStream, 0, mark);
}

LIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
						   unsigned int gridDimZ, unsigned int blockDimX,
						   unsigned int blockDimY, unsigned int blockDimZ,
						   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
	uint64_t mark = gate(hStream, 1);
	return after(LIM_REAL_CU(cuLaunchCooperativeKernel_ptsz)(f, gridDimX, gridDimY, gridDimZ, blockDimX,
								  blockDimY, blockDimZ, sharedMemBytes, hStream,
								  kernelParams),
		     hStream, 1, mark);
}

LIM_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
							 unsigned int flags)
{
	(void)gate(NULL, 0); /* no marker: the launches are on several streams */
	return LIM_REAL_CU(cuLaunchCooperativeKernelMultiDevice)(launchParamsList, numDevices, flags);
}

LIM_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	uint64_t mark = gate(hStream, 0);
	return after(LIM_REAL_CU(cuGraphLaunch)(hGraphExec, hStream), hStream, 0, mark);
}

LIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	uint64_t mark = gate(hStream, 1);
	return after(LIM_REAL_CU(cuGraphLaunch_ptsz)(hGraphExec, hStream), hStream, 1, mark);
}

LIM_EXPORT CUresult cuLaunch(CUfunction f)
{
	uint64_t mark = gate(NULL, 0);
	return after(LIM_REAL_CU(cuLaunch)(f), NULL, 0, mark);
}

LIM_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	uint64_t mark = gate(NULL, 0);
	return after(LIM_REAL_CU(cuLaunchGrid)(f, grid_width, grid_height), NULL, 0, mark);
}

LIM_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
	uint64_t mark = gate(hStream, 0);
	return after(LIM_REAL_CU(cuLaunchGridAsync)(f, grid_width, grid_height, hStream), hStream, 0, mark);
}
