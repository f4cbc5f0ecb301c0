package node_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/internal/scrape"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
)

// TestMetrics serves a simulated node's metrics and reads them back as
// Prometheus does: its GPUs, MIG instances, every share with its group and
// health, a held share with its holder, and the lease count.
func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := &nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), LimiterDir: stubLimiter(t), GPUs: []share.GPURule{
		{Match: "0", Mechanism: share.TimeSlice, Replicas: 4},
		{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"3g.71gb": 1, "2g.35gb": 2}},
	}}
	n, err := node.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Start(ctx, "the metrics test"); err != nil {
		t.Fatal(err)
	}
	c, err := n.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var replicas *share.Group
	for i := range c.Groups {
		if c.Groups[i].Name == "H200-timeslice-4x" {
			replicas = &c.Groups[i]
		}
	}
	if replicas == nil {
		t.Fatalf("no group H200-timeslice-4x in %+v", c.Groups)
	}
	replica := replicas.Shares[0].ID
	st, err := lease.Open(n.LeasePath())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(ctx, "web-1", func(map[string]string) ([]string, error) { return []string{replica}, nil }); err != nil {
		t.Fatal(err)
	}
	st.Close()

	addr, err := node.ServeMetrics(ctx, "127.0.0.1:0", n.Collectors()...)
	if err != nil {
		t.Fatal(err)
	}
	f, err := scrape.Get(ctx, "http://"+addr.String()+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpumux_gpu_info", map[string]string{"gpu": "7", "model": "NVIDIA H200"}, 1},
		{"gpumux_gpu_healthy", map[string]string{"gpu": "0"}, 1},
		{"gpumux_gpu_xid_errors_total", map[string]string{"gpu": "0"}, 0},
		{"gpumux_mig_instances", map[string]string{"gpu": "6", "profile": "2g.35gb"}, 2},
		{"gpumux_mig_instances", map[string]string{"gpu": "6", "profile": "3g.71gb"}, 1},
		{"gpumux_share_info", map[string]string{"share": replica, "group": "H200-timeslice-4x", "mechanism": "timeslice"}, 1},
		{"gpumux_share_healthy", map[string]string{"share": replica}, 1},
		{"gpumux_share_held", map[string]string{"share": replica, "holder": "container web-1"}, 1},
		{"gpumux_share_memory_limit_bytes", map[string]string{"share": replica}, float64(replicas.Attrs.MemoryMiB) * (1 << 20)},
		{"gpumux_leases_held", nil, 1},
	} {
		if got, ok := f.Value(tc.name, tc.labels); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present: %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if got, want := len(f.Samples("gpumux_share_info", nil)), c.Len(); got != want {
		t.Errorf("%d shares in the metrics, the catalog has %d", got, want)
	}
	if got := len(f.Samples("gpumux_share_held", nil)); got != 1 {
		t.Errorf("%d held shares in the metrics, want 1", got)
	}

	// A critical XID on GPU 0 shows on the GPU and its shares.
	gh, ok := n.Host().(*gpu.Host)
	if !ok || gh.Simulated() == nil {
		t.Fatalf("the node's host is %T, not a simulated *gpu.Host", n.Host())
	}
	if err := gh.Simulated().InjectXid(0, 79); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := scrape.Get(ctx, "http://"+addr.String()+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		healthy, _ := f.Value("gpumux_gpu_healthy", map[string]string{"gpu": "0"})
		xids, _ := f.Value("gpumux_gpu_xid_errors_total", map[string]string{"gpu": "0"})
		share, _ := f.Value("gpumux_share_healthy", map[string]string{"share": replica})
		other, _ := f.Value("gpumux_gpu_healthy", map[string]string{"gpu": "1"})
		if healthy == 0 && xids == 1 && share == 0 && other == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after XID 79 on GPU 0: gpu healthy %v, xids %v, its replica healthy %v, GPU 1 healthy %v", healthy, xids, share, other)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetricsAreDocumented fails when a node metric is missing from
// docs/metrics.md.
func TestMetricsAreDocumented(t *testing.T) {
	cfg := &nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir()}
	n, err := node.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range n.Collectors() {
			c.Describe(ch)
		}
		close(ch)
	}()
	seen := 0
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		seen++
		if !strings.HasPrefix(m[1], "gpumux_") {
			t.Errorf("metric %s does not start with gpumux_", m[1])
		}
		if !strings.Contains(string(doc), "`"+m[1]+"`") {
			t.Errorf("docs/metrics.md does not list %s", m[1])
		}
	}
	if seen < 15 {
		t.Errorf("only %d metrics described", seen)
	}
}
