package server_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// heldEvents is a backend whose events are not done while held is set,
// as if their streams' work ran on; it counts the queries.
type heldEvents struct {
	server.Backend
	held    *atomic.Bool
	queries *atomic.Int64
}

func (h heldEvents) EventQuery(ev uintptr) proto.Result {
	h.queries.Add(1)
	if h.held.Load() {
		return proto.ErrNotReady
	}
	return h.Backend.EventQuery(ev)
}

// poolClient dials e as the job: the client, its primary context, two
// streams of flags and the default pool of device 0.
func poolClient(t *testing.T, e *env, flags uint32) (cl *proto.Client, ctx, st, other, pool proto.Handle) {
	t.Helper()
	cl = e.dial(t, jobToken(t))
	ctx = primary(t, cl)
	var r proto.Result
	var err error
	st, r, err = cl.StreamCreate(ctx, flags)
	ok(t, "cuStreamCreate")(r, err)
	other, r, err = cl.StreamCreate(ctx, flags)
	ok(t, "cuStreamCreate")(r, err)
	pool, r, err = cl.DeviceGetDefaultMemPool(ctx, 0)
	ok(t, "cuDeviceGetDefaultMemPool")(r, err)
	return cl, ctx, st, other, pool
}

// holdingEvents is an env's wrap that holds its events while held is set.
func holdingEvents(held *atomic.Bool) func(server.Backend) server.Backend {
	return countingEvents(held, new(atomic.Int64))
}

// countingEvents is holdingEvents that counts the queries in queries.
func countingEvents(held *atomic.Bool, queries *atomic.Int64) func(server.Backend) server.Backend {
	return func(be server.Backend) server.Backend { return heldEvents{be, held, queries} }
}

// TestWindowPool: on a server WithMigration a session's pool is its own
// memory in its windows: small allocations share slabs of 2 MiB in slots
// of a power of two, large ones get chunks of their own; a slot freed in
// stream order is reused at once on the same stream; what the pool holds
// unused goes at the next synchronizing call unless the release threshold
// keeps it, or at cuMemPoolTrimTo; the attributes count it all.
func TestWindowPool(t *testing.T) {
	var held atomic.Bool
	e := migrating(t, holdingEvents(&held))
	cl, ctx, st, other, pool := poolClient(t, e, 0)
	allocAsync := func(n uint64) proto.DevPtr {
		t.Helper()
		p, r, err := cl.MemAllocAsync(ctx, n, st)
		ok(t, "cuMemAllocAsync")(r, err)
		data := random(int(n), uint64(p))
		ok(t, "cuMemcpyHtoDAsync")(cl.MemcpyHtoDAsyncV2(ctx, p, data, n, st))
		got := make([]byte, n)
		ok(t, "cuMemcpyDtoHAsync")(cl.MemcpyDtoHAsyncV2(ctx, got, p, n, st))
		ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
		if !bytes.Equal(got, data) {
			t.Fatalf("the %d bytes at %#x came back changed", n, p)
		}
		return p
	}
	attr := func(a uint32) uint64 { return poolAttr(t, cl, ctx, pool, a) }

	a := allocAsync(100)
	b := allocAsync(512)
	c := allocAsync(3000)
	big := allocAsync(3 * mib)
	if b != a+512 {
		t.Errorf("100 and 512 bytes at %#x and %#x: want neighbouring slots of 512", a, b)
	}
	if c >= a && c < a+2*mib || big%gran != 0 {
		t.Errorf("3000 bytes at %#x, 3 MiB at %#x: want a slab of its own and a chunk of its own", c, big)
	}
	const slabs = 2 * (2 << 20)
	if got, want := attr(proto.MemPoolReservedMemCurrent), uint64(slabs+4*mib); got != want {
		t.Errorf("reserved %d, want %d (two slabs, a 4 MiB chunk)", got, want)
	}
	if got, want := attr(proto.MemPoolUsedMemCurrent), uint64(512+512+4096+4*mib); got != want {
		t.Errorf("used %d, want %d (the slots and the chunk)", got, want)
	}

	// Freed on a stream whose work is not done, a slot is that stream's
	// again at once, and another stream's only once the work is done.
	held.Store(true)
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, b, st))
	if again := allocAsync(200); again != b {
		t.Errorf("200 bytes after freeing %#x on the same stream: at %#x, want the same slot", b, again)
	}
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, b, st))
	q, r, err := cl.MemAllocAsync(ctx, 200, other)
	ok(t, "cuMemAllocAsync on another stream")(r, err)
	if q == b {
		t.Errorf("another stream got the slot at %#x before the work of its free was done", b)
	}
	held.Store(false)
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, q, other))
	if x, y := allocAsync(200), allocAsync(200); min(x, y) != min(b, q) || max(x, y) != max(b, q) {
		t.Errorf("twice 200 bytes once the work is done: at %#x and %#x, want the freed slots %#x and %#x", x, y, b, q)
	} else {
		b = x
		ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, y, st))
	}

	// With the default release threshold (0), what is unused goes at the
	// next synchronizing call; the high-water marks stay until reset.
	for _, p := range []proto.DevPtr{a, b, c, big} {
		ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, p, st))
	}
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
	if got := attr(proto.MemPoolReservedMemCurrent); got != 0 {
		t.Errorf("reserved %d after everything was freed and synchronized, want 0", got)
	}
	if got := attr(proto.MemPoolReservedMemHigh); got != uint64(slabs+4*mib) {
		t.Errorf("reserved high %d, want %d", got, slabs+4*mib)
	}
	ok(t, "reset the high-water mark")(cl.MemPoolSetAttribute(ctx, pool, proto.MemPoolReservedMemHigh, 0))
	if got := attr(proto.MemPoolReservedMemHigh); got != 0 {
		t.Errorf("reserved high %d after its reset, want 0", got)
	}

	// A threshold keeps it, for reuse, until cuMemPoolTrimTo.
	ok(t, "set the release threshold")(cl.MemPoolSetAttribute(ctx, pool, proto.MemPoolReleaseThreshold, math.MaxUint64))
	p := allocAsync(3 * mib)
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, p, st))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
	if got := attr(proto.MemPoolReservedMemCurrent); got != 4*mib {
		t.Errorf("reserved %d with the threshold at its most, want %d", got, 4*mib)
	}
	if again := allocAsync(3 * mib); again != p {
		t.Errorf("3 MiB again at %#x, want the kept chunk at %#x", again, p)
	}
	ok(t, "cuMemFree")(cl.MemFreeV2(ctx, p))
	ok(t, "cuMemPoolTrimTo")(cl.MemPoolTrimTo(ctx, pool, 0))
	if got := attr(proto.MemPoolReservedMemCurrent); got != 0 {
		t.Errorf("reserved %d after cuMemPoolTrimTo(0), want 0", got)
	}
	if st := e.fake.Stats(); st.Physical != 0 {
		t.Errorf("the GPU holds %d physical allocations once the pool is trimmed", st.Physical)
	}
	if used := e.srv.QuotaUsed("job"); used != 0 {
		t.Errorf("QuotaUsed %d, want 0", used)
	}
	access, r, err := cl.MemPoolGetAccess(ctx, pool, proto.MemLocationTypeDevice, 0)
	ok(t, "cuMemPoolGetAccess")(r, err)
	if access != proto.MemAccessReadWrite {
		t.Errorf("the pool's access from its device: %d, want read and write", access)
	}
}

