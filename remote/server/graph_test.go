package server_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

// capture begins capturing stream st of ctx.
func capture(t *testing.T, cl *proto.Client, ctx, st proto.Handle, mode int32) {
	t.Helper()
	ok(t, "cuStreamBeginCapture")(cl.StreamBeginCaptureV2(ctx, st, uint32(mode)))
}

// captureStatus is cuStreamIsCapturing's answer.
func captureStatus(t *testing.T, cl *proto.Client, ctx, st proto.Handle) int32 {
	t.Helper()
	status, r, err := cl.StreamIsCapturing(ctx, st)
	ok(t, "cuStreamIsCapturing")(r, err)
	return status
}

func handles(t *testing.T, b []byte) []proto.Handle {
	t.Helper()
	hs, good := proto.DecodeHandles(b)
	if !good {
		t.Fatalf("a node list of %d bytes", len(b))
	}
	return hs
}

func graphNodes(t *testing.T, cl *proto.Client, ctx, g proto.Handle) []proto.Handle {
	t.Helper()
	b, n, r, err := cl.GraphGetNodes(ctx, g, 0, proto.MaxGraphNodes)
	ok(t, "cuGraphGetNodes")(r, err)
	hs := handles(t, b)
	if uint64(len(hs)) != n {
		t.Fatalf("cuGraphGetNodes: %d nodes of %d", len(hs), n)
	}
	return hs
}

// graphClient is a client with its primary context, the test module and
// a non-blocking stream.
func graphClient(t *testing.T, e *env) (*proto.Client, proto.Handle, proto.Handle, map[string]proto.Handle, proto.Handle) {
	t.Helper()
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	mod, fns := module(t, cl, ctx)
	st, r, err := cl.StreamCreate(ctx, 1)
	ok(t, "cuStreamCreate")(r, err)
	return cl, ctx, mod, fns, st
}

func sum(t *testing.T, got []byte, i int) float32 {
	t.Helper()
	return math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
}

