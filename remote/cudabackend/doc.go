// Package cudabackend is gpumux-remoted's server.Backend over the real
// NVIDIA driver: it runs the CUDA driver API calls that remote clients
// forward on the server's GPUs.
//
// # Loading the driver
//
// The package needs no CUDA toolkit to build, only a C compiler: Open loads
// libcuda.so.1 (or another path) with dlopen and resolves each entry point
// with dlsym into a table (cudabackend.c), under the versioned ABI names
// (cuMemAlloc_v2, cuCtxCreate_v2, cuMemcpyHtoDAsync_v2, ...). The CUDA
// types it uses come from the interposer's remote/interposer/gm_abi.h. A library
// that cannot be loaded is an error wrapping ErrNoDriver; a missing symbol
// one wrapping ErrMissingSymbol that names it. A few entry points are
// optional: cuFuncGetParamInfo (CUDA 12.4; FuncParamInfo answers
// ErrNotSupported without it), and cuEventElapsedTime_v2 and
// cuDeviceGetUuid_v2, used where the driver has them, else their
// unversioned names (ErrNotSupported when neither is there). Open then runs
// cuInit(0).
//
// Each method is one cgo call into a thin C wrapper that calls the driver
// and returns its CUresult unchanged as a proto.Result. Handles (contexts,
// modules, functions, streams, events) are the driver's raw pointers as
// uintptr; device arguments are ordinals, turned into CUdevices with
// cuDeviceGet. Kernel parameters go to cuLaunchKernel as one packed buffer
// (CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE,
// CU_LAUNCH_PARAM_END in extra), which the driver copies before it returns.
// The hot path (copies, memsets, launches, streams and events) allocates
// nothing in Go: the wrappers are marked noescape and nocallback, so their
// out-arguments stay on the stack.
//
// # Threading
//
// The server calls each client session from its own goroutine locked to an
// OS thread (runtime.LockOSThread), and sets the session's context with
// CtxSetCurrent before any call that needs one: the driver's current
// context is per thread, and every call here runs in the calling thread's
// current context. A Backend is safe for concurrent use by any number of
// sessions; the only state it shares between them is a map from context to
// its staging buffers, under a read-write mutex.
//
// # Staging buffers
//
// Go memory handed to C must not be kept after the call returns, and an
// asynchronous copy reads its host memory later, so asynchronous copies
// never touch Go memory:
//
//   - MemcpyHtoD with async copies the data into pinned host memory
//     (cuMemAllocHost), queues cuMemcpyHtoDAsync_v2 from there and records
//     an event after it. Each context has a ring of StagingSlots buffers of
//     StagingSize (1 MiB, one data frame), allocated on first use; before a
//     buffer is reused its event is synchronized, so up to
//     StagingSlots*StagingSize bytes of host-to-device copies can be in
//     flight on a context, and the caller may reuse src as soon as the call
//     returns. Larger sources go through the ring in StagingSize pieces.
//   - MemcpyDtoH on a stream runs cuMemcpyDtoHAsync_v2 into a staging
//     buffer, synchronizes the stream and copies the data out.
//   - Synchronous copies (MemcpyHtoD without async, MemcpyDtoH without a
//     stream) pass Go memory straight to cuMemcpyHtoD_v2/cuMemcpyDtoH_v2,
//     which are done with it when they return.
//
// Staging is found through cuCtxGetCurrent. CtxDestroy waits for the
// context's staged copies, frees its buffers and events (with the context
// pushed current) and then destroys the context.
//
// # Tests
//
// The tests build a fake libcuda.so.1 (testdata/fakecuda.c, embedded in
// the test binary) with the C compiler and run the backend over it: the
// dlsym table, argument passing, staging, the missing-symbol error and the
// hot path's zero allocations. They skip only where no C compiler exists.
// realgpu_test.go, behind the build tag gpu, runs the backend on a real
// GPU:
//
//	go test -c -tags gpu -o .devbin/cudabackend.test ./remote/cudabackend/
//	.devbin/cudabackend.test -test.v -test.run GPU
package cudabackend
