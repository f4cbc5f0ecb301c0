/* A program whose session moves between servers while it runs
 * (remote/ctest's TestMigrate*): it never sees an error, and after every
 * move each byte it wrote and each handle it holds is what it was.
 *
 * "migrate": sets up device memory (filled by a kernel launch with the
 * pointer among its parameters and by host-to-device copies, one of them
 * a stream-ordered allocation from the default pool), streams (one with a
 * priority), events and a module, prints READY, then runs rounds until a
 * line arrives on stdin. Every round writes (a launch, a multi-chunk copy,
 * a module load and unload, a stream-ordered allocation and free: calls a
 * move may hold) and checks everything, then prints "ROUND n". A second thread copies to and
 * from memory of its own all the while. */
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "t.h"

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
CUresult cuStreamGetPriority(CUstream hStream, int *priority);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);

#define A_WORDS (16u << 10)
#define B_BYTES ((3u << 20) + 123u) /* more than one data frame */
#define C_BYTES 4096u
#define D_WORDS 1000u
#define T_BYTES (256u << 10)
#define E_WORDS 700u

static CUcontext ctx;
static CUmodule mod;
static CUfunction fill;
static CUstream s1, s2;
static int prio2;
static CUevent e1, e2;
static CUdeviceptr a, b, c, d, e;
static unsigned char *hb, *hb2, cpat[C_BYTES];
static uint32_t *ha;
static volatile int stop;

static void launch_fill(CUdeviceptr p, uint32_t v, uint64_t n, CUstream s)
{
	void *args[] = {&p, &v, &n};
	CHECK(cuLaunchKernel(fill, 1, 1, 1, 128, 1, 1, 0, s, args, NULL));
}

/* check_words: the n words at p are all v. */
static void check_words(CUdeviceptr p, uint32_t n, uint32_t v, const char *what, int round)
{
	memset(ha, 0, (size_t)n * 4);
	CHECK(cuMemcpyDtoH_v2(ha, p, (size_t)n * 4));
	uint32_t bad = 0, first = 0;
	for (uint32_t i = 0; i < n; i++)
		if (ha[i] != v && bad++ == 0)
			first = i;
	if (bad) {
		printf("FAIL round %d: %s: %u of %u words differ, the first at %u (%#x, want %#x)\n", round, what, bad,
		       n, first, ha[first], v);
		fflush(stdout);
		t_failures++;
	}
}

static void setup(void)
{
	ctx = t_setup();
	REQUIRE(cuStreamCreate(&s1, 0));
	REQUIRE(cuStreamCreateWithPriority(&s2, 0, -1));
	REQUIRE(cuStreamGetPriority(s2, &prio2));
	REQUIRE(cuEventCreate(&e1, 0));
	REQUIRE(cuEventCreate(&e2, 0));
	REQUIRE(cuMemAlloc_v2(&a, A_WORDS * 4));
	REQUIRE(cuMemAlloc_v2(&b, B_BYTES));
	REQUIRE(cuMemAlloc_v2(&c, C_BYTES));
	REQUIRE(cuMemAlloc_v2(&d, D_WORDS * 4));
	/* No cuModuleGetGlobal: a target refuses a session whose looked-up
	 * global it places elsewhere, and the fake's addresses only grow, so
	 * a session that comes back would be refused. */
	REQUIRE(cuModuleLoadData(&mod, t_fake_module));
	REQUIRE(cuModuleGetFunction(&fill, mod, "fill_u32"));
	ha = malloc(A_WORDS * 4);
	hb = malloc(B_BYTES);
	hb2 = malloc(B_BYTES);
	if (ha == NULL || hb == NULL || hb2 == NULL)
		exit(2);
	/* Written once, checked every round. */
	for (unsigned i = 0; i < C_BYTES; i++)
		cpat[i] = (unsigned char)(i * 7 + 3);
	CHECK(cuMemcpyHtoD_v2(c, cpat, C_BYTES));
	launch_fill(d, 0xD00Du, D_WORDS, s2);
	REQUIRE(cuMemAllocAsync(&e, E_WORDS * 4, s2));
	launch_fill(e, 0xE00Eu, E_WORDS, s2);
	CHECK(cuStreamSynchronize(s2));
}

