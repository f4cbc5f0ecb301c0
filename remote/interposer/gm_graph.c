/*
 * Stream capture and CUDA graphs: the public entry points, composed from
 * the forwarded calls of calls.def (ops 100-121). Graphs, graph execs and
 * nodes are the server's per-client handles. README.md ("Stream capture
 * and graphs") describes the behaviour; remote/server/calls_graph.go the
 * server's rules.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gm_internal.h"
#include "gm_wire.h"
#include "zz_calls.h"

#define GM_PTSZ(s) ((s) == NULL ? CU_STREAM_PER_THREAD : (s))

/* The most node handles one message carries (proto.MaxGraphNodes). */
#define GM_MAX_NODES (GM_MAX_BLOB / 8)

_Static_assert(sizeof(CUgraphNode) == 8, "a node handle is a u64 on the wire");
_Static_assert(sizeof(CUgraphEdgeData) == 8, "CUgraphEdgeData is 8 bytes");

/* ---- the thread's capture interaction mode ---- */

static __thread int gm_capture_mode; /* CU_STREAM_CAPTURE_MODE_GLOBAL */

int gm_thread_capture_mode(void)
{
	return gm_capture_mode;
}

void gm_set_thread_capture_mode(int mode)
{
	gm_capture_mode = mode;
}

/* Answered here, per thread: the server's worker thread gets the calling
 * thread's mode before each call of a thread whose mode differs from the
 * last one sent (gm_wire.c), so every call runs under its own thread's
 * mode. */
GM_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (mode == NULL || (int)*mode < CU_STREAM_CAPTURE_MODE_GLOBAL || (int)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	int old = gm_capture_mode;
	gm_capture_mode = (int)*mode;
	*mode = (CUstreamCaptureMode)old;
	return CUDA_SUCCESS;
}

/* ---- capture ---- */

GM_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	return gm_rpc_cuStreamBeginCapture_v2(hStream, (unsigned int)mode);
}

/* CUDA 10.0's name: a global capture. */
GM_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
	return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

GM_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	return cuStreamBeginCapture_v2(GM_PTSZ(hStream), mode);
}

GM_EXPORT CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
	return cuStreamBeginCapture_v2(GM_PTSZ(hStream), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

GM_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	return gm_rpc_cuStreamEndCapture(hStream, phGraph);
}

GM_EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	return cuStreamEndCapture(GM_PTSZ(hStream), phGraph);
}

/* The dependencies cuStreamGetCaptureInfo returns live in a buffer of the
 * calling thread, valid until its next capture info call (CUDA: until the
 * next call on the stream). */
struct gm_deps {
	size_t cap;
	CUgraphNode *nodes;
	CUgraphEdgeData *edges;
};

static pthread_key_t gm_deps_key;
static pthread_once_t gm_deps_once = PTHREAD_ONCE_INIT;

static void gm_deps_free(void *p)
{
	struct gm_deps *d = p;
	free(d->nodes);
	free(d->edges);
	free(d);
}

static void gm_deps_init(void)
{
	pthread_key_create(&gm_deps_key, gm_deps_free);
}

static struct gm_deps *gm_deps(void)
{
	pthread_once(&gm_deps_once, gm_deps_init);
	struct gm_deps *d = pthread_getspecific(gm_deps_key);
	if (d == NULL) {
		d = calloc(1, sizeof *d);
		if (d == NULL || pthread_setspecific(gm_deps_key, d) != 0) {
			free(d);
			return NULL;
		}
	}
	if (d->cap < GM_MAX_NODES) {
		CUgraphNode *n = realloc(d->nodes, GM_MAX_NODES * sizeof *n);
		if (n != NULL)
			d->nodes = n;
		CUgraphEdgeData *e = realloc(d->edges, GM_MAX_NODES * sizeof *e);
		if (e != NULL)
			d->edges = e;
		if (n == NULL || e == NULL)
			return NULL;
		d->cap = GM_MAX_NODES;
	}
	return d;
}

