package server

import "github.com/gpumux/gpumux/remote/proto"

// Backend runs CUDA driver calls on real objects: the GPU through libcuda
// (package remote/cudabackend) or the CPU for tests (remote/fakecuda).
//
// The server calls a backend only after validating the client's handles
// and pointers, and only from the client session's own OS-thread-locked
// worker, so a backend may rely on the thread's current context: the
// session calls CtxSetCurrent before any call that needs one. Objects are
// the backend's own raw values (uintptr); the session maps them to
// per-client proto.Handles. Every method returns CUDA's result code.
type Backend interface {
	Init() proto.Result
	DriverVersion() (int32, proto.Result)
	DeviceCount() (int32, proto.Result)
	DeviceName(dev int32) (string, proto.Result)
	DeviceTotalMem(dev int32) (uint64, proto.Result)
	DeviceAttribute(attr, dev int32) (int32, proto.Result)
	DeviceUUID(dev int32) ([16]byte, proto.Result)

	// CtxCreate makes a new context on dev; the server gives each client
	// its own, also for the client's "primary" context.
	CtxCreate(dev int32, flags uint32) (uintptr, proto.Result)
	CtxDestroy(ctx uintptr) proto.Result
	CtxSetCurrent(ctx uintptr) proto.Result
	CtxSynchronize() proto.Result

	MemAlloc(n uint64) (proto.DevPtr, proto.Result)
	MemFree(p proto.DevPtr) proto.Result
	MemGetInfo() (free, total uint64, r proto.Result)
	// MemcpyHtoD copies one chunk; src may be reused when it returns.
	// stream is 0 for a synchronous copy.
	MemcpyHtoD(dst proto.DevPtr, src []byte, stream uintptr, async bool) proto.Result
	// MemcpyDtoH copies one chunk into dst.
	MemcpyDtoH(dst []byte, src proto.DevPtr, stream uintptr) proto.Result
	MemcpyDtoD(dst, src proto.DevPtr, n uint64, stream uintptr, async bool) proto.Result
	MemsetD8(dst proto.DevPtr, v uint8, n uint64, stream uintptr, async bool) proto.Result
	MemsetD32(dst proto.DevPtr, v uint32, n uint64, stream uintptr, async bool) proto.Result

	ModuleLoadData(image []byte) (uintptr, proto.Result)
	ModuleUnload(mod uintptr) proto.Result
	ModuleGetFunction(mod uintptr, name string) (uintptr, proto.Result)
	ModuleGetGlobal(mod uintptr, name string) (proto.DevPtr, uint64, proto.Result)
	// FuncParamInfo returns the offset and size of a kernel parameter;
	// ErrInvalidValue past the last one.
	FuncParamInfo(fn uintptr, index uint64) (offset, size uint64, r proto.Result)
	FuncGetAttribute(attr int32, fn uintptr) (int32, proto.Result)
	// LaunchKernel launches fn with its parameters packed at the offsets
	// FuncParamInfo gives (CU_LAUNCH_PARAM_BUFFER_POINTER's layout).
	LaunchKernel(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, params []byte) proto.Result

	StreamCreate(flags uint32) (uintptr, proto.Result)
	StreamDestroy(s uintptr) proto.Result
	StreamSynchronize(s uintptr) proto.Result
	StreamQuery(s uintptr) proto.Result
	StreamWaitEvent(s, ev uintptr, flags uint32) proto.Result
	EventCreate(flags uint32) (uintptr, proto.Result)
	EventDestroy(ev uintptr) proto.Result
	EventRecord(ev, s uintptr) proto.Result
	EventSynchronize(ev uintptr) proto.Result
	EventQuery(ev uintptr) proto.Result
	EventElapsedTime(start, end uintptr) (float32, proto.Result)

	// Calls PyTorch's CUDA initialisation and kernels need; a driver that
	// lacks one gives proto.ErrNotSupported.
	//
	// CtxStreamPriorityRange is cuCtxGetStreamPriorityRange in the current
	// context.
	CtxStreamPriorityRange() (least, greatest int32, r proto.Result)
	StreamCreateWithPriority(flags uint32, priority int32) (uintptr, proto.Result)
	// StreamPriority, StreamFlags and StreamIsCapturing take a stream of
	// the current context or a default stream (0, 1, 2).
	StreamPriority(s uintptr) (int32, proto.Result)
	StreamFlags(s uintptr) (uint32, proto.Result)
	StreamIsCapturing(s uintptr) (int32, proto.Result)
	EventRecordWithFlags(ev, s uintptr, flags uint32) proto.Result
	FuncSetAttribute(fn uintptr, attr, value int32) proto.Result
	OccupancyMaxActiveBlocks(fn uintptr, blockSize int32, dynamicSMem uint64, flags uint32) (int32, proto.Result)
	OccupancyAvailableDynamicSMem(fn uintptr, numBlocks, blockSize int32) (uint64, proto.Result)

	// Launches with a CUlaunchConfig. The server has checked the attributes
	// (plain numbers from an allow-list; events already the backend's own).
	//
	// LaunchKernelEx is LaunchKernel with launch attributes.
	LaunchKernelEx(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr, params []byte) proto.Result
	// OccupancyMaxActiveClusters and OccupancyMaxPotentialClusterSize are
	// the driver's answers for fn in the current context.
	OccupancyMaxActiveClusters(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr) (int32, proto.Result)
	OccupancyMaxPotentialClusterSize(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr) (int32, proto.Result)

	// CtxGetLimit is cuCtxGetLimit in the current context.
	CtxGetLimit(limit uint32) (uint64, proto.Result)

	// CtxSetLimit is cuCtxSetLimit in the current context; the server has
	// charged what the new value costs to the client's quota.
	CtxSetLimit(limit uint32, value uint64) proto.Result

	// Virtual memory management (virtual.go). Locations name the backend's
	// device ordinals; the server has checked every field and handle, and
	// that every range is the client's own.
	//
	// MemGetAllocationGranularity is cuMemGetAllocationGranularity.
	MemGetAllocationGranularity(prop proto.MemProp, option uint32) (uint64, proto.Result)
	// MemAddressReserve and MemAddressFree reserve and free a range of
	// virtual addresses.
	MemAddressReserve(size, alignment uint64, addr proto.DevPtr, flags uint64) (proto.DevPtr, proto.Result)
	MemAddressFree(p proto.DevPtr, size uint64) proto.Result
	// MemCreate makes a physical allocation and returns the backend's
	// handle of it; MemRelease drops that handle (the memory goes when it
	// is also unmapped everywhere).
	MemCreate(size uint64, prop proto.MemProp, flags uint64) (uint64, proto.Result)
	MemRelease(h uint64) proto.Result
	// MemMap maps a physical allocation at p, in a reserved range;
	// MemUnmap unmaps whole mappings.
	MemMap(p proto.DevPtr, size, offset, h, flags uint64) proto.Result
	MemUnmap(p proto.DevPtr, size uint64) proto.Result
	// MemSetAccess and MemGetAccess set and read the access of devices to
	// mapped memory.
	MemSetAccess(p proto.DevPtr, size uint64, descs []proto.MemAccessDesc) proto.Result
	MemGetAccess(locType uint32, locID int32, p proto.DevPtr) (uint64, proto.Result)

	// Stream-ordered allocation (pools.go). The server never uses a
	// device's default pool, which every tenant of a process shares: it
	// makes each client its own pools.
	//
	// MemPoolCreate makes a pool; MemPoolDestroy destroys one (its live
	// allocations stay valid until freed).
	MemPoolCreate(props proto.MemPoolProps) (uintptr, proto.Result)
	MemPoolDestroy(pool uintptr) proto.Result
	// MemAllocFromPoolAsync allocates from pool in stream order on a
	// stream of the current context; MemFreeAsync frees in stream order.
	// MemFree frees such an allocation at once.
	MemAllocFromPoolAsync(n uint64, pool, stream uintptr) (proto.DevPtr, proto.Result)
	MemFreeAsync(p proto.DevPtr, stream uintptr) proto.Result
	// MemPoolSetAttribute and MemPoolGetAttribute take the attributes of
	// proto.MemPoolReuseFollowEventDependencies to MemPoolUsedMemHigh,
	// every value widened to 64 bits.
	MemPoolSetAttribute(pool uintptr, attr uint32, value uint64) proto.Result
	MemPoolGetAttribute(pool uintptr, attr uint32) (uint64, proto.Result)
	MemPoolTrimTo(pool uintptr, keep uint64) proto.Result
	MemPoolSetAccess(pool uintptr, descs []proto.MemAccessDesc) proto.Result
	MemPoolGetAccess(pool uintptr, locType uint32, locID int32) (uint32, proto.Result)
	// Several devices (peers.go). Devices are the backend's ordinals,
	// contexts its own; a driver without a call gives
	// proto.ErrNotSupported.
	//
	// DeviceCanAccessPeer is cuDeviceCanAccessPeer: 1 if contexts on dev
	// can access memory of peer directly.
	DeviceCanAccessPeer(dev, peer int32) (int32, proto.Result)
	// DeviceP2PAttribute is cuDeviceGetP2PAttribute of the link from src
	// to dst.
	DeviceP2PAttribute(attr uint32, src, dst int32) (int32, proto.Result)
	// CtxEnablePeerAccess and CtxDisablePeerAccess let the current context
	// access peer's memory directly, or no longer.
	CtxEnablePeerAccess(peer uintptr, flags uint32) proto.Result
	CtxDisablePeerAccess(peer uintptr) proto.Result
	// MemcpyPeer copies n bytes from src, memory of srcCtx's device, to
	// dst, memory of dstCtx's device: queued on a stream of the current
	// context when async (cuMemcpyPeerAsync), else at once (cuMemcpyPeer).
	// It works without peer access.
	MemcpyPeer(dst proto.DevPtr, dstCtx uintptr, src proto.DevPtr, srcCtx uintptr, n uint64, stream uintptr, async bool) proto.Result

	GraphBackend
}