// TestCaptureReplay is graph-captured inference: a kernel, a memset and a
// device copy captured once, then replayed with new input written to the
// same buffers; the replays compute with the new data.
func TestCaptureReplay(t *testing.T) {
	e := start(t, envConfig{})
	cl, ctx, _, fns, st := graphClient(t, e)
	const n = 1000
	a, b, c, out, flag := alloc(t, cl, ctx, 4*n), alloc(t, cl, ctx, 4*n), alloc(t, cl, ctx, 4*n), alloc(t, cl, ctx, 4*n), alloc(t, cl, ctx, 64)

	capture(t, cl, ctx, st, proto.CaptureModeGlobal)
	status, id, g, deps, _, r, err := cl.StreamGetCaptureInfoV3(ctx, st, proto.MaxGraphNodes)
	ok(t, "cuStreamGetCaptureInfo")(r, err)
	if status != proto.CaptureActive || id != 1 || g < 0x1000 || len(deps) != 0 {
		t.Fatalf("capture info: status %d id %d graph %#x deps %d; want active, the client's first ID, a handle, none", status, id, g, len(deps))
	}
	ok(t, "vecadd (captured)")(cl.LaunchKernel(ctx, fns["vecadd_f32"], 4, 1, 1, 256, 1, 1, 0, st, vecaddParams(a, b, c, n)))
	ok(t, "memset (captured)")(cl.MemsetD32Async(ctx, flag, 0xabcd, 4, st))
	ok(t, "copy (captured)")(cl.MemcpyDtoDAsyncV2(ctx, out, c, 4*n, st))
	if len(e.fake.Launches()) != 0 {
		t.Fatal("a captured kernel ran")
	}
	_, _, _, deps, edges, r, err := cl.StreamGetCaptureInfoV3(ctx, st, proto.MaxGraphNodes)
	ok(t, "cuStreamGetCaptureInfo")(r, err)
	if len(handles(t, deps)) != 1 || len(edges) != 0 {
		t.Fatalf("after three captured calls: %d dependencies, %d bytes of edge data; want 1 and default edges", len(deps)/8, len(edges))
	}
	got, r, err := cl.StreamEndCapture(ctx, st)
	ok(t, "cuStreamEndCapture")(r, err)
	if got != g {
		t.Fatalf("cuStreamEndCapture returned graph %#x, the capture info %#x", got, g)
	}
	nodes := graphNodes(t, cl, ctx, g)
	if len(nodes) != 3 || nodes[2] != handles(t, deps)[0] {
		t.Fatalf("the graph's nodes %v; want 3, the last the capture's dependency %#x", nodes, handles(t, deps)[0])
	}
	roots, total, r, err := cl.GraphGetRootNodes(ctx, g, 0, 10)
	ok(t, "cuGraphGetRootNodes")(r, err)
	if total != 1 || handles(t, roots)[0] != nodes[0] {
		t.Fatalf("roots %v of %d, want the first node", handles(t, roots), total)
	}

	exec, r, err := cl.GraphInstantiateWithFlags(ctx, g, proto.GraphInstantiateAutoFreeOnLaunch)
	ok(t, "cuGraphInstantiateWithFlags")(r, err)
	for round := range 3 {
		xs, ys := make([]float32, n), make([]float32, n)
		for i := range n {
			xs[i], ys[i] = float32(round*1000+i), 0.25
		}
		upload(t, cl, ctx, a, floats(xs))
		upload(t, cl, ctx, b, floats(ys))
		ok(t, "cuGraphLaunch")(cl.GraphLaunch(ctx, exec, st))
		ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
		res := download(t, cl, ctx, out, 4*n)
		for i := range n {
			if v := sum(t, res, i); v != xs[i]+ys[i] {
				t.Fatalf("replay %d: out[%d] = %v, want %v", round, i, v, xs[i]+ys[i])
			}
		}
	}
	if f := binary.LittleEndian.Uint32(download(t, cl, ctx, flag, 4)); f != 0xabcd {
		t.Errorf("the captured memset wrote %#x", f)
	}
	if l := e.fake.Launches(); len(l) != 3 || l[0].Kernel != "vecadd_f32" || l[0].Grid[0] != 4 {
		t.Errorf("the replays ran %+v, want three vecadd_f32 launches of the captured geometry", l)
	}
	ok(t, "cuGraphExecDestroy")(cl.GraphExecDestroy(ctx, exec))
	ok(t, "cuGraphDestroy")(cl.GraphDestroy(ctx, g))
	is(t, "cuGraphLaunch of a destroyed exec (sent)", proto.Success)(cl.GraphLaunch(ctx, exec, st))
	is(t, "the next call", proto.ErrInvalidHandle)(cl.CtxSynchronize(ctx))
	if st := e.fake.Stats(); st.Graphs != 0 || st.GraphExecs != 0 {
		t.Errorf("the backend holds %d graphs and %d execs", st.Graphs, st.GraphExecs)
	}
}

// TestCaptureRefusesHostCopies: a copy of the client's host memory on a
// capturing stream is refused, and the capture invalidated; the stream
// works again after cuStreamEndCapture.
func TestCaptureRefusesHostCopies(t *testing.T) {
	e := start(t, envConfig{})
	cl, ctx, _, _, st := graphClient(t, e)
	p := alloc(t, cl, ctx, 4096)
	for _, tc := range []struct {
		name string
		copy func() (proto.Result, error)
		want proto.Result // what the copy returns (an async one: the next call)
	}{
		{"host to device", func() (proto.Result, error) {
			if r, err := cl.MemcpyHtoDAsyncV2(ctx, p, make([]byte, 4096), 4096, st); r != proto.Success || err != nil {
				return r, err
			}
			_, r, err := cl.CtxGetDevice(ctx) // the async copy's result comes with the next reply
			return r, err
		}, proto.ErrStreamCaptureUnsupported},
		{"device to host", func() (proto.Result, error) {
			return cl.MemcpyDtoHAsyncV2(ctx, make([]byte, 64), p, 64, st)
		}, proto.ErrStreamCaptureUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			capture(t, cl, ctx, st, proto.CaptureModeThreadLocal)
			is(t, "the copy", tc.want)(tc.copy())
			if s := captureStatus(t, cl, ctx, st); s != proto.CaptureInvalidated {
				t.Errorf("after the copy the capture status is %d, want invalidated", s)
			}
			g, r, err := cl.StreamEndCapture(ctx, st)
			is(t, "cuStreamEndCapture", proto.ErrStreamCaptureInvalidated)(r, err)
			if g != 0 {
				t.Errorf("an invalidated capture gave graph %#x", g)
			}
			if s := e.fake.Stats(); s.Graphs != 0 || s.Captures != 0 {
				t.Errorf("the backend holds %d graphs and %d captures", s.Graphs, s.Captures)
			}
			upload(t, cl, ctx, p, make([]byte, 16)) // the stream is usable again
			ok(t, "cuMemcpyHtoDAsync after the capture")(cl.MemcpyHtoDAsyncV2(ctx, p, []byte{1, 2, 3, 4}, 4, st))
			ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
		})
	}
}