/* gm_capture_info is cuStreamGetCaptureInfo_v3; every output is optional.
 * Without edgeData_out, edges other than the default are
 * CUDA_ERROR_LOSSY_QUERY, as in CUDA. */
static CUresult gm_capture_info(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
				CUgraph *graph_out, const CUgraphNode **dependencies_out,
				const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out, int lossy_ok)
{
	struct gm_deps *d = gm_deps();
	if (d == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int status = 0;
	unsigned long long id = 0;
	CUgraph g = NULL;
	size_t nd = 0, ne = 0;
	CUresult r = gm_rpc_cuStreamGetCaptureInfo_v3(hStream, GM_MAX_NODES, &status, &id, &g, d->nodes,
						      d->cap * sizeof *d->nodes, &nd, d->edges,
						      d->cap * sizeof *d->edges, &ne);
	if (r != CUDA_SUCCESS)
		return r;
	size_t n = nd / sizeof *d->nodes;
	if (nd % sizeof *d->nodes != 0 || (ne != 0 && ne != n * sizeof *d->edges))
		return CUDA_ERROR_UNKNOWN; /* the server speaks another protocol */
	if (ne == 0)
		memset(d->edges, 0, n * sizeof *d->edges);
	else if (!lossy_ok)
		return CUDA_ERROR_LOSSY_QUERY;
	if (captureStatus_out != NULL)
		*captureStatus_out = (CUstreamCaptureStatus)status;
	if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE && status != CU_STREAM_CAPTURE_STATUS_INVALIDATED)
		return CUDA_SUCCESS; /* the other outputs are undefined: left as they are */
	if (id_out != NULL)
		*id_out = id;
	if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return CUDA_SUCCESS;
	if (graph_out != NULL)
		*graph_out = g;
	if (dependencies_out != NULL)
		*dependencies_out = n > 0 ? d->nodes : NULL;
	if (edgeData_out != NULL)
		*edgeData_out = n > 0 ? d->edges : NULL;
	if (numDependencies_out != NULL)
		*numDependencies_out = n;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out,
						     const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	return gm_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
			       numDependencies_out, 1);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
	return gm_capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
			       numDependencies_out, 0);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						  cuuint64_t *id_out)
{
	return gm_capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL, 1);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						       cuuint64_t *id_out)
{
	return cuStreamGetCaptureInfo(GM_PTSZ(hStream), captureStatus_out, id_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
							  CUstreamCaptureStatus *captureStatus_out,
							  cuuint64_t *id_out, CUgraph *graph_out,
							  const CUgraphNode **dependencies_out,
							  size_t *numDependencies_out)
{
	return cuStreamGetCaptureInfo_v2(GM_PTSZ(hStream), captureStatus_out, id_out, graph_out, dependencies_out,
					 numDependencies_out);
}

GM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
							  CUstreamCaptureStatus *captureStatus_out,
							  cuuint64_t *id_out, CUgraph *graph_out,
							  const CUgraphNode **dependencies_out,
							  const CUgraphEdgeData **edgeData_out,
							  size_t *numDependencies_out)
{
	return cuStreamGetCaptureInfo_v3(GM_PTSZ(hStream), captureStatus_out, id_out, graph_out, dependencies_out,
					 edgeData_out, numDependencies_out);
}

/* gm_nodes_len is the blob length of n node handles, or (size_t)-1 when
 * they cannot travel (a NULL list of some, more than one message holds). */
static size_t gm_nodes_len(const CUgraphNode *nodes, size_t n)
{
	if ((nodes == NULL && n != 0) || n > GM_MAX_NODES)
		return (size_t)-1;
	return n * sizeof *nodes;
}

GM_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
								const CUgraphEdgeData *dependencyData,
								size_t numDependencies, unsigned int flags)
{
	size_t len = gm_nodes_len(dependencies, numDependencies);
	if (len == (size_t)-1)
		return gm_refuse("cuStreamUpdateCaptureDependencies", "dependencies", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, len, dependencyData,
							   dependencyData != NULL ? numDependencies * sizeof *dependencyData : 0,
							   flags);
}

