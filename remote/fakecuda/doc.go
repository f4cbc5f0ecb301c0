// Package fakecuda is a CPU implementation of the gpumux-remoted backend
// (server.Backend) for tests and demos only: it never touches a GPU and
// must not stand in for one in production.
//
// # Devices
//
// New makes one or more fake devices (WithDevices, WithMemory, WithName):
// compute capability 9.0, 132 multiprocessors, the limits of an H100/H200
// class GPU for the other attributes (see attrs.go), and a UUID derived from
// the device index, so it is stable across runs. Devices of one fake share
// their name, as GPUs of one model do; their UUIDs tell them apart. Every
// two distinct devices are peers (peers.go): cuDeviceCanAccessPeer answers
// 1, and a context's kernels reach another device's memory once the
// context has enabled access to the memory's context
// (cuCtxEnablePeerAccess, which refuses a context of its own device).
//
// # Memory
//
// Device memory is Go memory at fake addresses: allocations start at
// 0x7f0000000000, are 256-byte aligned and are separated by 64 KiB gaps, and
// no address is ever handed out twice, so an off-by-one overrun or a use
// after free touches nothing. Backing pages (64 KiB) are made on first
// write, so a large fake device costs only what is written. Copies and
// memsets accept any live allocation (one address space per process, as
// with CUDA's unified addressing); isolating clients is the server's job.
// Each device has its own memory, and the fake is stricter than CUDA about
// copies between devices: MemcpyDtoD of memory of two devices is
// CUDA_ERROR_INVALID_VALUE, so the server must ask for a peer copy
// (MemcpyPeer, which needs no peer access and checks that each address is
// memory of its context's device). Kernels see only the allocations and
// globals of the context they run in and of the contexts it enabled peer
// access to: an access to anything else fails the launch with
// CUDA_ERROR_ILLEGAL_ADDRESS, as a kernel dereferencing another context's
// address faults on a GPU. Unlike a GPU, the fault is not sticky: the
// context keeps working.
//
// # Virtual memory and pools
//
// MemAddressReserve hands out ranges no allocation will get; MemCreate
// makes physical memory (counted as used on its device until it is both
// released and unmapped); MemMap maps a whole physical allocation into a
// reservation, and every mapping of one allocation shares its bytes. Sizes
// and mapped addresses are multiples of Granularity (2 MiB). Copies and
// memsets may run across adjacent mappings, and need the access
// MemSetAccess granted the current context's device (read for reading,
// read-write for writing). A mapping belongs to the context current when it
// was made: that context's kernels see it, like its allocations, and those
// of contexts that enabled peer access to it, and only where the mapping
// grants their device access (stricter than CUDA, where access alone
// decides). A mapping is memory of its physical allocation's device: a
// copy between it and another device's memory is a peer copy.
//
// Pools reserve device memory in PoolChunk steps up to their maximum size,
// keep freed memory up to their release threshold (released at each free,
// where CUDA releases at synchronization), and trim on MemPoolTrimTo. A
// destroyed pool's allocations stay valid until freed. CtxSetLimit records
// a context's limits (the stack size rounded up to 16 bytes), which
// CtxGetLimit answers.
//
// # Modules
//
// ModuleLoadData accepts a text image, optionally followed by NUL bytes
// (the interposer sends text images with their terminator):
//
//	gpumux-fake-module 1
//	# a comment
//	kernel fill_u32 8,4,8
//	kernel vecadd_f32 8,8,8,4
//	kernel fault
//	kernel noop
//	global counter 4
//
// The first line names the format and its version. "kernel NAME SIZES"
// declares a kernel and the byte sizes of its parameters, comma-separated
// (none: no parameters); each parameter sits at the next offset aligned to
// the largest of 8, 4, 2 or 1 that divides its size, which is what
// FuncParamInfo reports and what a launch's packed parameter buffer must
// match. "global NAME SIZE" declares a zero-initialised module global of
// SIZE bytes (ModuleGetGlobal). Anything else is CUDA_ERROR_INVALID_IMAGE.
// ModuleImage builds such an image.
//
// # Kernels
//
// Launches are recorded (Launches) and run synchronously. Three names run
// code on the fake memory; declaring one of them with other parameter sizes
// is CUDA_ERROR_INVALID_IMAGE:
//
//	fill_u32(uint32_t *dst, uint32_t value, uint64_t n)        sizes 8,4,8   (offsets 0,8,16; 24 bytes)
//	    dst[i] = value for every i < n
//	vecadd_f32(const float *a, const float *b, float *c, uint32_t n)
//	                                                           sizes 8,8,8,4 (offsets 0,8,16,24; 28 bytes)
//	    c[i] = a[i] + b[i] for every i < n
//	fault(...)                                                 any sizes
//	    fails with CUDA_ERROR_ILLEGAL_ADDRESS
//
// The kernels ignore the launch geometry (as a grid-stride loop would).
// Every other kernel only records its launch.
//
// # Contexts, streams and events
//
// The current context is tracked per OS thread (gettid), as CUDA does;
// gpumux-remoted's sessions lock their worker goroutines to threads. Calls
// that need a context fail with CUDA_ERROR_INVALID_CONTEXT without one, and
// the fake is strict where CUDA is lenient in ways the server should not
// rely on: objects are freed or destroyed only with their own context
// current. Destroying a context frees what is left in it, as CUDA does, and
// counts it in Stats.ImplicitFrees, so tests can prove the server freed
// everything itself. Streams and events are synchronous; EventElapsedTime
// measures the real clock between two EventRecord calls.
//
// # Stream capture and graphs
//
// Capture has CUDA's semantics (graph.go): work issued to a capturing
// stream (launches, memsets, device copies, event records, graph launches)
// is recorded into the capture's graph instead of run; cuStreamEndCapture
// returns the graph; an instantiated graph replays the recorded work in
// dependency order on the memory as it is at launch, so new input written
// to the captured buffers gives new output. A host-to-device copy is
// recorded with the bytes it had then, as a driver records a copy from
// pinned memory it reads at replay (the server refuses them); a
// device-to-host copy, synchronizing the stream or its context, and
// waiting for an event not of the capture are refused and invalidate the
// capture, as are MemAlloc and MemFree when the thread's interaction mode
// and the captures under way prohibit unsafe calls. Streams join a capture
// by waiting for an event recorded in it; only the stream that began a
// capture ends it, on the thread that began it unless it is relaxed.
// Edge data other than the default is CUDA_ERROR_NOT_SUPPORTED.
//
// A Backend is safe for concurrent use by many sessions.
package fakecuda