// GraphBackend is stream capture and CUDA graphs (calls_graph.go): the
// driver's calls with the backend's raw graphs, graph execs and nodes. The
// server has checked every handle, pointer range and kernel parameter
// buffer; capture modes and capture statuses are CUstreamCaptureMode and
// CUstreamCaptureStatus numbers (proto.CaptureMode*, proto.Capture*),
// edge data EdgeDataSize-byte CUgraphEdgeData records (nil: default
// edges). A driver without these calls gives proto.ErrNotSupported.
type GraphBackend interface {
	// StreamBeginCapture begins capturing stream s (of the current
	// context) in mode; the server never asks for a global capture (it
	// would hold other sessions' threads to the capture's rules).
	StreamBeginCapture(s uintptr, mode int32) proto.Result
	// StreamEndCapture ends the capture s began and returns its graph.
	StreamEndCapture(s uintptr) (uintptr, proto.Result)
	// StreamCaptureInfo is cuStreamGetCaptureInfo_v3: s's capture status
	// and, while the capture is active, its ID, graph and the nodes the
	// next work on s will depend on, with their edge data.
	StreamCaptureInfo(s uintptr) (status int32, id uint64, graph uintptr, deps []uintptr, edges []byte, r proto.Result)
	// StreamUpdateCaptureDependencies adds to or sets (flags) the nodes
	// the next work on capturing stream s depends on.
	StreamUpdateCaptureDependencies(s uintptr, deps []uintptr, edges []byte, flags uint32) proto.Result
	// ThreadExchangeStreamCaptureMode sets the calling thread's capture
	// interaction mode and returns the one it had.
	ThreadExchangeStreamCaptureMode(mode int32) (int32, proto.Result)

	GraphCreate(flags uint32) (uintptr, proto.Result)
	GraphDestroy(g uintptr) proto.Result
	GraphClone(g uintptr) (uintptr, proto.Result)
	// GraphNodes returns g's nodes (roots: only those without
	// dependencies) in the driver's order.
	GraphNodes(g uintptr, roots bool) ([]uintptr, proto.Result)
	// GraphAddKernelNode adds a launch of fn with its parameters packed as
	// LaunchKernel takes them.
	GraphAddKernelNode(g uintptr, deps []uintptr, fn uintptr, grid, block [3]uint32, sharedMem uint32, params []byte) (uintptr, proto.Result)
	// GraphAddMemsetNode adds a memset of height rows of width elements of
	// elementSize (1, 2 or 4) bytes, pitch bytes apart.
	GraphAddMemsetNode(g uintptr, deps []uintptr, dst proto.DevPtr, pitch uint64, value, elementSize uint32, width, height uint64) (uintptr, proto.Result)
	// GraphAddMemcpyNode adds a device-to-device copy.
	GraphAddMemcpyNode(g uintptr, deps []uintptr, c proto.Copy3D) (uintptr, proto.Result)
	GraphAddEmptyNode(g uintptr, deps []uintptr) (uintptr, proto.Result)
	// GraphAddEventNode adds an event record node, or a wait node if wait.
	GraphAddEventNode(g uintptr, deps []uintptr, ev uintptr, wait bool) (uintptr, proto.Result)
	// GraphAddDependencies adds the edges from[i] → to[i].
	GraphAddDependencies(g uintptr, from, to []uintptr, edges []byte) proto.Result
	// GraphInstantiate makes an executable graph of g in the current
	// context.
	GraphInstantiate(g uintptr, flags uint64) (uintptr, proto.Result)
	GraphExecDestroy(e uintptr) proto.Result
	GraphLaunch(e, s uintptr) proto.Result
	GraphUpload(e, s uintptr) proto.Result
	// GraphExecKernelNodeSetParams changes kernel node n's launch in e.
	GraphExecKernelNodeSetParams(e, n uintptr, fn uintptr, grid, block [3]uint32, sharedMem uint32, params []byte) proto.Result
}