GM_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
							     size_t numDependencies, unsigned int flags)
{
	return cuStreamUpdateCaptureDependencies_v2(hStream, dependencies, NULL, numDependencies, flags);
}

GM_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream hStream, CUgraphNode *dependencies,
								     const CUgraphEdgeData *dependencyData,
								     size_t numDependencies, unsigned int flags)
{
	return cuStreamUpdateCaptureDependencies_v2(GM_PTSZ(hStream), dependencies, dependencyData, numDependencies,
						    flags);
}

GM_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode *dependencies,
								  size_t numDependencies, unsigned int flags)
{
	return cuStreamUpdateCaptureDependencies_v2(GM_PTSZ(hStream), dependencies, NULL, numDependencies, flags);
}

/* ---- graphs ---- */

GM_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	return gm_rpc_cuGraphCreate(phGraph, flags);
}

GM_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
	return gm_rpc_cuGraphDestroy(hGraph);
}

GM_EXPORT CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
	return gm_rpc_cuGraphClone(phGraphClone, originalGraph);
}

typedef CUresult (*gm_nodes_rpc)(CUgraph, size_t, size_t, void *, size_t, size_t *, size_t *);

/* gm_graph_nodes: with nodes NULL, the number of nodes; else up to
 * *numNodes of them, a page (GM_MAX_NODES) per round trip, the rest of
 * the array NULL and the number obtained in *numNodes, as CUDA does. */
static CUresult gm_graph_nodes(gm_nodes_rpc rpc, CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
	if (numNodes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	size_t total = 0, len = 0;
	if (nodes == NULL) {
		CUresult r = rpc(hGraph, 0, 0, NULL, 0, &len, &total);
		if (r == CUDA_SUCCESS)
			*numNodes = total;
		return r;
	}
	size_t want = *numNodes, got = 0;
	while (got < want) {
		size_t page = want - got < GM_MAX_NODES ? want - got : GM_MAX_NODES;
		CUresult r = rpc(hGraph, got, page, nodes + got, page * sizeof *nodes, &len, &total);
		if (r != CUDA_SUCCESS)
			return r;
		size_t n = len / sizeof *nodes;
		if (len % sizeof *nodes != 0 || n > page)
			return CUDA_ERROR_UNKNOWN;
		got += n;
		if (n < page || got >= total)
			break;
	}
	for (size_t i = got; i < want; i++)
		nodes[i] = NULL;
	*numNodes = got;
	return CUDA_SUCCESS;
}

GM_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
	return gm_graph_nodes(gm_rpc_cuGraphGetNodes, hGraph, nodes, numNodes);
}

GM_EXPORT CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
	return gm_graph_nodes(gm_rpc_cuGraphGetRootNodes, hGraph, rootNodes, numRootNodes);
}

/* A kernel node's launch: the function, or its CUkernel's function in the
 * node's context (the current one when it names none), and its parameters
 * packed as cuLaunchKernel packs them. */
static CUresult gm_kernel_node(const CUDA_KERNEL_NODE_PARAMS_v2 *p, CUfunction *f, struct gm_params *params)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*f = p->func != NULL ? p->func : (CUfunction)p->kern;
	if (*f == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->func == NULL) {
		CUresult r = gm_kernel_function_in(f, p->ctx != NULL ? (uint64_t)(uintptr_t)p->ctx : gm_current_ctx());
		if (r != CUDA_SUCCESS)
			return r;
	}
	return gm_params_pack(params, *f, p->kernelParams, p->extra);
}

static CUDA_KERNEL_NODE_PARAMS_v2 gm_kernel_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS_v2 v;
	memset(&v, 0, sizeof v);
	memcpy(&v, p, sizeof *p); /* v1 is v2's first fields */
	return v;
}

