package server

import (
	"encoding/binary"
	"math/bits"

	"github.com/gpumux/gpumux/remote/proto"
)

// Stream capture and CUDA graphs.
//
// Captures run in the driver: work a client issues on a capturing stream
// is forwarded as usual and the driver records it into the capture's
// graph. Two things cannot be captured remotely and are refused: a copy
// between the client's host memory and the device (the graph would replay
// the server's staging buffer, not the client's memory; refuseHostCopy),
// and a global-mode capture, which in the driver would hold every thread
// of the server process, other clients' included, to the capture's rules:
// it begins as a thread-local capture, which on the session's one worker
// thread holds every thread of the client, what a global capture does
// within a process.
//
// Graphs, graph execs and nodes are per-client handles. A graph belongs to
// the context current when it was made (a capture's: its stream's
// context), an exec to its graph's; nodes belong to their graph and go with
// it. Node handles are given out on first sight (a node added here, or one
// a capture or cuGraphGetNodes reports). Everything is destroyed with its
// context or when the client goes (destroyCtx), captures ended first.
//
// A graph holds the code it runs and the events of its event nodes: the
// driver is not asked to unload a module while its context holds graphs
// or execs, nor to destroy an event an event node of the client's names
// (CUDA_ERROR_ILLEGAL_STATE), so no graph outlives what it runs.

// graph resolves a graph handle and makes its context current.
func (s *session) graph(h proto.Handle) (*graphState, proto.Result) {
	g := s.graphs[h]
	if g == nil {
		return nil, proto.ErrInvalidHandle
	}
	return g, s.use(g.ctx)
}

// addGraph records a graph the backend returned (a capture's: the one
// already recorded for raw).
func (s *session) addGraph(raw uintptr, ctx *ctxState) *graphState {
	if g := s.graphsByRaw[raw]; g != nil {
		return g
	}
	g := &graphState{h: s.handle(), raw: raw, ctx: ctx, nodes: map[uintptr]*nodeState{}, events: map[*eventState]bool{}}
	s.graphs[g.h] = g
	s.graphsByRaw[raw] = g
	return g
}

// forgetGraph drops a graph and its nodes (the backend has destroyed it).
func (s *session) forgetGraph(g *graphState) {
	for _, n := range g.nodes {
		delete(s.nodes, n.h)
	}
	delete(s.graphs, g.h)
	if s.graphsByRaw[g.raw] == g {
		delete(s.graphsByRaw, g.raw)
	}
	if g.capture != nil && g.capture.graph == g {
		g.capture.graph = nil
	}
}

// node returns the handle of one of g's nodes, giving it one on first
// sight.
func (s *session) node(g *graphState, raw uintptr) proto.Handle {
	if n := g.nodes[raw]; n != nil {
		return n.h
	}
	n := &nodeState{h: s.handle(), raw: raw, graph: g}
	g.nodes[raw] = n
	s.nodes[n.h] = n
	return n.h
}

// nodeHandles encodes raw nodes of g as the client's handles.
func (s *session) nodeHandles(g *graphState, raws []uintptr) []byte {
	b := make([]byte, 0, 8*len(raws))
	for _, raw := range raws {
		b = binary.LittleEndian.AppendUint64(b, uint64(s.node(g, raw)))
	}
	return b
}

// nodesOf decodes a blob of node handles that must all be g's.
func (s *session) nodesOf(g *graphState, blob []byte) ([]uintptr, proto.Result) {
	hs, good := proto.DecodeHandles(blob)
	if !good {
		return nil, proto.ErrInvalidValue
	}
	raws := make([]uintptr, len(hs))
	for i, h := range hs {
		n := s.nodes[h]
		if n == nil || n.graph != g {
			return nil, proto.ErrInvalidValue // CUDA's answer for a node of another graph
		}
		raws[i] = n.raw
	}
	return raws, ok
}

// edgesFor checks edge data for n edges: none (default edges) or one
// record each.
func edgesFor(edges []byte, n int) proto.Result {
	if len(edges) != 0 && len(edges) != n*proto.EdgeDataSize {
		return proto.ErrInvalidValue
	}
	return ok
}

// graphDeps resolves a graph to add a node to and the node's
// dependencies, and makes the graph's context current.
func (s *session) graphDeps(h proto.Handle, deps []byte) (*graphState, []uintptr, proto.Result) {
	g, r := s.graph(h)
	if r != ok {
		return nil, nil, r
	}
	raws, r := s.nodesOf(g, deps)
	return g, raws, r
}

