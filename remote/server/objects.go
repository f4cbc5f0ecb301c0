package server

import (
	"slices"
	"sort"

	"github.com/gpumux/gpumux/remote/proto"
)

// firstHandle is the first handle a session gives out; lower values are
// the default streams and never name an object.
const firstHandle proto.Handle = 0x1000

// maxParams bounds the parameters the server asks a backend about.
const maxParams = proto.MaxBlob

type ctxState struct {
	h       proto.Handle
	raw     uintptr
	dev     int32 // the client's device ordinal
	flags   uint32
	primary bool
	// limits are the cuCtxSetLimit values charged to the quota (ctxlimit.go).
	limits map[uint32]*limitCharge
}

// primaryState is a client's primary context of one device.
type primaryState struct {
	ctx   *ctxState // nil: inactive
	refs  int
	flags uint32
}

type moduleState struct {
	h       proto.Handle
	raw     uintptr
	ctx     *ctxState
	funcs   map[string]proto.Handle
	globals map[string]*allocation
	// image is what the module was loaded from, kept on a server
	// WithMigration for the target to load it again.
	image []byte
}

type funcState struct {
	h      proto.Handle
	raw    uintptr
	mod    *moduleState
	params []param // nil until asked
	// attrs are the attributes the client set (cuFuncSetAttribute), for
	// a migration to set them again.
	attrs map[int32]int32
}

type param struct{ offset, size uint64 }

type streamState struct {
	h     proto.Handle
	raw   uintptr
	ctx   *ctxState
	flags uint32
	// priority is the one asked for, if withPriority.
	priority     int32
	withPriority bool
}

type eventState struct {
	h     proto.Handle
	raw   uintptr
	ctx   *ctxState
	flags uint32
}

// graphState is one of the client's graphs: made with cuGraphCreate or
// cuGraphClone, or a capture's, known from the first cuStreamGetCaptureInfo
// or cuStreamEndCapture that returns it.
type graphState struct {
	h   proto.Handle
	raw uintptr
	ctx *ctxState
	// capture is set while the graph is an active capture's: the driver
	// owns it until cuStreamEndCapture.
	capture *captureState
	// nodes are the node handles given out, by raw node.
	nodes map[uintptr]*nodeState
	// events are the events of the graph's event nodes (calls_graph.go).
	events map[*eventState]bool
}

type nodeState struct {
	h     proto.Handle
	raw   uintptr
	graph *graphState
}

type execState struct {
	h     proto.Handle
	raw   uintptr
	ctx   *ctxState
	graph *graphState // instantiated from; its nodes name the exec's nodes
	// events are the events of the exec's event nodes.
	events map[*eventState]bool
}

// captureState is a stream capture the client began.
type captureState struct {
	id     uint64 // the ID the client sees
	raw    uint64 // the driver's
	origin streamKey
	graph  *graphState // once seen
	// invalidated: the server refused work in the capture
	// (cuStreamEndCapture then fails), whatever the driver says.
	invalidated bool
}

// streamKey names a stream of a context: a default stream (0, 1, 2) or a
// created stream's raw value.
type streamKey struct {
	ctx *ctxState
	raw uintptr
}

// allocation is a range of device memory the client may name: one of its
// cuMemAlloc allocations, a module global, a stream-ordered allocation
// (pool set) or a mapping of physical memory (phys set, ctx nil).
type allocation struct {
	base proto.DevPtr
	size uint64
	ctx  *ctxState
	mod  *moduleState // set for a module global
	pool *poolState   // set for an allocation from a pool
	phys *physical    // set for a mapping (cuMemMap)
	res  *reservation // the reserved range a mapping lies in
	// backed is the virtual memory behind a cuMemAlloc allocation on a
	// server WithMigration (backing.go).
	backed *backing
	// access is what the client last set with cuMemSetAccess on a
	// mapping, as it asked (its device ordinals), and accessPartial that
	// some call set it on part of the mapping only (virtual.go).
	access        []proto.MemAccessDesc
	accessPartial bool
	// at is where the backend has a module global a migration restored
	// elsewhere than base, the address the client holds (relocate.go);
	// 0 when it is at base.
	at proto.DevPtr
}

// charged reports whether the allocation's size is charged to the quota
// by itself (a mapping's memory is charged with its physical allocation).
func (a *allocation) charged() bool { return a.mod == nil && a.phys == nil }

