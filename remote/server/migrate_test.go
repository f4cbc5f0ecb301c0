package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/tlstest"
	"github.com/gpumux/gpumux/remote/control"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

// pair is two migrating servers of one pool, on fake GPUs of their own.
func pair(t *testing.T, srcOpts []server.Option, dstOpts ...server.Option) [2]*env {
	t.Helper()
	return [2]*env{migrating(t, nil, srcOpts...), migrating(t, nil, dstOpts...)}
}

// migrating is a migrating server of the pool on a fake GPU of its own,
// with extra options; wrap, if not nil, wraps the fake (envConfig.wrap).
func migrating(t *testing.T, wrap func(server.Backend) server.Backend, extra ...server.Option) *env {
	t.Helper()
	return start(t, envConfig{tcp: true, fake: []fakecuda.Option{fakecuda.WithMemory(1 << 30)}, wrap: wrap,
		srv: append([]server.Option{server.WithSecret(testSecret), server.WithMigration()}, extra...)})
}

// only is server.Option... for one side of a pair.
func only(o ...server.Option) []server.Option { return o }

func jobToken(t *testing.T) string {
	return mint(t, testSecret, token.Claims{ID: "job", Quota: 512 << 20, Expires: time.Now().Add(time.Hour)})
}

// sessionOf returns the number of the job's one session on e, or 0.
func sessionOf(t *testing.T, e *env) uint64 {
	t.Helper()
	ids := e.srv.Sessions()["job"]
	switch len(ids) {
	case 0:
		return 0
	case 1:
		return ids[0]
	}
	t.Fatalf("%d sessions of the job on one server", len(ids))
	return 0
}

