// A plain CUDA runtime program (nvcc's static cudart): what cudaMemGetInfo
// reports, how much cudaMalloc gets in 256 MiB steps, and a kernel's result.
#include <cstdio>
#include <vector>
__global__ void add(const float *a, const float *b, float *c, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) c[i] = a[i] + b[i];
}
int main() {
	size_t f = 0, t = 0;
	cudaError_t e = cudaMemGetInfo(&f, &t);
	printf("MEMINFO %d free=%zu total=%zu\n", (int)e, f, t);
	int n = 1 << 20;
	std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n);
	float *da, *db, *dc;
	cudaMalloc(&da, n * 4); cudaMalloc(&db, n * 4); cudaMalloc(&dc, n * 4);
	cudaMemcpy(da, a.data(), n * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b.data(), n * 4, cudaMemcpyHostToDevice);
	add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
	cudaMemcpy(c.data(), dc, n * 4, cudaMemcpyDeviceToHost);
	printf("RESULT %s\n", c[0] == 3.0f && c[n - 1] == 3.0f ? "ok" : "wrong");
	size_t got = 0;
	std::vector<void *> ps;
	for (;;) {
		void *p;
		e = cudaMalloc(&p, 256 << 20);
		if (e != cudaSuccess) break;
		ps.push_back(p);
		got += 256 << 20;
	}
	printf("GOT %zu MiB then %s\n", got >> 20, cudaGetErrorName(e));
	cudaGetLastError();
	for (void *p : ps) cudaFree(p);
	e = cudaMalloc(&da, 512 << 20);
	printf("AFTER FREE %s\n", cudaGetErrorName(e));
	e = cudaMemGetInfo(&f, &t);
	printf("MEMINFO %d free=%zu total=%zu\n", (int)e, f, t);
	return 0;
}
