package server_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

func floats(fs []float32) []byte {
	b := make([]byte, 4*len(fs))
	for i, f := range fs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func TestVecAdd(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	_, fns := module(t, cl, ctx)
	st, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)

	const n = 300_001 // past the fake's inner chunk
	x, y := make([]float32, n), make([]float32, n)
	for i := range n {
		x[i], y[i] = float32(i), 0.5*float32(i)+1
	}
	a, b, c := alloc(t, cl, ctx, 4*n), alloc(t, cl, ctx, 4*n), alloc(t, cl, ctx, 4*n)
	upload(t, cl, ctx, a, floats(x))
	upload(t, cl, ctx, b, floats(y))
	ok(t, "launch vecadd_f32 (sent)")(cl.LaunchKernel(ctx, fns["vecadd_f32"], (n+255)/256, 1, 1, 256, 1, 1, 0, st, vecaddParams(a, b, c, n)))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
	got := download(t, cl, ctx, c, 4*n)
	for i := range n {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != x[i]+y[i] {
			t.Fatalf("c[%d] = %v, want %v", i, v, x[i]+y[i])
		}
	}

	ok(t, "launch fill_u32 (sent)")(launch1(cl, ctx, fns["fill_u32"], 0, fillParams(c+8, 0xcafef00d, 3)))
	got = download(t, cl, ctx, c, 24)
	for i, want := range []uint32{0, 1, 0xcafef00d, 0xcafef00d, 0xcafef00d, 5} {
		v := binary.LittleEndian.Uint32(got[4*i:])
		if i == 0 || i == 1 || i == 5 {
			want = math.Float32bits(x[i] + y[i])
		}
		if v != want {
			t.Errorf("after fill_u32, word %d is %#x, want %#x", i, v, want)
		}
	}

	launches := e.fake.Launches()
	if len(launches) != 2 || launches[0].Kernel != "vecadd_f32" || launches[0].Grid[0] != (n+255)/256 || launches[0].Block[0] != 256 {
		t.Errorf("the fake saw launches %+v", launches)
	}
}

// TestLaunchChecks: the server refuses bad launches before the backend.
func TestLaunchChecks(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	_, fns := module(t, cl, ctx)
	other, r, err := cl.CtxCreateV2(ctx, 0, 0)
	ok(t, "cuCtxCreate")(r, err)
	otherStream, r, err := cl.StreamCreate(other, 0)
	ok(t, "cuStreamCreate in the other context")(r, err)
	p := alloc(t, cl, ctx, 64)

	tests := []struct {
		name   string
		f      proto.Handle
		stream proto.Handle
		grid   uint32
		params []byte
		want   proto.Result
	}{
		{"params one byte short", fns["fill_u32"], 0, 1, fillParams(p, 0, 1)[:23], proto.ErrInvalidValue},
		{"params one byte long", fns["fill_u32"], 0, 1, append(fillParams(p, 0, 1), 0), proto.ErrInvalidValue},
		{"params for no parameters", fns["noop"], 0, 1, []byte{0}, proto.ErrInvalidValue},
		{"an empty grid", fns["noop"], 0, 0, nil, proto.ErrInvalidValue},
		{"a stream of another context", fns["noop"], otherStream, 1, nil, proto.ErrInvalidHandle},
		{"not a function", ctx, 0, 1, nil, proto.ErrInvalidHandle},
		{"right", fns["noop"], 2, 1, nil, proto.Success},
	}
	for _, tt := range tests {
		before := len(e.fake.Launches())
		ok(t, tt.name+" (sent)")(cl.LaunchKernel(ctx, tt.f, tt.grid, 1, 1, 1, 1, 1, 0, tt.stream, tt.params))
		is(t, tt.name, tt.want)(cl.CtxSynchronize(ctx))
		ran := len(e.fake.Launches()) - before
		if (tt.want == proto.Success) != (ran == 1) {
			t.Errorf("%s: the backend ran %d launches", tt.name, ran)
		}
	}
	ok(t, "launch in the other context (sent)")(launch1(cl, other, fns["noop"], 0, nil))
	is(t, "a function of another context", proto.ErrInvalidHandle)(cl.CtxSynchronize(other))

	for i, want := range [][2]uint64{{0, 8}, {8, 4}, {16, 8}} {
		off, size, r, err := cl.FuncGetParamInfo(ctx, fns["fill_u32"], uint64(i))
		ok(t, "cuFuncGetParamInfo")(r, err)
		if off != want[0] || size != want[1] {
			t.Errorf("fill_u32 parameter %d at %d size %d, want %v", i, off, size, want)
		}
	}
	_, _, r, err = cl.FuncGetParamInfo(ctx, fns["fill_u32"], 3)
	is(t, "a parameter past the last", proto.ErrInvalidValue)(r, err)
	v, r, err := cl.FuncGetAttribute(ctx, 0, fns["noop"])
	ok(t, "cuFuncGetAttribute")(r, err)
	if v != 1024 {
		t.Errorf("max threads per block %d, want 1024", v)
	}
}