GM_EXPORT CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
						   const CUgraphNode *dependencies, size_t numDependencies,
						   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	size_t dl = gm_nodes_len(dependencies, numDependencies);
	if (dl == (size_t)-1)
		return gm_refuse("cuGraphAddKernelNode", "dependencies", CUDA_ERROR_INVALID_VALUE);
	CUfunction f;
	struct gm_params p;
	CUresult r = gm_kernel_node(nodeParams, &f, &p);
	if (r != CUDA_SUCCESS)
		return r;
	r = gm_rpc_cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, dl, f, nodeParams->gridDimX,
					   nodeParams->gridDimY, nodeParams->gridDimZ, nodeParams->blockDimX,
					   nodeParams->blockDimY, nodeParams->blockDimZ, nodeParams->sharedMemBytes,
					   p.buf, p.len);
	gm_params_free(&p);
	return r;
}

/* CUDA 10's name, with the parameters of before CUDA 12. */
GM_EXPORT CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						const CUgraphNode *dependencies, size_t numDependencies,
						const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (nodeParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS_v2 v = gm_kernel_v1(nodeParams);
	return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &v);
}

/* The node's context is the graph's here: ctx is not sent. */
GM_EXPORT CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						const CUgraphNode *dependencies, size_t numDependencies,
						const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	(void)ctx;
	size_t dl = gm_nodes_len(dependencies, numDependencies);
	if (dl == (size_t)-1 || memsetParams == NULL)
		return gm_refuse("cuGraphAddMemsetNode", "dependencies or memsetParams", CUDA_ERROR_INVALID_VALUE);
	const CUDA_MEMSET_NODE_PARAMS *m = memsetParams;
	return gm_rpc_cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, dl, m->dst, m->pitch, m->value,
					   m->elementSize, m->width, m->height);
}

/* gm_copy_side resolves one side of a memcpy node to a device address:
 * device memory, or unified memory the server says is the client's device
 * memory. Host memory and arrays cannot be reached from the server. */
static int gm_copy_side(CUmemorytype type, CUdeviceptr dev, const void *host, CUdeviceptr *out)
{
	CUdeviceptr base;
	size_t size;
	switch (type) {
	case CU_MEMORYTYPE_DEVICE:
		*out = dev;
		return 1;
	case CU_MEMORYTYPE_UNIFIED:
		*out = dev != 0 ? dev : (CUdeviceptr)(uintptr_t)host;
		return gm_rpc_cuMemGetAddressRange_v2(&base, &size, *out) == CUDA_SUCCESS;
	default:
		return 0;
	}
}

/* A device-to-device copy; the node's context is the graph's. */
GM_EXPORT CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						const CUgraphNode *dependencies, size_t numDependencies,
						const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	static unsigned char once;
	(void)ctx;
	size_t dl = gm_nodes_len(dependencies, numDependencies);
	if (dl == (size_t)-1 || copyParams == NULL)
		return gm_refuse("cuGraphAddMemcpyNode", "dependencies or copyParams", CUDA_ERROR_INVALID_VALUE);
	const CUDA_MEMCPY3D *c = copyParams;
	CUdeviceptr src, dst;
	if (!gm_copy_side(c->srcMemoryType, c->srcDevice, c->srcHost, &src) ||
	    !gm_copy_side(c->dstMemoryType, c->dstDevice, c->dstHost, &dst))
		return gm_not_supported("cuGraphAddMemcpyNode with host memory or an array (the remote GPU cannot reach them)",
					&once);
	uint64_t f[15] = {src, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, c->srcHeight,
			  dst, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch, c->dstHeight,
			  c->WidthInBytes, c->Height, c->Depth};
	unsigned char blob[sizeof f];
	for (int i = 0; i < 15; i++) /* little-endian u64s (proto.Copy3D) */
		for (int j = 0; j < 8; j++)
			blob[8 * i + j] = (unsigned char)(f[i] >> (8 * j));
	return gm_rpc_cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, dl, blob, sizeof blob);
}

GM_EXPORT CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					       const CUgraphNode *dependencies, size_t numDependencies)
{
	size_t dl = gm_nodes_len(dependencies, numDependencies);
	if (dl == (size_t)-1)
		return gm_refuse("cuGraphAddEmptyNode", "dependencies", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, dl);
}

