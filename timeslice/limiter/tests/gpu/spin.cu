// The compute limit on a real GPU.
//   spin bench N        N launches of an empty kernel: host µs per launch
//   spin run SECS US    kernels that keep every SM busy for US µs, back to
//                       back for SECS: "KERNELS n WALL_S w GPU_FRAC f"
#include <cstdio>
#include <cstdlib>
#include <chrono>
__global__ void empty() {}
__global__ void spin(long long cycles) {
	long long t0 = clock64();
	while (clock64() - t0 < cycles) {
	}
}
static double now() {
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
int main(int argc, char **argv) {
	if (argc >= 3 && argv[1][0] == 'b') {
		long n = atol(argv[2]);
		empty<<<1, 1>>>();
		cudaDeviceSynchronize();
		double t0 = now();
		for (long i = 0; i < n; i++) empty<<<1, 1>>>();
		double t1 = now();
		cudaDeviceSynchronize();
		printf("US_PER_LAUNCH %.3f (with the drain %.3f)\n", (t1 - t0) * 1e6 / n, (now() - t0) * 1e6 / n);
		return 0;
	}
	double secs = atof(argv[2]);
	int us = atoi(argv[3]), khz = 0, sms = 0;
	cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
	cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
	long long cycles = (long long)khz * us / 1000;
	spin<<<sms, 32>>>(cycles);
	cudaDeviceSynchronize();
	const char *at = getenv("START_AT");
	if (at) {
		double t = atof(at);
		while (std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() < t) {
		}
	}
	double t0 = now();
	long n = 0;
	while (now() - t0 < secs) {
		spin<<<sms, 32>>>(cycles);
		n++;
	}
	cudaDeviceSynchronize();
	double w = now() - t0;
	printf("KERNELS %ld WALL_S %.3f GPU_FRAC %.3f\n", n, w, n * us * 1e-6 / w);
	return cudaGetLastError() != cudaSuccess;
}
