package server_test

import (
	"testing"

	"github.com/gpumux/gpumux/remote/server"
)

// BenchmarkSmallCall measures a loop of small synchronous calls
// (cuCtxGetDevice: one frame each way, no backend work), in this process
// and through a tenant worker.
func BenchmarkSmallCall(b *testing.B) {
	for _, mode := range []struct {
		name string
		srv  []server.Option
	}{
		{"in-process", nil},
		{"tenant-process", tenantOpts()},
	} {
		b.Run(mode.name, func(b *testing.B) {
			e := start(b, envConfig{srv: mode.srv})
			cl := e.dial(b, e.token(b, "bench", 0))
			ctx := primary(b, cl)
			for b.Loop() {
				if _, r, err := cl.CtxGetDevice(ctx); err != nil || r != 0 {
					b.Fatalf("cuCtxGetDevice: %v %v", r, err)
				}
			}
		})
	}
}
