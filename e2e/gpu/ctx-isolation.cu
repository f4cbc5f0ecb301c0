// ctx-isolation: can a kernel in one CUDA context write memory that another
// context of the same process allocated? gpumux-remoted gives every client
// its own context in one server process and cannot inspect kernel
// arguments, so its isolation rests on the answer (docs/validation.md).
//
//   nvcc -o ctx-isolation ctx-isolation.cu -lcuda && ./ctx-isolation
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static const char *ptx =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry store(.param .u64 p, .param .u32 v)\n{\n"
    "  .reg .b64 %rd<3>;\n  .reg .b32 %r<2>;\n"
    "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [v];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  st.global.u32 [%rd2], %r1;\n  ret;\n}\n";

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *s; cuGetErrorName(r_, &s); \
	fprintf(stderr, "%s: %s\n", #x, s); exit(1); } } while (0)

static CUcontext mkctx(CUdevice dev)
{
	CUcontext c;
#if CUDA_VERSION >= 13000
	CK(cuCtxCreate(&c, NULL, 0, dev));
#else
	CK(cuCtxCreate(&c, 0, dev));
#endif
	return c;
}

static CUresult store(CUdeviceptr p, unsigned v)
{
	CUmodule m;
	CUfunction f;
	CK(cuModuleLoadData(&m, ptx));
	CK(cuModuleGetFunction(&f, m, "store"));
	void *args[] = {&p, &v};
	CUresult r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, 0, args, NULL);
	if (r == CUDA_SUCCESS)
		r = cuCtxSynchronize();
	return r;
}

int main(void)
{
	CUdevice dev;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CUcontext a = mkctx(dev), b = mkctx(dev);

	CK(cuCtxSetCurrent(a));
	CUdeviceptr pa;
	unsigned v = 1234, got = 0;
	CK(cuMemAlloc(&pa, 4096));
	CK(cuMemcpyHtoD(pa, &v, 4));

	CK(cuCtxSetCurrent(b));
	CUresult rb = store(pa, 999);
	const char *name;
	cuGetErrorName(rb, &name);
	printf("context B writing context A's pointer %#llx: %s\n", (unsigned long long)pa, name);

	CK(cuCtxSetCurrent(a));
	CUresult ra = cuMemcpyDtoH(&got, pa, 4);
	cuGetErrorName(ra, &name);
	printf("context A reads its value: %u (%s)\n", got, name);
	CUresult ra2 = store(pa, 4321);
	cuGetErrorName(ra2, &name);
	CK(cuMemcpyDtoH(&got, pa, 4));
	printf("context A writes its own pointer after B's attempt: %s, value now %u\n", name, got);
	int isolated = rb != CUDA_SUCCESS && ra == CUDA_SUCCESS && ra2 == CUDA_SUCCESS && got == 4321;
	printf("isolated: %s\n", isolated ? "yes" : "NO");
	return isolated ? 0 : 2;
}
