package server

import (
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

// TestLatencyBucket: a latency goes to the first bucket whose bound is at
// or over it, past the last bound to the overflow bucket.
func TestLatencyBucket(t *testing.T) {
	bounds := LatencyBuckets()
	if len(bounds) != latencyBuckets || bounds[0] != 5e-6 || bounds[len(bounds)-1] < 10 || bounds[len(bounds)-1] > 11 {
		t.Fatalf("bounds %v: want 5µs to about 10s", bounds)
	}
	tests := []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 0}, {5 * time.Microsecond, 0},
		{5*time.Microsecond + 1, 1}, {10 * time.Microsecond, 1}, {10*time.Microsecond + 1, 2},
		{40 * time.Microsecond, 3}, {time.Millisecond, 8}, {time.Second, 18},
		{latencyBase << (latencyBuckets - 1), latencyBuckets - 1}, {latencyBase<<(latencyBuckets-1) + 1, latencyBuckets},
		{time.Hour, latencyBuckets},
	}
	for _, tt := range tests {
		got := latencyBucket(tt.d)
		if got != tt.want {
			t.Errorf("latencyBucket(%v) = %d, want %d", tt.d, got, tt.want)
			continue
		}
		// Against the bounds themselves.
		s := tt.d.Seconds()
		if got < latencyBuckets && s > bounds[got] || got > 0 && s <= bounds[got-1] {
			t.Errorf("latencyBucket(%v) = %d, outside its bounds", tt.d, got)
		}
	}
}

// BenchmarkCallCounting measures what counting adds to each call: the two
// clock readings and the counters, from one session and from several at
// once (sharing the counters' cache lines).
func BenchmarkCallCounting(b *testing.B) {
	c := newCounters()
	count := func() {
		start := time.Now()
		c.call(proto.OpCtxSynchronize, time.Since(start), false)
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			count()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				count()
			}
		})
	})
}