// objects are one client's server objects, by handle, and its memory.
type objects struct {
	next    proto.Handle
	ctxs    map[proto.Handle]*ctxState
	primary map[int32]*primaryState
	mods    map[proto.Handle]*moduleState
	funcs   map[proto.Handle]*funcState
	streams map[proto.Handle]*streamState
	events  map[proto.Handle]*eventState
	// Graphs (calls_graph.go).
	graphs      map[proto.Handle]*graphState
	graphsByRaw map[uintptr]*graphState
	nodes       map[proto.Handle]*nodeState
	execs       map[proto.Handle]*execState
	// captures are the active captures by the driver's ID, and by the
	// stream that began them.
	captures       map[uint64]*captureState
	captureOrigins map[streamKey]*captureState
	lastCaptureID  uint64
	// allocs is sorted by base and never overlaps.
	allocs []*allocation
	// moved are the allocations of allocs whose at is set.
	moved relocations
	// inUse is what the session has charged to the quota: allocations
	// (globals excluded), physical memory and context limits.
	inUse   uint64
	virtual virtualMemory // cuMemCreate and friends (virtual.go)
	pools   poolTable     // memory pools (pools.go)
	// cur is the backend context current on the worker thread, if curOK.
	cur   uintptr
	curOK bool
}

func (o *objects) init() {
	o.next = firstHandle
	o.ctxs = map[proto.Handle]*ctxState{}
	o.primary = map[int32]*primaryState{}
	o.mods = map[proto.Handle]*moduleState{}
	o.funcs = map[proto.Handle]*funcState{}
	o.streams = map[proto.Handle]*streamState{}
	o.events = map[proto.Handle]*eventState{}
	o.graphs = map[proto.Handle]*graphState{}
	o.graphsByRaw = map[uintptr]*graphState{}
	o.nodes = map[proto.Handle]*nodeState{}
	o.execs = map[proto.Handle]*execState{}
	o.captures = map[uint64]*captureState{}
	o.captureOrigins = map[streamKey]*captureState{}
	o.virtual.init()
	o.pools.init()
}

// handle returns a new handle; handles are never reused in a session.
func (o *objects) handle() proto.Handle {
	h := o.next
	o.next++
	return h
}

// find returns the allocation holding all of [p, p+n); n == 0 asks for p
// to lie inside one.
func (o *objects) find(p proto.DevPtr, n uint64) *allocation {
	i := sort.Search(len(o.allocs), func(i int) bool { return o.allocs[i].base > p }) - 1
	if i < 0 {
		return nil
	}
	a := o.allocs[i]
	off := uint64(p - a.base)
	if off >= a.size || n > a.size-off {
		return nil
	}
	return a
}

// addAlloc records an allocation; false if it overlaps one already known
// (a backend handing out an address twice).
func (o *objects) addAlloc(a *allocation) bool {
	end := uint64(a.base) + a.size
	if end < uint64(a.base) {
		return false
	}
	i := sort.Search(len(o.allocs), func(i int) bool { return o.allocs[i].base >= a.base })
	if i > 0 {
		prev := o.allocs[i-1]
		if uint64(prev.base)+prev.size > uint64(a.base) {
			return false
		}
	}
	if i < len(o.allocs) && uint64(o.allocs[i].base) < max(end, uint64(a.base)+1) {
		return false
	}
	o.allocs = slices.Insert(o.allocs, i, a)
	if a.at != 0 {
		o.moved.add(a)
	}
	return true
}

// vacant reports whether no allocation overlaps [p, p+n).
func (o *objects) vacant(p proto.DevPtr, n uint64) bool {
	end := uint64(p) + n
	if n == 0 || end < uint64(p) {
		return false
	}
	i := sort.Search(len(o.allocs), func(i int) bool { return o.allocs[i].base >= p })
	if i > 0 {
		prev := o.allocs[i-1]
		if uint64(prev.base)+prev.size > uint64(p) {
			return false
		}
	}
	return i == len(o.allocs) || uint64(o.allocs[i].base) >= end
}

// mapped returns the mappings that together cover [p, p+n) without a gap,
// in address order, or nil.
func (o *objects) mapped(p proto.DevPtr, n uint64) []*allocation {
	end := uint64(p) + n
	if n == 0 || end < uint64(p) {
		return nil
	}
	i := sort.Search(len(o.allocs), func(i int) bool { return o.allocs[i].base > p }) - 1
	if i < 0 {
		return nil
	}
	var ms []*allocation
	for at := uint64(p); at < end; i++ {
		if i >= len(o.allocs) {
			return nil
		}
		a := o.allocs[i]
		if a.phys == nil || uint64(a.base) > at || uint64(a.base)+a.size <= at {
			return nil
		}
		ms = append(ms, a)
		at = uint64(a.base) + a.size
	}
	return ms
}

func (o *objects) removeAlloc(a *allocation) {
	i := sort.Search(len(o.allocs), func(i int) bool { return o.allocs[i].base >= a.base })
	if i < len(o.allocs) && o.allocs[i] == a {
		o.allocs = slices.Delete(o.allocs, i, i+1)
		if a.at != 0 {
			o.moved.remove(a)
		}
	}
}

// sortedHandles returns a map's handles in order (for deterministic
// cleanup).
func sortedHandles[V any](m map[proto.Handle]V) []proto.Handle {
	hs := make([]proto.Handle, 0, len(m))
	for h := range m {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	return hs
}
