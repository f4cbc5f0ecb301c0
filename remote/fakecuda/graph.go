package fakecuda

import (
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

// Stream capture and graphs, with CUDA's semantics on the fake's
// synchronous streams: work issued to a capturing stream is recorded into
// the capture's graph instead of run; cuStreamEndCapture returns the graph;
// an instantiated graph replays the recorded work, in dependency order, on
// the memory as it is at launch. See the package doc for the rules.

type opKind int

const (
	opKernel opKind = iota
	opMemset
	opCopy
	opHostCopy // a host-to-device copy recorded in a capture: its bytes then
	opEventRecord
	opEventWait
	opEmpty
	opGraph // a graph launched in a capture: the exec's work
)

// op is one node's work.
type op struct {
	kind opKind
	// opKernel
	fn          *function
	grid, block [3]uint32
	shared      uint32
	params      []byte
	attrs       []proto.LaunchAttr
	// opMemset: height rows of width elements of elem bytes, pitch apart
	dst, pitch    uint64
	value, elem   uint32
	width, height uint64
	// opCopy
	copy proto.Copy3D
	// opHostCopy
	data []byte
	// opEventRecord, opEventWait
	ev *event
	// opGraph
	sub []op
}

func (o op) clone() op {
	o.params = append([]byte(nil), o.params...)
	o.sub = append([]op(nil), o.sub...)
	return o
}

type node struct {
	id   uintptr
	g    *graph
	deps []*node
	op   op
}

type graph struct {
	id    uintptr
	ctx   *context
	nodes []*node // in the order they were added
	// capture is set while a capture builds the graph.
	capture *capture
}

type capture struct {
	id          uint64
	g           *graph
	mode        int32
	tid         int       // the thread that began it
	origin      streamKey // the stream that began it
	invalidated bool
	ended       bool
}

// streamKey is a stream of a context (the default streams are one per
// context here).
type streamKey struct {
	ctx *context
	s   uintptr
}

// streamCapture is a stream taking part in a capture, and the nodes its
// next work depends on.
type streamCapture struct {
	cap  *capture
	deps []*node
}

type exec struct {
	id  uintptr
	ctx *context
	ops []op // in dependency order
	// at is the index in ops of each node of the graph it was made from.
	at map[uintptr]int
}

// eventExternal is CU_EVENT_RECORD_EXTERNAL and CU_EVENT_WAIT_EXTERNAL:
// in a capture, an event record or wait node.
const eventExternal = 1

// capturing returns the capture stream s of c takes part in (nil: none).
// Work on a stream of an invalidated capture fails with
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. The caller holds mu.
func (b *Backend) capturing(c *context, s uintptr) (*streamCapture, proto.Result) {
	sc := b.captures[streamKey{c, s}]
	if sc == nil {
		return nil, proto.Success
	}
	if sc.cap.invalidated {
		return nil, proto.ErrStreamCaptureInvalidated
	}
	return sc, proto.Success
}

// record adds o to sc's graph after sc's dependencies.
func (b *Backend) record(sc *streamCapture, o op) proto.Result {
	n := b.addNode(sc.cap.g, sc.deps, o)
	sc.deps = []*node{n}
	return proto.Success
}

func (b *Backend) addNode(g *graph, deps []*node, o op) *node {
	n := &node{id: b.newID(), g: g, deps: append([]*node(nil), deps...), op: o}
	g.nodes = append(g.nodes, n)
	b.nodes[n.id] = n
	return n
}

// invalidate invalidates a capture: its streams' work fails from now on,
// and cuStreamEndCapture returns no graph.
func (b *Backend) invalidate(cp *capture) { cp.invalidated = true }

// refuse invalidates sc's capture and returns r: the answer to work that
// cannot be captured.
func (b *Backend) refuse(sc *streamCapture, r proto.Result) proto.Result {
	b.invalidate(sc.cap)
	return r
}

// prohibited reports whether the calling thread may not make a
// potentially unsafe call (MemAlloc, MemFree) now, as CUDA rules by the
// thread's interaction mode and the captures under way; it invalidates the
// captures that forbid it. The caller holds mu.
func (b *Backend) prohibited() bool {
	tid := gettid()
	mode := b.modes[tid]
	if mode == proto.CaptureModeRelaxed {
		return false
	}
	hit := false
	for _, cp := range b.live {
		if cp.tid == tid && cp.mode != proto.CaptureModeRelaxed ||
			mode == proto.CaptureModeGlobal && cp.tid != tid && cp.mode == proto.CaptureModeGlobal {
			b.invalidate(cp)
			hit = true
		}
	}
	return hit
}

// ThreadExchangeStreamCaptureMode sets the calling thread's interaction
// mode.
func (b *Backend) ThreadExchangeStreamCaptureMode(mode int32) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if mode < 0 || mode > proto.CaptureModeRelaxed {
		return 0, proto.ErrInvalidValue
	}
	tid := gettid()
	old := b.modes[tid]
	if mode == proto.CaptureModeGlobal {
		delete(b.modes, tid)
	} else {
		b.modes[tid] = mode
	}
	return old, proto.Success
}

