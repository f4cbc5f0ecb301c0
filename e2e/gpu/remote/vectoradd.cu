// vectoradd: an ordinary CUDA runtime program (nvcc's default static
// cudart), milestone 2 of the remote GPU issue: does it run unmodified
// through gpumux's interposer? run.sh rt says what happens.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}

int main()
{
	const int n = 1 << 20;
	size_t sz = n * sizeof(float);
	float *a = new float[n], *b = new float[n], *c = new float[n];
	for (int i = 0; i < n; i++) {
		a[i] = i;
		b[i] = 2 * i;
	}
	float *da, *db, *dc;
	cudaError_t e = cudaMalloc(&da, sz);
	if (e != cudaSuccess) {
		printf("cudaMalloc: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
		return 1;
	}
	cudaMalloc(&db, sz);
	cudaMalloc(&dc, sz);
	cudaMemcpy(da, a, sz, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b, sz, cudaMemcpyHostToDevice);
	add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
	e = cudaMemcpy(c, dc, sz, cudaMemcpyDeviceToHost);
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += c[i] != 3.0f * i;
	printf("vectoradd: %s, %d wrong\n", cudaGetErrorName(e), bad);
	return bad != 0 || e != cudaSuccess;
}
