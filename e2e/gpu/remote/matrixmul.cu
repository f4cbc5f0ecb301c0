// matrixmul: an ordinary CUDA runtime program (nvcc's default static
// cudart): a tiled shared-memory matrix product, timed with events and
// checked against the host. run.sh rt runs it locally and through gpumux's
// interposer and compares the outputs (the timing line is left out).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define TILE 16

__global__ void matmul(const float *a, const float *b, float *c, int n)
{
	__shared__ float ta[TILE][TILE], tb[TILE][TILE];
	int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0;
	for (int t = 0; t < n / TILE; t++) {
		ta[threadIdx.y][threadIdx.x] = a[row * n + t * TILE + threadIdx.x];
		tb[threadIdx.y][threadIdx.x] = b[(t * TILE + threadIdx.y) * n + col];
		__syncthreads();
		for (int k = 0; k < TILE; k++)
			acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
		__syncthreads();
	}
	c[row * n + col] = acc;
}

#define CHECK(x)                                                                                      \
	do {                                                                                          \
		cudaError_t e_ = (x);                                                                 \
		if (e_ != cudaSuccess) {                                                              \
			printf("%s: %s (%s)\n", #x, cudaGetErrorName(e_), cudaGetErrorString(e_));    \
			return 1;                                                                     \
		}                                                                                     \
	} while (0)

int main()
{
	const int n = 512;
	size_t sz = (size_t)n * n * sizeof(float);
	float *a = (float *)malloc(sz), *b = (float *)malloc(sz), *c = (float *)malloc(sz);
	for (int i = 0; i < n * n; i++) {
		a[i] = (float)(i % 7) - 3;
		b[i] = (float)(i % 5) - 2;
	}
	float *da, *db, *dc;
	CHECK(cudaMalloc(&da, sz));
	CHECK(cudaMalloc(&db, sz));
	CHECK(cudaMalloc(&dc, sz));
	CHECK(cudaMemcpy(da, a, sz, cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b, sz, cudaMemcpyHostToDevice));
	cudaEvent_t start, stop;
	CHECK(cudaEventCreate(&start));
	CHECK(cudaEventCreate(&stop));
	dim3 block(TILE, TILE), grid(n / TILE, n / TILE);
	CHECK(cudaEventRecord(start));
	for (int r = 0; r < 10; r++)
		matmul<<<grid, block>>>(da, db, dc, n);
	CHECK(cudaGetLastError());
	CHECK(cudaEventRecord(stop));
	CHECK(cudaEventSynchronize(stop));
	float ms = 0;
	CHECK(cudaEventElapsedTime(&ms, start, stop));
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(c, dc, sz, cudaMemcpyDeviceToHost));
	int bad = 0;
	double sum = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			float want = 0;
			for (int k = 0; k < n; k++)
				want += a[i * n + k] * b[k * n + j];
			bad += c[i * n + j] != want;
			sum += c[i * n + j];
		}
	printf("matrixmul %dx%d: %d wrong, checksum %.0f\n", n, n, bad, sum);
	fprintf(stderr, "matrixmul: 10 launches in %.3f ms\n", ms);
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	return bad != 0;
}