// drained waits until e's fake GPU holds nothing.
func drained(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.fake.Stats()
		if st.Contexts == 0 && st.Reservations == 0 && st.Physical == 0 && st.Modules == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target still holds %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workload is a client's objects and what its memory must hold.
type workload struct {
	t       *testing.T
	cl      *proto.Client
	ctx     proto.Handle
	fill    proto.Handle
	streams []proto.Handle
	prio    map[proto.Handle]int32
	events  []proto.Handle
	mem     map[proto.DevPtr][]byte // the shadow of each allocation
	async   map[proto.DevPtr]bool   // those from a pool (cuMemAllocAsync)
}

func newWorkload(t *testing.T, cl *proto.Client, rng *rand.Rand) *workload {
	w := &workload{t: t, cl: cl, ctx: primary(t, cl), prio: map[proto.Handle]int32{}, mem: map[proto.DevPtr][]byte{}, async: map[proto.DevPtr]bool{}}
	mod, r, err := cl.ModuleLoadData(w.ctx, fakecuda.ModuleImage([]fakecuda.Kernel{fakecuda.FillU32, fakecuda.VecAddF32}, nil))
	ok(t, "cuModuleLoadData")(r, err)
	w.fill, r, err = cl.ModuleGetFunction(w.ctx, mod, fakecuda.FillU32.Name)
	ok(t, "cuModuleGetFunction")(r, err)
	for i := range 1 + rng.IntN(3) {
		st, r, err := cl.StreamCreateWithPriority(w.ctx, uint32(i%2), -int32(i%2))
		ok(t, "cuStreamCreateWithPriority")(r, err)
		w.prio[st], _, _ = cl.StreamGetPriority(w.ctx, st)
		w.streams = append(w.streams, st)
	}
	for range 1 + rng.IntN(3) {
		ev, r, err := cl.EventCreate(w.ctx, 0)
		ok(t, "cuEventCreate")(r, err)
		w.events = append(w.events, ev)
	}
	for range 2 + rng.IntN(4) {
		w.alloc(rng)
	}
	return w
}

func (w *workload) alloc(rng *rand.Rand) {
	n := uint64(4 * (1 + rng.IntN(3<<18)))
	var p proto.DevPtr
	if rng.IntN(3) == 0 { // from the default pool, in stream order (small ones share a chunk)
		n = uint64(4 * (1 + rng.IntN(1<<rng.IntN(19))))
		var r proto.Result
		var err error
		p, r, err = w.cl.MemAllocAsync(w.ctx, n, w.streams[rng.IntN(len(w.streams))])
		ok(w.t, "cuMemAllocAsync")(r, err)
		w.async[p] = true
	} else {
		p = alloc(w.t, w.cl, w.ctx, n)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	ok(w.t, "cuMemcpyHtoD")(w.cl.MemcpyHtoDV2(w.ctx, p, b, n))
	w.mem[p] = b
}

// step does one random thing, asynchronous or not.
func (w *workload) step(rng *rand.Rand) {
	ptrs := make([]proto.DevPtr, 0, len(w.mem))
	for p := range w.mem {
		ptrs = append(ptrs, p)
	}
	p := ptrs[rng.IntN(len(ptrs))]
	b := w.mem[p]
	st := w.streams[rng.IntN(len(w.streams))]
	switch rng.IntN(6) {
	case 0: // a kernel fills part of an allocation: its pointer is in the parameters
		count := uint64(1 + rng.IntN(len(b)/4))
		v := rng.Uint32()
		params := binary.LittleEndian.AppendUint64(nil, uint64(p))
		params = binary.LittleEndian.AppendUint32(params, v)
		params = append(params, 0, 0, 0, 0)
		params = binary.LittleEndian.AppendUint64(params, count)
		ok(w.t, "cuLaunchKernel")(w.cl.LaunchKernel(w.ctx, w.fill, 1, 1, 1, 1, 1, 1, 0, st, params))
		for i := range count {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
	case 1: // an asynchronous copy in
		off := uint64(rng.IntN(len(b)))
		src := make([]byte, 1+rng.IntN(len(b)-int(off)))
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		ok(w.t, "cuMemcpyHtoDAsync")(w.cl.MemcpyHtoDAsyncV2(w.ctx, p+proto.DevPtr(off), src, uint64(len(src)), st))
		copy(b[off:], src)
	case 2:
		ok(w.t, "cuEventRecord")(w.cl.EventRecord(w.ctx, w.events[rng.IntN(len(w.events))], st))
	case 3:
		if len(w.mem) < 8 {
			w.alloc(rng)
		}
	case 4:
		if len(w.mem) > 1 {
			if w.async[p] && rng.IntN(2) == 0 {
				ok(w.t, "cuMemFreeAsync")(w.cl.MemFreeAsync(w.ctx, p, st))
			} else {
				ok(w.t, "cuMemFree")(w.cl.MemFreeV2(w.ctx, p))
			}
			delete(w.mem, p)
			delete(w.async, p)
		}
	case 5: // a synchronous read back
		w.check(p)
	}
}

// check compares an allocation with its shadow.
func (w *workload) check(p proto.DevPtr) {
	w.t.Helper()
	want := w.mem[p]
	got := make([]byte, len(want))
	ok(w.t, "cuMemcpyDtoH")(w.cl.MemcpyDtoHV2(w.ctx, got, p, uint64(len(got))))
	if !bytes.Equal(got, want) {
		w.t.Fatalf("allocation %#x differs from what the client wrote", p)
	}
}

// verify checks every byte, stream and event.
func (w *workload) verify() {
	w.t.Helper()
	for p := range w.mem {
		w.check(p)
	}
	for _, st := range w.streams {
		ok(w.t, "cuStreamSynchronize")(w.cl.StreamSynchronize(w.ctx, st))
		prio, r, err := w.cl.StreamGetPriority(w.ctx, st)
		ok(w.t, "cuStreamGetPriority")(r, err)
		if prio != w.prio[st] {
			w.t.Errorf("stream %#x has priority %d, had %d", st, prio, w.prio[st])
		}
	}
	for _, ev := range w.events {
		ok(w.t, "cuEventQuery")(w.cl.EventQuery(w.ctx, ev))
	}
}

// moveWhileRunning moves the job's session from one server to the other
// while the client keeps calling, and waits for the move.
func moveWhileRunning(t *testing.T, w *workload, rng *rand.Rand, from, to *env) error {
	t.Helper()
	id := sessionOf(t, from)
	if id == 0 {
		t.Fatal("the job has no session on the source")
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- from.srv.Move(ctx, id, to.addr)
	}()
	for {
		select {
		case err := <-done:
			return err
		default:
			w.step(rng)
		}
	}
}

// TestMigrateRandomSessions moves random sessions back and forth between
// two servers at random points of a running client: every byte, handle
// and stream priority the client holds is the same after each move.
func TestMigrateRandomSessions(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 15))
			envs := pair(t, nil)
			cl := envs[0].dial(t, jobToken(t))
			w := newWorkload(t, cl, rng)
			moves := 2 + rng.IntN(3)
			for i := range moves {
				for range rng.IntN(20) {
					w.step(rng)
				}
				from, to := envs[i%2], envs[(i+1)%2]
				if err := moveWhileRunning(t, w, rng, from, to); err != nil {
					t.Fatalf("move %d: %v", i, err)
				}
				waitSessions(t, from, 0) // the source lets go once its cleanup is done
				drained(t, from)
				w.verify()
			}
			if got := cl.Moves(); got != moves {
				t.Errorf("the client followed %d moves, want %d", got, moves)
			}
		})
	}
}

