/* The calls PyTorch's CUDA initialisation and kernels make besides the
 * basic ones, on the fake backend: stream priorities, flags and capture
 * status, events recorded with flags, function and kernel attributes,
 * occupancy, and page-locked host memory (plain host memory here). */
#include "t.h"

CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority);
CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
CUresult cuStreamGetPriority(CUstream hStream, int *priority);
CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority);
CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags);
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
				   CUgraph *graph_out, const CUgraphNode **dependencies_out,
				   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
				   CUgraph *graph_out, const CUgraphNode **dependencies_out,
				   size_t *numDependencies_out);
CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value);
CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev);
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
						     size_t dynamicSMemSize);
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
							      size_t dynamicSMemSize, unsigned int flags);
CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
						 int blockSize);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p);
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
				CUdeviceptr ptr);
CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);

#define P(x) ((CUdeviceptr)(uintptr_t)(x))

int main(void)
{
	/* Host memory needs a context, as CUDA's does. */
	void *h = NULL;
	EXPECT(cuMemAllocHost_v2(&h, 64), CUDA_ERROR_INVALID_CONTEXT);
	t_setup();

	int least = 99, greatest = 99;
	CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
	ASSERT(least == 0 && greatest == -5); /* fakecuda's, an H200's */

	CUstream s;
	CHECK(cuStreamCreateWithPriority(&s, 1, -2));
	int prio = 99;
	unsigned int flags = 99;
	CHECK(cuStreamGetPriority(s, &prio));
	CHECK(cuStreamGetFlags(s, &flags));
	ASSERT(prio == -2 && flags == 1);
	CHECK(cuStreamGetPriority_ptsz(NULL, &prio));
	ASSERT(prio == 0);
	EXPECT(cuStreamGetPriority((CUstream)(uintptr_t)0x7777, &prio), CUDA_ERROR_INVALID_HANDLE);

	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	CHECK(cuStreamIsCapturing(s, &st));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_NONE);
	st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	cuuint64_t id = 42;
	CHECK(cuStreamGetCaptureInfo_v3(NULL, &st, &id, NULL, NULL, NULL, NULL));
	ASSERT(st == CU_STREAM_CAPTURE_STATUS_NONE && id == 42); /* only the status is defined */
	CHECK(cuStreamGetCaptureInfo_v2(s, &st, NULL, NULL, NULL, NULL));
	EXPECT(cuStreamIsCapturing(s, NULL), CUDA_ERROR_INVALID_VALUE);

	/* cuGetProcAddress hands out the version the caller was built for. */
	void *fn = NULL;
	CUdriverProcAddressQueryResult qr;
	CHECK(cuGetProcAddress_v2("cuStreamGetCaptureInfo", &fn, 12030, 0, &qr));
	ASSERT(fn == (void *)cuStreamGetCaptureInfo_v3);
	CHECK(cuGetProcAddress_v2("cuStreamGetCaptureInfo", &fn, 12000, 0, &qr));
	ASSERT(fn == (void *)cuStreamGetCaptureInfo_v2);
	CHECK(cuGetProcAddress_v2("cuStreamGetPriority", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &qr));
	ASSERT(fn == (void *)cuStreamGetPriority_ptsz);
	CHECK(cuGetProcAddress_v2("cuMemAllocHost", &fn, 13000, 0, &qr));
	ASSERT(fn == (void *)cuMemAllocHost_v2);

	CUevent ev;
	CHECK(cuEventCreate(&ev, 0));
	CHECK(cuEventRecordWithFlags(ev, s, 0));
	CHECK(cuEventSynchronize(ev));
	CHECK(cuEventRecordWithFlags(ev, s, 0x40)); /* async: the next call that waits reports it */
	EXPECT(cuEventSynchronize(ev), CUDA_ERROR_INVALID_VALUE);

	CUmodule m;
	REQUIRE(cuModuleLoadData(&m, t_fake_module));
	CUfunction f;
	CHECK(cuModuleGetFunction(&f, m, "fill_u32"));
	CHECK(cuFuncSetAttribute(f, (CUfunction_attribute)8, 65536));
	int v = 0;
	CHECK(cuFuncGetAttribute(&v, (CUfunction_attribute)8, f));
	ASSERT(v == 65536);
	CHECK(cuKernelSetAttribute((CUfunction_attribute)8, 1024, (CUkernel)f, 0));
	CHECK(cuFuncGetAttribute(&v, (CUfunction_attribute)8, f));
	ASSERT(v == 1024);
	EXPECT(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, 1), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuFuncSetAttribute((CUfunction)(uintptr_t)0x7777, (CUfunction_attribute)8, 0), CUDA_ERROR_INVALID_HANDLE);

	int blocks = 0;
	CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 512, 0));
	ASSERT(blocks == 4); /* the fake's 2048 threads per multiprocessor */
	CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 128, 0, 1));
	ASSERT(blocks == 16);
	EXPECT(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 0, 0), CUDA_ERROR_INVALID_VALUE);
	size_t smem = 0;
	CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&smem, f, 4, 256));
	ASSERT(smem == 233472 / 4 - 1024);

	/* Host memory: page-aligned, usable, freed once, by its start. */
	CHECK(cuMemAllocHost_v2(&h, 10000));
	ASSERT(((uintptr_t)h & 4095) == 0);
	void *w = NULL;
	CHECK(cuMemHostAlloc(&w, 100, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED));
	unsigned int hf = 99;
	CHECK(cuMemHostGetFlags(&hf, (char *)w + 50));
	ASSERT(hf == (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED));
	CHECK(cuMemHostGetFlags(&hf, h));
	ASSERT(hf == 0);
	int local = 0;
	EXPECT(cuMemHostGetFlags(&hf, &local), CUDA_ERROR_INVALID_VALUE);
	/* Mapped host memory (cuDNN and the runtime's default pinned memory
	 * ask for it) is host memory the remote GPU cannot reach: no device
	 * address. */
	void *mapped = NULL;
	CHECK(cuMemHostAlloc(&mapped, 100, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	CUdeviceptr md = 1;
	EXPECT(cuMemHostGetDevicePointer_v2(&md, mapped, 0), CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(cuMemHostAlloc(&w, 0, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemHostAlloc(&w, 100, 0x80), CUDA_ERROR_INVALID_VALUE);

	/* Registered memory: the caller's, pinned in place; not freed by
	 * cuMemFreeHost, registered once, unregistered by its start. */
	static char reg[8192];
	CHECK(cuMemHostRegister_v2(reg, sizeof reg, CU_MEMHOSTREGISTER_DEVICEMAP));
	EXPECT(cuMemHostRegister_v2(reg + 100, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	EXPECT(cuMemHostRegister_v2(reg, 10, 0x40), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemHostGetFlags(&hf, reg + 10));
	ASSERT(hf == CU_MEMHOSTREGISTER_DEVICEMAP);
	EXPECT(cuMemFreeHost(reg), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemHostUnregister(mapped), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

	/* Pointer attributes: host memory pinned here, device memory by the
	 * server's records, memory CUDA does not know. */
	CUdeviceptr d;
	CHECK(cuMemAlloc_v2(&d, 10000));
	unsigned int mt = 99;
	CHECK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, P(reg + 5)));
	ASSERT(mt == CU_MEMORYTYPE_HOST);
	CHECK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 5));
	ASSERT(mt == CU_MEMORYTYPE_DEVICE);
	CUdeviceptr start = 0;
	size_t rsize = 0;
	CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 5));
	CHECK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 5));
	ASSERT(start == d && rsize == 10000);
	EXPECT(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, P(&local)), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, P(mapped)), CUDA_ERROR_NOT_SUPPORTED);
	{
		CUpointer_attribute as[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
					     CU_POINTER_ATTRIBUTE_HOST_POINTER, CU_POINTER_ATTRIBUTE_IS_MANAGED};
		unsigned int type = 99;
		CUdeviceptr dp = 99;
		void *hp = NULL;
		int managed = 99;
		void *vals[4] = {&type, &dp, &hp, &managed};
		CHECK(cuPointerGetAttributes(4, as, vals, P(mapped)));
		ASSERT(type == CU_MEMORYTYPE_HOST && dp == 0 && hp == mapped && managed == 0);
		CHECK(cuPointerGetAttributes(4, as, vals, d));
		ASSERT(type == CU_MEMORYTYPE_DEVICE && dp == d && hp == NULL && managed == 0);
		type = 99;
		CHECK(cuPointerGetAttributes(4, as, vals, P(&local))); /* unknown: defaults, no error */
		ASSERT(type == 0 && dp == 0 && hp == NULL);
		CUpointer_attribute bad = (CUpointer_attribute)99;
		EXPECT(cuPointerGetAttributes(1, &bad, vals, d), CUDA_ERROR_INVALID_VALUE);
	}
	CHECK(cuMemHostUnregister(reg));
	EXPECT(cuMemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	CHECK(cuMemFreeHost(mapped));

	/* The runtime asks each thread's context for its API version. */
	unsigned int api = 0;
	CHECK(cuCtxGetApiVersion(NULL, &api));
	ASSERT(api == 3020);
	EXPECT(cuCtxGetApiVersion(NULL, NULL), CUDA_ERROR_INVALID_VALUE);

	memset(h, 0x5a, 10000);
	CHECK(cuMemcpyHtoDAsync_v2(d, h, 10000, s));
	memset(h, 0, 10000);
	CHECK(cuMemcpyDtoHAsync_v2(h, d, 10000, s));
	CHECK(cuStreamSynchronize(s));
	ASSERT(((unsigned char *)h)[9999] == 0x5a);
	EXPECT(cuMemFreeHost((char *)h + 1), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemFreeHost(h));
	EXPECT(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuMemFreeHost(w));

	/* Unified copies: which side is device memory, the server's records
	 * of this client's allocations say (an interior pointer too). */
	CUdeviceptr d2;
	CHECK(cuMemAlloc_v2(&d2, 64));
	uint32_t in[16], out[16], mid[16];
	for (int i = 0; i < 16; i++)
		in[i] = 0x1000u + (uint32_t)i;
	memset(out, 0, sizeof out);
	CHECK(cuMemcpy(d2, P(in), sizeof in));                            /* host to device */
	CHECK(cuMemcpyAsync(d + 64, d2, sizeof in, s));                   /* device to device */
	CHECK(cuMemcpyAsync(P(out), d + 64, sizeof out, s));              /* device to host */
	CHECK(cuStreamSynchronize(s));
	ASSERT(memcmp(in, out, sizeof in) == 0);
	CHECK(cuMemcpy(P(mid), P(in), sizeof in));                        /* host to host */
	ASSERT(memcmp(in, mid, sizeof in) == 0);
	CHECK(cuMemcpy(P(out), d2 + 8, 4));
	ASSERT(out[0] == 0x1002u);
	CHECK(cuMemcpy(d2, P(in), 0));
	CHECK(cuMemFree_v2(d2));

	CHECK(cuStreamDestroy_v2(s));
	EXPECT(cuStreamGetFlags(s, &flags), CUDA_ERROR_INVALID_HANDLE);
	return t_done("torchcalls");
}
