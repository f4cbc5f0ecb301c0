package server

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

func sampleSnapshot() snapshot {
	return snapshot{
		token: "gmx1.x.y", identity: "host/1/python", version: proto.Version, next: 0x1010,
		modeSet: true, captureMode: 1,
		primary: []snapPrimary{{dev: 0, flags: 4, ctx: 0x1000, refs: 2}},
		ctxs:    []snapCtx{{h: 0x1000, dev: 0, primary: true, limits: []snapLimit{{limit: 1, value: 8192}}}},
		mods: []snapModule{{h: 0x1001, ctx: 0x1000, image: 12,
			funcs:   []snapFunc{{name: "k", h: 0x1002, attrs: [][2]int32{{8, 65536}}}},
			globals: []snapGlobal{{name: "g", base: 0x7f0000000000, size: 64}}}},
		streams:  []snapStream{{h: 0x1003, ctx: 0x1000, flags: 1, priority: -1, withPriority: true}},
		events:   []snapEvent{{h: 0x1004, ctx: 0x1000, flags: 2}},
		allocs:   []snapAlloc{{ctx: 0x1000, base: 0x7f0000200000, size: 4096}, {ctx: 0x1000, base: 0x2000_0020_0000, size: 100, pool: 0x1006}},
		reserved: []snapReservation{{base: 0x3000_0000_0000, size: 8 << 20}},
		phys: []snapPhys{{h: 0x1005, size: 2 << 20, refs: 1,
			prop: proto.MemProp{Type: proto.MemAllocationTypePinned, LocType: proto.MemLocationTypeDevice, HandleTypes: 1}}},
		mappings: []snapMapping{{base: 0x3000_0000_0000, size: 2 << 20, phys: 0x1005,
			access: []proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, Flags: proto.MemAccessReadWrite}}}},
		pools: []snapPool{{h: 0x1006, dev: 0, dflt: true, current: true, threshold: 1 << 30, reuse: [3]uint64{1, 0, 1}, maxSize: 64 << 20,
			chunks: []snapChunk{{base: 0x2000_0020_0000, size: 2 << 20, slot: 512}}}},
	}
}

// TestSnapshotRoundTrip: a snapshot's state decodes to what was encoded.
func TestSnapshotRoundTrip(t *testing.T) {
	sn := sampleSnapshot()
	got, err := decodeSnapshot(sn.encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sn) {
		t.Errorf("decoded\n%+v\nwant\n%+v", got, sn)
	}
	enc := sn.encode()
	for _, n := range []int{0, 3, len(enc) / 2, len(enc) - 1} {
		if _, err := decodeSnapshot(enc[:n]); err == nil {
			t.Errorf("a state cut to %d of %d bytes decoded", n, len(enc))
		}
	}
}

// FuzzDecodeSnapshot: a state from the network never panics the decoder
// or makes it allocate past what the bytes can hold, and what decodes
// encodes back to the same bytes.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(sampleSnapshot().encode())
	f.Add(snapshot{}.encode())
	f.Fuzz(func(t *testing.T, p []byte) {
		sn, err := decodeSnapshot(p)
		if err != nil {
			return
		}
		if enc := sn.encode(); !bytes.Equal(enc, p) {
			// Booleans decode from any non-zero word: compare again.
			if again, err := decodeSnapshot(enc); err != nil || !reflect.DeepEqual(again, sn) {
				t.Fatalf("re-encoding changed the snapshot: %v", err)
			}
		}
	})
}
