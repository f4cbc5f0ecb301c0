package cudabackend

/*
#cgo nocallback gm_stream_begin_capture
#cgo nocallback gm_stream_end_capture
#cgo noescape gm_stream_end_capture
#cgo nocallback gm_stream_capture_info
#cgo noescape gm_stream_capture_info
#cgo nocallback gm_stream_update_capture_deps
#cgo noescape gm_stream_update_capture_deps
#cgo nocallback gm_thread_exchange_capture_mode
#cgo noescape gm_thread_exchange_capture_mode
#cgo nocallback gm_graph_create
#cgo noescape gm_graph_create
#cgo nocallback gm_graph_destroy
#cgo nocallback gm_graph_clone
#cgo noescape gm_graph_clone
#cgo nocallback gm_graph_nodes
#cgo noescape gm_graph_nodes
#cgo nocallback gm_graph_add_kernel
#cgo noescape gm_graph_add_kernel
#cgo nocallback gm_graph_add_memset
#cgo noescape gm_graph_add_memset
#cgo nocallback gm_graph_add_memcpy
#cgo noescape gm_graph_add_memcpy
#cgo nocallback gm_graph_add_empty
#cgo noescape gm_graph_add_empty
#cgo nocallback gm_graph_add_event
#cgo noescape gm_graph_add_event
#cgo nocallback gm_graph_add_deps
#cgo noescape gm_graph_add_deps
#cgo nocallback gm_graph_instantiate
#cgo noescape gm_graph_instantiate
#cgo nocallback gm_graph_exec_destroy
#cgo nocallback gm_graph_launch
#cgo nocallback gm_graph_exec_kernel_params
#cgo noescape gm_graph_exec_kernel_params

#include "cudabackend.h"
*/
import "C"

import (
	"unsafe"

	"github.com/gpumux/gpumux/remote/proto"
)

// Stream capture and graphs: server.GraphBackend through the driver's
// graph API (CUDA 12.3 for edge data; cuStreamGetCaptureInfo_v2,
// cuStreamUpdateCaptureDependencies and cuGraphAddDependencies stand in
// for their _v3/_v2 where a driver lacks them, with default edges only).
// Each call is proto.ErrNotSupported where the driver lacks it.

// nodesPtr is the first of raw nodes, or nil; they hold no Go pointers.
func nodesPtr(ns []uintptr) *C.uintptr_t {
	if len(ns) == 0 {
		return nil
	}
	return (*C.uintptr_t)(unsafe.Pointer(&ns[0]))
}

// StreamBeginCapture implements server.GraphBackend.
func (b *Backend) StreamBeginCapture(s uintptr, mode int32) proto.Result {
	return res(C.gm_stream_begin_capture(b.t, C.uintptr_t(s), C.int(mode)))
}

// StreamEndCapture implements server.GraphBackend.
func (b *Backend) StreamEndCapture(s uintptr) (uintptr, proto.Result) {
	var g C.uintptr_t
	r := C.gm_stream_end_capture(b.t, C.uintptr_t(s), &g)
	return uintptr(g), res(r)
}