// TestMigrateFailures fails a migration at each step: the session stays on
// the source with everything it had, the target holds nothing, and a
// migration without the failure then goes through.
func TestMigrateFailures(t *testing.T) {
	for _, step := range []string{server.StepQuiesce, server.StepSnapshot, server.StepTransfer, server.StepRestore, server.StepSwitch} {
		t.Run(step, func(t *testing.T) {
			var failing atomic.Bool
			failing.Store(true)
			hook := server.WithMigrationHook(func(s string) error {
				if s == step && failing.Load() {
					return errors.New("injected")
				}
				return nil
			})
			envs := pair(t, only(hook), hook)
			rng := rand.New(rand.NewPCG(1, 2))
			cl := envs[0].dial(t, jobToken(t))
			w := newWorkload(t, cl, rng)
			err := moveWhileRunning(t, w, rng, envs[0], envs[1])
			if !errors.Is(err, server.ErrMigration) || !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), step) {
				t.Fatalf("a migration failing at %s: %v", step, err)
			}
			if sessionOf(t, envs[0]) == 0 || cl.Moves() != 0 {
				t.Fatal("the session left the source")
			}
			w.verify()
			drained(t, envs[1])
			failing.Store(false)
			if err := moveWhileRunning(t, w, rng, envs[0], envs[1]); err != nil {
				t.Fatalf("the next migration: %v", err)
			}
			w.verify()
		})
	}
}

// TestMigrateRefused: sessions holding what a migration does not carry,
// or on a server that cannot migrate, stay where they are with a reason.
func TestMigrateRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		plain   bool // the source runs without WithMigration
		setup   func(t *testing.T, cl *proto.Client, ctx proto.Handle)
		wantErr string
	}{
		{"no migration on the server", true, nil, "without migration"},
		{"a CUDA graph", false, func(t *testing.T, cl *proto.Client, ctx proto.Handle) {
			_, r, err := cl.GraphCreate(ctx, 0)
			ok(t, "cuGraphCreate")(r, err)
		}, "graphs"},
		{"an allocation of a destroyed pool", false, func(t *testing.T, cl *proto.Client, ctx proto.Handle) {
			pool, r, err := cl.MemPoolCreate(ctx, proto.MemAllocationTypePinned, 0, proto.MemLocationTypeDevice, 0, 0, 0)
			ok(t, "cuMemPoolCreate")(r, err)
			_, r, err = cl.MemAllocFromPoolAsync(ctx, 4096, pool, 0)
			ok(t, "cuMemAllocFromPoolAsync")(r, err)
			ok(t, "cuMemPoolDestroy")(cl.MemPoolDestroy(ctx, pool))
		}, "a memory pool it destroyed"},
		{"access set on part of a mapping", false, func(t *testing.T, cl *proto.Client, ctx proto.Handle) {
			base, r, err := cl.MemAddressReserve(ctx, 2*gran, 0, 0, 0)
			ok(t, "cuMemAddressReserve")(r, err)
			h, r, err := cl.MemCreate(ctx, 2*gran, devProp(0), 0)
			ok(t, "cuMemCreate")(r, err)
			ok(t, "cuMemMap")(cl.MemMap(ctx, base, 2*gran, 0, h, 0))
			ok(t, "cuMemSetAccess")(cl.MemSetAccess(ctx, base, gran, rw(0)))
		}, "part of its mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := start(t, envConfig{tcp: true, srv: []server.Option{server.WithSecret(testSecret)}})
			if !tc.plain {
				src = pair(t, nil)[0]
			}
			dst := pair(t, nil)[1]
			cl := src.dial(t, jobToken(t))
			ctx := primary(t, cl)
			p := alloc(t, cl, ctx, 4096)
			if tc.setup != nil {
				tc.setup(t, cl, ctx)
			}
			err := moveSyncing(t, cl, ctx, src, dst)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Move: %v, want an error saying %q", err, tc.wantErr)
			}
			ok(t, "cuMemFree on the source")(cl.MemFreeV2(ctx, p))
			drained(t, dst)
		})
	}
}

