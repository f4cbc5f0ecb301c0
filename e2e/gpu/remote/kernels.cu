// Kernels for the remote GPU checks and benchmarks (check.c, bench.c).
// Built on the GPU machine by run.sh as a cubin, PTX and a fatbin, so the
// programs load modules in all three forms through the driver API.
extern "C" {

__device__ unsigned int counter;

__global__ void empty() {}

__global__ void fill(unsigned int *p, unsigned int v, unsigned int n)
{
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = v + i;
}

__global__ void saxpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
	if (i == 0)
		atomicAdd(&counter, 1);
}

#define TILE 16
__global__ void matmul(const float *A, const float *B, float *C, int n)
{
	__shared__ float a[TILE][TILE], b[TILE][TILE];
	int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0;
	for (int t = 0; t < n; t += TILE) {
		a[threadIdx.y][threadIdx.x] = A[row * n + t + threadIdx.x];
		b[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * n + col];
		__syncthreads();
		for (int k = 0; k < TILE; k++)
			acc += a[threadIdx.y][k] * b[k][threadIdx.x];
		__syncthreads();
	}
	C[row * n + col] = acc;
}
}