// TestCaptureGlobalStaysInTheClient: a global capture holds the client's
// own threads to it (its one worker thread), not another client's: the
// server begins it thread-local.
func TestCaptureGlobalStaysInTheClient(t *testing.T) {
	e := start(t, envConfig{})
	cl, ctx, _, _, st := graphClient(t, e)
	other := e.dial(t, e.token(t, "other", 0))
	octx := primary(t, other)

	capture(t, cl, ctx, st, proto.CaptureModeGlobal)
	_, r, err := other.MemAllocV2(octx, 64)
	ok(t, "another client's allocation during the capture")(r, err)
	// The client's own unsafe call is refused, unless its thread is relaxed.
	ok(t, "relax the thread")(cl.ThreadExchangeStreamCaptureMode(ctx, uint32(proto.CaptureModeRelaxed)))
	_, r, err = cl.MemAllocV2(ctx, 64)
	ok(t, "an allocation of a relaxed thread")(r, err)
	ok(t, "back to global")(cl.ThreadExchangeStreamCaptureMode(ctx, uint32(proto.CaptureModeGlobal)))
	_, r, err = cl.MemAllocV2(ctx, 64)
	is(t, "an allocation in a global capture", proto.ErrStreamCaptureUnsupported)(r, err)
	_, r, err = cl.StreamEndCapture(ctx, st)
	is(t, "cuStreamEndCapture", proto.ErrStreamCaptureInvalidated)(r, err)
	is(t, "a mode past relaxed (sent)", proto.Success)(cl.ThreadExchangeStreamCaptureMode(ctx, 3))
	is(t, "the next call", proto.ErrInvalidValue)(cl.CtxSynchronize(ctx))
}

