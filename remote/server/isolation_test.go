package server_test

import (
	"bytes"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

// TestClientsCannotTouchEachOther: B names A's pointers and handles in
// every kind of call and is refused; A's data survives.
func TestClientsCannotTouchEachOther(t *testing.T) {
	e := start(t, envConfig{})
	a := e.dial(t, e.token(t, "job-a", 0))
	b := e.dial(t, e.token(t, "job-b", 0))

	actx := primary(t, a)
	// Handles are per client and both start at 0x1000: A burns 64 so that
	// its objects' handles are numbers B never holds.
	for range 64 {
		ev, r, err := a.EventCreate(actx, 0)
		ok(t, "A cuEventCreate")(r, err)
		ok(t, "A cuEventDestroy")(a.EventDestroyV2(actx, ev))
	}
	secret := bytes.Repeat([]byte("A's secret data."), 256) // 4 KiB
	ap := alloc(t, a, actx, uint64(len(secret)))
	upload(t, a, actx, ap, secret)
	amod, afns := module(t, a, actx)
	astream, r, err := a.StreamCreate(actx, 0)
	ok(t, "A cuStreamCreate")(r, err)
	aevent, r, err := a.EventCreate(actx, 0)
	ok(t, "A cuEventCreate")(r, err)
	aglobal, _, r, err := a.ModuleGetGlobalV2(actx, amod, "counter")
	ok(t, "A cuModuleGetGlobal")(r, err)

	bctx := primary(t, b)
	bp := alloc(t, b, bctx, 4096)
	if bctx != actx {
		t.Logf("B's context handle %#x differs from A's %#x", bctx, actx)
	}

	// Synchronous calls on A's memory.
	buf := make([]byte, 16)
	is(t, "B reads A's memory", proto.ErrInvalidValue)(b.MemcpyDtoHV2(bctx, buf, ap, 16))
	is(t, "B reads A's memory, at an offset", proto.ErrInvalidValue)(b.MemcpyDtoHV2(bctx, buf, ap+100, 16))
	is(t, "B reads A's global", proto.ErrInvalidValue)(b.MemcpyDtoHV2(bctx, buf[:4], aglobal, 4))
	is(t, "B writes A's memory", proto.ErrInvalidValue)(b.MemcpyHtoDV2(bctx, ap, make([]byte, 16), 16))
	is(t, "B copies A's memory into its own", proto.ErrInvalidValue)(b.MemcpyDtoDV2(bctx, bp, ap, 16))
	is(t, "B copies over A's memory", proto.ErrInvalidValue)(b.MemcpyDtoDV2(bctx, ap, bp, 16))
	is(t, "B reads A's memory on a stream", proto.ErrInvalidValue)(b.MemcpyDtoHAsyncV2(bctx, buf, ap, 16, 0))
	is(t, "B frees A's memory", proto.ErrInvalidValue)(b.MemFreeV2(bctx, ap))
	_, _, r, err = b.MemGetAddressRangeV2(bctx, ap)
	is(t, "B asks for A's address range", proto.ErrInvalidValue)(r, err)
	// B's own allocation, one byte too far.
	is(t, "B overruns its own allocation", proto.ErrInvalidValue)(b.MemcpyDtoHV2(bctx, make([]byte, 4097), bp, 4097))
	is(t, "B reads past its allocation's end", proto.ErrInvalidValue)(b.MemcpyDtoHV2(bctx, buf[:1], bp+4096, 1))

	// Async calls on A's memory: refused at the next sync call.
	asyncs := []struct {
		name string
		call func() (proto.Result, error)
	}{
		{"memset D8", func() (proto.Result, error) { return b.MemsetD8V2(bctx, ap, 0, 16) }},
		{"memset D32", func() (proto.Result, error) { return b.MemsetD32Async(bctx, ap, 0, 4, 0) }},
		{"async upload", func() (proto.Result, error) { return b.MemcpyHtoDAsyncV2(bctx, ap, make([]byte, 16), 16, 0) }},
		{"async D2D", func() (proto.Result, error) { return b.MemcpyDtoDAsyncV2(bctx, ap, bp, 16, 0) }},
		{"launch A's function", func() (proto.Result, error) {
			return launch1(b, bctx, afns["fill_u32"], 0, fillParams(bp, 1, 1))
		}},
		{"launch on A's stream", func() (proto.Result, error) {
			_, bfns := module(t, b, bctx)
			return launch1(b, bctx, bfns["noop"], astream, nil)
		}},
		{"record A's event", func() (proto.Result, error) { return b.EventRecord(bctx, aevent, 0) }},
		{"wait on A's event", func() (proto.Result, error) { return b.StreamWaitEvent(bctx, 0, aevent, 0) }},
	}
	for _, c := range asyncs {
		ok(t, "B "+c.name+" (sent)")(c.call())
		r, err := b.CtxSynchronize(bctx)
		if err != nil || r == proto.Success {
			t.Errorf("B %s: the next sync call got %v, %v; want a refusal", c.name, r, err)
		}
	}

	// A's handles in B's calls.
	_, r, err = b.ModuleGetFunction(bctx, amod, "fill_u32")
	is(t, "B looks up in A's module", proto.ErrInvalidHandle)(r, err)
	is(t, "B unloads A's module", proto.ErrInvalidHandle)(b.ModuleUnload(bctx, amod))
	_, _, r, err = b.FuncGetParamInfo(bctx, afns["vecadd_f32"], 0)
	is(t, "B asks about A's function", proto.ErrInvalidHandle)(r, err)
	is(t, "B syncs A's stream", proto.ErrInvalidHandle)(b.StreamSynchronize(bctx, astream))
	is(t, "B destroys A's stream", proto.ErrInvalidHandle)(b.StreamDestroyV2(bctx, astream))
	is(t, "B destroys A's event", proto.ErrInvalidHandle)(b.EventDestroyV2(bctx, aevent))
	is(t, "B queries A's event", proto.ErrInvalidHandle)(b.EventQuery(bctx, aevent))
	// A's stream handle as B's current context, and B's context as a stream.
	_, r, err = b.MemAllocV2(astream, 16)
	is(t, "B allocates in a context that is not its own", proto.ErrInvalidContext)(r, err)
	is(t, "B uses a context handle as a stream", proto.ErrInvalidHandle)(b.StreamSynchronize(bctx, bctx))
	is(t, "B destroys A's context", proto.ErrInvalidContext)(b.CtxDestroyV2(bctx, astream))

	// A kernel of B's that dereferences A's memory faults in B's context.
	_, bfns := module(t, b, bctx)
	ok(t, "B launch fill_u32 on A's address (sent)")(launch1(b, bctx, bfns["fill_u32"], 0, fillParams(ap, 0, 4)))
	is(t, "B's faulting kernel, at the next sync call", proto.ErrIllegalAddress)(b.CtxSynchronize(bctx))

	if got := download(t, a, actx, ap, len(secret)); !bytes.Equal(got, secret) {
		t.Error("A's data changed")
	}
	r, err = a.StreamSynchronize(actx, astream)
	ok(t, "A still has its stream")(r, err)
	ok(t, "A still has its event")(a.EventQuery(actx, aevent))
}

// TestHandleKinds: a handle of another kind is refused; handles are never
// reused.
func TestHandleKinds(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	m, fns := module(t, cl, ctx)
	st, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)
	ev, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)

	is(t, "a module as a stream", proto.ErrInvalidHandle)(cl.StreamQuery(ctx, m))
	is(t, "a stream as an event", proto.ErrInvalidHandle)(cl.EventQuery(ctx, st))
	is(t, "an event as a module", proto.ErrInvalidHandle)(cl.ModuleUnload(ctx, ev))
	_, _, r, err = cl.FuncGetParamInfo(ctx, m, 0)
	is(t, "a module as a function", proto.ErrInvalidHandle)(r, err)
	is(t, "a stream as a context", proto.ErrInvalidContext)(cl.CtxSynchronize(st))
	is(t, "no context", proto.ErrInvalidContext)(cl.CtxSynchronize(0))
	is(t, "the default stream cannot be destroyed", proto.ErrInvalidHandle)(cl.StreamDestroyV2(ctx, 1))
	for _, def := range []proto.Handle{0, 1, 2} {
		ok(t, "a default stream")(cl.StreamSynchronize(ctx, def))
	}

	ok(t, "cuStreamDestroy")(cl.StreamDestroyV2(ctx, st))
	is(t, "a destroyed stream", proto.ErrInvalidHandle)(cl.StreamSynchronize(ctx, st))
	st2, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)
	if st2 == st || st2 < 0x1000 {
		t.Errorf("new stream handle %#x: want a fresh one (the old was %#x)", st2, st)
	}
	ok(t, "cuModuleUnload")(cl.ModuleUnload(ctx, m))
	ok(t, "launch after unload (sent)")(launch1(cl, ctx, fns["noop"], 0, nil))
	is(t, "a function of an unloaded module", proto.ErrInvalidHandle)(cl.CtxSynchronize(ctx))
}
