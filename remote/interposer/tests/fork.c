/* fork: a child that uses CUDA is a new client (it reconnects; the
 * parent's handles and memory are not its own), a child that does not is
 * harmless, and the parent keeps working, also when it forks while another
 * of its threads is in the middle of calls. */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

#define SIZE 65536

static CUdeviceptr parent_ptr;

static int child_uses_cuda(void)
{
	CUcontext cur = (CUcontext)1;
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == NULL); /* the parent's context is not the child's */
	t_setup();
	unsigned char buf[SIZE];
	EXPECT(cuMemcpyDtoH_v2(buf, parent_ptr, SIZE), CUDA_ERROR_INVALID_VALUE);
	CUdeviceptr p;
	CHECK(cuMemAlloc_v2(&p, SIZE));
	memset(buf, 0x3C, sizeof buf);
	CHECK(cuMemcpyHtoD_v2(p, buf, SIZE));
	memset(buf, 0, sizeof buf);
	CHECK(cuMemcpyDtoH_v2(buf, p, SIZE));
	ASSERT(buf[0] == 0x3C && buf[SIZE - 1] == 0x3C);
	CHECK(cuMemFree_v2(p));
	return t_failures;
}

static int wait_child(pid_t pid)
{
	int st = 0;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static volatile int stop;
static int busy_failures;

static void *busy(void *arg)
{
	CUcontext ctx = arg;
	CHECK(cuCtxSetCurrent(ctx));
	CUdeviceptr p;
	CHECK(cuMemAlloc_v2(&p, 4096));
	unsigned char a[4096], b[4096];
	for (unsigned i = 0; !stop; i++) {
		memset(a, (int)(i & 0xff), sizeof a);
		if (cuMemcpyHtoD_v2(p, a, sizeof a) != CUDA_SUCCESS || cuMemcpyDtoH_v2(b, p, sizeof b) != CUDA_SUCCESS ||
		    memcmp(a, b, sizeof a) != 0) {
			busy_failures++;
			break;
		}
	}
	CHECK(cuMemFree_v2(p));
	return NULL;
}

int main(void)
{
	CUcontext ctx = t_setup();
	unsigned char pat[SIZE], back[SIZE];
	for (int i = 0; i < SIZE; i++)
		pat[i] = (unsigned char)(i * 13);
	REQUIRE(cuMemAlloc_v2(&parent_ptr, SIZE));
	REQUIRE(cuMemcpyHtoD_v2(parent_ptr, pat, SIZE));
	fflush(stdout);

	pid_t pid = fork();
	if (pid == 0) {
		int f = child_uses_cuda();
		fflush(stdout);
		_exit(f ? 1 : 0);
	}
	ASSERT(pid > 0);
	ASSERT(wait_child(pid) == 0);

	pid = fork();
	if (pid == 0)
		_exit(0); /* never touches CUDA */
	ASSERT(wait_child(pid) == 0);

	/* The parent's connection and memory are untouched. */
	CHECK(cuMemcpyDtoH_v2(back, parent_ptr, SIZE));
	ASSERT(memcmp(pat, back, SIZE) == 0);

	/* Fork while another thread is busy with calls. */
	pthread_t th;
	pthread_create(&th, NULL, busy, ctx);
	for (int i = 0; i < 8; i++) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			int f = child_uses_cuda();
			fflush(stdout);
			_exit(f ? 1 : 0);
		}
		int rc = wait_child(pid);
		if (rc != 0) {
			printf("FAIL: child %d exited with %d\n", i, rc);
			t_failures++;
		}
	}
	stop = 1;
	pthread_join(th, NULL);
	ASSERT(busy_failures == 0);

	CHECK(cuMemcpyDtoH_v2(back, parent_ptr, SIZE));
	ASSERT(memcmp(pat, back, SIZE) == 0);
	CHECK(cuMemFree_v2(parent_ptr));
	return t_done("fork");
}
