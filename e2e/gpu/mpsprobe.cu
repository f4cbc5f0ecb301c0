// mpsprobe is a tiny CUDA client for proving MPS shares on a real GPU
// (plugin/realgpu_mps_test.go). Build it on the GPU machine:
//
//	nvcc -O2 -o mpsprobe mpsprobe.cu
//
// Commands (one per run; output is one line per fact, for the test to parse):
//
//	mpsprobe sm             SMs this client may use     -> "SM <n>"
//	mpsprobe alloc <MiB>    one cudaMalloc of that size  -> "ALLOC <MiB> OK" or "ALLOC <MiB> <error>"
//	mpsprobe fault          a kernel writing to an unmapped address -> "FAULT <error>"
//	mpsprobe spin <seconds> launch and wait for small kernels until the time is up
//	                        -> "SPIN OK <launches>" or "SPIN ERROR <error> after <launches>"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <cuda_runtime.h>

__global__ void work(float *x, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        for (int k = 0; k < iters; k++) v = v * 0.999f + 0.001f;
        x[i] = v;
    }
}

__global__ void fault(int *p) { *(volatile int *)((char *)p + (1ull << 40)) = 1; }

static int fail(const char *what, cudaError_t e) {
    printf("%s %s\n", what, cudaGetErrorString(e));
    fflush(stdout);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mpsprobe sm|alloc <MiB>|fault|spin <seconds>\n");
        return 64;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "sm")) {
        int n;
        cudaError_t e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
        if (e != cudaSuccess) return fail("SM ERROR", e);
        printf("SM %d\n", n);
        return 0;
    }
    if (!strcmp(cmd, "alloc") && argc == 3) {
        size_t mib = strtoull(argv[2], 0, 10);
        void *p;
        cudaError_t e = cudaMalloc(&p, mib << 20);
        printf("ALLOC %zu %s\n", mib, e == cudaSuccess ? "OK" : cudaGetErrorString(e));
        return e == cudaSuccess ? 0 : 1;
    }
    if (!strcmp(cmd, "fault")) {
        int *p;
        cudaError_t e = cudaMalloc(&p, 4);
        if (e != cudaSuccess) return fail("FAULT setup", e);
        fault<<<1, 1>>>(p);
        e = cudaDeviceSynchronize();
        printf("FAULT %s\n", cudaGetErrorString(e));
        return 0;
    }
    if (!strcmp(cmd, "spin") && argc == 3) {
        double secs = atof(argv[2]);
        const int n = 1 << 20;
        float *x;
        cudaError_t e = cudaMalloc(&x, n * sizeof(float));
        if (e != cudaSuccess) return fail("SPIN ERROR", e);
        auto start = std::chrono::steady_clock::now();
        long launches = 0;
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < secs) {
            work<<<n / 256, 256>>>(x, n, 2000);
            e = cudaDeviceSynchronize();
            if (e != cudaSuccess) {
                printf("SPIN ERROR %s after %ld\n", cudaGetErrorString(e), launches);
                return 1;
            }
            launches++;
        }
        printf("SPIN OK %ld\n", launches);
        return 0;
    }
    fprintf(stderr, "mpsprobe: unknown command %s\n", cmd);
    return 64;
}
