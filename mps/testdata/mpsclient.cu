// mpsclient is the CUDA program of mps/realmps_test.go (build tag gpu): it
// prints the SM count it sees and whether allocating argv[1] MiB worked, then
// sleeps argv[2] seconds as an MPS client. Build: nvcc -o mpsclient mpsclient.cu
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cuda_runtime.h>

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? atoll(argv[1]) : 16;
  int secs = argc > 2 ? atoi(argv[2]) : 0;
  int sms = 0;
  cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  printf("client pid %d: %s, sms=%d\n", getpid(), cudaGetErrorString(e), sms);
  fflush(stdout);
  void* p = nullptr;
  e = cudaMalloc(&p, mib << 20);
  printf("client pid %d: malloc %zu MiB: %s\n", getpid(), mib, cudaGetErrorString(e));
  fflush(stdout);
  sleep(secs);
  return 0;
}
