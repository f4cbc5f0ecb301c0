// Package server is gpumux-remoted's core: it serves the remote protocol
// (package proto) to clients (the C interposer, proto.Client) and runs
// their CUDA driver calls on a Backend (the GPU through libcuda, or
// fakecuda in tests).
//
// # Connections
//
// Serve accepts connections on a TCP or unix listener. The first frame of
// a connection must be the handshake (proto.Hello) within the handshake
// timeout: the server checks the protocol version and the client's token
// (package token) before anything else and answers proto.Welcome, closing
// the connection on refusal (CUDA_ERROR_NOT_PERMITTED and a message).
// Handshakes under way are bounded apart from the clients served, in all
// and per peer, and a connection past a bound closes the oldest handshake
// waiting, so connections that stall in theirs cannot keep clients out
// (limits.go). Before login the server reads nothing past the Hello, and
// refuses a frame announcing more than proto.MaxHello when its header
// arrives. Each admitted connection is one session: a reader goroutine
// reads frames, bounded in size and count, and a worker goroutine locked
// to its OS thread runs the calls in order through proto.Dispatch, so the
// backend sees one thread per client and the thread's current context is
// the session's. A malformed frame, a broken data stream or a transport
// error closes that connection only.
//
// # Isolation
//
// A client names server objects (contexts, modules, functions, streams,
// events) by handles the session allocates: they start at 0x1000, are never
// reused within a session and are checked against the kind the call
// expects, so another client's handle or a stale one is
// CUDA_ERROR_INVALID_HANDLE (CUDA_ERROR_INVALID_CONTEXT for contexts).
// Stream handles 0, 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD) are
// the current context's default streams.
//
// Every device pointer a call takes (copies, memsets, cuMemFree,
// cuMemGetAddressRange) must lie entirely within one allocation of the
// client: its cuMemAlloc results and the module globals it looked up; any
// other range is CUDA_ERROR_INVALID_VALUE, so a client can neither read nor
// write another client's memory through the API (cuMemFree(0) does nothing,
// as in CUDA). The server cannot inspect
// kernel arguments, which are opaque bytes; kernels run in the client's own
// CUDA context, though, never one shared with another client (even
// cuDevicePrimaryCtxRetain makes the client a context of its own), so a
// kernel that dereferences another client's address faults in its own
// context.
//
// With a token secret (WithSecret), a client sees the GPUs its token
// names, as ordinals 0, 1, … in the token's order (token.Claims.Devices;
// one GPU for most tokens). Without one (WithInsecureNoAuth, for tests
// only) a client sees every device. Copies between memory of two devices
// run as peer copies, and peer copies must name the contexts of the
// devices their memory is on (peers.go).
//
// # Quota
//
// The connections presenting tokens with the same ID share a pool across
// the server, as large as the largest quota of those tokens (what
// admission counts for the ID), and the connections presenting one token
// are also held, together, to that token's own quota (quota.go says how
// tokens of one ID combine). cuMemAlloc past either is
// CUDA_ERROR_OUT_OF_MEMORY; a connection's quota is the smaller of the two:
// cuMemGetInfo reports free as the smallest of the device's free memory
// and what is left of each, and total as the quota, and cuDeviceTotalMem
// reports the smaller of the quota and the device's memory (each of them,
// for a client of several devices: one quota covers them all). Quotas count
// requested bytes, not the backend's rounding, and not module globals.
//
// # Expiry
//
// A token's expiry holds for the connections that presented it: when it
// passes, the session frees everything its client held and answers every
// call from then on with CUDA_ERROR_NOT_PERMITTED, without running it (an
// asynchronous call's failure comes with the next synchronous call), logs
// that once, and closes the connection a minute later (expiry.go).
//
// # Asynchronous calls and kernels
//
// An async call (launches, memsets, async copies) gets no reply: its first
// failure is kept in the session and returned by the next call that waits
// (proto.Call.Deferred). Before a launch the server asks the backend for
// the kernel's parameter layout (once per function) and refuses a packed
// parameter buffer of another length with CUDA_ERROR_INVALID_VALUE.
// cuLaunchKernelEx and the cluster occupancy calls carry a CUlaunchConfig's
// attributes (proto.LaunchAttr); only an allow-list of attributes whose
// values are plain numbers reaches the backend, rebuilt from their defined
// bytes, and event attributes are mapped through the client's own events
// (another client's is CUDA_ERROR_INVALID_HANDLE); any other attribute is
// CUDA_ERROR_NOT_SUPPORTED.
//
// # Statistics
//
// Stats reports the server's counters (calls by op and result and their
// latency, bytes copied, refused handshakes and admissions, tenant worker
// starts and deaths) and gauges (sessions and memory by tenant,
// handshakes under way, workers running). Tenant workers send theirs to
// the front, whose Stats covers them (stats.go). Package metrics serves
// them to Prometheus.
//
// # Cleanup
//
// When a client goes away (EOF, an error, or Serve's context ending), its
// session synchronizes each of its contexts, frees its memory, unloads its
// modules, destroys its streams, events and contexts, gives its memory back
// to the quota and logs a one-line summary.
package server