// TestAsyncErrors: an async failure comes back once, at the next call
// that waits.
func TestAsyncErrors(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	_, fns := module(t, cl, ctx)
	p := alloc(t, cl, ctx, 16)

	ok(t, "launch fault (sent)")(launch1(cl, ctx, fns["fault"], 0, nil))
	is(t, "the next sync call", proto.ErrIllegalAddress)(cl.CtxSynchronize(ctx))
	ok(t, "the one after")(cl.CtxSynchronize(ctx))

	// The first failure wins; later async calls still run.
	ok(t, "launch fault (sent)")(launch1(cl, ctx, fns["fault"], 0, nil))
	ok(t, "memset past the end (sent)")(cl.MemsetD8V2(ctx, p, 1, 17))
	ok(t, "memset (sent)")(cl.MemsetD8V2(ctx, p, 9, 16))
	_, r, err := cl.MemAllocV2(ctx, 16)
	is(t, "an alloc after the failures", proto.ErrIllegalAddress)(r, err)
	if got := download(t, cl, ctx, p, 16); got[15] != 9 {
		t.Errorf("the memset after the failures did not run: %v", got)
	}
	// A sync call that streams data returns the deferred error and keeps
	// the stream in step.
	ok(t, "launch fault (sent)")(launch1(cl, ctx, fns["fault"], 0, nil))
	is(t, "an upload after a fault", proto.ErrIllegalAddress)(cl.MemcpyHtoDV2(ctx, p, make([]byte, 16), 16))
	upload(t, cl, ctx, p, make([]byte, 16))
}

func TestContexts(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2), srv: insecure()})
	a, b := e.dial(t, ""), e.dial(t, "")
	ha := primary(t, a)
	if again := primary(t, a); again != ha {
		t.Errorf("retaining twice gave %#x and %#x", ha, again)
	}
	primary(t, b)
	if st := e.fake.Stats(); st.Contexts != 2 {
		t.Errorf("two clients' primary contexts: the backend holds %d contexts, want 2 (one each)", st.Contexts)
	}
	flags, active, r, err := a.DevicePrimaryCtxGetState(0, 0)
	ok(t, "cuDevicePrimaryCtxGetState")(r, err)
	if flags != 0 || active != 1 {
		t.Errorf("state: flags %#x active %d, want 0 and 1", flags, active)
	}
	_, active, r, err = a.DevicePrimaryCtxGetState(0, 1)
	ok(t, "cuDevicePrimaryCtxGetState(1)")(r, err)
	if active != 0 {
		t.Error("device 1's primary context is active before any retain")
	}
	ok(t, "cuDevicePrimaryCtxSetFlags")(a.DevicePrimaryCtxSetFlagsV2(0, 1, 4))
	flags, _, _, _ = a.DevicePrimaryCtxGetState(0, 1)
	if flags != 4 {
		t.Errorf("flags %#x after setting 4", flags)
	}
	h1, r, err := a.DevicePrimaryCtxRetain(0, 1)
	ok(t, "retain device 1")(r, err)
	dev, r, err := a.CtxGetDevice(h1)
	ok(t, "cuCtxGetDevice")(r, err)
	if dev != 1 {
		t.Errorf("cuCtxGetDevice: %d, want 1", dev)
	}

	// Release: the first keeps it, the second destroys it and its memory.
	p := alloc(t, a, ha, 64)
	ok(t, "release 1 of 2")(a.DevicePrimaryCtxReleaseV2(0, 0))
	ok(t, "still usable")(a.MemcpyHtoDV2(ha, p, make([]byte, 8), 8))
	ok(t, "release 2 of 2")(a.DevicePrimaryCtxReleaseV2(0, 0))
	is(t, "a released context", proto.ErrInvalidContext)(a.CtxSynchronize(ha))
	is(t, "a third release", proto.ErrInvalidContext)(a.DevicePrimaryCtxReleaseV2(0, 0))
	ha2 := primary(t, a)
	if ha2 == ha {
		t.Error("a new primary context reused the old handle")
	}
	is(t, "memory of a destroyed context", proto.ErrInvalidValue)(a.MemcpyHtoDV2(ha2, p, make([]byte, 8), 8))

	// Reset destroys at once.
	alloc(t, a, ha2, 64)
	ok(t, "cuDevicePrimaryCtxReset")(a.DevicePrimaryCtxResetV2(0, 0))
	is(t, "a reset context", proto.ErrInvalidContext)(a.CtxSynchronize(ha2))

	// Created contexts.
	c, r, err := a.CtxCreateV2(0, 0, 1)
	ok(t, "cuCtxCreate")(r, err)
	alloc(t, a, c, 64)
	is(t, "destroying a primary context", proto.ErrInvalidContext)(a.CtxDestroyV2(c, h1))
	ok(t, "cuCtxDestroy")(a.CtxDestroyV2(0, c))
	is(t, "a destroyed context", proto.ErrInvalidContext)(a.CtxSynchronize(c))
	_, r, err = a.CtxCreateV2(0, 0, 2)
	is(t, "a context on a device that is not there", proto.ErrInvalidDevice)(r, err)
	if st := e.fake.Stats(); st.Allocations != 0 || st.ImplicitFrees != 0 {
		t.Errorf("after releases, resets and destroys: %+v; want no allocation, none freed implicitly", st)
	}
}
