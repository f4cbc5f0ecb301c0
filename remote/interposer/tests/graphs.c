/* Stream capture and graphs on the fake backend: the graph-captured
 * inference pattern (capture a kernel, a memset and a device copy once,
 * then write new input to the same buffers and replay, several times);
 * capture status, ID and dependencies; host copies refused in a capture,
 * which invalidates it; the capture interaction mode of each client
 * thread; explicit graphs (kernel, memset, memcpy, empty and event nodes,
 * edges, clone, exec parameter updates); cuGetProcAddress of the graph
 * names; bad handles. Graphs left alive at exit are the server's to
 * destroy. */
#include <pthread.h>

#include "t.h"

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
				   CUgraph *graph_out, const CUgraphNode **dependencies_out,
				   size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
				   CUgraph *graph_out, const CUgraphNode **dependencies_out,
				   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out);
CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies, size_t numDependencies,
					   unsigned int flags);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode);
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph);
CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes);
CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes);
CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx);
CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx);
CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			     size_t numDependencies);
CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				   size_t numDependencies, CUevent event);
CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
				size_t numDependencies);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
			       size_t bufferSize);
CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
				      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
					   const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);

#define N 1024

static CUfunction vecadd, fill;

static void upload(CUdeviceptr d, float base)
{
	float h[N];
	for (int i = 0; i < N; i++)
		h[i] = base + (float)i;
	CHECK(cuMemcpyHtoD_v2(d, h, sizeof h));
}

/* The pattern PyTorch's CUDA graphs follow: one capture, then replays with
 * new input written into the captured buffers. */