// addNode records the node the backend added to g.
func (s *session) addNode(g *graphState, raw uintptr, r proto.Result) (proto.Handle, proto.Result) {
	if r != ok {
		return 0, r
	}
	return s.node(g, raw), ok
}

// captureStream resolves a stream for a capture call: a default stream of
// the current context or one of the client's streams, with its context
// made current.
func (s *session) captureStream(c *proto.Call, h proto.Handle) (streamKey, proto.Result) {
	if h <= 2 {
		ctx, r := s.current(c)
		return streamKey{ctx, uintptr(h)}, r
	}
	st := s.streams[h]
	if st == nil {
		return streamKey{}, proto.ErrInvalidHandle
	}
	return streamKey{st.ctx, st.raw}, s.use(st.ctx)
}

// StreamBeginCaptureV2 begins a capture; a global one begins thread-local
// (see the top of this file).
func (s *session) StreamBeginCaptureV2(c *proto.Call, hs proto.Handle, mode uint32) proto.Result {
	key, r := s.captureStream(c, hs)
	if r != ok {
		return r
	}
	if mode > uint32(proto.CaptureModeRelaxed) {
		return proto.ErrInvalidValue
	}
	m := int32(mode)
	if m == proto.CaptureModeGlobal {
		m = proto.CaptureModeThreadLocal
	}
	if r := s.be.StreamBeginCapture(key.raw, m); r != ok {
		return r
	}
	status, id, _, _, _, r := s.be.StreamCaptureInfo(key.raw)
	if r == ok && status != proto.CaptureActive {
		r = proto.ErrUnknown
	}
	if r != ok {
		s.log.Error("a capture began but its ID cannot be read; ending it", "result", r.String())
		if g, r := s.be.StreamEndCapture(key.raw); r == ok && g != 0 {
			s.be.GraphDestroy(g)
		}
		return proto.ErrUnknown
	}
	s.lastCaptureID++
	cp := &captureState{id: s.lastCaptureID, raw: id, origin: key}
	s.captures[id] = cp
	s.captureOrigins[key] = cp
	return ok
}

// StreamEndCapture ends a capture and gives the client its graph; a
// capture the server invalidated ends with
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph, as in CUDA.
func (s *session) StreamEndCapture(c *proto.Call, hs proto.Handle) (proto.Handle, proto.Result) {
	key, r := s.captureStream(c, hs)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.StreamEndCapture(key.raw)
	cp := s.captureOrigins[key]
	if cp == nil {
		if r == ok && raw != 0 {
			return s.addGraph(raw, key.ctx).h, ok // a capture the session did not see begin
		}
		return 0, r
	}
	if status, _ := s.be.StreamIsCapturing(key.raw); status != proto.CaptureNone && r != ok {
		return 0, r // not ended (another stream of the capture, say)
	}
	if r != ok || raw == 0 {
		s.endCapture(cp, 0)
		return 0, r
	}
	if cp.invalidated {
		s.endCapture(cp, 0)
		if r := s.be.GraphDestroy(raw); r != ok {
			s.log.Warn("destroying the graph of an invalidated capture failed", "result", r.String())
		}
		return 0, proto.ErrStreamCaptureInvalidated
	}
	s.endCapture(cp, raw)
	return s.addGraph(raw, key.ctx).h, ok
}

// endCapture forgets an ended capture. Its graph, if the session knew it,
// is the client's now if it is keep (what cuStreamEndCapture returned),
// and gone otherwise.
func (s *session) endCapture(cp *captureState, keep uintptr) {
	delete(s.captures, cp.raw)
	if s.captureOrigins[cp.origin] == cp {
		delete(s.captureOrigins, cp.origin)
	}
	if g := cp.graph; g != nil {
		g.capture, cp.graph = nil, nil
		if g.raw != keep {
			s.forgetGraph(g)
		}
	}
}

// abandonCapture ends a capture the client left running (its stream or
// context going), destroying its graph.
func (s *session) abandonCapture(cp *captureState) {
	if g, r := s.be.StreamEndCapture(cp.origin.raw); r == ok && g != 0 {
		if r := s.be.GraphDestroy(g); r != ok {
			s.log.Warn("cleanup: cuGraphDestroy of an abandoned capture failed", "result", r.String())
		}
	}
	s.endCapture(cp, 0)
}

// anyInvalidated reports whether the server invalidated a capture under
// way.
func (s *session) anyInvalidated() bool {
	for _, cp := range s.captures {
		if cp.invalidated {
			return true
		}
	}
	return false
}

