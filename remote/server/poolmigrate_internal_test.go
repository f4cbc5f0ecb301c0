package server

import (
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

// TestRestorePoolsRefusesMalformed: what a snapshot says of pools and
// their allocations is checked against itself before anything is trusted:
// each case is refused as malformed, and a good snapshot restores.
func TestRestorePoolsRefusesMalformed(t *testing.T) {
	const (
		ctxH  = proto.Handle(0x1000)
		poolH = proto.Handle(0x1001)
		base  = proto.DevPtr(windowFirst + 3*windowSize)
		slab  = uint64(slabSize)
	)
	good := func() snapshot {
		return snapshot{next: 0x1010,
			pools: []snapPool{{h: poolH, dev: 0, dflt: true, reuse: [3]uint64{1, 1, 1},
				chunks: []snapChunk{{base: base, size: slab, slot: 4096}, {base: base + proto.DevPtr(slab), size: 4 << 20, slot: 4 << 20}}}},
			allocs: []snapAlloc{{ctx: ctxH, base: base + 4096, size: 100, pool: poolH}, {ctx: ctxH, base: base + proto.DevPtr(slab), size: 3 << 20, pool: poolH}},
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*snapshot)
		want string // "" restores
	}{
		{"good", func(*snapshot) {}, ""},
		{"a slot not a power of two", func(sn *snapshot) { sn.pools[0].chunks[0].slot = 3000 }, "not a chunk a pool makes"},
		{"slots larger than a slab's", func(sn *snapshot) { sn.pools[0].chunks[0].size, sn.pools[0].chunks[0].slot = 4<<20, 2<<20 }, "not a chunk a pool makes"},
		{"a chunk of no size", func(sn *snapshot) { sn.pools[0].chunks[0].size = 0 }, "not a chunk a pool makes"},
		{"overlapping chunks", func(sn *snapshot) { sn.pools[0].chunks[1].base = base + 4096*16 }, "overlapping"},
		{"past the pool's maximum", func(sn *snapshot) { sn.pools[0].maxSize = slab }, "maximum size"},
		{"a slab larger than a slab", func(sn *snapshot) { sn.pools[0].chunks[0].size = 64 << 20 }, "not a chunk a pool makes"},
		{"a reuse policy of 2", func(sn *snapshot) { sn.pools[0].reuse[1] = 2 }, "reuse policies [1 2 1], not 0 or 1"},
		{"two default pools of a device", func(sn *snapshot) {
			sn.pools = append(sn.pools, snapPool{h: poolH + 1, dev: 0, dflt: true})
		}, "a second default pool of device 0"},
		{"two current pools of a device", func(sn *snapshot) {
			sn.pools[0].current = true
			sn.pools = append(sn.pools, snapPool{h: poolH + 1, dev: 0, current: true})
		}, "a second current pool of device 0"},
		{"a pool of a device the client lacks", func(sn *snapshot) { sn.pools[0].dev = 3 }, "device 3"},
		{"an allocation of an unknown pool", func(sn *snapshot) { sn.allocs[0].pool = poolH + 5 }, "allocation"},
		{"an allocation outside every chunk", func(sn *snapshot) { sn.allocs[0].base = base - 4096 }, "allocation"},
		{"an allocation between slots", func(sn *snapshot) { sn.allocs[0].base = base + 100 }, "allocation"},
		{"an allocation larger than its slot", func(sn *snapshot) { sn.allocs[0].size = 5000 }, "allocation"},
		{"two allocations in one slot", func(sn *snapshot) {
			sn.allocs = append(sn.allocs, snapAlloc{ctx: ctxH, base: base + 4096, size: 8, pool: poolH})
		}, "allocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			s := poolSession(t)
			sn := good()
			tc.edit(&sn)
			err := restorePoolsOf(s, sn)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("a good snapshot: %v", err)
				}
				if got, _ := s.pools.byHandle[poolH].mem.attribute(proto.MemPoolUsedMemCurrent); got != 4096+4<<20 {
					t.Errorf("used %d after the restore, want %d", got, 4096+4<<20)
				}
				return
			}
			if !errors.Is(err, proto.ErrMalformed) && !strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("restore: %v, want malformed, saying %q", err, tc.want)
			}
		})
	}
}

// poolSession is a session on a migrating server with a fake GPU and one
// context, handle 0x1000.
func poolSession(t *testing.T) *session {
	t.Helper()
	fake, err := fakecuda.New(fakecuda.WithMemory(1 << 30))
	if err != nil {
		t.Fatal(err)
	}
	fake.Init()
	log := slog.New(slog.DiscardHandler)
	srv := New(fake, WithInsecureNoAuth(), WithLogger(log), WithMigration())
	s := newSession(srv, &share{q: &quota{refs: 1}, g: &grant{refs: 1}}, []int32{0}, log)
	raw, r := fake.CtxCreate(0, 0)
	if r != proto.Success {
		t.Fatalf("cuCtxCreate: %v", r)
	}
	s.ctxs[0x1000] = &ctxState{h: 0x1000, raw: raw, dev: 0}
	t.Cleanup(func() { s.cleanup() })
	return s
}

// restorePoolsOf restores a snapshot's pools and pool allocations, as
// restore does.
func restorePoolsOf(s *session, sn snapshot) error {
	seen := map[proto.Handle]bool{}
	handle := func(h proto.Handle) error {
		if seen[h] {
			return proto.ErrMalformed
		}
		seen[h] = true
		return nil
	}
	if err := s.restorePools(sn, handle); err != nil {
		return err
	}
	for _, sa := range sn.allocs {
		if _, err := s.restorePoolAlloc(s.ctxs[sa.ctx], sa); err != nil {
			return err
		}
	}
	return nil
}
