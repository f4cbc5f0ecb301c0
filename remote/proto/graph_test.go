package proto

import (
	"math"
	"testing"
)

func TestCopy3DSpans(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        Copy3D
		src, dst [2]uint64
		ok       bool
	}{
		{"1D", Copy3D{Src: 1000, SrcX: 8, Dst: 5000, Width: 100, Height: 1, Depth: 1},
			[2]uint64{1008, 1108}, [2]uint64{5000, 5100}, true},
		{"2D rows", Copy3D{Src: 0, SrcPitch: 64, Dst: 4096, DstX: 8, DstPitch: 32, Width: 16, Height: 3, Depth: 1},
			[2]uint64{0, 2*64 + 16}, [2]uint64{4096 + 8, 4096 + 2*32 + 8 + 16}, true},
		{"3D planes from row 1 of plane 1", Copy3D{SrcY: 1, SrcZ: 1, SrcPitch: 10, SrcHeight: 4, Width: 10, Height: 2, Depth: 2,
			DstPitch: 10, DstHeight: 2},
			[2]uint64{(4 + 1) * 10, (2*4+1+1)*10 + 10}, [2]uint64{0, 3*10 + 10}, true},
		{"empty", Copy3D{Width: 0, Height: 1, Depth: 1}, [2]uint64{}, [2]uint64{}, false},
		{"row wider than its pitch", Copy3D{SrcPitch: 8, DstPitch: 64, Width: 16, Height: 2, Depth: 1}, [2]uint64{}, [2]uint64{}, false},
		{"rows past the plane", Copy3D{SrcPitch: 16, SrcHeight: 2, DstPitch: 16, DstHeight: 4, Width: 16, Height: 3, Depth: 2}, [2]uint64{}, [2]uint64{}, false},
		{"overflow", Copy3D{Src: math.MaxUint64 - 4, Dst: 0, Width: 16, Height: 1, Depth: 1}, [2]uint64{}, [2]uint64{}, false},
		{"huge pitch", Copy3D{SrcPitch: math.MaxUint64 / 2, DstPitch: 16, Width: 16, Height: 4, Depth: 1}, [2]uint64{}, [2]uint64{}, false},
	} {
		src, dst, ok := tc.c.Spans()
		if ok != tc.ok || ok && (src != tc.src || dst != tc.dst) {
			t.Errorf("%s: %v %v %v, want %v %v %v", tc.name, src, dst, ok, tc.src, tc.dst, tc.ok)
		}
		back, good := DecodeCopy3D(tc.c.Encode())
		if !good || back != tc.c {
			t.Errorf("%s: %+v does not round-trip (%+v)", tc.name, tc.c, back)
		}
	}
	if _, good := DecodeCopy3D(make([]byte, Copy3DSize-1)); good {
		t.Error("a short Copy3D decodes")
	}
}

func TestHandles(t *testing.T) {
	hs := []Handle{0x1000, 0x1234_5678_9abc, 1}
	back, ok := DecodeHandles(EncodeHandles(hs))
	if !ok || len(back) != 3 || back[0] != hs[0] || back[1] != hs[1] || back[2] != hs[2] {
		t.Errorf("round trip: %v %v", back, ok)
	}
	if _, ok := DecodeHandles(make([]byte, 12)); ok {
		t.Error("12 bytes decode as handles")
	}
	if hs, ok := DecodeHandles(nil); !ok || len(hs) != 0 {
		t.Error("no handles")
	}
}