// StreamBeginCapture begins capturing s (not the legacy stream) into a new
// graph of the current context.
func (b *Backend) StreamBeginCapture(s uintptr, mode int32) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return r
	}
	if s == 0 || s == streamLegacy {
		return proto.ErrStreamCaptureUnsupported
	}
	if mode < 0 || mode > proto.CaptureModeRelaxed {
		return proto.ErrInvalidValue
	}
	key := streamKey{c, s}
	if b.captures[key] != nil {
		return proto.ErrIllegalState
	}
	b.nextCapture++
	g := &graph{id: b.newID(), ctx: c}
	cp := &capture{id: b.nextCapture, g: g, mode: mode, tid: gettid(), origin: key}
	g.capture = cp
	b.graphs[g.id] = g
	b.live[cp.id] = cp
	b.captures[key] = &streamCapture{cap: cp}
	return proto.Success
}

// StreamEndCapture ends the capture s began: its graph, or
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (the graph destroyed) if it was
// invalidated. A stream that joined the capture cannot end it
// (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, which invalidates it), nor may
// another thread end a capture that is not relaxed
// (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD).
func (b *Backend) StreamEndCapture(s uintptr) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	sc := b.captures[streamKey{c, s}]
	if sc == nil {
		return 0, proto.ErrIllegalState
	}
	cp := sc.cap
	if cp.origin != (streamKey{c, s}) {
		b.invalidate(cp)
		return 0, proto.ErrStreamCaptureUnmatched
	}
	if cp.mode != proto.CaptureModeRelaxed && cp.tid != gettid() {
		return 0, proto.ErrStreamCaptureWrongThread
	}
	b.endCapture(cp)
	if cp.invalidated {
		b.dropGraph(cp.g)
		return 0, proto.ErrStreamCaptureInvalidated
	}
	cp.g.capture = nil
	return cp.g.id, proto.Success
}

// endCapture takes every stream out of cp.
func (b *Backend) endCapture(cp *capture) {
	for k, sc := range b.captures {
		if sc.cap == cp {
			delete(b.captures, k)
		}
	}
	cp.ended = true
	delete(b.live, cp.id)
}

// dropGraph forgets g and its nodes.
func (b *Backend) dropGraph(g *graph) {
	for _, n := range g.nodes {
		delete(b.nodes, n.id)
	}
	delete(b.graphs, g.id)
}

// StreamCaptureInfo reports s's capture: status, ID, graph and the nodes
// its next work depends on (default edges only).
func (b *Backend) StreamCaptureInfo(s uintptr) (int32, uint64, uintptr, []uintptr, []byte, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, 0, 0, nil, nil, r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return 0, 0, 0, nil, nil, r
	}
	sc := b.captures[streamKey{c, s}]
	if sc == nil {
		return proto.CaptureNone, 0, 0, nil, nil, proto.Success
	}
	if sc.cap.invalidated {
		return proto.CaptureInvalidated, sc.cap.id, 0, nil, nil, proto.Success
	}
	deps := make([]uintptr, len(sc.deps))
	for i, n := range sc.deps {
		deps[i] = n.id
	}
	return proto.CaptureActive, sc.cap.id, sc.cap.g.id, deps, nil, proto.Success
}