// TestMigratePools moves a session with pools back and forth: a pool of
// its own made the device's current one, with its release threshold and a
// reuse policy set, holding slab and chunk allocations from two streams,
// and the default pool. Each allocation keeps its address and bytes, the
// pools their handles, settings and use; the moved allocations free and
// the pools allocate again where the session is.
func TestMigratePools(t *testing.T) {
	envs := pair(t, nil)
	rng := rand.New(rand.NewPCG(11, 15))
	cl := envs[0].dial(t, jobToken(t))
	w := newWorkload(t, cl, rng)
	pool, r, err := cl.MemPoolCreate(w.ctx, proto.MemAllocationTypePinned, 0, proto.MemLocationTypeDevice, 0, 0, 0)
	ok(t, "cuMemPoolCreate")(r, err)
	ok(t, "cuDeviceSetMemPool")(cl.DeviceSetMemPool(w.ctx, 0, pool))
	ok(t, "set the release threshold")(cl.MemPoolSetAttribute(w.ctx, pool, proto.MemPoolReleaseThreshold, 64*mib))
	ok(t, "set a reuse policy")(cl.MemPoolSetAttribute(w.ctx, pool, proto.MemPoolReuseAllowOpportunistic, 0))
	for i, n := range []uint64{4, 700, 700, 5000, 3 * mib} {
		st := w.streams[i%len(w.streams)]
		p, r, err := cl.MemAllocAsync(w.ctx, n, st)
		ok(t, "cuMemAllocAsync")(r, err)
		data := random(int(n), uint64(i))
		ok(t, "cuMemcpyHtoDAsync")(cl.MemcpyHtoDAsyncV2(w.ctx, p, data, n, st))
		w.mem[p], w.async[p] = data, true
	}
	attrs := func() [4]uint64 {
		var a [4]uint64
		for i, at := range []uint32{proto.MemPoolReleaseThreshold, proto.MemPoolReuseAllowOpportunistic, proto.MemPoolUsedMemCurrent, proto.MemPoolReservedMemCurrent} {
			a[i] = poolAttr(t, cl, w.ctx, pool, at)
		}
		return a
	}
	before := attrs()
	for i := range 4 {
		from, to := envs[i%2], envs[(i+1)%2]
		move := func() error { return moveWhileRunning(t, w, rng, from, to) }
		if i == 0 { // nothing else runs: the pool's figures are compared
			move = func() error { return moveSyncing(t, cl, w.ctx, from, to) }
		}
		if err := move(); err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		drained(t, from)
		w.verify()
		cur, r, err := cl.DeviceGetMemPool(w.ctx, 0)
		ok(t, "cuDeviceGetMemPool")(r, err)
		if cur != pool {
			t.Fatalf("move %d: the current pool is %#x, want %#x", i, cur, pool)
		}
		if i == 0 {
			// The threshold, the policy and what is in use came along; the
			// reserved memory is what holds the live allocations.
			got := attrs()
			if got[0] != before[0] || got[1] != before[1] || got[2] != before[2] || got[3] > before[3] || got[3] == 0 {
				t.Fatalf("move %d: threshold, policy, used, reserved %v, were %v", i, got, before)
			}
		}
		// The pool allocates beside what moved, and what moved frees.
		p, r, err := cl.MemAllocAsync(w.ctx, 700, w.streams[0])
		ok(t, "cuMemAllocAsync after the move")(r, err)
		if _, taken := w.mem[p]; taken {
			t.Fatalf("move %d: a new allocation at %#x, which the session holds", i, p)
		}
		data := random(700, uint64(100+i))
		ok(t, "cuMemcpyHtoD")(cl.MemcpyHtoDV2(w.ctx, p, data, 700))
		w.mem[p], w.async[p] = data, true
		for q := range w.async {
			if q != p {
				ok(t, "cuMemFreeAsync of a moved allocation")(cl.MemFreeAsync(w.ctx, q, w.streams[0]))
				delete(w.mem, q)
				delete(w.async, q)
				break
			}
		}
		w.verify()
	}
}

