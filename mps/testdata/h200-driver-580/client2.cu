#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>
int main(int argc, char** argv) {
  int secs = argc > 1 ? atoi(argv[1]) : 3;
  int sms = 0; void* p = nullptr;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("c2 pid %d: attr %s sms=%d\n", getpid(), cudaGetErrorString(e), sms); fflush(stdout);
  e = cudaMalloc(&p, 1 << 20); printf("c2 pid %d: first malloc %s\n", getpid(), cudaGetErrorString(e)); fflush(stdout);
  sleep(secs);
  e = cudaMalloc(&p, 1 << 20); printf("c2 pid %d: second malloc %s\n", getpid(), cudaGetErrorString(e)); fflush(stdout);
  e = cudaMemset(p, 0, 1 << 20); cudaError_t s = cudaDeviceSynchronize();
  printf("c2 pid %d: memset %s sync %s\n", getpid(), cudaGetErrorString(e), cudaGetErrorString(s)); fflush(stdout);
  return 0;
}