static void captured_inference(CUstream s)
{
	CUdeviceptr a, b, c, out, flag;
	REQUIRE(cuMemAlloc_v2(&a, N * 4));
	REQUIRE(cuMemAlloc_v2(&b, N * 4));
	REQUIRE(cuMemAlloc_v2(&c, N * 4));
	REQUIRE(cuMemAlloc_v2(&out, N * 4));
	REQUIRE(cuMemAlloc_v2(&flag, 64));
	CHECK(cuMemsetD32_v2(flag, 0, 16));

	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	CHECK(cuStreamIsCapturing(s, &st));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_NONE);
	REQUIRE(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuStreamIsCapturing(s, &st));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
	cuuint64_t id = 0;
	CUgraph cg = NULL;
	const CUgraphNode *deps = (const CUgraphNode *)1;
	size_t nd = 99;
	CHECK(cuStreamGetCaptureInfo_v2(s, &st, &id, &cg, &deps, &nd));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && cg != NULL && nd == 0);

	unsigned n = N;
	void *p[] = {&a, &b, &c, &n};
	CHECK(cuLaunchKernel(vecadd, 4, 1, 1, 256, 1, 1, 0, s, p, NULL)); /* recorded, not run */
	CHECK(cuMemsetD32Async(flag, 0xabcd, 4, s));
	CHECK(cuMemcpyDtoDAsync_v2(out, c, N * 4, s));
	const CUgraphEdgeData *edges = NULL;
	cuuint64_t id2 = 0;
	CHECK(cuStreamGetCaptureInfo_v3(s, &st, &id2, NULL, &deps, &edges, &nd));
	ASSERT(id2 == id && nd == 1 && deps != NULL && deps[0] != NULL && edges != NULL);
	ASSERT(edges != NULL && edges[0].type == 0 && edges[0].from_port == 0);

	/* The allocator's pattern: relaxed around an allocation in a capture. */
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	CHECK(cuThreadExchangeStreamCaptureMode(&mode));
	ASSERT(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
	CUdeviceptr extra;
	CHECK(cuMemAlloc_v2(&extra, 256));
	CHECK(cuThreadExchangeStreamCaptureMode(&mode));
	ASSERT(mode == CU_STREAM_CAPTURE_MODE_RELAXED);

	CUgraph g = NULL;
	CHECK(cuStreamEndCapture(s, &g));
	ASSERT(g == cg);
	CHECK(cuStreamIsCapturing(s, &st));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_NONE);

	size_t count = 0;
	CHECK(cuGraphGetNodes(g, NULL, &count));
	ASSERT(count == 3);
	CUgraphNode nodes[5] = {0};
	count = 5;
	CHECK(cuGraphGetNodes(g, nodes, &count));
	ASSERT(count == 3 && nodes[2] == deps[0] && nodes[3] == NULL && nodes[4] == NULL);
	count = 1;
	CHECK(cuGraphGetRootNodes(g, nodes, &count));
	ASSERT(count == 1 && nodes[0] != NULL);

	CUgraphExec e;
	REQUIRE(cuGraphInstantiateWithFlags(&e, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
	for (int round = 0; round < 5; round++) {
		upload(a, (float)(100 * round));
		upload(b, 0.5f);
		CHECK(cuGraphLaunch(e, s));
		CHECK(cuStreamSynchronize(s));
		float h[N];
		CHECK(cuMemcpyDtoH_v2(h, out, sizeof h));
		int bad = 0;
		for (int i = 0; i < N; i++)
			bad += h[i] != (float)(100 * round) + (float)i + 0.5f + (float)i;
		ASSERT(bad == 0);
	}
	uint32_t f[5];
	CHECK(cuMemcpyDtoH_v2(f, flag, sizeof f));
	ASSERT(f[0] == 0xabcd && f[3] == 0xabcd && f[4] == 0);
	/* The per-thread default stream variant. */
	upload(a, 7.0f);
	CHECK(cuGraphLaunch_ptsz(e, NULL));
	CHECK(cuCtxSynchronize());
	float h0;
	CHECK(cuMemcpyDtoH_v2(&h0, out, 4));
	ASSERT(h0 == 7.5f);

	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
	EXPECT(cuGraphDestroy(g), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuGraphExecDestroy(e), CUDA_ERROR_INVALID_HANDLE);
	CHECK(cuMemFree_v2(extra));
}

/* A host copy cannot be replayed remotely: refused, and the capture is
 * invalidated, as the driver does for an illegal call. */
static void refused_in_capture(CUstream s)
{
	CUdeviceptr d;
	REQUIRE(cuMemAlloc_v2(&d, 256));
	char host[256] = {1};
	REQUIRE(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	CHECK(cuMemcpyHtoDAsync_v2(d, host, sizeof host, s)); /* async: refused at the next call that waits */
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	EXPECT(cuStreamIsCapturing(s, &st), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK(cuStreamIsCapturing(s, &st));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
	CUgraph g = (CUgraph)1;
	EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CHECK(cuStreamIsCapturing(s, &st));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_NONE);

	/* A device-to-host copy waits: refused at once. */
	REQUIRE(cuStreamBeginCapture(s));
	EXPECT(cuMemcpyDtoHAsync_v2(host, d, sizeof host, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

	/* An allocation is not safe in a global capture of this thread. */
	REQUIRE(cuStreamBeginCapture(s));
	CUdeviceptr x;
	EXPECT(cuMemAlloc_v2(&x, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	EXPECT(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

	/* The stream works again after. */
	CHECK(cuMemcpyHtoDAsync_v2(d, host, sizeof host, s));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuMemFree_v2(d));
}

static void *relaxed_alloc(void *arg)
{
	CUcontext ctx = arg;
	CHECK(cuCtxSetCurrent(ctx));
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	CHECK(cuThreadExchangeStreamCaptureMode(&mode));
	CUdeviceptr d;
	CHECK(cuMemAlloc_v2(&d, 64));
	CHECK(cuMemFree_v2(d));
	return NULL;
}

/* Another thread's mode is its own: a relaxed thread allocates while this
 * one captures globally, and the capture goes on. */
static void thread_modes(CUcontext ctx, CUstream s)
{
	REQUIRE(cuStreamBeginCapture(s));
	pthread_t t;
	pthread_create(&t, NULL, relaxed_alloc, ctx);
	pthread_join(t, NULL);
	CUgraph g;
	CHECK(cuStreamEndCapture(s, &g));
	CHECK(cuGraphDestroy(g));
}

static uint32_t word(CUdeviceptr d)
{
	uint32_t v = 0;
	CHECK(cuMemcpyDtoH_v2(&v, d, 4));
	return v;
}

/* A graph built node by node, as CUDA's samples build them. */
static void explicit_graph(CUmodule m, CUstream s)
{
	CUdeviceptr x, y, z;
	REQUIRE(cuMemAlloc_v2(&x, 4096));
	REQUIRE(cuMemAlloc_v2(&y, 4096));
	REQUIRE(cuMemAlloc_v2(&z, 4096));
	CUgraph g;
	REQUIRE(cuGraphCreate(&g, 0));
	EXPECT(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);

	CUDA_MEMSET_NODE_PARAMS ms = {.dst = x, .pitch = 0, .value = 0x01020304, .elementSize = 4, .width = 16, .height = 1};
	CUgraphNode mset, kern, copy, empty, rec;
	CHECK(cuGraphAddMemsetNode(&mset, g, NULL, 0, &ms, NULL));
	CUdeviceptr dst = y;
	uint32_t v = 0x77;
	uint64_t n = 8;
	void *params[] = {&dst, &v, &n};
	CUDA_KERNEL_NODE_PARAMS_v1 kp = {.func = fill, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
					 .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1, .kernelParams = params};
	CHECK(cuGraphAddKernelNode(&kern, g, &mset, 1, &kp));
	CUDA_MEMCPY3D cp;
	memset(&cp, 0, sizeof cp);
	cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	cp.srcDevice = x;
	cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	cp.dstDevice = z;
	cp.dstXInBytes = 16;
	cp.WidthInBytes = 64;
	cp.Height = 1;
	cp.Depth = 1;
	CHECK(cuGraphAddMemcpyNode(&copy, g, &kern, 1, &cp, NULL));
	CHECK(cuGraphAddEmptyNode(&empty, g, NULL, 0));
	CUevent ev;
	CHECK(cuEventCreate(&ev, 0));
	CHECK(cuGraphAddEventRecordNode(&rec, g, &copy, 1, ev));
	CHECK(cuGraphAddDependencies(g, &empty, &copy, 1));
	EXPECT(cuGraphAddDependencies(g, &copy, &mset, 1), CUDA_ERROR_INVALID_VALUE); /* a cycle */
	size_t roots = 0;
	CHECK(cuGraphGetRootNodes(g, NULL, &roots));
	ASSERT(roots == 2);

	/* What the server cannot do: copies of host memory, host nodes. */
	char host[64];
	CUDA_MEMCPY3D hc = cp;
	hc.srcMemoryType = CU_MEMORYTYPE_HOST;
	hc.srcHost = host;
	CUgraphNode none;
	EXPECT(cuGraphAddMemcpyNode(&none, g, NULL, 0, &hc, NULL), CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(cuGraphDebugDotPrint(g, "/tmp/g.dot", 0), CUDA_ERROR_NOT_SUPPORTED);
	/* Memory that is not the client's. */
	ms.dst = 0x10;
	EXPECT(cuGraphAddMemsetNode(&none, g, NULL, 0, &ms, NULL), CUDA_ERROR_INVALID_VALUE);
	ms.dst = x + 4088; /* 64 bytes from 8 before the end */
	EXPECT(cuGraphAddMemsetNode(&none, g, NULL, 0, &ms, NULL), CUDA_ERROR_INVALID_VALUE);
	CUgraphNode stranger = (CUgraphNode)(uintptr_t)0x7777;
	EXPECT(cuGraphAddEmptyNode(&none, g, &stranger, 1), CUDA_ERROR_INVALID_VALUE);

	CUgraphExec e;
	char log[16] = "x";
	CUgraphNode errnode = (CUgraphNode)1;
	REQUIRE(cuGraphInstantiate_v2(&e, g, &errnode, log, sizeof log));
	ASSERT(errnode == NULL && log[0] == 0);
	CHECK(cuGraphLaunch(e, s));
	CHECK(cuStreamSynchronize(s));
	ASSERT(word(x) == 0x01020304 && word(y) == 0x77 && word(z + 16) == 0x01020304);
	CHECK(cuEventQuery(ev));

	/* New parameters for the exec's kernel node. */
	v = 0x99;
	CUDA_KERNEL_NODE_PARAMS kp2;
	memset(&kp2, 0, sizeof kp2);
	memcpy(&kp2, &kp, sizeof kp);
	CHECK(cuGraphExecKernelNodeSetParams_v2(e, kern, &kp2));
	CHECK(cuGraphLaunch(e, s));
	CHECK(cuStreamSynchronize(s));
	ASSERT(word(y) == 0x99);
	EXPECT(cuGraphExecKernelNodeSetParams_v2(e, (CUgraphNode)(uintptr_t)0x7777, &kp2), CUDA_ERROR_INVALID_VALUE);

	/* The event node holds the event, the graph the module. */
	EXPECT(cuEventDestroy_v2(ev), CUDA_ERROR_ILLEGAL_STATE);
	EXPECT(cuModuleUnload(m), CUDA_ERROR_ILLEGAL_STATE);

	/* A clone, instantiated with parameters (and uploaded). */
	CUgraph clone;
	CHECK(cuGraphClone(&clone, g));
	size_t count = 0;
	CHECK(cuGraphGetNodes(clone, NULL, &count));
	ASSERT(count == 5);
	CUDA_GRAPH_INSTANTIATE_PARAMS ip = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, .hUploadStream = s,
					    .hErrNode_out = (CUgraphNode)1, .result_out = CUDA_GRAPH_INSTANTIATE_ERROR};
	CUgraphExec ce;
	CHECK(cuGraphInstantiateWithParams(&ce, clone, &ip));
	ASSERT(ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS && ip.hErrNode_out == NULL);
	CHECK(cuMemsetD32_v2(y, 0, 8));
	CHECK(cuGraphLaunch(ce, s));
	CHECK(cuStreamSynchronize(s));
	ASSERT(word(y) == 0x77); /* the clone has the graph's parameters, not the exec's */

	/* Bad handles: a launch is async, its error comes with the next wait. */
	CHECK(cuGraphLaunch((CUgraphExec)(uintptr_t)0x7777, s));
	EXPECT(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuGraphInstantiateWithFlags(&e, (CUgraph)(uintptr_t)0x7777, 0), CUDA_ERROR_INVALID_HANDLE);
	EXPECT(cuGraphDestroy((CUgraph)(uintptr_t)0x7777), CUDA_ERROR_INVALID_HANDLE);

	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
	/* clone and ce stay alive: the server destroys them when this
	 * process goes (TestGraphsCleanup checks the backend). */
}

int main(void)
{
	CUcontext ctx = t_setup();
	CUmodule m;
	REQUIRE(cuModuleLoadData(&m, t_fake_module));
	REQUIRE(cuModuleGetFunction(&vecadd, m, "vecadd_f32"));
	REQUIRE(cuModuleGetFunction(&fill, m, "fill_u32"));
	CUstream s;
	REQUIRE(cuStreamCreate(&s, 1));

	captured_inference(s);
	refused_in_capture(s);
	thread_modes(ctx, s);
	explicit_graph(m, s);

	/* The legacy stream cannot capture. */
	EXPECT(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CUstreamCaptureMode mode = (CUstreamCaptureMode)7;
	EXPECT(cuThreadExchangeStreamCaptureMode(&mode), CUDA_ERROR_INVALID_VALUE);

	/* cuGetProcAddress: the signature the caller was built for. */
	void *fn = NULL;
	CHECK(cuGetProcAddress("cuGraphInstantiate", &fn, 13000, 0));
	ASSERT(fn == (void *)cuGraphInstantiateWithFlags);
	CHECK(cuGetProcAddress("cuGraphInstantiate", &fn, 11000, 0));
	ASSERT(fn == (void *)cuGraphInstantiate_v2);
	CHECK(cuGetProcAddress("cuGraphAddKernelNode", &fn, 12000, 0));
	ASSERT(fn == (void *)cuGraphAddKernelNode_v2);
	CHECK(cuGetProcAddress("cuGraphAddKernelNode", &fn, 11080, 0));
	ASSERT(fn == (void *)cuGraphAddKernelNode);
	CHECK(cuGetProcAddress("cuStreamBeginCapture", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
	ASSERT(fn == (void *)cuStreamBeginCapture_v2_ptsz);
	CHECK(cuGetProcAddress("cuGraphLaunch", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
	ASSERT(fn == (void *)cuGraphLaunch_ptsz);
	return t_done("graphs");
}
