/* The context stack: thread-local, push/pop/set semantics, creation and
 * destruction. */
#include <pthread.h>

#include "t.h"

static CUcontext shared;

static void *other_thread(void *arg)
{
	(void)arg;
	CUcontext cur = (CUcontext)1;
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == NULL); /* the main thread's context is not ours */
	CUdeviceptr p;
	EXPECT(cuMemAlloc_v2(&p, 64), CUDA_ERROR_INVALID_CONTEXT);
	CHECK(cuCtxSetCurrent(shared));
	CHECK(cuMemAlloc_v2(&p, 64));
	CHECK(cuMemFree_v2(p));
	return NULL;
}

int main(void)
{
	CUcontext a = NULL, b = NULL, c = NULL, cur = NULL, popped = NULL;
	REQUIRE(cuInit(0));

	EXPECT(cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);
	CHECK(cuCtxSetCurrent(NULL)); /* popping an empty stack is no error */
	EXPECT(cuCtxPushCurrent_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE);

	/* cuCtxCreate pushes the new context. */
	CHECK(cuCtxCreate_v2(&a, 0, 0));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == a && a != NULL);
	CHECK(cuCtxCreate(&b, 0, 0)); /* the version-1 name */
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == b && b != a);
	CHECK(cuCtxCreate_v3(&c, NULL, 0, 0, 0));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == c);
	CHECK(cuCtxPopCurrent_v2(&popped));
	ASSERT(popped == c);
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == b);
	CHECK(cuCtxDestroy_v2(c));

	/* Not supported: execution affinity and creation parameters. */
	CUcontext x = NULL;
	EXPECT(cuCtxCreate_v3(&x, (CUexecAffinityParam *)&x, 1, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(cuCtxCreate_v4(&x, (CUctxCreateParams *)&x, 0, 0), CUDA_ERROR_NOT_SUPPORTED);
	CHECK(cuCtxCreate_v4(&x, NULL, 0, 0));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == x);
	CHECK(cuCtxDestroy(x)); /* leaves the stack */
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == b);

	/* Memory follows the current context. */
	CUdeviceptr pb, pa;
	CHECK(cuMemAlloc_v2(&pb, 128));
	CHECK(cuCtxPushCurrent_v2(a));
	CHECK(cuMemAlloc_v2(&pa, 128));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == a);
	CHECK(cuMemFree_v2(pa));
	CHECK(cuCtxPopCurrent_v2(NULL));
	CHECK(cuMemFree_v2(pb));

	/* cuCtxSetCurrent replaces the top; NULL pops it. */
	CHECK(cuCtxSetCurrent(a));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == a);
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == a); /* the stack was [a, b]: b was replaced by a */
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == NULL);

	/* CUDA 13's explicit-context calls leave the stack as it was. */
	CUdevice dev = -1;
	CHECK(cuCtxGetDevice_v2(&dev, b));
	ASSERT(dev == 0);
	CHECK(cuCtxSynchronize_v2(b));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == NULL);
	EXPECT(cuCtxSynchronize_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);

	/* Another thread starts without a context. */
	shared = b;
	pthread_t th;
	pthread_create(&th, NULL, other_thread, NULL);
	pthread_join(th, NULL);

	/* A destroyed context is gone for the server too. */
	CHECK(cuCtxDestroy_v2(b));
	CHECK(cuCtxSetCurrent(b));
	/* Its device was asked above and is kept for the context's life, not
	 * after it. */
	EXPECT(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
	CUdeviceptr p;
	EXPECT(cuMemAlloc_v2(&p, 64), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuCtxDestroy_v2(b), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuCtxDestroy_v2(NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuCtxDestroy_v2(a));

	/* A deep stack. */
	CUcontext d;
	CHECK(cuCtxCreate_v2(&d, 0, 0));
	for (int i = 0; i < 100; i++)
		CHECK(cuCtxPushCurrent_v2(d));
	for (int i = 0; i < 100; i++)
		CHECK(cuCtxPopCurrent_v2(NULL));
	CHECK(cuCtxGetCurrent(&cur));
	ASSERT(cur == d);
	CHECK(cuCtxDestroy_v2(d));
	return t_done("ctx");
}