GM_EXPORT CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						     const CUgraphNode *dependencies, size_t numDependencies,
						     CUevent event)
{
	size_t dl = gm_nodes_len(dependencies, numDependencies);
	if (dl == (size_t)-1)
		return gm_refuse("cuGraphAddEventRecordNode", "dependencies", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuGraphAddEventRecordNode(phGraphNode, hGraph, dependencies, dl, event);
}

GM_EXPORT CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						   const CUgraphNode *dependencies, size_t numDependencies,
						   CUevent event)
{
	size_t dl = gm_nodes_len(dependencies, numDependencies);
	if (dl == (size_t)-1)
		return gm_refuse("cuGraphAddEventWaitNode", "dependencies", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuGraphAddEventWaitNode(phGraphNode, hGraph, dependencies, dl, event);
}

GM_EXPORT CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
						     const CUgraphNode *to, const CUgraphEdgeData *edgeData,
						     size_t numDependencies)
{
	size_t len = gm_nodes_len(from, numDependencies);
	if (len == (size_t)-1 || gm_nodes_len(to, numDependencies) == (size_t)-1)
		return gm_refuse("cuGraphAddDependencies", "from or to", CUDA_ERROR_INVALID_VALUE);
	return gm_rpc_cuGraphAddDependencies_v2(hGraph, from, len, to, len, edgeData,
						edgeData != NULL ? numDependencies * sizeof *edgeData : 0);
}

GM_EXPORT CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
						  size_t numDependencies)
{
	return cuGraphAddDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

/* ---- executable graphs ---- */

GM_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
						       unsigned long long flags)
{
	return gm_rpc_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);
}

/* The names before CUDA 12 (cuGetProcAddress hands out
 * cuGraphInstantiateWithFlags for "cuGraphInstantiate" from 12000): no
 * error node, an empty log. */
GM_EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
						 char *logBuffer, size_t bufferSize)
{
	if (phErrorNode != NULL)
		*phErrorNode = NULL;
	if (logBuffer != NULL && bufferSize > 0)
		logBuffer[0] = 0;
	return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

GM_EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
					      char *logBuffer, size_t bufferSize)
{
	return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

/* CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD: instantiated, then uploaded on the
 * given stream. No error node is reported. */
GM_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
							CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	if (instantiateParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_GRAPH_INSTANTIATE_PARAMS *p = instantiateParams;
	p->hErrNode_out = NULL;
	CUresult r = cuGraphInstantiateWithFlags(phGraphExec, hGraph, p->flags & ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
	if (r == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
		r = gm_rpc_cuGraphUpload(*phGraphExec, p->hUploadStream);
	p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
	return r;
}

GM_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
							     CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	if (instantiateParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_GRAPH_INSTANTIATE_PARAMS p = *instantiateParams;
	p.hUploadStream = GM_PTSZ(p.hUploadStream);
	CUresult r = cuGraphInstantiateWithParams(phGraphExec, hGraph, &p);
	instantiateParams->hErrNode_out = p.hErrNode_out;
	instantiateParams->result_out = p.result_out;
	return r;
}

GM_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	return gm_rpc_cuGraphLaunch(hGraphExec, hStream);
}

GM_EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return gm_rpc_cuGraphLaunch(hGraphExec, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	return gm_rpc_cuGraphUpload(hGraphExec, hStream);
}

GM_EXPORT CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	return gm_rpc_cuGraphUpload(hGraphExec, GM_PTSZ(hStream));
}

GM_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	return gm_rpc_cuGraphExecDestroy(hGraphExec);
}

GM_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
							     const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	CUfunction f;
	struct gm_params p;
	CUresult r = gm_kernel_node(nodeParams, &f, &p);
	if (r != CUDA_SUCCESS)
		return r;
	r = gm_rpc_cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, f, nodeParams->gridDimX, nodeParams->gridDimY,
						     nodeParams->gridDimZ, nodeParams->blockDimX,
						     nodeParams->blockDimY, nodeParams->blockDimZ,
						     nodeParams->sharedMemBytes, p.buf, p.len);
	gm_params_free(&p);
	return r;
}

GM_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
							  const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (nodeParams == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS_v2 v = gm_kernel_v1(nodeParams);
	return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &v);
}
