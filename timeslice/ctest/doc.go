// Package ctest builds gpumux's limiter (timeslice/limiter: the
// libcuda.so.1 and libnvidia-ml.so.1 installed in time-slice replicas'
// containers), fake CUDA and NVML libraries for it to load, and its C test
// programs (timeslice/limiter/tests), and runs them: no GPU needed. The
// tests need a C compiler (cc, or $CC; GM_CTEST_CC for the C code alone)
// and make; without them they fail, they do not skip.
// GM_CTEST_SANITIZE=1 builds everything with ASan and UBSan.
//
// The package also holds the generator of the limiter's pass-through
// stubs (stubs.go; `go generate ./timeslice/ctest`).
package ctest

//go:generate go run ./genstubs -root ../..