// capture returns the session's record of the capture with the driver's
// ID raw (one began on another stream and joined through an event).
func (s *session) capture(raw uint64, key streamKey) *captureState {
	cp := s.captures[raw]
	if cp == nil {
		s.lastCaptureID++
		cp = &captureState{id: s.lastCaptureID, raw: raw, origin: key}
		s.captures[raw] = cp
	}
	return cp
}

// StreamGetCaptureInfoV3 answers with the client's capture ID, graph and
// node handles; at most maxDeps dependencies (more is
// CUDA_ERROR_NOT_SUPPORTED).
func (s *session) StreamGetCaptureInfoV3(c *proto.Call, hs proto.Handle, maxDeps uint32) (int32, uint64, proto.Handle, []byte, []byte, proto.Result) {
	key, r := s.captureStream(c, hs)
	if r != ok {
		return 0, 0, 0, nil, nil, r
	}
	status, id, raw, deps, edges, r := s.be.StreamCaptureInfo(key.raw)
	if r != ok || status == proto.CaptureNone {
		return status, 0, 0, nil, nil, r
	}
	cp := s.capture(id, key)
	if cp.invalidated || status != proto.CaptureActive {
		return proto.CaptureInvalidated, cp.id, 0, nil, nil, ok
	}
	if len(deps) > int(min(maxDeps, proto.MaxGraphNodes)) {
		return 0, 0, 0, nil, nil, proto.ErrNotSupported
	}
	if err := edgesFor(edges, len(deps)); err != ok {
		return 0, 0, 0, nil, nil, proto.ErrUnknown
	}
	if allZero(edges) {
		edges = nil
	}
	g := cp.graph
	if g == nil || g.raw != raw {
		g = s.addGraph(raw, key.ctx)
		g.capture, cp.graph = cp, g
	}
	return status, cp.id, g.h, s.nodeHandles(g, deps), edges, ok
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

// ThreadExchangeStreamCaptureMode sets the worker thread's interaction
// mode to the calling client thread's (the interposer sends it before a
// call of a thread whose mode differs from the last one sent).
func (s *session) ThreadExchangeStreamCaptureMode(c *proto.Call, mode uint32) proto.Result {
	if mode > uint32(proto.CaptureModeRelaxed) {
		return proto.ErrInvalidValue
	}
	_, r := s.be.ThreadExchangeStreamCaptureMode(int32(mode))
	s.modeSet = s.modeSet || r == ok
	return r
}

// StreamUpdateCaptureDependenciesV2 takes nodes of the stream's capture
// graph.
func (s *session) StreamUpdateCaptureDependenciesV2(c *proto.Call, hs proto.Handle, deps, edges []byte, flags uint32) proto.Result {
	key, r := s.captureStream(c, hs)
	if r != ok {
		return r
	}
	if flags > proto.CaptureSetDependencies {
		return proto.ErrInvalidValue
	}
	status, _, raw, _, _, r := s.be.StreamCaptureInfo(key.raw)
	if r != ok {
		return r
	}
	if status != proto.CaptureActive {
		return proto.ErrIllegalState
	}
	g := s.graphsByRaw[raw]
	if g == nil {
		return proto.ErrInvalidValue // no node of it was ever given out
	}
	nodes, r := s.nodesOf(g, deps)
	if r != ok {
		return r
	}
	if r := edgesFor(edges, len(nodes)); r != ok {
		return r
	}
	return s.be.StreamUpdateCaptureDependencies(key.raw, nodes, edges, flags)
}

// refuseHostCopy refuses a copy between the client's host memory and the
// device on a capturing stream: replayed, the graph would copy the
// server's staging buffer, not the client's memory. The capture is
// invalidated, as the driver invalidates one for an illegal call; the
// session remembers it whatever the driver does with the query it is
// given to that end (querying a capturing stream is illegal in a capture).
func (s *session) refuseHostCopy(key streamKey) proto.Result {
	if key.raw == 0 || key.raw == 1 {
		return ok // the legacy stream never captures; the driver judges its implicit dependencies
	}
	status, r := s.be.StreamIsCapturing(key.raw)
	if r != ok || status == proto.CaptureNone {
		return r
	}
	if _, id, _, _, _, r := s.be.StreamCaptureInfo(key.raw); r == ok {
		s.capture(id, key).invalidated = true
	}
	s.be.StreamQuery(key.raw)
	if status == proto.CaptureInvalidated {
		return proto.ErrStreamCaptureInvalidated
	}
	return proto.ErrStreamCaptureUnsupported
}

func (s *session) GraphCreate(c *proto.Call, flags uint32) (proto.Handle, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	if flags != 0 {
		return 0, proto.ErrInvalidValue
	}
	raw, r := s.be.GraphCreate(flags)
	if r != ok {
		return 0, r
	}
	return s.addGraph(raw, ctx).h, ok
}

// GraphDestroy destroys a graph and its nodes; a capture's graph is the
// driver's until cuStreamEndCapture (CUDA_ERROR_ILLEGAL_STATE).
func (s *session) GraphDestroy(c *proto.Call, h proto.Handle) proto.Result {
	g, r := s.graph(h)
	if r != ok {
		return r
	}
	if g.capture != nil {
		return proto.ErrIllegalState
	}
	if r := s.be.GraphDestroy(g.raw); r != ok {
		return r
	}
	s.forgetGraph(g)
	return ok
}

func (s *session) GraphClone(c *proto.Call, h proto.Handle) (proto.Handle, proto.Result) {
	g, r := s.graph(h)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.GraphClone(g.raw)
	if r != ok {
		return 0, r
	}
	clone := s.addGraph(raw, g.ctx)
	for e := range g.events {
		clone.events[e] = true
	}
	return clone.h, ok
}

// graphNodes answers cuGraphGetNodes and cuGraphGetRootNodes a page at a
// time: the handles of nodes [offset, offset+maxNodes) (at most
// proto.MaxGraphNodes) and the number of nodes.
func (s *session) graphNodes(h proto.Handle, offset, maxNodes uint64, roots bool) ([]byte, uint64, proto.Result) {
	g, r := s.graph(h)
	if r != ok {
		return nil, 0, r
	}
	raws, r := s.be.GraphNodes(g.raw, roots)
	if r != ok {
		return nil, 0, r
	}
	n := uint64(len(raws))
	start := min(offset, n)
	end := start + min(n-start, maxNodes, proto.MaxGraphNodes)
	return s.nodeHandles(g, raws[start:end]), n, ok
}

func (s *session) GraphGetNodes(c *proto.Call, h proto.Handle, offset, maxNodes uint64) ([]byte, uint64, proto.Result) {
	return s.graphNodes(h, offset, maxNodes, false)
}

func (s *session) GraphGetRootNodes(c *proto.Call, h proto.Handle, offset, maxNodes uint64) ([]byte, uint64, proto.Result) {
	return s.graphNodes(h, offset, maxNodes, true)
}

// GraphAddKernelNodeV2 checks the launch as cuLaunchKernel's, in the
// graph's context.
func (s *session) GraphAddKernelNodeV2(c *proto.Call, hg proto.Handle, deps []byte, hf proto.Handle, gx, gy, gz, bx, by, bz, shared uint32, params []byte) (proto.Handle, proto.Result) {
	g, raws, r := s.graphDeps(hg, deps)
	if r != ok {
		return 0, r
	}
	grid, block := [3]uint32{gx, gy, gz}, [3]uint32{bx, by, bz}
	f, r := s.kernelArgs(g.ctx, hf, grid, block, params)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.GraphAddKernelNode(g.raw, raws, f.raw, grid, block, shared, params)
	return s.addNode(g, raw, r)
}

// GraphAddMemsetNode: height rows of width elements (1, 2 or 4 bytes,
// aligned), pitch bytes apart, all in one of the client's allocations.
func (s *session) GraphAddMemsetNode(c *proto.Call, hg proto.Handle, deps []byte, dst proto.DevPtr, pitch uint64, value, elementSize uint32, width, height uint64) (proto.Handle, proto.Result) {
	g, raws, r := s.graphDeps(hg, deps)
	if r != ok {
		return 0, r
	}
	if elementSize != 1 && elementSize != 2 && elementSize != 4 || uint64(dst)%uint64(elementSize) != 0 ||
		width == 0 || height == 0 {
		return 0, proto.ErrInvalidValue
	}
	over, row := bits.Mul64(width, uint64(elementSize))
	if over != 0 || height > 1 && pitch < row {
		return 0, proto.ErrInvalidValue
	}
	hi, before := bits.Mul64(height-1, pitch)
	n, carry := bits.Add64(before, row, 0)
	if hi != 0 || carry != 0 {
		return 0, proto.ErrInvalidValue
	}
	if dst, r = s.span(dst, n); r != ok {
		return 0, r
	}
	raw, r := s.be.GraphAddMemsetNode(g.raw, raws, dst, pitch, value, elementSize, width, height)
	return s.addNode(g, raw, r)
}

// GraphAddMemcpyNode takes a device-to-device copy whose source and
// destination each lie in one of the client's allocations.
func (s *session) GraphAddMemcpyNode(c *proto.Call, hg proto.Handle, deps []byte, copyParams []byte) (proto.Handle, proto.Result) {
	g, raws, r := s.graphDeps(hg, deps)
	if r != ok {
		return 0, r
	}
	cp, good := proto.DecodeCopy3D(copyParams)
	if !good {
		return 0, proto.ErrInvalidValue
	}
	src, dst, good := cp.Spans()
	if !good {
		return 0, proto.ErrInvalidValue
	}
	// Each end moves with its first byte's translation (relocate.go).
	sp, r := s.span(proto.DevPtr(src[0]), src[1]-src[0])
	if r != ok {
		return 0, r
	}
	dp, r := s.span(proto.DevPtr(dst[0]), dst[1]-dst[0])
	if r != ok {
		return 0, r
	}
	cp.Src += uint64(sp) - src[0]
	cp.Dst += uint64(dp) - dst[0]
	raw, r := s.be.GraphAddMemcpyNode(g.raw, raws, cp)
	return s.addNode(g, raw, r)
}

func (s *session) GraphAddEmptyNode(c *proto.Call, hg proto.Handle, deps []byte) (proto.Handle, proto.Result) {
	g, raws, r := s.graphDeps(hg, deps)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.GraphAddEmptyNode(g.raw, raws)
	return s.addNode(g, raw, r)
}

// eventNode adds an event record or wait node for an event of the graph's
// context.
func (s *session) eventNode(hg proto.Handle, deps []byte, he proto.Handle, wait bool) (proto.Handle, proto.Result) {
	g, raws, r := s.graphDeps(hg, deps)
	if r != ok {
		return 0, r
	}
	e := s.events[he]
	if e == nil || e.ctx != g.ctx {
		return 0, proto.ErrInvalidHandle
	}
	raw, r := s.be.GraphAddEventNode(g.raw, raws, e.raw, wait)
	h, r := s.addNode(g, raw, r)
	if r == ok {
		g.events[e] = true
	}
	return h, r
}

func (s *session) GraphAddEventRecordNode(c *proto.Call, hg proto.Handle, deps []byte, he proto.Handle) (proto.Handle, proto.Result) {
	return s.eventNode(hg, deps, he, false)
}

func (s *session) GraphAddEventWaitNode(c *proto.Call, hg proto.Handle, deps []byte, he proto.Handle) (proto.Handle, proto.Result) {
	return s.eventNode(hg, deps, he, true)
}

// GraphAddDependenciesV2 adds edges between nodes of the graph.
func (s *session) GraphAddDependenciesV2(c *proto.Call, hg proto.Handle, from, to, edges []byte) proto.Result {
	g, r := s.graph(hg)
	if r != ok {
		return r
	}
	fs, r := s.nodesOf(g, from)
	if r != ok {
		return r
	}
	ts, r := s.nodesOf(g, to)
	if r != ok {
		return r
	}
	if len(fs) != len(ts) {
		return proto.ErrInvalidValue
	}
	if r := edgesFor(edges, len(fs)); r != ok {
		return r
	}
	return s.be.GraphAddDependencies(g.raw, fs, ts, edges)
}

// GraphInstantiateWithFlags instantiates a graph of the current context
// that no capture is building. Flags other than auto-free-on-launch and
// node priorities (device launch: the device would need the server's
// handle) are CUDA_ERROR_NOT_SUPPORTED.
func (s *session) GraphInstantiateWithFlags(c *proto.Call, hg proto.Handle, flags uint64) (proto.Handle, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	g := s.graphs[hg]
	if g == nil || g.ctx != ctx {
		return 0, proto.ErrInvalidHandle
	}
	if g.capture != nil {
		return 0, proto.ErrIllegalState
	}
	if flags&^(proto.GraphInstantiateAutoFreeOnLaunch|proto.GraphInstantiateUseNodePriority) != 0 {
		return 0, proto.ErrNotSupported
	}
	raw, r := s.be.GraphInstantiate(g.raw, flags)
	if r != ok {
		return 0, r
	}
	e := &execState{h: s.handle(), raw: raw, ctx: ctx, graph: g, events: map[*eventState]bool{}}
	for ev := range g.events {
		e.events[ev] = true
	}
	s.execs[e.h] = e
	return e.h, ok
}

// execStream resolves an exec of the current context and a stream of it.
func (s *session) execStream(c *proto.Call, he, hs proto.Handle) (*execState, uintptr, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return nil, 0, r
	}
	e := s.execs[he]
	if e == nil || e.ctx != ctx {
		return nil, 0, proto.ErrInvalidHandle
	}
	st, r := s.stream(ctx, hs)
	return e, st, r
}

