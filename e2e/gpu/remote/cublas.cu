// cuBLAS through gpumux (run.sh cublas): cublasCreate and one SGEMM,
// checked against the CPU. Prints each step's status.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	const int n = 256;
	cublasHandle_t h;
	cublasStatus_t s = cublasCreate(&h);
	printf("cublasCreate: %d\n", (int)s);
	if (s != CUBLAS_STATUS_SUCCESS)
		return 1;
	size_t bytes = sizeof(float) * n * n;
	float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
	for (int i = 0; i < n * n; i++) {
		a[i] = (float)((i * 7) % 13) / 13.0f;
		b[i] = (float)((i * 5) % 11) / 11.0f;
	}
	float *da, *db, *dc;
	cudaMalloc(&da, bytes);
	cudaMalloc(&db, bytes);
	cudaMalloc(&dc, bytes);
	cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
	const float one = 1.0f, zero = 0.0f;
	s = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
	printf("cublasSgemm: %d\n", (int)s);
	cudaError_t e = cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost);
	printf("copy back: %s\n", cudaGetErrorName(e));
	double maxerr = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			double ref = 0;
			for (int k = 0; k < n; k++)
				ref += (double)a[k * n + i] * b[j * n + k];
			maxerr = fmax(maxerr, fabs(ref - c[j * n + i]));
		}
	printf("max error vs CPU below 1e-3: %s\n", maxerr < 1e-3 ? "yes" : "no");
	cublasDestroy(h);
	return 0;
}
