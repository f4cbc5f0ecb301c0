package plugin

import (
	"context"
	"testing"

	"github.com/gpumux/gpumux/nodeconfig"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/device"
)

// benchPlugin starts a plugin on a simulated 8×H200 node whose GPUs each carry
// seven 1g.18gb instances: 56 MIG shares.
func benchPlugin(b *testing.B) (*Plugin, *nodeconfig.Config) {
	b.Helper()
	cfg, err := nodeconfig.ParseConfig([]byte(`
simulate  = "dgxh200"
state_dir = "` + b.TempDir() + `"
gpu {
  match     = "0-7"
  mechanism = "mig"
  mig_devices { "1g.18gb" = 7 }
}`))
	if err != nil {
		b.Fatal(err)
	}
	p := New(hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	if _, err := p.start(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	groups, err := p.fingerprintOnce(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if n := len(groups[0].Devices); len(groups) != 1 || n != 56 {
		b.Fatalf("want one group of 56 MIG shares, got %d groups, %d devices", len(groups), n)
	}
	return p, cfg
}

// fingerprintOnce is one pass of the fingerprint loop: the node's catalog,
// reconciled, as Nomad device groups.
func (p *Plugin) fingerprintOnce(ctx context.Context) ([]*device.DeviceGroup, error) {
	c, err := p.node.Refresh(ctx)
	if err != nil {
		return nil, err
	}
	return deviceGroups(c, p.node.Health), nil
}

// BenchmarkInventory is the baseline of BenchmarkFingerprint: the NVML read
// of the same node alone.
func BenchmarkInventory(b *testing.B) {
	p, _ := benchPlugin(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.node.Host().Inventory(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFingerprint measures one complete fingerprint: NVML inventory of 8
// GPUs and 56 MIG instances, layout assignment, catalog and device groups.
func BenchmarkFingerprint(b *testing.B) {
	p, _ := benchPlugin(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.fingerprintOnce(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserve measures a Reserve of one MIG share (lookup, health check
// and container edits).
func BenchmarkReserve(b *testing.B) {
	p, _ := benchPlugin(b)
	id := p.node.Current().Groups[0].Shares[17].ID
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Reserve([]string{id}); err != nil {
			b.Fatal(err)
		}
	}
}
