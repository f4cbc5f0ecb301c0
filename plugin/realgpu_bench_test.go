//go:build gpu

package plugin

import (
	"context"
	"testing"

	"github.com/gpumux/gpumux/nodeconfig"

	"github.com/hashicorp/go-hclog"
)

// realPlugin starts the plugin on the machine's real GPUs (read-only: no MIG
// layout declared).
func realPlugin(b *testing.B) (*Plugin, *nodeconfig.Config) {
	b.Helper()
	cfg, err := nodeconfig.ParseConfig([]byte(`state_dir = "` + b.TempDir() + `"`))
	if err != nil {
		b.Fatal(err)
	}
	p := New(hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	if _, err := p.start(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	return p, cfg
}

// BenchmarkRealInventory is the baseline: the real NVML inventory alone.
func BenchmarkRealInventory(b *testing.B) {
	p, _ := realPlugin(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.node.Host().Inventory(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRealFingerprint is one complete fingerprint on the real GPUs.
func BenchmarkRealFingerprint(b *testing.B) {
	p, _ := realPlugin(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.fingerprintOnce(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRealReserve reserves the first whole GPU.
func BenchmarkRealReserve(b *testing.B) {
	p, _ := realPlugin(b)
	if _, err := p.fingerprintOnce(context.Background()); err != nil {
		b.Fatal(err)
	}
	id := p.node.Current().Groups[0].Shares[0].ID
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Reserve([]string{id}); err != nil {
			b.Fatal(err)
		}
	}
}