// TestGraphHandles: graphs, execs and nodes are the client's own, checked
// on every use.
func TestGraphHandles(t *testing.T) {
	e := start(t, envConfig{})
	cl, ctx, _, _, st := graphClient(t, e)
	g, r, err := cl.GraphCreate(ctx, 0)
	ok(t, "cuGraphCreate")(r, err)
	n1, r, err := cl.GraphAddEmptyNode(ctx, g, nil)
	ok(t, "cuGraphAddEmptyNode")(r, err)
	g2, r, err := cl.GraphCreate(ctx, 0)
	ok(t, "cuGraphCreate")(r, err)
	exec, r, err := cl.GraphInstantiateWithFlags(ctx, g, 0)
	ok(t, "cuGraphInstantiateWithFlags")(r, err)
	intruder := e.dial(t, e.token(t, "intruder", 0))
	ictx := primary(t, intruder)
	ist, r, err := intruder.StreamCreate(ictx, 1)
	ok(t, "cuStreamCreate")(r, err)

	check := func(name string, want proto.Result, call func() (proto.Result, error)) {
		t.Helper()
		is(t, name, want)(call())
	}
	result := func(_ proto.Handle, r proto.Result, err error) (proto.Result, error) { return r, err }
	check("another client's graph", proto.ErrInvalidHandle, func() (proto.Result, error) {
		return result(intruder.GraphInstantiateWithFlags(ictx, g, 0))
	})
	check("another client's graph destroyed", proto.ErrInvalidHandle, func() (proto.Result, error) { return intruder.GraphDestroy(ictx, g) })
	check("another client's exec", proto.ErrInvalidHandle, func() (proto.Result, error) { return intruder.GraphExecDestroy(ictx, exec) })
	check("another client's exec launched (then a wait)", proto.ErrInvalidHandle, func() (proto.Result, error) {
		intruder.GraphLaunch(ictx, exec, ist)
		return intruder.StreamSynchronize(ictx, ist)
	})
	check("another client's node as a dependency", proto.ErrInvalidHandle, func() (proto.Result, error) {
		return result(intruder.GraphAddEmptyNode(ictx, n1, proto.EncodeHandles([]proto.Handle{n1})))
	})
	check("a node of another graph", proto.ErrInvalidValue, func() (proto.Result, error) {
		return result(cl.GraphAddEmptyNode(ctx, g2, proto.EncodeHandles([]proto.Handle{n1})))
	})
	check("a node list that is no list", proto.ErrInvalidValue, func() (proto.Result, error) {
		return result(cl.GraphAddEmptyNode(ctx, g, []byte{1, 2, 3}))
	})
	check("an exec as a graph", proto.ErrInvalidHandle, func() (proto.Result, error) { return cl.GraphDestroy(ctx, exec) })
	check("a graph as an exec", proto.ErrInvalidHandle, func() (proto.Result, error) { return cl.GraphExecDestroy(ctx, g) })
	check("a stream as a graph", proto.ErrInvalidHandle, func() (proto.Result, error) {
		_, _, r, err := cl.GraphGetNodes(ctx, st, 0, 10)
		return r, err
	})
	check("graph flags", proto.ErrInvalidValue, func() (proto.Result, error) { return result(cl.GraphCreate(ctx, 1)) })
	check("device launch", proto.ErrNotSupported, func() (proto.Result, error) {
		return result(cl.GraphInstantiateWithFlags(ctx, g, 4))
	})
	check("edges of the wrong length", proto.ErrInvalidValue, func() (proto.Result, error) {
		n2, _, _ := cl.GraphAddEmptyNode(ctx, g, nil)
		return cl.GraphAddDependenciesV2(ctx, g, proto.EncodeHandles([]proto.Handle{n1}), proto.EncodeHandles([]proto.Handle{n2}), make([]byte, 7))
	})
	check("an exec node of another graph", proto.ErrInvalidValue, func() (proto.Result, error) {
		n3, _, _ := cl.GraphAddEmptyNode(ctx, g2, nil)
		return cl.GraphExecKernelNodeSetParamsV2(ctx, exec, n3, 0, 1, 1, 1, 1, 1, 1, 0, nil)
	})

	// A capture's graph is the driver's until the capture ends.
	capture(t, cl, ctx, st, proto.CaptureModeRelaxed)
	_, _, cg, _, _, r, err := cl.StreamGetCaptureInfoV3(ctx, st, proto.MaxGraphNodes)
	ok(t, "cuStreamGetCaptureInfo")(r, err)
	check("destroying a capture's graph", proto.ErrIllegalState, func() (proto.Result, error) { return cl.GraphDestroy(ctx, cg) })
	check("instantiating a capture's graph", proto.ErrIllegalState, func() (proto.Result, error) {
		return result(cl.GraphInstantiateWithFlags(ctx, cg, 0))
	})
	check("a second capture of the stream", proto.ErrIllegalState, func() (proto.Result, error) {
		return cl.StreamBeginCaptureV2(ctx, st, uint32(proto.CaptureModeRelaxed))
	})
	check("a capture mode past relaxed", proto.ErrInvalidValue, func() (proto.Result, error) {
		return cl.StreamBeginCaptureV2(ctx, 0, 3)
	})
	check("updating dependencies with another graph's node", proto.ErrInvalidValue, func() (proto.Result, error) {
		return cl.StreamUpdateCaptureDependenciesV2(ctx, st, proto.EncodeHandles([]proto.Handle{n1}), nil, proto.CaptureSetDependencies)
	})
	check("the legacy stream", proto.ErrStreamCaptureUnsupported, func() (proto.Result, error) {
		return cl.StreamBeginCaptureV2(ctx, 1, uint32(proto.CaptureModeRelaxed))
	})
	// The intruder's own stream and graph calls still work.
	_, r, err = intruder.GraphCreate(ictx, 0)
	ok(t, "the intruder's own graph")(r, err)
}

