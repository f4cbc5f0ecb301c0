package server_test

import (
	"bytes"
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

func attr(id uint32, words ...uint32) proto.LaunchAttr {
	a := proto.LaunchAttr{ID: id}
	for i, w := range words {
		a.SetU32(i, w)
	}
	return a
}

func eventAttr(id uint32, ev proto.Handle, flags uint32) proto.LaunchAttr {
	a := proto.LaunchAttr{ID: id}
	a.SetU64(uint64(ev))
	a.SetU32(2, flags)
	return a
}

func attrs(as ...proto.LaunchAttr) []byte { return proto.EncodeLaunchAttrs(as) }

// cuLaunchKernelEx: allow-listed attributes reach the backend rebuilt from
// their defined bytes, events mapped to the backend's; attributes off the
// allow-list, another client's events and functions are refused.
func TestLaunchKernelEx(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	other := e.dial(t, e.token(t, "other", 0))
	ctx := primary(t, cl)
	octx := primary(t, other)
	_, fns := module(t, cl, ctx)
	_, ofns := module(t, other, octx)
	f := fns["fill_u32"]
	st, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)
	p := alloc(t, cl, ctx, 64)
	ev, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)
	oev, r, err := other.EventCreate(octx, 0)
	ok(t, "cuEventCreate (other)")(r, err)
	// A function handle past every handle the other client has.
	_, fns2 := module(t, cl, ctx)

	// Junk in the bytes past a value's own is not passed on.
	cluster := attr(proto.LaunchAttrClusterDimension, 2, 1, 1)
	cluster.Value[40] = 0xee
	good := attrs(cluster, attr(proto.LaunchAttrIgnore), attr(proto.LaunchAttrPriority, 3),
		attr(proto.LaunchAttrProgrammaticStreamSerialization, 1), attr(proto.LaunchAttrMemSyncDomainMap, 0x0100),
		eventAttr(proto.LaunchAttrLaunchCompletionEvent, ev, 0))
	ok(t, "cuLaunchKernelEx (sent)")(cl.LaunchKernelEx(ctx, f, 4, 1, 1, 32, 1, 1, 0, st, good, fillParams(p, 7, 16)))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
	got := download(t, cl, ctx, p, 64)
	if got[0] != 7 || got[60] != 7 {
		t.Errorf("fill_u32 through cuLaunchKernelEx: %x", got)
	}
	ls := e.fake.Launches()
	last := ls[len(ls)-1]
	if last.Kernel != "fill_u32" || last.Grid != [3]uint32{4, 1, 1} || len(last.Attrs) != 5 {
		t.Fatalf("the fake saw %+v", last)
	}
	want := cluster
	want.Value[40] = 0
	if last.Attrs[0] != want || last.Attrs[1].U32(0) != 3 || last.Attrs[3].Value[1] != 1 {
		t.Errorf("attributes as the backend saw them: %+v", last.Attrs)
	}
	if evRaw := last.Attrs[4].U64(); evRaw == 0 || evRaw == uint64(ev) {
		t.Errorf("the event attribute reached the backend as %#x (client handle %#x), not the backend's event", evRaw, ev)
	}

	// Without attributes, with a blob of parameters of the right size only.
	ok(t, "cuLaunchKernelEx without attributes (sent)")(cl.LaunchKernelEx(ctx, f, 1, 1, 1, 1, 1, 1, 0, 0, nil, fillParams(p, 9, 1)))
	ok(t, "cuCtxSynchronize")(cl.CtxSynchronize(ctx))
	if got := download(t, cl, ctx, p, 4); got[0] != 9 {
		t.Errorf("word 0 after a launch without attributes: %x", got)
	}

	for _, tc := range []struct {
		name   string
		cl     *proto.Client
		ctx, f proto.Handle
		attrs  []byte
		params []byte
		want   proto.Result
	}{
		{"an access policy window (a device pointer)", cl, ctx, f, attrs(attr(proto.LaunchAttrAccessPolicyWindow, 0x1000, 0, 64)), fillParams(p, 1, 1), proto.ErrNotSupported},
		{"a stream-only attribute", cl, ctx, f, attrs(attr(proto.LaunchAttrSynchronizationPolicy, 1)), fillParams(p, 1, 1), proto.ErrNotSupported},
		{"a graph attribute", cl, ctx, f, attrs(attr(proto.LaunchAttrDeviceUpdatableKernelNode, 1)), fillParams(p, 1, 1), proto.ErrNotSupported},
		{"an unknown attribute", cl, ctx, f, attrs(attr(99, 1)), fillParams(p, 1, 1), proto.ErrNotSupported},
		{"an allowed attribute then a refused one", cl, ctx, f, attrs(cluster, attr(15)), fillParams(p, 1, 1), proto.ErrNotSupported},
		{"another client's event", cl, ctx, f, attrs(eventAttr(proto.LaunchAttrProgrammaticEvent, oev, 0)), fillParams(p, 1, 1), proto.ErrInvalidHandle},
		{"a default stream as an event", cl, ctx, f, attrs(eventAttr(proto.LaunchAttrLaunchCompletionEvent, 1, 0)), fillParams(p, 1, 1), proto.ErrInvalidHandle},
		{"a partial attribute record", cl, ctx, f, attrs(cluster)[:71], fillParams(p, 1, 1), proto.ErrInvalidValue},
		{"too many attributes", cl, ctx, f, bytes.Repeat(attrs(attr(proto.LaunchAttrPriority, 0)), proto.MaxLaunchAttrs+1), fillParams(p, 1, 1), proto.ErrInvalidValue},
		{"parameters of the wrong size", cl, ctx, f, nil, fillParams(p, 1, 1)[:20], proto.ErrInvalidValue},
		{"another client's function", other, octx, fns2["fill_u32"], nil, fillParams(p, 1, 1), proto.ErrInvalidHandle},
		{"the other client's own function on the first's memory", other, octx, ofns["fill_u32"], attrs(cluster), fillParams(p, 1, 1), proto.Success},
	} {
		n := len(e.fake.Launches())
		ok(t, tc.name+" (sent)")(tc.cl.LaunchKernelEx(tc.ctx, tc.f, 2, 1, 1, 1, 1, 1, 0, 0, tc.attrs, tc.params))
		if tc.want == proto.Success {
			// The kernel runs in the other client's context: the fake
			// faults on an address that is not its own.
			is(t, tc.name+", reported by the next call", proto.ErrIllegalAddress)(tc.cl.CtxSynchronize(tc.ctx))
			continue
		}
		is(t, tc.name+", reported by the next call", tc.want)(tc.cl.CtxSynchronize(tc.ctx))
		if len(e.fake.Launches()) != n {
			t.Errorf("%s reached the backend", tc.name)
		}
	}
	if got := download(t, cl, ctx, p, 4); got[0] != 9 {
		t.Errorf("word 0 changed by refused launches: %x", got)
	}
}