// TestWindowPoolInCapture: while a stream capture is under way, an
// allocation from a migrating server's pool comes from a pool of the
// driver's (in the capture, the graph's), not the window pool's memory;
// a window allocation cannot be freed on the capturing stream; and the
// session does not move while it holds such an allocation.
func TestWindowPoolInCapture(t *testing.T) {
	envs := pair(t, nil)
	e := envs[0]
	cl, ctx, st, other, pool := poolClient(t, e, 1)
	before, r, err := cl.MemAllocAsync(ctx, 4096, st)
	ok(t, "cuMemAllocAsync")(r, err)

	ok(t, "cuStreamBeginCapture")(cl.StreamBeginCaptureV2(ctx, st, uint32(proto.CaptureModeRelaxed)))
	p, r, err := cl.MemAllocAsync(ctx, 4096, st)
	ok(t, "cuMemAllocAsync in the capture")(r, err)
	q, r, err := cl.MemAllocAsync(ctx, 4096, other)
	ok(t, "cuMemAllocAsync on another stream during the capture")(r, err)
	if used := poolAttr(t, cl, ctx, pool, proto.MemPoolUsedMemCurrent); used != 4096 {
		t.Errorf("the window pool's used memory %d with an allocation in a capture, want the one before's 4096", used)
	}
	ok(t, "cuMemFreeAsync of a window allocation in the capture (sent)")(cl.MemFreeAsync(ctx, before, st))
	_, r, err = cl.MemPoolGetAttribute(ctx, pool, proto.MemPoolUsedMemCurrent) // answers with the deferred error
	is(t, "cuMemFreeAsync of a window allocation in the capture", proto.ErrStreamCaptureUnsupported)(r, err)
	ok(t, "cuMemFreeAsync in the capture")(cl.MemFreeAsync(ctx, p, st))
	g, r, err := cl.StreamEndCapture(ctx, st)
	if r == proto.Success {
		ok(t, "cuGraphDestroy")(cl.GraphDestroy(ctx, g))
	}
	ok(t, "cuMemFreeAsync after the capture")(cl.MemFreeAsync(ctx, before, st))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, st))
	if err := e.srv.Move(t.Context(), sessionOf(t, e), envs[1].addr); err == nil || !strings.Contains(err.Error(), "while a stream capture was under way") {
		t.Fatalf("Move with a driver pool's allocation: %v", err)
	}
	ok(t, "cuMemFreeAsync of the driver pool's allocation")(cl.MemFreeAsync(ctx, q, other))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(ctx, other))
	if err := moveSyncing(t, cl, ctx, e, envs[1]); err != nil {
		t.Fatalf("Move once it is freed: %v", err)
	}
}

