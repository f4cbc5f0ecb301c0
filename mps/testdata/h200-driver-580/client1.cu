// MPS probe client: allocates MiB given in argv[1], reports SM count seen, sleeps argv[2] s.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>
int main(int argc, char** argv) {
  size_t mib = argc > 1 ? atoll(argv[1]) : 16;
  int secs = argc > 2 ? atoi(argv[2]) : 5;
  int sms = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("client pid %d attr err=%s sms=%d\n", getpid(), cudaGetErrorString(e), sms); fflush(stdout);
  void* p = nullptr;
  e = cudaMalloc(&p, mib << 20);
  printf("client pid %d malloc %zu MiB: %s\n", getpid(), mib, cudaGetErrorString(e)); fflush(stdout);
  sleep(secs);
  printf("client pid %d done\n", getpid()); fflush(stdout);
  return 0;
}