// TestMigrateRelocatedGlobal moves a session whose module global each
// target's driver places elsewhere than the client saw it: the client keeps
// its address, and copies, memsets, a kernel given the address and the
// pointer queries reach the global where it is, move after move.
func TestMigrateRelocatedGlobal(t *testing.T) {
	envs := pair(t, nil)
	rng := rand.New(rand.NewPCG(5, 6))
	cl := envs[0].dial(t, jobToken(t))
	w := newWorkload(t, cl, rng)
	// A module loaded and unloaded first: the fake never hands an address
	// out twice, so the second module's global is past the first's on the
	// source, and at the first's on the fresh target; back on the source,
	// past both.
	img := fakecuda.ModuleImage([]fakecuda.Kernel{fakecuda.FillU32}, []fakecuda.Global{{Name: "g", Size: 64}})
	first, r, err := cl.ModuleLoadData(w.ctx, img)
	ok(t, "cuModuleLoadData")(r, err)
	_, _, r, err = cl.ModuleGetGlobalV2(w.ctx, first, "g")
	ok(t, "cuModuleGetGlobal")(r, err)
	ok(t, "cuModuleUnload")(cl.ModuleUnload(w.ctx, first))
	mod, r, err := cl.ModuleLoadData(w.ctx, img)
	ok(t, "cuModuleLoadData")(r, err)
	g, size, r, err := cl.ModuleGetGlobalV2(w.ctx, mod, "g")
	ok(t, "cuModuleGetGlobal")(r, err)
	fill, r, err := cl.ModuleGetFunction(w.ctx, mod, fakecuda.FillU32.Name)
	ok(t, "cuModuleGetFunction")(r, err)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	ok(t, "cuMemcpyHtoD to the global")(cl.MemcpyHtoDV2(w.ctx, g, want, size))
	out := alloc(t, cl, w.ctx, size)

	for i, way := range [][2]*env{{envs[0], envs[1]}, {envs[1], envs[0]}, {envs[0], envs[1]}} {
		if err := moveWhileRunning(t, w, rng, way[0], way[1]); err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		w.verify()
		again, n, r, err := cl.ModuleGetGlobalV2(w.ctx, mod, "g")
		ok(t, "cuModuleGetGlobal after the move")(r, err)
		if again != g || n != size {
			t.Fatalf("move %d: the global is at %#x (%d bytes) for the client, was %#x (%d)", i, again, n, g, size)
		}
		base, n, _, _, r, err := cl.PointerGetAttributes(w.ctx, g+4)
		ok(t, "cuPointerGetAttribute")(r, err)
		if base != g || n != size {
			t.Fatalf("move %d: cuPointerGetAttribute: base %#x size %d, want %#x %d", i, base, n, g, size)
		}
		got := make([]byte, size)
		ok(t, "cuMemcpyDtoH of the global")(cl.MemcpyDtoHV2(w.ctx, got, g, size))
		if !bytes.Equal(got, want) {
			t.Fatalf("move %d: the global's contents differ", i)
		}
		// A kernel given the global's address, a memset and a device copy.
		v := rng.Uint32()
		ok(t, "fill_u32 on the global")(launch1(cl, w.ctx, fill, 0, fillParams(g+8, v, 2)))
		ok(t, "cuMemsetD32 on the global")(cl.MemsetD32V2(w.ctx, g+16, v+1, 2))
		for k, x := range []uint32{v, v, v + 1, v + 1} {
			binary.LittleEndian.PutUint32(want[8+4*k:], x)
		}
		ok(t, "cuMemcpyDtoD from the global")(cl.MemcpyDtoDV2(w.ctx, out, g, size))
		ok(t, "cuMemcpyDtoH")(cl.MemcpyDtoHV2(w.ctx, got, out, size))
		if !bytes.Equal(got, want) {
			t.Fatalf("move %d: a kernel, memset and copy of the global's address did not reach it", i)
		}
	}
}