// TestGraphCleanup: graphs, execs and a capture under way are destroyed
// when the client goes, by the server (nothing for the backend to free
// with the context).
func TestGraphCleanup(t *testing.T) {
	e := start(t, envConfig{})
	cl, ctx, _, fns, st := graphClient(t, e)
	p := alloc(t, cl, ctx, 64)
	ev, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)
	g, r, err := cl.GraphCreate(ctx, 0)
	ok(t, "cuGraphCreate")(r, err)
	_, r, err = cl.GraphAddKernelNodeV2(ctx, g, nil, fns["fill_u32"], 1, 1, 1, 1, 1, 1, 0, fillParams(p, 1, 4))
	ok(t, "cuGraphAddKernelNode")(r, err)
	_, r, err = cl.GraphAddEventRecordNode(ctx, g, nil, ev)
	ok(t, "cuGraphAddEventRecordNode")(r, err)
	_, r, err = cl.GraphInstantiateWithFlags(ctx, g, 0)
	ok(t, "cuGraphInstantiateWithFlags")(r, err)
	capture(t, cl, ctx, st, proto.CaptureModeGlobal)
	ok(t, "a captured launch")(launch1(cl, ctx, fns["fill_u32"], st, fillParams(p, 2, 4)))
	if s := e.fake.Stats(); s.Graphs != 2 || s.GraphExecs != 1 || s.Captures != 1 {
		t.Fatalf("before the client goes the backend holds %+v", s)
	}
	cl.Close()
	e.waitClean(t)
	if s := e.fake.Stats(); s.Graphs != 0 || s.GraphExecs != 0 || s.Captures != 0 {
		t.Errorf("after the client went the backend holds %+v", s)
	}
}