// StreamIsCapturing reports s's capture status.
func (b *Backend) StreamIsCapturing(s uintptr) (int32, proto.Result) {
	st, _, _, _, _, r := b.StreamCaptureInfo(s)
	return st, r
}

// StreamUpdateCaptureDependencies adds (flags 0) or sets (1) the nodes of
// the capture's graph that s's next work depends on.
func (b *Backend) StreamUpdateCaptureDependencies(s uintptr, deps []uintptr, edges []byte, flags uint32) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	sc, r := b.capturing(c, s)
	if r != proto.Success {
		return r
	}
	if sc == nil {
		return proto.ErrIllegalState
	}
	ns, r := b.nodesOf(sc.cap.g, deps, edges)
	if r != proto.Success {
		return r
	}
	switch flags {
	case proto.CaptureAddDependencies:
		sc.deps = union(sc.deps, ns)
	case proto.CaptureSetDependencies:
		sc.deps = ns
	default:
		return proto.ErrInvalidValue
	}
	return proto.Success
}

func union(a, b []*node) []*node {
	out := append([]*node(nil), a...)
	for _, n := range b {
		found := false
		for _, m := range out {
			found = found || m == n
		}
		if !found {
			out = append(out, n)
		}
	}
	return out
}

// nodesOf resolves nodes of g; edge data must be the default (zero). The
// caller holds mu.
func (b *Backend) nodesOf(g *graph, ids []uintptr, edges []byte) ([]*node, proto.Result) {
	for _, v := range edges {
		if v != 0 {
			return nil, proto.ErrNotSupported
		}
	}
	ns := make([]*node, len(ids))
	for i, id := range ids {
		n := b.nodes[id]
		if n == nil || n.g != g {
			return nil, proto.ErrInvalidValue
		}
		ns[i] = n
	}
	return ns, proto.Success
}

// ownGraph returns a graph of the current context; the caller holds mu.
func (b *Backend) ownGraph(id uintptr) (*graph, proto.Result) {
	g, _, r := own(b, b.graphs, id, func(g *graph) *context { return g.ctx })
	return g, r
}

// GraphCreate makes an empty graph in the current context.
func (b *Backend) GraphCreate(flags uint32) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	if flags != 0 {
		return 0, proto.ErrInvalidValue
	}
	g := &graph{id: b.newID(), ctx: c}
	b.graphs[g.id] = g
	return g.id, proto.Success
}

// GraphDestroy destroys a graph no capture is building.
func (b *Backend) GraphDestroy(id uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, r := b.ownGraph(id)
	if r != proto.Success {
		return r
	}
	if g.capture != nil {
		return proto.ErrIllegalState
	}
	b.dropGraph(g)
	return proto.Success
}

// GraphClone copies a graph, its nodes and edges.
func (b *Backend) GraphClone(id uintptr) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, r := b.ownGraph(id)
	if r != proto.Success {
		return 0, r
	}
	clone := &graph{id: b.newID(), ctx: g.ctx}
	b.graphs[clone.id] = clone
	copies := map[*node]*node{}
	for _, n := range g.nodes { // deps always precede their nodes
		deps := make([]*node, len(n.deps))
		for i, d := range n.deps {
			deps[i] = copies[d]
		}
		copies[n] = b.addNode(clone, deps, n.op.clone())
	}
	return clone.id, proto.Success
}

// GraphNodes lists a graph's nodes, or its roots, in the order added.
func (b *Backend) GraphNodes(id uintptr, roots bool) ([]uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, r := b.ownGraph(id)
	if r != proto.Success {
		return nil, r
	}
	var ids []uintptr
	for _, n := range g.nodes {
		if !roots || len(n.deps) == 0 {
			ids = append(ids, n.id)
		}
	}
	return ids, proto.Success
}