// TestMigrateVirtualMemory moves a session that holds virtual memory of its
// own, as PyTorch's expandable segments make it: a reservation with
// physical memory mapped across it, one allocation mapped whose handle is
// released, one held but unmapped. After each move every mapping is at its
// address with its bytes and access, a kernel writes through one, the
// unmapped memory maps again with its bytes, handles and properties are
// the same, and the quota counts the physical memory once.
func TestMigrateVirtualMemory(t *testing.T) {
	envs := pair(t, nil)
	rng := rand.New(rand.NewPCG(7, 8))
	cl := envs[0].dial(t, jobToken(t))
	w := newWorkload(t, cl, rng)
	seg := expandable(t, cl, w.ctx, 8*gran, 3)
	released := seg.handles[2]
	ok(t, "cuMemRelease of a mapped handle")(cl.MemRelease(w.ctx, released))
	held, r, err := cl.MemCreate(w.ctx, 2*gran, devProp(0), 0)
	ok(t, "cuMemCreate")(r, err)
	spare := seg.base + 4*gran // where the held memory is mapped for a look
	look := func(write []byte) []byte {
		t.Helper()
		ok(t, "cuMemMap of the held memory")(cl.MemMap(w.ctx, spare, 2*gran, 0, held, 0))
		ok(t, "cuMemSetAccess")(cl.MemSetAccess(w.ctx, spare, 2*gran, rw(0)))
		if write != nil {
			ok(t, "cuMemcpyHtoD")(cl.MemcpyHtoDV2(w.ctx, spare, write, 2*gran))
		}
		got := make([]byte, 2*gran)
		ok(t, "cuMemcpyDtoH")(cl.MemcpyDtoHV2(w.ctx, got, spare, 2*gran))
		ok(t, "cuMemUnmap of the held memory")(cl.MemUnmap(w.ctx, spare, 2*gran))
		return got
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	mapped, heldBytes := random(3*gran), random(2*gran)
	ok(t, "cuMemcpyHtoD across the mappings")(cl.MemcpyHtoDV2(w.ctx, seg.base, mapped, 3*gran))
	look(heldBytes)
	inUse := func(e *env) uint64 { return e.srv.QuotaUsed("job") }

	for i, way := range [][2]*env{{envs[0], envs[1]}, {envs[1], envs[0]}, {envs[0], envs[1]}} {
		if err := moveWhileRunning(t, w, rng, way[0], way[1]); err != nil {
			t.Fatalf("move %d: %v", i, err)
		}
		w.verify()
		got := make([]byte, 3*gran)
		ok(t, "cuMemcpyDtoH across the mappings")(cl.MemcpyDtoHV2(w.ctx, got, seg.base, 3*gran))
		if !bytes.Equal(got, mapped) {
			t.Fatalf("move %d: the mapped memory differs", i)
		}
		if got := look(nil); !bytes.Equal(got, heldBytes) {
			t.Fatalf("move %d: the held, unmapped memory differs", i)
		}
		v := rng.Uint32()
		ok(t, "fill_u32 in a mapping")(launch1(cl, w.ctx, w.fill, 0, fillParams(seg.base+gran, v, 4)))
		for k := range 4 {
			binary.LittleEndian.PutUint32(mapped[gran+4*k:], v)
		}
		h, r, err := cl.MemRetainAllocationHandle(w.ctx, seg.base+2*gran)
		ok(t, "cuMemRetainAllocationHandle")(r, err)
		if h != released {
			t.Errorf("move %d: the mapping at +2 granules holds handle %#x, want %#x", i, h, released)
		}
		ok(t, "cuMemRelease of the retained handle")(cl.MemRelease(w.ctx, h))
		want := uint64(5 * gran) // the physical memory, once
		for _, b := range w.mem {
			want += uint64(len(b))
		}
		if got := inUse(way[1]); got != want {
			t.Errorf("move %d: the target counts %d bytes for the tenant, want %d", i, got, want)
		}
	}
	// Everything goes with the client: the target frees all of it.
	for _, h := range seg.handles[:2] {
		ok(t, "cuMemRelease")(cl.MemRelease(w.ctx, h))
	}
	ok(t, "cuMemRelease")(cl.MemRelease(w.ctx, held))
	ok(t, "cuMemUnmap")(cl.MemUnmap(w.ctx, seg.base, 3*gran))
	ok(t, "cuMemAddressFree")(cl.MemAddressFree(w.ctx, seg.base, seg.size))
}

// TestMigrateOverTLS: between servers that serve TLS, the source reaches
// the target over TLS (WithPoolTLS) and the client follows over TLS; a
// source that does not trust the target's certificate keeps the session.
func TestMigrateOverTLS(t *testing.T) {
	s := newTLS(t, tlstest.ECDSA, "")
	trust := s.ca.ClientConfig(t, "", nil)
	mk := func(pool *tls.Config) *env {
		return start(t, envConfig{tcp: true, tls: s.files.Config(), clientTLS: trust,
			fake: []fakecuda.Option{fakecuda.WithMemory(1 << 30)},
			srv:  []server.Option{server.WithSecret(testSecret), server.WithMigration(), server.WithPoolTLS(pool)}})
	}
	src, dst := mk(trust), mk(trust)
	cl := src.dial(t, jobToken(t))
	cl.TLS = trust
	rng := rand.New(rand.NewPCG(9, 10))
	w := newWorkload(t, cl, rng)
	if err := moveWhileRunning(t, w, rng, src, dst); err != nil {
		t.Fatalf("move over TLS: %v", err)
	}
	w.verify()
	if cl.Moves() != 1 || sessionOf(t, dst) == 0 {
		t.Fatalf("the session is not on the target: %d moves", cl.Moves())
	}

	// A source trusting another CA refuses the target's certificate.
	other := tlstest.NewCA(t, t.TempDir(), "other").ClientConfig(t, "", nil)
	doubting := mk(other)
	cl2 := doubting.dial(t, jobToken(t))
	cl2.TLS = trust
	w2 := newWorkload(t, cl2, rng)
	err := moveWhileRunning(t, w2, rng, doubting, dst)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a move to a target whose certificate the source does not trust: %v", err)
	}
	w2.verify()
}