static void round_(int r)
{
	/* A kernel writes a, with a's pointer among its parameters; an event
	 * on its stream says when. */
	uint32_t va = 0xA0000000u | (uint32_t)r;
	launch_fill(a, va, A_WORDS, s1);
	CHECK(cuEventRecord(e1, s1));
	CHECK(cuEventSynchronize(e1));
	check_words(a, A_WORDS, va, "a (kernel)", r);

	/* A multi-chunk host-to-device copy: a held one is streamed again. */
	for (unsigned i = 0; i < B_BYTES; i++)
		hb[i] = (unsigned char)(i * 31 + (unsigned)r);
	CHECK(cuMemcpyHtoD_v2(b, hb, B_BYTES));
	memset(hb2, 0, B_BYTES);
	CHECK(cuMemcpyDtoH_v2(hb2, b, B_BYTES));
	if (memcmp(hb, hb2, B_BYTES) != 0) {
		printf("FAIL round %d: b (copied in) differs\n", r);
		t_failures++;
	}

	/* An async copy on the priority stream, an event after it. */
	uint32_t vd = 0xD00Du;
	CHECK(cuMemcpyHtoDAsync_v2(d, &vd, 4, s2));
	CHECK(cuEventRecord(e2, s2));
	CHECK(cuStreamSynchronize(s2));

	/* A module image goes out with the call: a held load resends it. */
	CUmodule m2;
	CUfunction noop;
	CHECK(cuModuleLoadData(&m2, t_fake_module));
	CHECK(cuModuleGetFunction(&noop, m2, "noop"));
	CHECK(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, s1, NULL, NULL));
	CHECK(cuStreamSynchronize(s1));
	CHECK(cuModuleUnload(m2));

	/* What was written before any move. */
	unsigned char cb[C_BYTES];
	memset(cb, 0, sizeof cb);
	CHECK(cuMemcpyDtoH_v2(cb, c, C_BYTES));
	if (memcmp(cb, cpat, C_BYTES) != 0) {
		printf("FAIL round %d: c (written at the start) differs\n", r);
		t_failures++;
	}
	check_words(d, D_WORDS, 0xD00Du, "d (kernel at the start)", r);
	check_words(e, E_WORDS, 0xE00Eu, "e (pool, kernel at the start)", r);

	/* A stream-ordered allocation, used and freed on a stream. */
	CUdeviceptr x;
	uint32_t vx = 0x5000u | (uint32_t)r;
	CHECK(cuMemAllocAsync(&x, 3000, s2));
	launch_fill(x, vx, 750, s2);
	CHECK(cuStreamSynchronize(s2));
	check_words(x, 750, vx, "x (pool, this round)", r);
	CHECK(cuMemFreeAsync(x, s2));

	/* Handles. */
	CUcontext cur = NULL;
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == ctx);
	CUfunction f2 = NULL;
	CHECK(cuModuleGetFunction(&f2, mod, "fill_u32"));
	ASSERT(f2 == fill);
	CUdeviceptr base = 0;
	size_t size = 0;
	CHECK(cuMemGetAddressRange_v2(&base, &size, b + 5));
	ASSERT(base == b && size >= B_BYTES);
	int p = 1;
	CHECK(cuStreamGetPriority(s2, &p));
	ASSERT(p == prio2);
	CHECK(cuStreamQuery(s1));
	CHECK(cuStreamQuery(s2));
	CHECK(cuEventQuery(e1));
	CHECK(cuEventQuery(e2));
}

/* copier: another thread's calls, all the while. */
static void *copier(void *arg)
{
	long *iters = arg;
	CHECK(cuCtxSetCurrent(ctx));
	CUdeviceptr t;
	CHECK(cuMemAlloc_v2(&t, T_BYTES));
	unsigned char *in = malloc(T_BYTES), *out = malloc(T_BYTES);
	if (in == NULL || out == NULL)
		exit(2);
	for (long i = 0; !__atomic_load_n(&stop, __ATOMIC_RELAXED); i++) {
		for (unsigned k = 0; k < T_BYTES; k++)
			in[k] = (unsigned char)(k ^ (unsigned)i);
		CHECK(cuMemcpyHtoD_v2(t, in, T_BYTES));
		memset(out, 0, T_BYTES);
		CHECK(cuMemcpyDtoH_v2(out, t, T_BYTES));
		if (memcmp(in, out, T_BYTES) != 0) {
			printf("FAIL copier iteration %ld: the memory differs\n", i);
			fflush(stdout);
			t_failures++;
		}
		*iters = i + 1;
	}
	CHECK(cuMemFree_v2(t));
	free(in);
	free(out);
	return NULL;
}

/* "migrate once" and "migrate lost": remote/ctest's moving stubs answer
 * the first call, a copy of host data, Moved. Followed ("once"), the
 * copy succeeds where the session went, and so does the call after it;
 * not followed ("lost"), the copy fails as on a lost connection. */
static int stub(const char *mode)
{
	size_t n = (1u << 20) + 5; /* two data frames */
	unsigned char *h = malloc(n);
	if (h == NULL)
		return 2;
	for (size_t i = 0; i < n; i++)
		h[i] = (unsigned char)(i * 13 + 1);
	int v = 0;
	if (strcmp(mode, "once") == 0) {
		CHECK(cuMemcpyHtoD_v2(0x1000, h, n));
		CHECK(cuDriverGetVersion(&v));
		ASSERT(v == 12080);
	} else {
		EXPECT(cuMemcpyHtoD_v2(0x1000, h, n), CUDA_ERROR_UNKNOWN);
		EXPECT(cuDriverGetVersion(&v), CUDA_ERROR_UNKNOWN);
	}
	free(h);
	return t_done(mode);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return stub(argv[1]);
	setup();
	long iters = 0;
	pthread_t th;
	if (pthread_create(&th, NULL, copier, &iters) != 0)
		return 2;
	printf("READY\n");
	fflush(stdout);
	int r = 0;
	for (;; r++) {
		round_(r);
		printf("ROUND %d\n", r);
		fflush(stdout);
		struct pollfd pf = {.fd = 0, .events = POLLIN};
		if (poll(&pf, 1, 0) > 0)
			break;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	ASSERT(iters > 0);
	round_(r + 1);
	CHECK(cuMemFree_v2(a));
	CHECK(cuMemFree_v2(b));
	CHECK(cuMemFree_v2(c));
	CHECK(cuMemFree_v2(d));
	CHECK(cuModuleUnload(mod));
	free(ha);
	free(hb);
	free(hb2);
	printf("rounds %d, copier iterations %ld\n", r + 2, iters);
	return t_done("migrate");
}