// moveSyncing moves the client's one session from one server to the
// other while the client synchronizes ctx, and returns the move's error.
func moveSyncing(t *testing.T, cl *proto.Client, ctx proto.Handle, from, to *env) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- from.srv.Move(t.Context(), sessionOf(t, from), to.addr) }()
	for {
		select {
		case err := <-done:
			return err
		default:
			ok(t, "cuCtxSynchronize")(cl.CtxSynchronize(ctx))
		}
	}
}

// TestWindowPoolFreesInFlight: what is freed in stream order while its
// stream's work runs on does not hold a session back from moving (the
// move waits for the work), is let go of with a context the client
// destroys, and is released at once from a pool the client destroyed.
func TestWindowPoolFreesInFlight(t *testing.T) {
	var held atomic.Bool
	envs := [2]*env{migrating(t, holdingEvents(&held)), migrating(t, holdingEvents(&held))}
	cl, ctx, st, _, pool := poolClient(t, envs[0], 0)
	reserved := func() uint64 { return poolAttr(t, cl, ctx, pool, proto.MemPoolReservedMemCurrent) }

	// A free whose work is not done, then a move.
	keep, r, err := cl.MemAllocAsync(ctx, 100, st)
	ok(t, "cuMemAllocAsync")(r, err)
	gone, r, err := cl.MemAllocAsync(ctx, 3*mib, st)
	ok(t, "cuMemAllocAsync")(r, err)
	held.Store(true)
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, gone, st))
	if err := moveSyncing(t, cl, ctx, envs[0], envs[1]); err != nil {
		t.Fatalf("a move with a free in flight: %v", err)
	}
	if got := reserved(); got != 2<<20 {
		t.Errorf("reserved %d after the move, want the slab of the live allocation only", got)
	}

	// A context destroyed with a free in flight on one of its streams.
	other, r, err := cl.CtxCreateV2(ctx, 0, 0)
	ok(t, "cuCtxCreate")(r, err)
	ost, r, err := cl.StreamCreate(other, 0)
	ok(t, "cuStreamCreate")(r, err)
	p, r, err := cl.MemAllocAsync(other, 3*mib, ost)
	ok(t, "cuMemAllocAsync")(r, err)
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(other, p, ost))
	ok(t, "cuCtxDestroy")(cl.CtxDestroyV2(ctx, other))
	held.Store(false)
	ok(t, "cuCtxSynchronize")(cl.CtxSynchronize(ctx))
	if got := reserved(); got != 2<<20 {
		t.Errorf("reserved %d after the context went with a free in flight, want the slab of the live allocation only", got)
	}

	// A pool destroyed with an allocation live: its free releases it.
	own, r, err := cl.MemPoolCreate(ctx, proto.MemAllocationTypePinned, 0, proto.MemLocationTypeDevice, 0, 0, 0)
	ok(t, "cuMemPoolCreate")(r, err)
	q, r, err := cl.MemAllocFromPoolAsync(ctx, 100, own, st)
	ok(t, "cuMemAllocFromPoolAsync")(r, err)
	ok(t, "cuMemPoolDestroy")(cl.MemPoolDestroy(ctx, own))
	held.Store(true)
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, q, st))
	ok(t, "cuMemFree")(cl.MemFreeV2(ctx, keep))
	ok(t, "cuMemPoolTrimTo")(cl.MemPoolTrimTo(ctx, pool, 0))
	if st := envs[1].fake.Stats(); st.Physical != 0 {
		t.Errorf("the GPU holds %d physical allocations once everything is freed", st.Physical)
	}
}

// TestWindowPoolPollsInStreamOrder: with many frees pending on a stream
// whose work is not done, an allocation asks the driver about the oldest
// only: a stream's work completes in order.
func TestWindowPoolPollsInStreamOrder(t *testing.T) {
	var held atomic.Bool
	var queries atomic.Int64
	cl, ctx, st, other, _ := poolClient(t, migrating(t, countingEvents(&held, &queries)), 0)
	var ps []proto.DevPtr
	for range 64 {
		p, r, err := cl.MemAllocAsync(ctx, 4096, st)
		ok(t, "cuMemAllocAsync")(r, err)
		ps = append(ps, p)
	}
	held.Store(true)
	for _, p := range ps {
		ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, p, st))
	}
	queries.Store(0)
	_, r, err := cl.MemAllocAsync(ctx, 100000, other)
	ok(t, "cuMemAllocAsync on another stream")(r, err)
	if n := queries.Load(); n != 1 {
		t.Errorf("%d event queries for 64 frees pending on one stream, want 1", n)
	}
	held.Store(false)
	ok(t, "cuCtxSynchronize")(cl.CtxSynchronize(ctx))
}
