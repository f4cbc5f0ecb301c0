package server_test

import (
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

// The calls PyTorch's initialisation and kernels make: stream priorities,
// flags and capture status, events with flags, function attributes and
// occupancy, each with another client's handles refused.
func TestPriorityStreamsAndFunctionAttributes(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	other := e.dial(t, e.token(t, "other", 0))

	_, _, r, err := cl.CtxGetStreamPriorityRange(0)
	is(t, "priority range without a context", proto.ErrInvalidContext)(r, err)
	ctx := primary(t, cl)
	octx := primary(t, other)
	least, greatest, r, err := cl.CtxGetStreamPriorityRange(ctx)
	ok(t, "cuCtxGetStreamPriorityRange")(r, err)
	if least != fakecuda.LeastStreamPriority || greatest != fakecuda.GreatestStreamPriority {
		t.Errorf("priority range %d, %d; want %d, %d", least, greatest, fakecuda.LeastStreamPriority, fakecuda.GreatestStreamPriority)
	}

	hi, r, err := cl.StreamCreateWithPriority(ctx, 1, -3)
	ok(t, "cuStreamCreateWithPriority")(r, err)
	clamped, r, err := cl.StreamCreateWithPriority(ctx, 0, -100)
	ok(t, "cuStreamCreateWithPriority(-100)")(r, err)
	for _, c := range []struct {
		s     proto.Handle
		prio  int32
		flags uint32
	}{{hi, -3, 1}, {clamped, greatest, 0}, {0, 0, 0}, {1, 0, 0}} {
		p, r, err := cl.StreamGetPriority(ctx, c.s)
		ok(t, "cuStreamGetPriority")(r, err)
		f, r, err := cl.StreamGetFlags(ctx, c.s)
		ok(t, "cuStreamGetFlags")(r, err)
		st, r, err := cl.StreamIsCapturing(ctx, c.s)
		ok(t, "cuStreamIsCapturing")(r, err)
		if p != c.prio || f != c.flags || st != 0 {
			t.Errorf("stream %#x: priority %d flags %d capture %d; want %d, %d, 0", c.s, p, f, st, c.prio, c.flags)
		}
	}
	_, r, err = other.StreamGetPriority(octx, hi)
	is(t, "another client's stream priority", proto.ErrInvalidHandle)(r, err)
	_, r, err = other.StreamIsCapturing(octx, hi)
	is(t, "another client's stream capture status", proto.ErrInvalidHandle)(r, err)

	ev, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)
	ok(t, "cuEventRecordWithFlags (sent)")(cl.EventRecordWithFlags(ctx, ev, hi, 0))
	ok(t, "cuEventSynchronize")(cl.EventSynchronize(ctx, ev))
	ok(t, "cuEventRecordWithFlags (sent)")(cl.EventRecordWithFlags(ctx, ev, hi, 7))
	is(t, "bad flags, reported by the next call", proto.ErrInvalidValue)(cl.EventSynchronize(ctx, ev))
	ok(t, "another client's event (sent)")(other.EventRecordWithFlags(octx, ev, 0, 0))
	is(t, "another client's event, reported by the next call", proto.ErrInvalidHandle)(other.CtxSynchronize(octx))

	_, fns := module(t, cl, ctx)
	f := fns["vecadd_f32"]
	// The client caches the answer until the set (calls.def: uncache).
	_, r, err = cl.FuncGetAttribute(ctx, 8, f)
	ok(t, "cuFuncGetAttribute(MAX_DYNAMIC_SHARED) before the set")(r, err)
	ok(t, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED)")(cl.FuncSetAttribute(ctx, f, 8, 100000))
	v, r, err := cl.FuncGetAttribute(ctx, 8, f)
	ok(t, "cuFuncGetAttribute(MAX_DYNAMIC_SHARED)")(r, err)
	if v != 100000 {
		t.Errorf("MAX_DYNAMIC_SHARED_SIZE_BYTES %d after setting 100000", v)
	}
	is(t, "a read-only attribute", proto.ErrInvalidValue)(cl.FuncSetAttribute(ctx, f, 4, 1))
	is(t, "another client's function", proto.ErrInvalidHandle)(other.FuncSetAttribute(octx, f, 8, 0))

	n, r, err := cl.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(ctx, f, 256, 0, 0)
	ok(t, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")(r, err)
	if n != 8 {
		t.Errorf("occupancy of 256 threads: %d blocks, want the fake's 8", n)
	}
	_, r, err = cl.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(ctx, f, 0, 0, 0)
	is(t, "occupancy of an empty block", proto.ErrInvalidValue)(r, err)
	_, r, err = other.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(octx, f, 256, 0, 0)
	is(t, "occupancy of another client's function", proto.ErrInvalidHandle)(r, err)

	smem, r, err := cl.OccupancyAvailableDynamicSMemPerBlock(ctx, f, 2, 256)
	ok(t, "cuOccupancyAvailableDynamicSMemPerBlock")(r, err)
	if smem != 233472/2-1024 {
		t.Errorf("dynamic shared memory for 2 blocks: %d, want the fake's %d", smem, 233472/2-1024)
	}
	_, r, err = cl.OccupancyAvailableDynamicSMemPerBlock(ctx, f, 0, 256)
	is(t, "dynamic shared memory for no block", proto.ErrInvalidValue)(r, err)
	_, r, err = other.OccupancyAvailableDynamicSMemPerBlock(octx, f, 1, 256)
	is(t, "dynamic shared memory of another client's function", proto.ErrInvalidHandle)(r, err)

	ok(t, "cuStreamDestroy")(cl.StreamDestroyV2(ctx, hi))
	_, r, err = cl.StreamGetFlags(ctx, hi)
	is(t, "a destroyed stream's flags", proto.ErrInvalidHandle)(r, err)
}
