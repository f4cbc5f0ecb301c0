package server_test

import (
	"sync/atomic"
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// granCounter counts the backend's MemGetAllocationGranularity calls.
type granCounter struct {
	server.Backend
	calls atomic.Int64
}

var _ server.Backend = (*granCounter)(nil)

func (b *granCounter) MemGetAllocationGranularity(prop proto.MemProp, option uint32) (uint64, proto.Result) {
	b.calls.Add(1)
	return b.Backend.MemGetAllocationGranularity(prop, option)
}

// TestBackingAsksGranularityOnce: a migratable server asks for a device's
// allocation granularity once per session and device, not at every
// cuMemAlloc; the allocations are still rounded to it, apart.
func TestBackingAsksGranularityOnce(t *testing.T) {
	var counter *granCounter
	e := start(t, envConfig{
		fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(1 << 30)},
		srv:  []server.Option{server.WithSecret(testSecret), server.WithMigration()},
		wrap: func(be server.Backend) server.Backend {
			counter = &granCounter{Backend: be}
			return counter
		},
	})
	tests := []struct {
		name      string
		devs      []int // the token's GPUs
		allocs    int   // per device
		wantAsked int64 // by this session
	}{
		{"one device", []int{0}, 5, 1},
		{"two devices", []int{0, 1}, 4, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := e.dial(t, twoGPUs(t, tt.name, 0, tt.devs...))
			before := counter.calls.Load()
			for dev := range tt.devs {
				ctx, r, err := cl.DevicePrimaryCtxRetain(0, int32(dev))
				ok(t, "cuDevicePrimaryCtxRetain")(r, err)
				var last proto.DevPtr
				for i := range tt.allocs {
					p := alloc(t, cl, ctx, 1+uint64(i)<<10)
					if p%fakecuda.Granularity != 0 || (i > 0 && p-last < fakecuda.Granularity) {
						t.Fatalf("device %d: cuMemAlloc %d at %#x after %#x: not %d bytes apart and aligned", dev, i, p, last, fakecuda.Granularity)
					}
					last = p
				}
			}
			if got := counter.calls.Load() - before; got != tt.wantAsked {
				t.Errorf("%d cuMemAlloc on %d devices asked for the granularity %d times, want %d", tt.allocs*len(tt.devs), len(tt.devs), got, tt.wantAsked)
			}
		})
	}
}
