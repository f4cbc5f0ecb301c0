/* Two GPUs, as a two-GPU PyTorch program uses them at the driver level
 * (tensor.to("cuda:1") and back): a primary context on each device, memory
 * on each, peer access both ways, copies 0→1 and back by the generic
 * unified copy the runtime's cudaMemcpyAsync becomes, by cuMemcpyPeer
 * (and its _ptsz variant from cuGetProcAddress), ordered across the
 * devices' streams by an event; pointer attributes of either device's
 * memory; a kernel on device 0 writing device 1's memory once peer access
 * is on. Run against a server with two fake devices and a token of both
 * (remote/ctest TestTwoDevices); argv[1] is the token's quota in bytes
 * (0: none). */
#include "t.h"

CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice, CUdevice dstDevice);
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags);
CUresult cuCtxDisablePeerAccess(CUcontext peerContext);
CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
		      size_t ByteCount);
CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
			   size_t ByteCount, CUstream hStream);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);

#define N (3u << 20) /* several data frames */

typedef CUresult (*peer_async_fn)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);

static void fill(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed + i * 13 + (i >> 9));
}

int main(int argc, char **argv)
{
	unsigned long long quota = argc > 1 ? strtoull(argv[1], NULL, 0) : 0;
	REQUIRE(cuInit(0));
	int count = 0;
	REQUIRE(cuDeviceGetCount(&count));
	if (count != 2) {
		printf("FAIL: %d devices, want 2\n", count);
		return 1;
	}
	CUdevice d0, d1;
	CHECK(cuDeviceGet(&d0, 0));
	CHECK(cuDeviceGet(&d1, 1));
	EXPECT(cuDeviceGet(&d1, 2), CUDA_ERROR_INVALID_DEVICE);
	CUuuid u0, u1;
	CHECK(cuDeviceGetUuid_v2(&u0, 0));
	CHECK(cuDeviceGetUuid_v2(&u1, 1));
	ASSERT(memcmp(u0.bytes, u1.bytes, 16) != 0);
	char name[64];
	CHECK(cuDeviceGetName(name, sizeof name, 1));
	ASSERT(strlen(name) > 0);

	int can = -1, self = -1, access = -1;
	CHECK(cuDeviceCanAccessPeer(&can, 0, 1));
	CHECK(cuDeviceCanAccessPeer(&self, 1, 1));
	ASSERT(can == 1 && self == 0);
	CHECK(cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 0));
	ASSERT(access == 1);
	EXPECT(cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1),
	       CUDA_ERROR_INVALID_DEVICE);

	/* A primary context and memory on each device. */
	CUcontext c0, c1;
	REQUIRE(cuDevicePrimaryCtxRetain(&c0, 0));
	REQUIRE(cuDevicePrimaryCtxRetain(&c1, 1));
	ASSERT(c0 != c1);
	CUdevice dev = -1;
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuCtxGetDevice(&dev));
	ASSERT(dev == 1);
	CUdeviceptr p1, p0;
	REQUIRE(cuMemAlloc_v2(&p1, N));
	CUstream s1;
	CHECK(cuStreamCreate(&s1, 0));
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuCtxGetDevice(&dev));
	ASSERT(dev == 0);
	REQUIRE(cuMemAlloc_v2(&p0, N));
	CUstream s0;
	CHECK(cuStreamCreate(&s0, 0));
	if (quota > 0) {
		/* One quota over both devices: what is left after the two. */
		CUdeviceptr more;
		EXPECT(cuMemAlloc_v2(&more, (size_t)quota - 2 * N + 1), CUDA_ERROR_OUT_OF_MEMORY);
		CHECK(cuMemAlloc_v2(&more, (size_t)quota - 2 * N));
		CHECK(cuMemFree_v2(more));
	}

	/* Peer access both ways, as the runtime's cudaDeviceEnablePeerAccess
	 * does from each device's current context. */
	CHECK(cuCtxEnablePeerAccess(c1, 0));
	EXPECT(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuCtxEnablePeerAccess(c0, 0));
	CHECK(cuCtxSetCurrent(c0));

	unsigned char *src = malloc(N), *back = malloc(N);
	if (src == NULL || back == NULL)
		return 2;
	fill(src, N, 5);

	/* 0 → 1 by the unified copy on device 0's stream, then device 1's
	 * stream waits for it through an event, and 1 → 0 by cuMemcpyPeer
	 * into another part of device 0's memory. */
	CHECK(cuMemcpyHtoDAsync_v2(p0, src, N / 2, s0));
	CUevent done;
	CHECK(cuEventCreate(&done, 0));
	CHECK(cuMemcpyAsync(p1, p0, N / 2, s0));
	CHECK(cuEventRecord(done, s0));
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuStreamWaitEvent(s1, done, 0));
	memset(back, 0, N);
	CHECK(cuMemcpyDtoHAsync_v2(back, p1, N / 2, s1));
	CHECK(cuStreamSynchronize(s1));
	ASSERT(memcmp(back, src, N / 2) == 0);
	CHECK(cuMemcpyPeer(p0 + N / 2, c0, p1, c1, N / 2));
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuMemcpyDtoH_v2(back, p0 + N / 2, N / 2));
	ASSERT(memcmp(back, src, N / 2) == 0);

	/* The whole buffer 0 → 1 by cuMemcpyPeerAsync_ptsz (what a
	 * per-thread-default-stream program gets from cuGetProcAddress) and
	 * back 1 → 0 by synchronous cuMemcpy, then compared. */
	fill(src, N, 77);
	CHECK(cuMemcpyHtoD_v2(p0, src, N));
	void *fn = NULL;
	CHECK(cuGetProcAddress("cuMemcpyPeerAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
	ASSERT(fn != NULL && fn != (void *)cuMemcpyPeerAsync);
	if (fn != NULL)
		CHECK(((peer_async_fn)fn)(p1, c1, p0, c0, N, s0));
	CHECK(cuStreamSynchronize(s0));
	CHECK(cuMemsetD8_v2(p0, 0, N));
	CHECK(cuMemcpy(p0, p1, N));
	memset(back, 0, N);
	CHECK(cuMemcpyDtoH_v2(back, p0, N));
	ASSERT(memcmp(back, src, N) == 0);

	/* Pointer attributes name the memory's own context and device,
	 * whichever is current. */
	int ordinal = -1;
	CUcontext owner = NULL;
	CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p1 + 100));
	CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p1 + 100));
	ASSERT(ordinal == 1 && owner == c1);
	CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p0));
	ASSERT(ordinal == 0);

	/* A kernel on device 0 writes device 1's memory through peer access;
	 * without it, it faults. */
	CUmodule m;
	CUfunction k;
	CHECK(cuModuleLoadData(&m, t_fake_module));
	CHECK(cuModuleGetFunction(&k, m, "fill_u32"));
	uint32_t v = 0x01020304;
	uint64_t words = 16;
	void *args[] = {&p1, &v, &words};
	CHECK(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, s0, args, NULL));
	CHECK(cuStreamSynchronize(s0));
	uint32_t got[16];
	CHECK(cuMemcpyDtoH_v2(got, p1, sizeof got));
	ASSERT(got[0] == v && got[15] == v);
	CHECK(cuCtxDisablePeerAccess(c1));
	EXPECT(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
	CHECK(cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, s0, args, NULL));
	EXPECT(cuStreamSynchronize(s0), CUDA_ERROR_ILLEGAL_ADDRESS);

	/* A peer copy naming device 0's context for device 1's memory is
	 * refused, as is a copy past the end of an allocation. */
	EXPECT(cuMemcpyPeer(p0, c0, p1, c0, 64), CUDA_ERROR_INVALID_VALUE);
	EXPECT(cuMemcpyPeer(p0, c0, p1 + N - 8, c1, 64), CUDA_ERROR_INVALID_VALUE);

	CHECK(cuModuleUnload(m));
	CHECK(cuEventDestroy_v2(done));
	CHECK(cuStreamDestroy_v2(s0));
	CHECK(cuMemFree_v2(p0));
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuStreamDestroy_v2(s1));
	CHECK(cuMemFree_v2(p1));
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuDevicePrimaryCtxRelease_v2(1));
	CHECK(cuDevicePrimaryCtxRelease_v2(0));
	free(src);
	free(back);
	return t_done("peer");
}