// TestGraphNodes: explicit graphs, node by node, and what the server checks
// in each node.
func TestGraphNodes(t *testing.T) {
	e := start(t, envConfig{})
	cl, ctx, mod, fns, st := graphClient(t, e)
	x, y, z := alloc(t, cl, ctx, 4096), alloc(t, cl, ctx, 4096), alloc(t, cl, ctx, 4096)
	upload(t, cl, ctx, x, make([]byte, 4096))
	upload(t, cl, ctx, z, make([]byte, 4096))
	g, r, err := cl.GraphCreate(ctx, 0)
	ok(t, "cuGraphCreate")(r, err)

	// A 2D memset: 4 rows of 8 16-bit elements, 64 bytes apart.
	ms, r, err := cl.GraphAddMemsetNode(ctx, g, nil, x, 64, 0xbeef, 2, 8, 4)
	ok(t, "cuGraphAddMemsetNode")(r, err)
	k, r, err := cl.GraphAddKernelNodeV2(ctx, g, proto.EncodeHandles([]proto.Handle{ms}), fns["fill_u32"], 1, 1, 1, 32, 1, 1, 0, fillParams(y, 7, 16))
	ok(t, "cuGraphAddKernelNode")(r, err)
	// Two rows of 16 bytes of x (row pitch 64) to z at byte 8 (pitch 32).
	cp := proto.Copy3D{Src: uint64(x), SrcPitch: 64, Dst: uint64(z), DstX: 8, DstPitch: 32, Width: 16, Height: 2, Depth: 1}
	_, r, err = cl.GraphAddMemcpyNode(ctx, g, proto.EncodeHandles([]proto.Handle{k}), cp.Encode())
	ok(t, "cuGraphAddMemcpyNode")(r, err)
	for _, n := range []uint64{1, 2, 3} {
		b, total, r, err := cl.GraphGetNodes(ctx, g, n-1, 1)
		ok(t, "cuGraphGetNodes")(r, err)
		if total != 3 || len(handles(t, b)) != 1 {
			t.Fatalf("page %d: %d nodes of %d", n, len(b)/8, total)
		}
	}
	if b, total, r, err := cl.GraphGetNodes(ctx, g, 5, 10); r != proto.Success || err != nil || len(b) != 0 || total != 3 {
		t.Errorf("a page past the end: %d bytes of %d nodes, %v %v", len(b), total, r, err)
	}
	exec, r, err := cl.GraphInstantiateWithFlags(ctx, g, 0)
	ok(t, "cuGraphInstantiateWithFlags")(r, err)
	ok(t, "cuGraphLaunch")(cl.GraphLaunch(ctx, exec, st))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
	xs := download(t, cl, ctx, x, 256)
	for row := range 4 {
		for i := range 8 {
			if v := binary.LittleEndian.Uint16(xs[64*row+2*i:]); v != 0xbeef {
				t.Fatalf("memset row %d element %d = %#x", row, i, v)
			}
		}
		if v := binary.LittleEndian.Uint16(xs[64*row+16:]); v != 0 {
			t.Fatalf("memset wrote past its row %d: %#x", row, v)
		}
	}
	if v := binary.LittleEndian.Uint32(download(t, cl, ctx, y+60, 4)); v != 7 {
		t.Errorf("the kernel node wrote %d", v)
	}
	zs := download(t, cl, ctx, z, 64)
	if binary.LittleEndian.Uint16(zs[8:]) != 0xbeef || binary.LittleEndian.Uint16(zs[40:]) != 0xbeef || zs[7] != 0 || zs[24] != 0 {
		t.Errorf("the 2D copy wrote % x", zs)
	}
	// The exec's kernel node, relaunched with new parameters.
	ok(t, "cuGraphExecKernelNodeSetParams")(cl.GraphExecKernelNodeSetParamsV2(ctx, exec, k, fns["fill_u32"], 1, 1, 1, 32, 1, 1, 0, fillParams(y, 9, 16)))
	ok(t, "cuGraphLaunch")(cl.GraphLaunch(ctx, exec, st))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
	if v := binary.LittleEndian.Uint32(download(t, cl, ctx, y, 4)); v != 9 {
		t.Errorf("after new parameters the kernel node wrote %d", v)
	}
	// A clone is a graph of its own, with its own nodes.
	clone, r, err := cl.GraphClone(ctx, g)
	ok(t, "cuGraphClone")(r, err)
	if cn := graphNodes(t, cl, ctx, clone); len(cn) != 3 || cn[0] == ms {
		t.Errorf("the clone's nodes %v", cn)
	}

	for _, tc := range []struct {
		name string
		call func() (proto.Handle, proto.Result, error)
		want proto.Result
	}{
		{"memset past the allocation", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddMemsetNode(ctx, g, nil, x+4000, 64, 1, 4, 8, 3) // the third row from 4128
		}, proto.ErrInvalidValue},
		{"memset rows wider than their pitch", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddMemsetNode(ctx, g, nil, x, 8, 1, 4, 8, 2)
		}, proto.ErrInvalidValue},
		{"memset element size 3", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddMemsetNode(ctx, g, nil, x, 0, 1, 3, 8, 1)
		}, proto.ErrInvalidValue},
		{"memset misaligned", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddMemsetNode(ctx, g, nil, x+2, 0, 1, 4, 8, 1)
		}, proto.ErrInvalidValue},
		{"memset of memory not the client's", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddMemsetNode(ctx, g, nil, 0x1000, 0, 1, 4, 8, 1)
		}, proto.ErrInvalidValue},
		{"memset rows overflowing", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddMemsetNode(ctx, g, nil, x, math.MaxUint64/2, 1, 4, 8, 4)
		}, proto.ErrInvalidValue},
		{"copy past the source", func() (proto.Handle, proto.Result, error) {
			c := proto.Copy3D{Src: uint64(x) + 4090, Dst: uint64(z), Width: 16, Height: 1, Depth: 1}
			return cl.GraphAddMemcpyNode(ctx, g, nil, c.Encode())
		}, proto.ErrInvalidValue},
		{"copy planes past the destination", func() (proto.Handle, proto.Result, error) {
			c := proto.Copy3D{Src: uint64(x), SrcPitch: 16, SrcHeight: 2, Dst: uint64(z), DstPitch: 2048, DstHeight: 2, Width: 16, Height: 2, Depth: 2} // the last row at 6144
			return cl.GraphAddMemcpyNode(ctx, g, nil, c.Encode())
		}, proto.ErrInvalidValue},
		{"copy rows wider than their pitch", func() (proto.Handle, proto.Result, error) {
			c := proto.Copy3D{Src: uint64(x), SrcPitch: 8, Dst: uint64(z), DstPitch: 64, Width: 16, Height: 2, Depth: 1}
			return cl.GraphAddMemcpyNode(ctx, g, nil, c.Encode())
		}, proto.ErrInvalidValue},
		{"copy parameters cut short", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddMemcpyNode(ctx, g, nil, cp.Encode()[:64])
		}, proto.ErrInvalidValue},
		{"kernel parameters of the wrong size", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddKernelNodeV2(ctx, g, nil, fns["fill_u32"], 1, 1, 1, 1, 1, 1, 0, make([]byte, 20))
		}, proto.ErrInvalidValue},
		{"kernel of an empty grid", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddKernelNodeV2(ctx, g, nil, fns["fill_u32"], 0, 1, 1, 1, 1, 1, 0, fillParams(y, 1, 1))
		}, proto.ErrInvalidValue},
		{"kernel that is no function", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddKernelNodeV2(ctx, g, nil, mod, 1, 1, 1, 1, 1, 1, 0, nil)
		}, proto.ErrInvalidHandle},
		{"event that is no event", func() (proto.Handle, proto.Result, error) {
			return cl.GraphAddEventWaitNode(ctx, g, nil, st)
		}, proto.ErrInvalidHandle},
	} {
		if _, r, err := tc.call(); r != tc.want || err != nil {
			t.Errorf("%s: %v %v, want %v", tc.name, r, err, tc.want)
		}
	}

	// What a graph runs outlives it: no unloading its module, no
	// destroying its events, while the context holds graphs.
	ev, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)
	_, r, err = cl.GraphAddEventRecordNode(ctx, clone, nil, ev)
	ok(t, "cuGraphAddEventRecordNode")(r, err)
	is(t, "cuEventDestroy of an event node's event", proto.ErrIllegalState)(cl.EventDestroyV2(ctx, ev))
	is(t, "cuModuleUnload with graphs", proto.ErrIllegalState)(cl.ModuleUnload(ctx, mod))
	ok(t, "cuGraphDestroy")(cl.GraphDestroy(ctx, clone))
	ok(t, "cuEventDestroy once no node names it")(cl.EventDestroyV2(ctx, ev))
	ok(t, "cuGraphExecDestroy")(cl.GraphExecDestroy(ctx, exec))
	ok(t, "cuGraphDestroy")(cl.GraphDestroy(ctx, g))
	ok(t, "cuModuleUnload once no graph is left")(cl.ModuleUnload(ctx, mod))
}