// The cluster occupancy calls and cuCtxGetLimit, with the same checks.
func TestClusterOccupancyAndLimits(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	other := e.dial(t, e.token(t, "other", 0))
	_, r, err := cl.CtxGetLimit(0, 0)
	is(t, "cuCtxGetLimit without a context", proto.ErrInvalidContext)(r, err)
	ctx := primary(t, cl)
	octx := primary(t, other)
	_, fns := module(t, cl, ctx)
	f := fns["fill_u32"]
	st, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)

	n, r, err := cl.OccupancyMaxActiveClusters(ctx, f, 8, 1, 1, 256, 1, 1, 0, st, attrs(attr(proto.LaunchAttrClusterDimension, 4, 1, 1)))
	ok(t, "cuOccupancyMaxActiveClusters")(r, err)
	if n != 132/4*8 {
		t.Errorf("clusters of 4 blocks of 256 threads: %d, want the fake's %d", n, 132/4*8)
	}
	size, r, err := cl.OccupancyMaxPotentialClusterSize(ctx, f, 8, 1, 1, 256, 1, 1, 0, 0, nil)
	ok(t, "cuOccupancyMaxPotentialClusterSize")(r, err)
	if size != 8 {
		t.Errorf("potential cluster size %d, want 8", size)
	}
	_, r, err = cl.OccupancyMaxActiveClusters(ctx, f, 8, 1, 1, 256, 1, 1, 0, 0, attrs(attr(proto.LaunchAttrAccessPolicyWindow)))
	is(t, "cluster occupancy with an attribute off the allow-list", proto.ErrNotSupported)(r, err)
	_, r, err = other.OccupancyMaxActiveClusters(octx, f, 8, 1, 1, 256, 1, 1, 0, 0, nil)
	is(t, "cluster occupancy of another client's function", proto.ErrInvalidHandle)(r, err)
	_, r, err = other.OccupancyMaxPotentialClusterSize(octx, f, 8, 1, 1, 256, 1, 1, 0, 0, nil)
	is(t, "potential cluster size of another client's function", proto.ErrInvalidHandle)(r, err)
	_, ofns := module(t, other, octx)
	_, r, err = other.OccupancyMaxActiveClusters(octx, ofns["fill_u32"], 8, 1, 1, 256, 1, 1, 0, st, nil)
	is(t, "cluster occupancy on another client's stream", proto.ErrInvalidHandle)(r, err)

	v, r, err := cl.CtxGetLimit(ctx, 2)
	ok(t, "cuCtxGetLimit(MALLOC_HEAP_SIZE)")(r, err)
	if v != fakecuda.Limits[2] {
		t.Errorf("heap size limit %d, want %d", v, fakecuda.Limits[2])
	}
	_, r, err = cl.CtxGetLimit(ctx, 99)
	is(t, "an unknown limit", proto.ErrInvalidValue)(r, err)
}