// StreamCaptureInfo implements server.GraphBackend through
// cuStreamGetCaptureInfo_v3 (_v2 without edge data). Edge data that is all
// default comes back nil.
func (b *Backend) StreamCaptureInfo(s uintptr) (int32, uint64, uintptr, []uintptr, []byte, proto.Result) {
	var status C.int
	var id C.ulonglong
	var g C.uintptr_t
	var n C.size_t
	deps := make([]uintptr, 16)
	edges := make([]byte, proto.EdgeDataSize*len(deps))
	for {
		r := C.gm_stream_capture_info(b.t, C.uintptr_t(s), &status, &id, &g, nodesPtr(deps),
			bytesPtr(edges), C.size_t(len(deps)), &n)
		if r != 0 {
			return 0, 0, 0, nil, nil, res(r)
		}
		if int(n) <= len(deps) {
			break
		}
		if n > proto.MaxGraphNodes {
			return 0, 0, 0, nil, nil, proto.ErrNotSupported
		}
		deps = make([]uintptr, n)
		edges = make([]byte, proto.EdgeDataSize*int(n))
	}
	deps, edges = deps[:n], edges[:proto.EdgeDataSize*int(n)]
	if allZero(edges) {
		edges = nil
	}
	return int32(status), uint64(id), uintptr(g), deps, edges, proto.Success
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

// StreamUpdateCaptureDependencies implements server.GraphBackend.
func (b *Backend) StreamUpdateCaptureDependencies(s uintptr, deps []uintptr, edges []byte, flags uint32) proto.Result {
	return res(C.gm_stream_update_capture_deps(b.t, C.uintptr_t(s), nodesPtr(deps), bytesPtr(edges),
		C.size_t(len(deps)), C.uint(flags)))
}

// ThreadExchangeStreamCaptureMode implements server.GraphBackend.
func (b *Backend) ThreadExchangeStreamCaptureMode(mode int32) (int32, proto.Result) {
	m := C.int(mode)
	r := C.gm_thread_exchange_capture_mode(b.t, &m)
	return int32(m), res(r)
}

// GraphCreate implements server.GraphBackend.
func (b *Backend) GraphCreate(flags uint32) (uintptr, proto.Result) {
	var g C.uintptr_t
	r := C.gm_graph_create(b.t, C.uint(flags), &g)
	return uintptr(g), res(r)
}

// GraphDestroy implements server.GraphBackend.
func (b *Backend) GraphDestroy(g uintptr) proto.Result {
	return res(C.gm_graph_destroy(b.t, C.uintptr_t(g)))
}

// GraphClone implements server.GraphBackend.
func (b *Backend) GraphClone(g uintptr) (uintptr, proto.Result) {
	var c C.uintptr_t
	r := C.gm_graph_clone(b.t, C.uintptr_t(g), &c)
	return uintptr(c), res(r)
}

// GraphNodes implements server.GraphBackend: the count, then the nodes.
func (b *Backend) GraphNodes(g uintptr, roots bool) ([]uintptr, proto.Result) {
	var n C.size_t
	if r := C.gm_graph_nodes(b.t, C.uintptr_t(g), cbool(roots), nil, 0, &n); r != 0 || n == 0 {
		return nil, res(r)
	}
	nodes := make([]uintptr, n)
	r := C.gm_graph_nodes(b.t, C.uintptr_t(g), cbool(roots), nodesPtr(nodes), C.size_t(len(nodes)), &n)
	if r != 0 {
		return nil, res(r)
	}
	return nodes[:min(int(n), len(nodes))], proto.Success
}

// GraphAddKernelNode implements server.GraphBackend: params goes in the
// node's extra as CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE; the driver copies
// it.
func (b *Backend) GraphAddKernelNode(g uintptr, deps []uintptr, fn uintptr, grid, block [3]uint32, sharedMem uint32, params []byte) (uintptr, proto.Result) {
	dims := launchDims(grid, block, sharedMem)
	var n C.uintptr_t
	r := C.gm_graph_add_kernel(b.t, C.uintptr_t(g), nodesPtr(deps), C.size_t(len(deps)), C.uintptr_t(fn),
		&dims[0], bytesPtr(params), C.size_t(len(params)), &n)
	return uintptr(n), res(r)
}

// GraphAddMemsetNode implements server.GraphBackend, in the current
// context.
func (b *Backend) GraphAddMemsetNode(g uintptr, deps []uintptr, dst proto.DevPtr, pitch uint64, value, elementSize uint32, width, height uint64) (uintptr, proto.Result) {
	var n C.uintptr_t
	r := C.gm_graph_add_memset(b.t, C.uintptr_t(g), nodesPtr(deps), C.size_t(len(deps)), C.CUdeviceptr(dst),
		C.size_t(pitch), C.uint(value), C.uint(elementSize), C.size_t(width), C.size_t(height), &n)
	return uintptr(n), res(r)
}

// GraphAddMemcpyNode implements server.GraphBackend: a CUDA_MEMCPY3D of
// device memory both sides, in the current context.
func (b *Backend) GraphAddMemcpyNode(g uintptr, deps []uintptr, c proto.Copy3D) (uintptr, proto.Result) {
	f := [15]C.ulonglong{C.ulonglong(c.Src), C.ulonglong(c.SrcX), C.ulonglong(c.SrcY), C.ulonglong(c.SrcZ),
		C.ulonglong(c.SrcPitch), C.ulonglong(c.SrcHeight), C.ulonglong(c.Dst), C.ulonglong(c.DstX),
		C.ulonglong(c.DstY), C.ulonglong(c.DstZ), C.ulonglong(c.DstPitch), C.ulonglong(c.DstHeight),
		C.ulonglong(c.Width), C.ulonglong(c.Height), C.ulonglong(c.Depth)}
	var n C.uintptr_t
	r := C.gm_graph_add_memcpy(b.t, C.uintptr_t(g), nodesPtr(deps), C.size_t(len(deps)), &f[0], &n)
	return uintptr(n), res(r)
}

// GraphAddEmptyNode implements server.GraphBackend.
func (b *Backend) GraphAddEmptyNode(g uintptr, deps []uintptr) (uintptr, proto.Result) {
	var n C.uintptr_t
	r := C.gm_graph_add_empty(b.t, C.uintptr_t(g), nodesPtr(deps), C.size_t(len(deps)), &n)
	return uintptr(n), res(r)
}

// GraphAddEventNode implements server.GraphBackend.
func (b *Backend) GraphAddEventNode(g uintptr, deps []uintptr, ev uintptr, wait bool) (uintptr, proto.Result) {
	var n C.uintptr_t
	r := C.gm_graph_add_event(b.t, C.uintptr_t(g), nodesPtr(deps), C.size_t(len(deps)), C.uintptr_t(ev), cbool(wait), &n)
	return uintptr(n), res(r)
}

// GraphAddDependencies implements server.GraphBackend.
func (b *Backend) GraphAddDependencies(g uintptr, from, to []uintptr, edges []byte) proto.Result {
	if len(from) != len(to) {
		return proto.ErrInvalidValue
	}
	return res(C.gm_graph_add_deps(b.t, C.uintptr_t(g), nodesPtr(from), nodesPtr(to), bytesPtr(edges), C.size_t(len(from))))
}

// GraphInstantiate implements server.GraphBackend.
func (b *Backend) GraphInstantiate(g uintptr, flags uint64) (uintptr, proto.Result) {
	var e C.uintptr_t
	r := C.gm_graph_instantiate(b.t, C.uintptr_t(g), C.ulonglong(flags), &e)
	return uintptr(e), res(r)
}

// GraphExecDestroy implements server.GraphBackend.
func (b *Backend) GraphExecDestroy(e uintptr) proto.Result {
	return res(C.gm_graph_exec_destroy(b.t, C.uintptr_t(e)))
}

// GraphLaunch implements server.GraphBackend.
func (b *Backend) GraphLaunch(e, s uintptr) proto.Result {
	return res(C.gm_graph_launch(b.t, C.uintptr_t(e), C.uintptr_t(s), 0))
}

// GraphUpload implements server.GraphBackend.
func (b *Backend) GraphUpload(e, s uintptr) proto.Result {
	return res(C.gm_graph_launch(b.t, C.uintptr_t(e), C.uintptr_t(s), 1))
}

// GraphExecKernelNodeSetParams implements server.GraphBackend, the
// parameters passed as GraphAddKernelNode passes them.
func (b *Backend) GraphExecKernelNodeSetParams(e, n uintptr, fn uintptr, grid, block [3]uint32, sharedMem uint32, params []byte) proto.Result {
	dims := launchDims(grid, block, sharedMem)
	return res(C.gm_graph_exec_kernel_params(b.t, C.uintptr_t(e), C.uintptr_t(n), C.uintptr_t(fn), &dims[0],
		bytesPtr(params), C.size_t(len(params))))
}