// TestCaptureAcrossStreams: a second stream joins a capture through an
// event recorded in it, and the capture's dependencies can be set by node.
func TestCaptureAcrossStreams(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	_, fns := module(t, cl, ctx)
	s1, r, err := cl.StreamCreate(ctx, 1)
	ok(t, "cuStreamCreate")(r, err)
	s2, r, err := cl.StreamCreate(ctx, 1)
	ok(t, "cuStreamCreate")(r, err)
	ev, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)
	p := alloc(t, cl, ctx, 64)

	capture(t, cl, ctx, s1, proto.CaptureModeThreadLocal)
	ok(t, "launch on s1")(launch1(cl, ctx, fns["fill_u32"], s1, fillParams(p, 1, 4)))
	ok(t, "record on s1")(cl.EventRecord(ctx, ev, s1))
	ok(t, "s2 waits")(cl.StreamWaitEvent(ctx, s2, ev, 0))
	status, id2, _, _, _, r, err := cl.StreamGetCaptureInfoV3(ctx, s2, proto.MaxGraphNodes)
	ok(t, "cuStreamGetCaptureInfo of s2")(r, err)
	_, id1, _, deps, _, r, err := cl.StreamGetCaptureInfoV3(ctx, s1, proto.MaxGraphNodes)
	ok(t, "cuStreamGetCaptureInfo of s1")(r, err)
	if status != proto.CaptureActive || id1 != id2 {
		t.Fatalf("s2: status %d capture %d; s1's capture %d", status, id2, id1)
	}
	ok(t, "launch on s2")(launch1(cl, ctx, fns["fill_u32"], s2, fillParams(p+16, 2, 4)))
	ok(t, "record on s2")(cl.EventRecord(ctx, ev, s2))
	ok(t, "s1 joins s2")(cl.StreamWaitEvent(ctx, s1, ev, 0))
	ok(t, "back to the first launch's dependency")(cl.StreamUpdateCaptureDependenciesV2(ctx, s1, deps, nil, proto.CaptureSetDependencies))
	is(t, "ending the capture on the stream that joined", proto.ErrStreamCaptureUnmatched)(func() (proto.Result, error) {
		_, r, err := cl.StreamEndCapture(ctx, s2)
		return r, err
	}())
	_, r, err = cl.StreamEndCapture(ctx, s1)
	is(t, "cuStreamEndCapture after an unmatched end", proto.ErrStreamCaptureInvalidated)(r, err)
	if s := e.fake.Stats(); s.Graphs != 0 || s.Captures != 0 {
		t.Errorf("the backend holds %+v", s)
	}
	// A stream destroyed while it captures takes its capture with it.
	capture(t, cl, ctx, s1, proto.CaptureModeRelaxed)
	ok(t, "cuStreamDestroy while capturing")(cl.StreamDestroyV2(ctx, s1))
	if s := e.fake.Stats(); s.Graphs != 0 || s.Captures != 0 || s.ImplicitFrees != 0 {
		t.Errorf("after destroying the capturing stream the backend holds %+v", s)
	}
}
