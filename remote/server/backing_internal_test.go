package server

import (
	"slices"
	"testing"
)

// TestWindowSpans: a window hands out aligned, disjoint spans first fit,
// takes exact ones for a migrated allocation, and coalesces what is given
// back, so that the whole window is one span again.
func TestWindowSpans(t *testing.T) {
	const g = 2 << 20
	w := &window{free: []span{{0, 16 * g}}}
	take := func(size, align uint64, want uint64) {
		t.Helper()
		off, ok := w.take(size, align)
		if !ok || off != want {
			t.Fatalf("take(%d, %d) = %d, %v; want %d", size, align, off, ok, want)
		}
	}
	take(g, g, 0)
	take(3*g, g, g)
	take(g, 4*g, 4*g) // 4g: free and aligned
	if !w.takeAt(8*g, 2*g) {
		t.Fatal("takeAt(8g, 2g) of a free range failed")
	}
	if w.takeAt(9*g, g) || w.takeAt(15*g, 2*g) {
		t.Fatal("takeAt of a taken range, or one past the end, succeeded")
	}
	if want := []span{{5 * g, 3 * g}, {10 * g, 6 * g}}; !slices.Equal(w.free, want) {
		t.Fatalf("free %v, want %v", w.free, want)
	}
	take(4*g, g, 10*g) // the first span is too small
	if _, ok := w.take(3*g, g); !ok {
		t.Fatal("take(3g) of the span at 5g failed")
	}
	if _, ok := w.take(3*g, g); ok {
		t.Fatal("take(3g) of a full window succeeded")
	}
	for _, s := range []span{{g, 3 * g}, {8 * g, 2 * g}, {0, g}, {5 * g, 3 * g}, {4 * g, g}, {10 * g, 4 * g}} {
		w.give(s.off, s.size)
	}
	if want := []span{{0, 16 * g}}; !slices.Equal(w.free, want) {
		t.Fatalf("free after giving everything back %v, want %v", w.free, want)
	}
}