func (s *session) GraphLaunch(c *proto.Call, he, hs proto.Handle) proto.Result {
	e, st, r := s.execStream(c, he, hs)
	if r != ok {
		return r
	}
	return s.be.GraphLaunch(e.raw, st)
}

func (s *session) GraphUpload(c *proto.Call, he, hs proto.Handle) proto.Result {
	e, st, r := s.execStream(c, he, hs)
	if r != ok {
		return r
	}
	return s.be.GraphUpload(e.raw, st)
}

func (s *session) GraphExecDestroy(c *proto.Call, he proto.Handle) proto.Result {
	e := s.execs[he]
	if e == nil {
		return proto.ErrInvalidHandle
	}
	if r := s.use(e.ctx); r != ok {
		return r
	}
	if r := s.be.GraphExecDestroy(e.raw); r != ok {
		return r
	}
	delete(s.execs, he)
	return ok
}

// GraphExecKernelNodeSetParamsV2 takes a node of the graph the exec was
// instantiated from, while that graph lives, and a launch checked as
// cuLaunchKernel's in the exec's context.
func (s *session) GraphExecKernelNodeSetParamsV2(c *proto.Call, he, hn, hf proto.Handle, gx, gy, gz, bx, by, bz, shared uint32, params []byte) proto.Result {
	e := s.execs[he]
	if e == nil {
		return proto.ErrInvalidHandle
	}
	n := s.nodes[hn]
	if n == nil || n.graph != e.graph {
		return proto.ErrInvalidValue
	}
	grid, block := [3]uint32{gx, gy, gz}, [3]uint32{bx, by, bz}
	f, r := s.kernelArgs(e.ctx, hf, grid, block, params)
	if r != ok {
		return r
	}
	return s.be.GraphExecKernelNodeSetParams(e.raw, n.raw, f.raw, grid, block, shared, params)
}

