package fakecuda

import (
	"encoding/binary"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

func fill(dst proto.DevPtr, v uint32, n uint64) []byte {
	p := make([]byte, 24)
	binary.LittleEndian.PutUint64(p, uint64(dst))
	binary.LittleEndian.PutUint32(p[8:], v)
	binary.LittleEndian.PutUint64(p[16:], n)
	return p
}

func word(t *testing.T, b *Backend, p proto.DevPtr) uint32 {
	t.Helper()
	w := make([]byte, 4)
	if r := b.MemcpyDtoH(w, p, 0); r != proto.Success {
		t.Fatalf("MemcpyDtoH: %v", r)
	}
	return binary.LittleEndian.Uint32(w)
}

// TestCaptureRecordsAndReplays: captured work is recorded, not run; the
// exec replays it on memory as it is at launch; a host-to-device copy is
// recorded with the bytes it had (why the server refuses them).
func TestCaptureRecordsAndReplays(t *testing.T) {
	b := newFake(t)
	locked(func() {
		ok := func(what string, r proto.Result) {
			t.Helper()
			if r != proto.Success {
				t.Fatalf("%s: %v", what, r)
			}
		}
		ctx := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
		ok("CtxSetCurrent", b.CtxSetCurrent(ctx))
		mod := must[uintptr](t, "module")(b.ModuleLoadData(ModuleImage([]Kernel{FillU32}, nil)))
		fn := must[uintptr](t, "function")(b.ModuleGetFunction(mod, "fill_u32"))
		s := must[uintptr](t, "stream")(b.StreamCreate(0))
		p := must[proto.DevPtr](t, "alloc")(b.MemAlloc(64))
		q := must[proto.DevPtr](t, "alloc")(b.MemAlloc(64))

		ok("StreamBeginCapture", b.StreamBeginCapture(s, proto.CaptureModeThreadLocal))
		if r := b.StreamBeginCapture(s, proto.CaptureModeThreadLocal); r != proto.ErrIllegalState {
			t.Errorf("a second capture of the stream: %v", r)
		}
		ok("captured launch", b.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, fill(p, 5, 1)))
		ok("captured host copy", b.MemcpyHtoD(p+4, []byte{9, 0, 0, 0}, s, true))
		ok("captured device copy", b.MemcpyDtoD(q, p, 8, s, true))
		if word(t, b, p) != 0 || len(b.Launches()) != 0 {
			t.Fatal("captured work ran")
		}
		if _, r := b.MemAlloc(8); r != proto.ErrStreamCaptureUnsupported {
			t.Errorf("an allocation in the thread's capture: %v", r)
		}
		if st, _ := b.StreamIsCapturing(s); st != proto.CaptureInvalidated {
			t.Fatalf("after an unsafe call the capture is %d", st)
		}
		if _, r := b.StreamEndCapture(s); r != proto.ErrStreamCaptureInvalidated {
			t.Fatalf("ending an invalidated capture: %v", r)
		}

		ok("StreamBeginCapture", b.StreamBeginCapture(s, proto.CaptureModeRelaxed))
		ok("captured launch", b.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, fill(p, 5, 1)))
		src := []byte{9, 0, 0, 0}
		ok("captured host copy", b.MemcpyHtoD(p+4, src, s, true))
		src[0] = 10 // a staging buffer reused: the graph keeps 9
		ok("captured device copy", b.MemcpyDtoD(q, p, 8, s, true))
		if _, r := b.MemAlloc(8); r != proto.Success {
			t.Errorf("an allocation in a relaxed capture: %v", r)
		}
		g := must[uintptr](t, "StreamEndCapture")(b.StreamEndCapture(s))
		nodes := must[[]uintptr](t, "GraphNodes")(b.GraphNodes(g, false))
		roots := must[[]uintptr](t, "GraphNodes")(b.GraphNodes(g, true))
		if len(nodes) != 3 || len(roots) != 1 || roots[0] != nodes[0] {
			t.Fatalf("nodes %v roots %v", nodes, roots)
		}
		e := must[uintptr](t, "GraphInstantiate")(b.GraphInstantiate(g, 0))
		ok("GraphDestroy", b.GraphDestroy(g)) // the exec stands alone
		for _, v := range []uint32{5, 6} {
			if v == 6 {
				ok("new parameters", b.GraphExecKernelNodeSetParams(e, nodes[0], fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, fill(p, 6, 1)))
			}
			ok("MemsetD32", b.MemsetD32(q, 0, 4, 0, false))
			ok("GraphLaunch", b.GraphLaunch(e, s))
			if word(t, b, q) != v || word(t, b, q+4) != 9 {
				t.Errorf("replay: q = %d, %d; want %d, 9", word(t, b, q), word(t, b, q+4), v)
			}
		}
		if l := b.Launches(); len(l) != 2 || l[1].Kernel != "fill_u32" {
			t.Errorf("launches %+v", l)
		}
		ok("GraphExecDestroy", b.GraphExecDestroy(e))
		ok("CtxDestroy", b.CtxDestroy(ctx))
		if st := b.Stats(); st.Graphs != 0 || st.GraphExecs != 0 || st.Captures != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestCaptureRules: what a capture forbids, and how streams join one.
func TestCaptureRules(t *testing.T) {
	b := newFake(t)
	locked(func() {
		ctx := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
		b.CtxSetCurrent(ctx)
		s1 := must[uintptr](t, "stream")(b.StreamCreate(0))
		s2 := must[uintptr](t, "stream")(b.StreamCreate(0))
		ev := must[uintptr](t, "event")(b.EventCreate(0))
		p := must[proto.DevPtr](t, "alloc")(b.MemAlloc(64))
		for _, tc := range []struct {
			name string
			call func() proto.Result
			want proto.Result
		}{
			{"synchronize the stream", func() proto.Result { return b.StreamSynchronize(s1) }, proto.ErrStreamCaptureUnsupported},
			{"synchronize the context", b.CtxSynchronize, proto.ErrStreamCaptureUnsupported},
			{"copy to the host", func() proto.Result { return b.MemcpyDtoH(make([]byte, 4), p, s1) }, proto.ErrStreamCaptureUnsupported},
			{"wait for an uncaptured event", func() proto.Result { return b.StreamWaitEvent(s1, ev, 0) }, proto.ErrStreamCaptureIsolation},
		} {
			if r := b.StreamBeginCapture(s1, proto.CaptureModeRelaxed); r != proto.Success {
				t.Fatal(r)
			}
			if r := tc.call(); r != tc.want {
				t.Errorf("%s: %v, want %v", tc.name, r, tc.want)
			}
			if _, r := b.StreamEndCapture(s1); r != proto.ErrStreamCaptureInvalidated {
				t.Errorf("%s: the capture ended with %v, want invalidated", tc.name, r)
			}
		}

		// s2 joins through an event; only s1 may end the capture.
		b.StreamBeginCapture(s1, proto.CaptureModeGlobal)
		b.MemsetD8(p, 1, 4, s1, true)
		b.EventRecord(ev, s1)
		if r := b.EventSynchronize(ev); r != proto.ErrCapturedEvent {
			t.Errorf("waiting for a captured event: %v", r)
		}
		b.StreamWaitEvent(s2, ev, 0)
		st, id2, g2, deps, _, _ := b.StreamCaptureInfo(s2)
		_, id1, g1, _, _, _ := b.StreamCaptureInfo(s1)
		if st != proto.CaptureActive || id1 != id2 || g1 != g2 || len(deps) != 1 {
			t.Fatalf("s2 joined: status %d capture %d graph %#x deps %d; s1 %d %#x", st, id2, g2, len(deps), id1, g1)
		}
		b.MemsetD8(p+4, 2, 4, s2, true)
		b.EventRecord(ev, s2)
		b.StreamWaitEvent(s1, ev, 0)
		if _, r := b.StreamEndCapture(s2); r != proto.ErrStreamCaptureUnmatched {
			t.Errorf("ending on the joined stream: %v", r)
		}
		if _, r := b.StreamEndCapture(s1); r != proto.ErrStreamCaptureInvalidated {
			t.Errorf("after an unmatched end: %v", r)
		}
		if r := b.StreamBeginCapture(streamLegacy, proto.CaptureModeGlobal); r != proto.ErrStreamCaptureUnsupported {
			t.Errorf("capturing the legacy stream: %v", r)
		}
	})
}