// addTo adds a node to graph id after deps; the caller holds mu.
func (b *Backend) addTo(id uintptr, deps []uintptr, o op) (uintptr, proto.Result) {
	g, r := b.ownGraph(id)
	if r != proto.Success {
		return 0, r
	}
	ns, r := b.nodesOf(g, deps, nil)
	if r != proto.Success {
		return 0, r
	}
	return b.addNode(g, ns, o).id, proto.Success
}

// kernelOp checks a kernel's launch as launch does; the caller holds mu.
func (b *Backend) kernelOp(fn uintptr, grid, block [3]uint32, shared uint32, params []byte) (op, proto.Result) {
	f, _, r := b.function(fn)
	if r != proto.Success {
		return op{}, r
	}
	for i := range 3 {
		if grid[i] == 0 || block[i] == 0 {
			return op{}, proto.ErrInvalidValue
		}
	}
	if uint64(block[0])*uint64(block[1])*uint64(block[2]) > 1024 || uint64(len(params)) != packedSize(f.def.params) {
		return op{}, proto.ErrInvalidValue
	}
	return op{kind: opKernel, fn: f, grid: grid, block: block, shared: shared, params: append([]byte(nil), params...)}, proto.Success
}

// GraphAddKernelNode adds a launch of a function of the graph's context.
func (b *Backend) GraphAddKernelNode(g uintptr, deps []uintptr, fn uintptr, grid, block [3]uint32, shared uint32, params []byte) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, r := b.kernelOp(fn, grid, block, shared, params)
	if r != proto.Success {
		return 0, r
	}
	return b.addTo(g, deps, o)
}

// GraphAddMemsetNode adds a 2D memset; the rows must lie in allocations
// now (and when it runs).
func (b *Backend) GraphAddMemsetNode(g uintptr, deps []uintptr, dst proto.DevPtr, pitch uint64, value, elementSize uint32, width, height uint64) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := op{kind: opMemset, dst: uint64(dst), pitch: pitch, value: value, elem: elementSize, width: width, height: height}
	if r := b.runMemset(o, true); r != proto.Success {
		return 0, proto.ErrInvalidValue
	}
	return b.addTo(g, deps, o)
}

// GraphAddMemcpyNode adds a device-to-device 3D copy.
func (b *Backend) GraphAddMemcpyNode(g uintptr, deps []uintptr, c proto.Copy3D) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := op{kind: opCopy, copy: c}
	if r := b.runCopy(c, true); r != proto.Success {
		return 0, proto.ErrInvalidValue
	}
	return b.addTo(g, deps, o)
}

// GraphAddEmptyNode adds a node that does nothing.
func (b *Backend) GraphAddEmptyNode(g uintptr, deps []uintptr) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addTo(g, deps, op{kind: opEmpty})
}

// GraphAddEventNode adds an event record (or wait) node for an event of
// the current context.
func (b *Backend) GraphAddEventNode(g uintptr, deps []uintptr, ev uintptr, wait bool) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, _, r := b.ownEvent(ev)
	if r != proto.Success {
		return 0, r
	}
	kind := opEventRecord
	if wait {
		kind = opEventWait
	}
	return b.addTo(g, deps, op{kind: kind, ev: e})
}

// GraphAddDependencies adds edges from[i] → to[i]; an edge twice, or one
// that closes a cycle, is CUDA_ERROR_INVALID_VALUE.
func (b *Backend) GraphAddDependencies(id uintptr, from, to []uintptr, edges []byte) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, r := b.ownGraph(id)
	if r != proto.Success {
		return r
	}
	fs, r := b.nodesOf(g, from, edges)
	if r != proto.Success {
		return r
	}
	ts, r := b.nodesOf(g, to, nil)
	if r != proto.Success || len(fs) != len(ts) {
		return proto.ErrInvalidValue
	}
	for i := range fs {
		for _, d := range ts[i].deps {
			if d == fs[i] {
				return proto.ErrInvalidValue
			}
		}
		if dependsOn(fs[i], ts[i]) { // to would depend on itself
			return proto.ErrInvalidValue
		}
	}
	for i := range fs {
		ts[i].deps = append(ts[i].deps, fs[i])
	}
	// Keep every node after its dependencies in g.nodes (order).
	g.nodes = topoOrder(g.nodes)
	return proto.Success
}