// holdsGraphs reports whether ctx has graphs or execs (a module of it
// cannot be unloaded then).
func (s *session) holdsGraphs(ctx *ctxState) bool {
	for _, g := range s.graphs {
		if g.ctx == ctx {
			return true
		}
	}
	for _, e := range s.execs {
		if e.ctx == ctx {
			return true
		}
	}
	return false
}

// eventInGraph reports whether an event node of a graph or exec names e.
func (s *session) eventInGraph(e *eventState) bool {
	for _, g := range s.graphs {
		if g.events[e] {
			return true
		}
	}
	for _, x := range s.execs {
		if x.events[e] {
			return true
		}
	}
	return false
}

// destroyGraphs ends ctx's captures and destroys its execs and graphs, for
// destroyCtx (ctx is current).
func (s *session) destroyGraphs(ctx *ctxState, f *freed) {
	for _, cp := range s.capturesOf(ctx) {
		if s.curOK && s.cur == ctx.raw {
			s.abandonCapture(cp)
		} else {
			s.endCapture(cp, 0)
		}
		f.captures++
	}
	f.execs += destroyOwned(s, ctx, s.execs, "cuGraphExecDestroy",
		func(e *execState) (*ctxState, uintptr) { return e.ctx, e.raw }, s.be.GraphExecDestroy,
		func(h proto.Handle, _ *execState) { delete(s.execs, h) })
	f.graphs += destroyOwned(s, ctx, s.graphs, "cuGraphDestroy",
		func(g *graphState) (*ctxState, uintptr) { return g.ctx, g.raw }, s.be.GraphDestroy,
		func(_ proto.Handle, g *graphState) { s.forgetGraph(g) })
}

// capturesOf returns the captures begun on ctx's streams, oldest first.
func (s *session) capturesOf(ctx *ctxState) []*captureState {
	var cs []*captureState
	for key, cp := range s.captureOrigins {
		if key.ctx == ctx {
			cs = append(cs, cp)
		}
	}
	for i := range cs { // few: insertion sort by ID
		for j := i; j > 0 && cs[j].id < cs[j-1].id; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	return cs
}
