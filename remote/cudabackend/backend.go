package cudabackend

/*
#cgo CFLAGS: -O2 -std=gnu11 -Wall
#cgo LDFLAGS: -ldl

// None of these calls back into Go, and none keeps a pointer it is given:
// Go arguments may then stay on the stack (no allocation per call).
#cgo nocallback gm_open
#cgo noescape gm_open
#cgo nocallback gm_staging_new
#cgo nocallback gm_htod_staged
#cgo noescape gm_htod_staged
#cgo nocallback gm_dtoh_staged
#cgo noescape gm_dtoh_staged
#cgo nocallback gm_init
#cgo nocallback gm_driver_version
#cgo noescape gm_driver_version
#cgo nocallback gm_device_count
#cgo noescape gm_device_count
#cgo nocallback gm_device_name
#cgo noescape gm_device_name
#cgo nocallback gm_device_total_mem
#cgo noescape gm_device_total_mem
#cgo nocallback gm_device_attribute
#cgo noescape gm_device_attribute
#cgo nocallback gm_device_uuid
#cgo noescape gm_device_uuid
#cgo nocallback gm_ctx_create
#cgo noescape gm_ctx_create
#cgo nocallback gm_ctx_destroy
#cgo nocallback gm_ctx_set_current
#cgo nocallback gm_ctx_get_current
#cgo noescape gm_ctx_get_current
#cgo nocallback gm_ctx_synchronize
#cgo nocallback gm_mem_alloc
#cgo noescape gm_mem_alloc
#cgo nocallback gm_mem_free
#cgo nocallback gm_mem_get_info
#cgo noescape gm_mem_get_info
#cgo nocallback gm_memcpy_htod
#cgo noescape gm_memcpy_htod
#cgo nocallback gm_memcpy_dtoh
#cgo noescape gm_memcpy_dtoh
#cgo nocallback gm_memcpy_dtod
#cgo nocallback gm_memset_d8
#cgo nocallback gm_memset_d32
#cgo nocallback gm_module_load
#cgo noescape gm_module_load
#cgo nocallback gm_module_unload
#cgo nocallback gm_module_get_function
#cgo noescape gm_module_get_function
#cgo nocallback gm_module_get_global
#cgo noescape gm_module_get_global
#cgo nocallback gm_func_param_info
#cgo noescape gm_func_param_info
#cgo nocallback gm_func_attribute
#cgo noescape gm_func_attribute
#cgo nocallback gm_launch
#cgo noescape gm_launch
#cgo nocallback gm_stream_create
#cgo noescape gm_stream_create
#cgo nocallback gm_stream_destroy
#cgo nocallback gm_stream_synchronize
#cgo nocallback gm_stream_query
#cgo nocallback gm_stream_wait_event
#cgo nocallback gm_event_create
#cgo noescape gm_event_create
#cgo nocallback gm_event_destroy
#cgo nocallback gm_event_record
#cgo nocallback gm_event_synchronize
#cgo nocallback gm_event_query
#cgo nocallback gm_event_elapsed
#cgo noescape gm_event_elapsed
#cgo nocallback gm_stream_priority_range
#cgo noescape gm_stream_priority_range
#cgo nocallback gm_stream_create_prio
#cgo noescape gm_stream_create_prio
#cgo nocallback gm_stream_priority
#cgo noescape gm_stream_priority
#cgo nocallback gm_stream_flags
#cgo noescape gm_stream_flags
#cgo nocallback gm_stream_is_capturing
#cgo noescape gm_stream_is_capturing
#cgo nocallback gm_event_record_flags
#cgo nocallback gm_func_set_attribute
#cgo nocallback gm_occupancy
#cgo noescape gm_occupancy
#cgo nocallback gm_occupancy_smem
#cgo noescape gm_occupancy_smem
#cgo nocallback gm_ctx_get_limit
#cgo noescape gm_ctx_get_limit
#cgo nocallback gm_launch_ex
#cgo noescape gm_launch_ex
#cgo nocallback gm_cluster_occupancy
#cgo noescape gm_cluster_occupancy
#cgo nocallback gm_ctx_set_limit
#cgo nocallback gm_mem_granularity
#cgo noescape gm_mem_granularity
#cgo nocallback gm_mem_address_reserve
#cgo noescape gm_mem_address_reserve
#cgo nocallback gm_mem_address_free
#cgo nocallback gm_mem_create
#cgo noescape gm_mem_create
#cgo nocallback gm_mem_release
#cgo nocallback gm_mem_map
#cgo nocallback gm_mem_unmap
#cgo nocallback gm_mem_set_access
#cgo noescape gm_mem_set_access
#cgo nocallback gm_mem_get_access
#cgo noescape gm_mem_get_access
#cgo nocallback gm_mem_pool_create
#cgo noescape gm_mem_pool_create
#cgo nocallback gm_mem_pool_destroy
#cgo nocallback gm_mem_alloc_from_pool
#cgo noescape gm_mem_alloc_from_pool
#cgo nocallback gm_mem_free_async
#cgo nocallback gm_mem_pool_set_attribute
#cgo nocallback gm_mem_pool_get_attribute
#cgo noescape gm_mem_pool_get_attribute
#cgo nocallback gm_mem_pool_trim
#cgo nocallback gm_mem_pool_set_access
#cgo noescape gm_mem_pool_set_access
#cgo nocallback gm_mem_pool_get_access
#cgo noescape gm_mem_pool_get_access
#cgo nocallback gm_device_can_access_peer
#cgo noescape gm_device_can_access_peer
#cgo nocallback gm_device_p2p_attribute
#cgo noescape gm_device_p2p_attribute
#cgo nocallback gm_ctx_enable_peer
#cgo nocallback gm_ctx_disable_peer
#cgo nocallback gm_memcpy_peer

#include <stdlib.h>
#include "cudabackend.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// DefaultLibrary is the driver library Open loads when given "".
const DefaultLibrary = "libcuda.so.1"

// StagingSize is the size of one pinned staging buffer: one data frame.
const StagingSize = proto.ChunkSize

// StagingSlots is the number of staging buffers a context may hold:
// asynchronous host-to-device copies of up to StagingSlots*StagingSize bytes
// can be in flight before the next one waits.
const StagingSlots = C.GM_STAGING_SLOTS

var (
	// ErrNoDriver means the driver library could not be loaded.
	ErrNoDriver = errors.New("cudabackend: no CUDA driver")
	// ErrMissingSymbol means the driver library lacks a required entry
	// point (the error names it).
	ErrMissingSymbol = errors.New("cudabackend: CUDA driver lacks a required symbol")
)

// InitError is a cuInit that failed in Open.
type InitError struct {
	Library string
	Result  proto.Result
}

func (e *InitError) Error() string {
	return fmt.Sprintf("cudabackend: %s: cuInit: %v", e.Library, e.Result)
}

// Backend runs server.Backend calls on the GPU through libcuda. It is safe
// for concurrent use by several sessions, each on its own locked OS thread.
type Backend struct {
	lib string
	t   *C.gm_cuda

	mu   sync.RWMutex
	ctxs map[uintptr]*ctxState // by CUcontext: staging of contexts that copied
}

// ctxState is what the backend keeps for one context.
type ctxState struct {
	mu sync.Mutex
	st *C.gm_staging // nil once the context is destroyed
}

var _ server.Backend = (*Backend)(nil)

// Open loads the driver library at libPath (DefaultLibrary when ""),
// resolves the entry points the backend calls and runs cuInit(0). A
// library that cannot be loaded gives an error wrapping ErrNoDriver with
// dlerror's text; a missing required symbol one wrapping ErrMissingSymbol
// that names it; a failing cuInit an *InitError. The library stays loaded
// for the life of the process: a CUDA driver cannot be unloaded safely.
func Open(libPath string) (*Backend, error) {
	if libPath == "" {
		libPath = DefaultLibrary
	}
	cpath := C.CString(libPath)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	var t *C.gm_cuda
	switch C.gm_open(cpath, &t, &msg[0], C.size_t(len(msg))) {
	case C.GM_OPEN_OK:
	case C.GM_OPEN_NO_LIBRARY:
		return nil, fmt.Errorf("%w: dlopen %s: %s", ErrNoDriver, libPath, C.GoString(&msg[0]))
	case C.GM_OPEN_NO_SYMBOL:
		return nil, fmt.Errorf("%w: %s has no %s", ErrMissingSymbol, libPath, C.GoString(&msg[0]))
	default:
		return nil, fmt.Errorf("cudabackend: %s: %s", libPath, C.GoString(&msg[0]))
	}
	b := &Backend{lib: libPath, t: t, ctxs: make(map[uintptr]*ctxState)}
	if r := b.Init(); r != proto.Success {
		return nil, &InitError{Library: libPath, Result: r}
	}
	return b, nil
}

// Library is the path Open loaded.
func (b *Backend) Library() string { return b.lib }

func res(r C.CUresult) proto.Result { return proto.Result(r) }

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// bytesPtr is p's first byte, or nil when p is empty. p holds no Go
// pointers, so C may read or write it for the length of one call.
func bytesPtr(p []byte) unsafe.Pointer {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Pointer(&p[0])
}

func strPtr(s string) *C.char {
	if len(s) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

// Init implements server.Backend.
func (b *Backend) Init() proto.Result { return res(C.gm_init(b.t, 0)) }

// DriverVersion implements server.Backend.
func (b *Backend) DriverVersion() (int32, proto.Result) {
	var v C.int
	r := C.gm_driver_version(b.t, &v)
	return int32(v), res(r)
}

// DeviceCount implements server.Backend.
func (b *Backend) DeviceCount() (int32, proto.Result) {
	var n C.int
	r := C.gm_device_count(b.t, &n)
	return int32(n), res(r)
}

// DeviceName implements server.Backend. dev is an ordinal, here as in every
// method that takes one.
func (b *Backend) DeviceName(dev int32) (string, proto.Result) {
	var name [256]C.char
	if r := C.gm_device_name(b.t, C.int(dev), &name[0], C.int(len(name))); r != 0 {
		return "", res(r)
	}
	name[len(name)-1] = 0
	return C.GoString(&name[0]), proto.Success
}

// DeviceTotalMem implements server.Backend.
func (b *Backend) DeviceTotalMem(dev int32) (uint64, proto.Result) {
	var n C.size_t
	r := C.gm_device_total_mem(b.t, C.int(dev), &n)
	return uint64(n), res(r)
}

// DeviceAttribute implements server.Backend.
func (b *Backend) DeviceAttribute(attr, dev int32) (int32, proto.Result) {
	var v C.int
	r := C.gm_device_attribute(b.t, C.int(attr), C.int(dev), &v)
	return int32(v), res(r)
}

// DeviceUUID implements server.Backend, through cuDeviceGetUuid_v2 where
// the driver has it (else cuDeviceGetUuid).
func (b *Backend) DeviceUUID(dev int32) ([16]byte, proto.Result) {
	var u [16]byte
	r := C.gm_device_uuid(b.t, C.int(dev), (*C.char)(unsafe.Pointer(&u[0])))
	return u, res(r)
}

// CtxCreate implements server.Backend. The new context is current on the
// calling thread when it returns, as cuCtxCreate leaves it.
func (b *Backend) CtxCreate(dev int32, flags uint32) (uintptr, proto.Result) {
	var ctx C.uintptr_t
	r := C.gm_ctx_create(b.t, C.int(dev), C.uint(flags), &ctx)
	return uintptr(ctx), res(r)
}

// CtxDestroy implements server.Backend: it waits for the context's staged
// copies, frees its staging buffers, then destroys it.
func (b *Backend) CtxDestroy(ctx uintptr) proto.Result {
	b.mu.Lock()
	s := b.ctxs[ctx]
	delete(b.ctxs, ctx)
	b.mu.Unlock()
	var st *C.gm_staging
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		st, s.st = s.st, nil
	}
	return res(C.gm_ctx_destroy(b.t, C.uintptr_t(ctx), st))
}

// CtxSetCurrent implements server.Backend.
func (b *Backend) CtxSetCurrent(ctx uintptr) proto.Result {
	return res(C.gm_ctx_set_current(b.t, C.uintptr_t(ctx)))
}

// CtxSynchronize implements server.Backend.
func (b *Backend) CtxSynchronize() proto.Result { return res(C.gm_ctx_synchronize(b.t)) }

// current returns the staging state of the calling thread's current
// context, made on first use.
func (b *Backend) current() (*ctxState, proto.Result) {
	var cur C.uintptr_t
	if r := C.gm_ctx_get_current(b.t, &cur); r != 0 {
		return nil, res(r)
	}
	if cur == 0 {
		return nil, proto.ErrInvalidContext
	}
	ctx := uintptr(cur)
	b.mu.RLock()
	s := b.ctxs[ctx]
	b.mu.RUnlock()
	if s != nil {
		return s, proto.Success
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s = b.ctxs[ctx]; s == nil {
		st := C.gm_staging_new(StagingSize)
		if st == nil {
			return nil, proto.ErrOutOfMemory
		}
		s = &ctxState{st: st}
		b.ctxs[ctx] = s
	}
	return s, proto.Success
}

// MemAlloc implements server.Backend.
func (b *Backend) MemAlloc(n uint64) (proto.DevPtr, proto.Result) {
	var p C.CUdeviceptr
	r := C.gm_mem_alloc(b.t, C.size_t(n), &p)
	return proto.DevPtr(p), res(r)
}

// MemFree implements server.Backend.
func (b *Backend) MemFree(p proto.DevPtr) proto.Result {
	return res(C.gm_mem_free(b.t, C.CUdeviceptr(p)))
}

// MemGetInfo implements server.Backend.
func (b *Backend) MemGetInfo() (free, total uint64, r proto.Result) {
	var f, t C.size_t
	cr := C.gm_mem_get_info(b.t, &f, &t)
	return uint64(f), uint64(t), res(cr)
}

// MemcpyHtoD implements server.Backend. A synchronous copy reads src in
// place; an asynchronous one copies it into the context's pinned staging
// buffers first, so src may be reused when it returns.
func (b *Backend) MemcpyHtoD(dst proto.DevPtr, src []byte, stream uintptr, async bool) proto.Result {
	if !async {
		return res(C.gm_memcpy_htod(b.t, C.CUdeviceptr(dst), bytesPtr(src), C.size_t(len(src))))
	}
	if len(src) == 0 {
		return proto.Success
	}
	s, r := b.current()
	if r != proto.Success {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return proto.ErrInvalidContext
	}
	return res(C.gm_htod_staged(b.t, s.st, C.CUdeviceptr(dst), bytesPtr(src), C.size_t(len(src)), C.uintptr_t(stream)))
}

// MemcpyDtoH implements server.Backend. Without a stream it copies into
// dst in place; on a stream it copies into pinned staging, synchronizes
// the stream and copies out.
func (b *Backend) MemcpyDtoH(dst []byte, src proto.DevPtr, stream uintptr) proto.Result {
	if stream == 0 {
		return res(C.gm_memcpy_dtoh(b.t, bytesPtr(dst), C.CUdeviceptr(src), C.size_t(len(dst))))
	}
	if len(dst) == 0 {
		return proto.Success
	}
	s, r := b.current()
	if r != proto.Success {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		return proto.ErrInvalidContext
	}
	return res(C.gm_dtoh_staged(b.t, s.st, bytesPtr(dst), C.CUdeviceptr(src), C.size_t(len(dst)), C.uintptr_t(stream)))
}

// MemcpyDtoD implements server.Backend.
func (b *Backend) MemcpyDtoD(dst, src proto.DevPtr, n uint64, stream uintptr, async bool) proto.Result {
	return res(C.gm_memcpy_dtod(b.t, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(stream), cbool(async)))
}

// MemsetD8 implements server.Backend.
func (b *Backend) MemsetD8(dst proto.DevPtr, v uint8, n uint64, stream uintptr, async bool) proto.Result {
	return res(C.gm_memset_d8(b.t, C.CUdeviceptr(dst), C.uchar(v), C.size_t(n), C.uintptr_t(stream), cbool(async)))
}

// MemsetD32 implements server.Backend; n counts 32-bit words.
func (b *Backend) MemsetD32(dst proto.DevPtr, v uint32, n uint64, stream uintptr, async bool) proto.Result {
	return res(C.gm_memset_d32(b.t, C.CUdeviceptr(dst), C.uint(v), C.size_t(n), C.uintptr_t(stream), cbool(async)))
}

// ModuleLoadData implements server.Backend. A PTX image needs no trailing
// NUL: the backend adds one where it is missing.
func (b *Backend) ModuleLoadData(image []byte) (uintptr, proto.Result) {
	var mod C.uintptr_t
	r := C.gm_module_load(b.t, bytesPtr(image), C.size_t(len(image)), &mod)
	return uintptr(mod), res(r)
}

// ModuleUnload implements server.Backend.
func (b *Backend) ModuleUnload(mod uintptr) proto.Result {
	return res(C.gm_module_unload(b.t, C.uintptr_t(mod)))
}

// ModuleGetFunction implements server.Backend.
func (b *Backend) ModuleGetFunction(mod uintptr, name string) (uintptr, proto.Result) {
	var fn C.uintptr_t
	r := C.gm_module_get_function(b.t, C.uintptr_t(mod), strPtr(name), C.size_t(len(name)), &fn)
	return uintptr(fn), res(r)
}

// ModuleGetGlobal implements server.Backend.
func (b *Backend) ModuleGetGlobal(mod uintptr, name string) (proto.DevPtr, uint64, proto.Result) {
	var p C.CUdeviceptr
	var n C.size_t
	r := C.gm_module_get_global(b.t, C.uintptr_t(mod), strPtr(name), C.size_t(len(name)), &p, &n)
	return proto.DevPtr(p), uint64(n), res(r)
}

// FuncParamInfo implements server.Backend through cuFuncGetParamInfo
// (CUDA 12.4); ErrNotSupported where the driver lacks it.
func (b *Backend) FuncParamInfo(fn uintptr, index uint64) (offset, size uint64, r proto.Result) {
	var o, s C.size_t
	cr := C.gm_func_param_info(b.t, C.uintptr_t(fn), C.size_t(index), &o, &s)
	return uint64(o), uint64(s), res(cr)
}

// FuncGetAttribute implements server.Backend.
func (b *Backend) FuncGetAttribute(attr int32, fn uintptr) (int32, proto.Result) {
	var v C.int
	r := C.gm_func_attribute(b.t, C.int(attr), C.uintptr_t(fn), &v)
	return int32(v), res(r)
}

// LaunchKernel implements server.Backend: params goes to cuLaunchKernel as
// CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE in extra; the driver copies it.
func (b *Backend) LaunchKernel(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, params []byte) proto.Result {
	return res(C.gm_launch(b.t, C.uintptr_t(fn),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(sharedMem), C.uintptr_t(stream), bytesPtr(params), C.size_t(len(params))))
}

// StreamCreate implements server.Backend.
func (b *Backend) StreamCreate(flags uint32) (uintptr, proto.Result) {
	var s C.uintptr_t
	r := C.gm_stream_create(b.t, C.uint(flags), &s)
	return uintptr(s), res(r)
}

// StreamDestroy implements server.Backend.
func (b *Backend) StreamDestroy(s uintptr) proto.Result {
	return res(C.gm_stream_destroy(b.t, C.uintptr_t(s)))
}

// StreamSynchronize implements server.Backend.
func (b *Backend) StreamSynchronize(s uintptr) proto.Result {
	return res(C.gm_stream_synchronize(b.t, C.uintptr_t(s)))
}

// StreamQuery implements server.Backend.
func (b *Backend) StreamQuery(s uintptr) proto.Result {
	return res(C.gm_stream_query(b.t, C.uintptr_t(s)))
}

// StreamWaitEvent implements server.Backend.
func (b *Backend) StreamWaitEvent(s, ev uintptr, flags uint32) proto.Result {
	return res(C.gm_stream_wait_event(b.t, C.uintptr_t(s), C.uintptr_t(ev), C.uint(flags)))
}

// EventCreate implements server.Backend.
func (b *Backend) EventCreate(flags uint32) (uintptr, proto.Result) {
	var ev C.uintptr_t
	r := C.gm_event_create(b.t, C.uint(flags), &ev)
	return uintptr(ev), res(r)
}

// EventDestroy implements server.Backend.
func (b *Backend) EventDestroy(ev uintptr) proto.Result {
	return res(C.gm_event_destroy(b.t, C.uintptr_t(ev)))
}

// EventRecord implements server.Backend.
func (b *Backend) EventRecord(ev, s uintptr) proto.Result {
	return res(C.gm_event_record(b.t, C.uintptr_t(ev), C.uintptr_t(s)))
}

// EventSynchronize implements server.Backend.
func (b *Backend) EventSynchronize(ev uintptr) proto.Result {
	return res(C.gm_event_synchronize(b.t, C.uintptr_t(ev)))
}

// EventQuery implements server.Backend.
func (b *Backend) EventQuery(ev uintptr) proto.Result {
	return res(C.gm_event_query(b.t, C.uintptr_t(ev)))
}

// EventElapsedTime implements server.Backend through cuEventElapsedTime_v2
// where the driver has it (else cuEventElapsedTime).
func (b *Backend) EventElapsedTime(start, end uintptr) (float32, proto.Result) {
	var ms C.float
	r := C.gm_event_elapsed(b.t, C.uintptr_t(start), C.uintptr_t(end), &ms)
	return float32(ms), res(r)
}

// CtxStreamPriorityRange implements server.Backend.
func (b *Backend) CtxStreamPriorityRange() (least, greatest int32, r proto.Result) {
	var l, g C.int
	cr := C.gm_stream_priority_range(b.t, &l, &g)
	return int32(l), int32(g), res(cr)
}

// StreamCreateWithPriority implements server.Backend.
func (b *Backend) StreamCreateWithPriority(flags uint32, priority int32) (uintptr, proto.Result) {
	var s C.uintptr_t
	r := C.gm_stream_create_prio(b.t, C.uint(flags), C.int(priority), &s)
	return uintptr(s), res(r)
}

// StreamPriority implements server.Backend.
func (b *Backend) StreamPriority(s uintptr) (int32, proto.Result) {
	var p C.int
	r := C.gm_stream_priority(b.t, C.uintptr_t(s), &p)
	return int32(p), res(r)
}

// StreamFlags implements server.Backend.
func (b *Backend) StreamFlags(s uintptr) (uint32, proto.Result) {
	var f C.uint
	r := C.gm_stream_flags(b.t, C.uintptr_t(s), &f)
	return uint32(f), res(r)
}

// StreamIsCapturing implements server.Backend.
func (b *Backend) StreamIsCapturing(s uintptr) (int32, proto.Result) {
	var st C.int
	r := C.gm_stream_is_capturing(b.t, C.uintptr_t(s), &st)
	return int32(st), res(r)
}

// EventRecordWithFlags implements server.Backend.
func (b *Backend) EventRecordWithFlags(ev, s uintptr, flags uint32) proto.Result {
	return res(C.gm_event_record_flags(b.t, C.uintptr_t(ev), C.uintptr_t(s), C.uint(flags)))
}

// FuncSetAttribute implements server.Backend.
func (b *Backend) FuncSetAttribute(fn uintptr, attr, value int32) proto.Result {
	return res(C.gm_func_set_attribute(b.t, C.uintptr_t(fn), C.int(attr), C.int(value)))
}

// OccupancyMaxActiveBlocks implements server.Backend.
func (b *Backend) OccupancyMaxActiveBlocks(fn uintptr, blockSize int32, dynamicSMem uint64, flags uint32) (int32, proto.Result) {
	var n C.int
	r := C.gm_occupancy(b.t, C.uintptr_t(fn), C.int(blockSize), C.size_t(dynamicSMem), C.uint(flags), &n)
	return int32(n), res(r)
}

// OccupancyAvailableDynamicSMem implements server.Backend.
func (b *Backend) OccupancyAvailableDynamicSMem(fn uintptr, numBlocks, blockSize int32) (uint64, proto.Result) {
	var n C.size_t
	r := C.gm_occupancy_smem(b.t, C.uintptr_t(fn), C.int(numBlocks), C.int(blockSize), &n)
	return uint64(n), res(r)
}

// launchDims is a CUlaunchConfig's dimensions and shared memory, as
// gm_launch_ex and gm_cluster_occupancy take them.
func launchDims(grid, block [3]uint32, sharedMem uint32) [7]C.uint {
	return [7]C.uint{C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]), C.uint(sharedMem)}
}

// LaunchKernelEx implements server.Backend through cuLaunchKernelEx (CUDA
// 11.8), with the parameters as LaunchKernel passes them and the server's
// checked attributes; ErrNotSupported where the driver lacks it.
func (b *Backend) LaunchKernelEx(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr, params []byte) proto.Result {
	if len(attrs) > C.GM_MAX_LAUNCH_ATTRS {
		return proto.ErrInvalidValue
	}
	dims := launchDims(grid, block, sharedMem)
	packed := proto.EncodeLaunchAttrs(attrs)
	return res(C.gm_launch_ex(b.t, C.uintptr_t(fn), &dims[0], C.uintptr_t(stream),
		bytesPtr(packed), C.uint(len(attrs)), bytesPtr(params), C.size_t(len(params))))
}

func (b *Backend) clusterOccupancy(which C.int, fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr) (int32, proto.Result) {
	if len(attrs) > C.GM_MAX_LAUNCH_ATTRS {
		return 0, proto.ErrInvalidValue
	}
	dims := launchDims(grid, block, sharedMem)
	packed := proto.EncodeLaunchAttrs(attrs)
	var n C.int
	r := C.gm_cluster_occupancy(b.t, which, C.uintptr_t(fn), &dims[0], C.uintptr_t(stream),
		bytesPtr(packed), C.uint(len(attrs)), &n)
	return int32(n), res(r)
}

// OccupancyMaxActiveClusters implements server.Backend through
// cuOccupancyMaxActiveClusters (CUDA 11.8).
func (b *Backend) OccupancyMaxActiveClusters(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr) (int32, proto.Result) {
	return b.clusterOccupancy(0, fn, grid, block, sharedMem, stream, attrs)
}

// OccupancyMaxPotentialClusterSize implements server.Backend through
// cuOccupancyMaxPotentialClusterSize (CUDA 11.8).
func (b *Backend) OccupancyMaxPotentialClusterSize(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr) (int32, proto.Result) {
	return b.clusterOccupancy(1, fn, grid, block, sharedMem, stream, attrs)
}

// CtxGetLimit implements server.Backend through cuCtxGetLimit.
func (b *Backend) CtxGetLimit(limit uint32) (uint64, proto.Result) {
	var v C.size_t
	r := C.gm_ctx_get_limit(b.t, C.int(limit), &v)
	return uint64(v), res(r)
}

// CtxSetLimit implements server.Backend through cuCtxSetLimit.
func (b *Backend) CtxSetLimit(limit uint32, value uint64) proto.Result {
	return res(C.gm_ctx_set_limit(b.t, C.int(limit), C.size_t(value)))
}

// memProp is the server's checked CUmemAllocationProp fields for C.
func memProp(p proto.MemProp) C.gm_memprop {
	return C.gm_memprop{_type: C.uint(p.Type), handle_types: C.uint(p.HandleTypes), loc_type: C.uint(p.LocType),
		loc_id: C.int(p.LocID), compression: C.uint(p.Compression), rdma: C.uint(p.GPUDirectRDMA), usage: C.uint(p.Usage)}
}

// accessDescs copies access descriptors for C; ok is false when there are
// none or more than proto.MaxMemAccessDescs.
func accessDescs(ds []proto.MemAccessDesc, out *[proto.MaxMemAccessDescs]C.gm_access) (n int, ok bool) {
	if len(ds) == 0 || len(ds) > len(out) {
		return 0, false
	}
	for i, d := range ds {
		out[i] = C.gm_access{loc_type: C.uint(d.LocType), loc_id: C.int(d.LocID), flags: C.uint(d.Flags)}
	}
	return len(ds), true
}

// MemGetAllocationGranularity implements server.Backend.
func (b *Backend) MemGetAllocationGranularity(prop proto.MemProp, option uint32) (uint64, proto.Result) {
	var g C.size_t
	p := memProp(prop)
	r := C.gm_mem_granularity(b.t, &p, C.int(option), &g)
	return uint64(g), res(r)
}

// MemAddressReserve implements server.Backend.
func (b *Backend) MemAddressReserve(size, alignment uint64, addr proto.DevPtr, flags uint64) (proto.DevPtr, proto.Result) {
	var p C.CUdeviceptr
	r := C.gm_mem_address_reserve(b.t, C.size_t(size), C.size_t(alignment), C.CUdeviceptr(addr), C.ulonglong(flags), &p)
	return proto.DevPtr(p), res(r)
}

// MemAddressFree implements server.Backend.
func (b *Backend) MemAddressFree(p proto.DevPtr, size uint64) proto.Result {
	return res(C.gm_mem_address_free(b.t, C.CUdeviceptr(p), C.size_t(size)))
}

// MemCreate implements server.Backend.
func (b *Backend) MemCreate(size uint64, prop proto.MemProp, flags uint64) (uint64, proto.Result) {
	var h C.ulonglong
	p := memProp(prop)
	r := C.gm_mem_create(b.t, C.size_t(size), &p, C.ulonglong(flags), &h)
	return uint64(h), res(r)
}

// MemRelease implements server.Backend.
func (b *Backend) MemRelease(h uint64) proto.Result {
	return res(C.gm_mem_release(b.t, C.ulonglong(h)))
}

// MemMap implements server.Backend.
func (b *Backend) MemMap(p proto.DevPtr, size, offset, h, flags uint64) proto.Result {
	return res(C.gm_mem_map(b.t, C.CUdeviceptr(p), C.size_t(size), C.size_t(offset), C.ulonglong(h), C.ulonglong(flags)))
}

// MemUnmap implements server.Backend.
func (b *Backend) MemUnmap(p proto.DevPtr, size uint64) proto.Result {
	return res(C.gm_mem_unmap(b.t, C.CUdeviceptr(p), C.size_t(size)))
}

// MemSetAccess implements server.Backend.
func (b *Backend) MemSetAccess(p proto.DevPtr, size uint64, descs []proto.MemAccessDesc) proto.Result {
	var d [proto.MaxMemAccessDescs]C.gm_access
	n, ok := accessDescs(descs, &d)
	if !ok {
		return proto.ErrInvalidValue
	}
	return res(C.gm_mem_set_access(b.t, C.CUdeviceptr(p), C.size_t(size), &d[0], C.size_t(n)))
}

// MemGetAccess implements server.Backend.
func (b *Backend) MemGetAccess(locType uint32, locID int32, p proto.DevPtr) (uint64, proto.Result) {
	var f C.ulonglong
	r := C.gm_mem_get_access(b.t, C.int(locType), C.int(locID), C.CUdeviceptr(p), &f)
	return uint64(f), res(r)
}

// MemPoolCreate implements server.Backend: a pool of pinned memory on a
// device, without shareable handles, of at most props.MaxSize bytes (0:
// the driver's default).
func (b *Backend) MemPoolCreate(props proto.MemPoolProps) (uintptr, proto.Result) {
	if props.AllocType != proto.MemAllocationTypePinned || props.LocType != proto.MemLocationTypeDevice ||
		props.HandleTypes != proto.MemHandleTypeNone || props.Usage != 0 {
		return 0, proto.ErrInvalidValue
	}
	var pool C.uintptr_t
	r := C.gm_mem_pool_create(b.t, C.int(props.LocID), C.size_t(props.MaxSize), &pool)
	return uintptr(pool), res(r)
}

// MemPoolDestroy implements server.Backend.
func (b *Backend) MemPoolDestroy(pool uintptr) proto.Result {
	return res(C.gm_mem_pool_destroy(b.t, C.uintptr_t(pool)))
}

// MemAllocFromPoolAsync implements server.Backend.
func (b *Backend) MemAllocFromPoolAsync(n uint64, pool, stream uintptr) (proto.DevPtr, proto.Result) {
	var p C.CUdeviceptr
	r := C.gm_mem_alloc_from_pool(b.t, C.size_t(n), C.uintptr_t(pool), C.uintptr_t(stream), &p)
	return proto.DevPtr(p), res(r)
}

// MemFreeAsync implements server.Backend.
func (b *Backend) MemFreeAsync(p proto.DevPtr, stream uintptr) proto.Result {
	return res(C.gm_mem_free_async(b.t, C.CUdeviceptr(p), C.uintptr_t(stream)))
}

// MemPoolSetAttribute implements server.Backend.
func (b *Backend) MemPoolSetAttribute(pool uintptr, attr uint32, value uint64) proto.Result {
	return res(C.gm_mem_pool_set_attribute(b.t, C.uintptr_t(pool), C.int(attr), C.ulonglong(value)))
}

// MemPoolGetAttribute implements server.Backend.
func (b *Backend) MemPoolGetAttribute(pool uintptr, attr uint32) (uint64, proto.Result) {
	var v C.ulonglong
	r := C.gm_mem_pool_get_attribute(b.t, C.uintptr_t(pool), C.int(attr), &v)
	return uint64(v), res(r)
}

// MemPoolTrimTo implements server.Backend.
func (b *Backend) MemPoolTrimTo(pool uintptr, keep uint64) proto.Result {
	return res(C.gm_mem_pool_trim(b.t, C.uintptr_t(pool), C.size_t(keep)))
}

// MemPoolSetAccess implements server.Backend.
func (b *Backend) MemPoolSetAccess(pool uintptr, descs []proto.MemAccessDesc) proto.Result {
	var d [proto.MaxMemAccessDescs]C.gm_access
	n, ok := accessDescs(descs, &d)
	if !ok {
		return proto.ErrInvalidValue
	}
	return res(C.gm_mem_pool_set_access(b.t, C.uintptr_t(pool), &d[0], C.size_t(n)))
}

// MemPoolGetAccess implements server.Backend.
func (b *Backend) MemPoolGetAccess(pool uintptr, locType uint32, locID int32) (uint32, proto.Result) {
	var f C.int
	r := C.gm_mem_pool_get_access(b.t, C.uintptr_t(pool), C.int(locType), C.int(locID), &f)
	return uint32(f), res(r)
}

// DeviceCanAccessPeer implements server.Backend through
// cuDeviceCanAccessPeer.
func (b *Backend) DeviceCanAccessPeer(dev, peer int32) (int32, proto.Result) {
	var v C.int
	r := C.gm_device_can_access_peer(b.t, C.int(dev), C.int(peer), &v)
	return int32(v), res(r)
}

// DeviceP2PAttribute implements server.Backend through
// cuDeviceGetP2PAttribute.
func (b *Backend) DeviceP2PAttribute(attr uint32, src, dst int32) (int32, proto.Result) {
	var v C.int
	r := C.gm_device_p2p_attribute(b.t, C.int(attr), C.int(src), C.int(dst), &v)
	return int32(v), res(r)
}

// CtxEnablePeerAccess implements server.Backend through
// cuCtxEnablePeerAccess.
func (b *Backend) CtxEnablePeerAccess(peer uintptr, flags uint32) proto.Result {
	return res(C.gm_ctx_enable_peer(b.t, C.uintptr_t(peer), C.uint(flags)))
}

// CtxDisablePeerAccess implements server.Backend through
// cuCtxDisablePeerAccess.
func (b *Backend) CtxDisablePeerAccess(peer uintptr) proto.Result {
	return res(C.gm_ctx_disable_peer(b.t, C.uintptr_t(peer)))
}

// MemcpyPeer implements server.Backend through cuMemcpyPeer, or
// cuMemcpyPeerAsync on stream when async.
func (b *Backend) MemcpyPeer(dst proto.DevPtr, dstCtx uintptr, src proto.DevPtr, srcCtx uintptr, n uint64, stream uintptr, async bool) proto.Result {
	return res(C.gm_memcpy_peer(b.t, C.CUdeviceptr(dst), C.uintptr_t(dstCtx), C.CUdeviceptr(src), C.uintptr_t(srcCtx),
		C.size_t(n), C.uintptr_t(stream), cbool(async)))
}