// dependsOn reports whether n depends on on, directly or through other
// nodes.
func dependsOn(n, on *node) bool {
	seen := map[*node]bool{}
	var walk func(m *node) bool
	walk = func(m *node) bool {
		if m == on {
			return true
		}
		if seen[m] {
			return false
		}
		seen[m] = true
		for _, d := range m.deps {
			if walk(d) {
				return true
			}
		}
		return false
	}
	return walk(n)
}

// topoOrder orders nodes after their dependencies, stably.
func topoOrder(nodes []*node) []*node {
	out := make([]*node, 0, len(nodes))
	done := map[*node]bool{}
	var visit func(n *node)
	visit = func(n *node) {
		if done[n] {
			return
		}
		done[n] = true
		for _, d := range n.deps {
			visit(d)
		}
		out = append(out, n)
	}
	for _, n := range nodes {
		visit(n)
	}
	return out
}

// GraphInstantiate makes an exec of a graph of the current context: its
// nodes' work copied, in dependency order.
func (b *Backend) GraphInstantiate(id uintptr, flags uint64) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, r := b.ownGraph(id)
	if r != proto.Success {
		return 0, r
	}
	if g.capture != nil {
		return 0, proto.ErrIllegalState
	}
	if flags&^(proto.GraphInstantiateAutoFreeOnLaunch|proto.GraphInstantiateUseNodePriority) != 0 {
		return 0, proto.ErrInvalidValue
	}
	e := &exec{id: b.newID(), ctx: g.ctx, at: map[uintptr]int{}}
	for _, n := range topoOrder(g.nodes) {
		e.at[n.id] = len(e.ops)
		e.ops = append(e.ops, n.op.clone())
	}
	b.execs[e.id] = e
	return e.id, proto.Success
}

// ownExec returns an exec of the current context; the caller holds mu.
func (b *Backend) ownExec(id uintptr) (*exec, *context, proto.Result) {
	return own(b, b.execs, id, func(e *exec) *context { return e.ctx })
}

// GraphExecDestroy destroys an exec of the current context.
func (b *Backend) GraphExecDestroy(id uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, _, r := b.ownExec(id); r != proto.Success {
		return r
	}
	delete(b.execs, id)
	return proto.Success
}

// GraphLaunch runs an exec's work on stream s, at once; on a capturing
// stream it is recorded as one node.
func (b *Backend) GraphLaunch(id, s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, c, r := b.ownExec(id)
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return r
	}
	sc, r := b.capturing(c, s)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opGraph, sub: append([]op(nil), e.ops...)})
	}
	return b.runOps(c, e.ops, s)
}

// GraphUpload checks its arguments: the fake has nothing to upload.
func (b *Backend) GraphUpload(id, s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, c, r := b.ownExec(id)
	if r != proto.Success {
		return r
	}
	return b.checkStream(c, s)
}

// GraphExecKernelNodeSetParams changes the launch of kernel node n (of the
// graph e was made from) in e.
func (b *Backend) GraphExecKernelNodeSetParams(id, n uintptr, fn uintptr, grid, block [3]uint32, shared uint32, params []byte) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, _, r := b.ownExec(id)
	if r != proto.Success {
		return r
	}
	i, found := e.at[n]
	if !found || e.ops[i].kind != opKernel {
		return proto.ErrInvalidValue
	}
	o, r := b.kernelOp(fn, grid, block, shared, params)
	if r != proto.Success {
		return r
	}
	e.ops[i] = o
	return proto.Success
}