// TestDrainSpreadsTenants: a drain keeps a tenant's sessions together on
// one target and starts each tenant at another target; a target that
// refuses (here: gone) is passed over for the next.
func TestDrainSpreadsTenants(t *testing.T) {
	src, a, b := migrating(t, nil), migrating(t, nil), migrating(t, nil)
	tok := func(id string) string {
		return mint(t, testSecret, token.Claims{ID: id, Quota: 64 << 20, Expires: time.Now().Add(time.Hour)})
	}
	type client struct {
		tenant string
		cl     *proto.Client
		ctx    proto.Handle
		p      proto.DevPtr
	}
	var cls []client
	for _, tenant := range []string{"job", "job", "other"} {
		cl := src.dial(t, tok(tenant))
		ctx := primary(t, cl)
		p := alloc(t, cl, ctx, 4096)
		ok(t, "cuMemsetD8")(cl.MemsetD8V2(ctx, p, uint32(len(cls)+1), 4096))
		cls = append(cls, client{tenant, cl, ctx, p})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	done := make(chan error, 1)
	go func() { done <- src.srv.Drain(context.Background(), []string{a.addr, dead, b.addr}) }()
	// The clients call until the drain is over: each moves at one of
	// its synchronous calls.
	for finished := false; !finished; {
		select {
		case err = <-done:
			finished = true
		default:
			for _, c := range cls {
				ok(t, "cuCtxSynchronize")(c.cl.CtxSynchronize(c.ctx))
			}
		}
	}
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	on := map[string]string{}
	for _, e := range []*env{src, a, b} {
		for tenant, ids := range e.srv.Sessions() {
			for range ids {
				on[tenant] += e.addr + " "
			}
		}
	}
	// Tenants in name order start at targets 0 and 1: "job" at a, where
	// both its sessions go; "other" at the dead server, then b.
	if on["job"] != a.addr+" "+a.addr+" " || on["other"] != b.addr+" " {
		t.Errorf("sessions after the drain: %v; want job's two on %s, other's on %s", on, a.addr, b.addr)
	}
	for i, c := range cls {
		got := make([]byte, 4096)
		ok(t, "cuMemcpyDtoH")(c.cl.MemcpyDtoHV2(c.ctx, got, c.p, 4096))
		if got[0] != byte(i+1) || got[4095] != byte(i+1) || c.cl.Moves() != 1 {
			t.Errorf("client %d (%s): bytes %d…%d, %d moves", i, c.tenant, got[0], got[4095], c.cl.Moves())
		}
	}
}

// TestMigrateControl moves a tenant's session through a control
// connection, as gpumux remote migrate does; a control connection without
// the pool's secret is refused.
func TestMigrateControl(t *testing.T) {
	envs := pair(t, nil)
	rng := rand.New(rand.NewPCG(3, 4))
	cl := envs[0].dial(t, jobToken(t))
	w := newWorkload(t, cl, rng)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	bad, err := control.Dial(ctx, envs[0].addr, []byte("another-secret-of-the-pool"),
		proto.Control{Kind: proto.ControlMigrate, Tenant: "job", Target: envs[1].addr})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bad.Reply()
	bad.Close()
	if err != nil || rep.Result != proto.ErrNotPermitted {
		t.Fatalf("a control request signed with another secret: %+v, %v", rep, err)
	}

	rep = migrateWhileRunning(t, w, rng, envs[0].addr, proto.Control{Kind: proto.ControlMigrate, Tenant: "job", Target: envs[1].addr})
	if rep.Result != proto.Success || len(rep.Moved) != 1 {
		t.Fatalf("migration through the control connection: %+v", rep)
	}
	w.verify()
	if cl.Moves() != 1 || sessionOf(t, envs[1]) == 0 {
		t.Fatalf("the client moved %d times; on the target: %v", cl.Moves(), envs[1].srv.Sessions())
	}
}

// TestMigrateBackAtOnce moves a session back to the server it left while
// that server is still cleaning up what it left there: the move back waits
// for the old session to let go of its address windows, which the session
// needs at the same bases, instead of being refused.
func TestMigrateBackAtOnce(t *testing.T) {
	release := make(chan struct{})
	var held, restoring atomic.Bool
	hook := server.WithMigrationHook(func(step string) error {
		switch {
		case step == server.StepLeft && held.CompareAndSwap(false, true):
			<-release // the session that left stays in its cleanup...
		case step == server.StepRestore && restoring.CompareAndSwap(false, true):
			// ...until the move back has begun to restore it here.
			time.AfterFunc(100*time.Millisecond, func() { close(release) })
		}
		return nil
	})
	envs := pair(t, only(hook))
	rng := rand.New(rand.NewPCG(3, 15))
	cl := envs[0].dial(t, jobToken(t))
	w := newWorkload(t, cl, rng)
	if err := moveWhileRunning(t, w, rng, envs[0], envs[1]); err != nil {
		t.Fatalf("the move out: %v", err)
	}
	if err := moveWhileRunning(t, w, rng, envs[1], envs[0]); err != nil {
		t.Fatalf("the move back: %v", err)
	}
	if !strings.Contains(envs[0].logs.String(), "waited for the session that left here to let go of its windows") {
		t.Errorf("the move back did not wait for the old session:\n%s", envs[0].logs.String())
	}
	// The source lets go once its cleanup is done, the target serves the
	// session once the client has resumed.
	waitSessions(t, envs[1], 0)
	waitSessions(t, envs[0], 1)
	w.verify()
	if got := cl.Moves(); got != 2 {
		t.Errorf("the client followed %d moves, want 2", got)
	}
}