// runOps runs recorded work in context c; the first failure ends it. The
// caller holds mu.
func (b *Backend) runOps(c *context, ops []op, s uintptr) proto.Result {
	for _, o := range ops {
		if r := b.runOp(c, o, s); r != proto.Success {
			return r
		}
	}
	return proto.Success
}

func (b *Backend) runOp(c *context, o op, s uintptr) proto.Result {
	switch o.kind {
	case opKernel:
		if b.funcs[o.fn.id] != o.fn {
			return proto.ErrLaunchFailed // its module is gone
		}
		r := b.run(c, o.fn.def, o.params)
		b.recordLaunch(Launch{Kernel: o.fn.def.name, Ctx: c.id, Grid: o.grid, Block: o.block, SharedMem: o.shared,
			Stream: s, Params: o.params, Attrs: o.attrs, Result: r})
		return r
	case opMemset:
		return b.runMemset(o, false)
	case opCopy:
		return b.runCopy(o.copy, false)
	case opHostCopy:
		reg, found := b.mem.region(o.dst, uint64(len(o.data)))
		if !found {
			return proto.ErrIllegalAddress
		}
		reg.writeAt(0, o.data)
	case opEventRecord:
		if b.events[o.ev.id] == o.ev {
			o.ev.recorded = time.Now()
		}
	case opGraph:
		return b.runOps(c, o.sub, s)
	}
	return proto.Success
}

// runMemset runs (or with check only checks) a memset op's rows.
func (b *Backend) runMemset(o op, check bool) proto.Result {
	if o.elem != 1 && o.elem != 2 && o.elem != 4 || o.width == 0 || o.height == 0 || o.dst%uint64(o.elem) != 0 ||
		o.width > 1<<40 || o.height > 1 && o.pitch < o.width*uint64(o.elem) {
		return proto.ErrInvalidValue
	}
	var pat [4]byte
	for i := range pat {
		pat[i] = byte(o.value >> (8 * (uint32(i) % o.elem)))
	}
	n := o.width * uint64(o.elem)
	for y := range o.height {
		reg, found := b.mem.region(o.dst+y*o.pitch, n)
		if !found {
			return proto.ErrIllegalAddress
		}
		if !check {
			reg.fill(pat)
		}
	}
	return proto.Success
}

// runCopy runs (or with check only checks) a 3D device-to-device copy row
// by row.
func (b *Backend) runCopy(c proto.Copy3D, check bool) proto.Result {
	if _, _, good := c.Spans(); !good {
		return proto.ErrInvalidValue
	}
	var buf []byte
	if !check {
		buf = make([]byte, c.Width)
	}
	for z := range c.Depth {
		for y := range c.Height {
			src := c.Src + ((c.SrcZ+z)*c.SrcHeight+c.SrcY+y)*c.SrcPitch + c.SrcX
			dst := c.Dst + ((c.DstZ+z)*c.DstHeight+c.DstY+y)*c.DstPitch + c.DstX
			sr, ok1 := b.mem.region(src, c.Width)
			dr, ok2 := b.mem.region(dst, c.Width)
			if !ok1 || !ok2 {
				return proto.ErrIllegalAddress
			}
			if !check {
				sr.readAt(0, buf)
				dr.writeAt(0, buf)
			}
		}
	}
	return proto.Success
}

// dropContextGraphs destroys what graphs, execs and captures c holds (for
// CtxDestroy), counting them in Stats.ImplicitFrees; the caller holds mu.
func (b *Backend) dropContextGraphs(c *context) {
	for k, sc := range b.captures {
		if k.ctx == c {
			sc.cap.invalidated = true
			delete(b.captures, k)
		}
	}
	for id, cp := range b.live {
		if cp.origin.ctx == c {
			cp.ended = true
			delete(b.live, id)
		}
	}
	for id, g := range b.graphs {
		if g.ctx == c {
			b.implicit++
			b.dropGraph(g)
			delete(b.graphs, id)
		}
	}
	for id, e := range b.execs {
		if e.ctx == c {
			b.implicit++
			delete(b.execs, id)
		}
	}
}
