package mps_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/exclusive"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/mps"
	"github.com/gpumux/gpumux/share"
)

// simHost is a simulated 8×H200 node whose GPU 7 carries 1× 3g.71gb and
// 2× 2g.35gb, with its inventory.
func simHost(t *testing.T) (*gpu.Host, *gpu.Node) {
	t.Helper()
	ctx := context.Background()
	h, err := gpu.OpenSimulated("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := mig.Apply(ctx, h, 7, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h, inv
}

// catalogOf is the catalog of the mps shares (and the exclusive GPUs) the
// providers offer on inv under rules.
func catalogOf(t *testing.T, p *mps.Provider, inv *gpu.Node, rules ...share.GPURule) *share.Catalog {
	t.Helper()
	ctx := context.Background()
	as, err := (&share.Layout{GPUs: rules}).Assign(inv)
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(ctx, inv, as)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := exclusive.New().Offers(ctx, inv, as)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.NewCatalog(append(offers, whole...))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// edits are what the node core gives a task of shares: the device edits,
// then the provider's.
func edits(h share.DevicePaths, p *mps.Provider, shares []share.Share) (share.Edits, error) {
	e, err := share.DeviceEdits(shares, h)
	if err != nil {
		return e, err
	}
	var mine []share.Share
	for _, s := range shares {
		if s.Mechanism == share.MPS {
			mine = append(mine, s)
		}
	}
	return e, p.Edits(mine, shares, &e)
}

func TestSMCount(t *testing.T) {
	for _, tc := range []struct{ total, pct, want int }{
		{132, 25, 32}, // seen on the H200
		{132, 50, 66},
		{132, 100, 132},
		{132, 1, 2},
		{108, 33, 34},
		{60, 50, 30}, // a 3g.71gb instance
	} {
		if got := mps.SMCount(tc.total, tc.pct); got != tc.want {
			t.Errorf("SMCount(%d, %d) = %d, want %d", tc.total, tc.pct, got, tc.want)
		}
	}
}

func TestOffers(t *testing.T) {
	h, inv := simHost(t)
	m := mps.NewManager(t.TempDir())
	p := mps.NewProvider(m)
	c := catalogOf(t, p, inv,
		share.GPURule{Match: "4", Mechanism: share.MPS, Shares: 4},
		share.GPURule{Match: "5", Mechanism: share.MPS, ShareSizes: []string{"50%", "25%", "25%"}})
	got := map[string]string{}
	for _, g := range c.Groups {
		if g.Mechanism == share.MPS {
			a := g.Attrs
			got[g.Name] = fmt.Sprintf("%d× %d MiB %d%% %d SMs %s fault=%v spread=%d", len(g.Shares), a.MemoryMiB, a.ComputePercent, a.SMCount, a.MemoryIsolation, a.FaultIsolation, g.Spread)
		}
	}
	want := map[string]string{
		"H200-mps-25pct": "6× 35942 MiB 25% 32 SMs hard fault=false spread=1", // 4 of GPU 4, 2 of GPU 5
		"H200-mps-50pct": "1× 71885 MiB 50% 66 SMs hard fault=false spread=1",
	}
	if share.SpreadOneDevice != 1 {
		t.Fatal("SpreadOneDevice changed; fix the want strings")
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MPS groups\n got %v\nwant %v", got, want)
	}
	if mps.Properties != (share.Properties{MemoryIsolation: share.Hard, FaultIsolation: false}) {
		t.Errorf("Properties %+v", mps.Properties)
	}
	g4 := inv.GPUs[4].UUID
	s, err := c.Lookup(g4 + "/mps/3")
	if err != nil {
		t.Fatal(err)
	}
	if s[0].ThreadPercent != 25 || s[0].Parent() != g4 || s[0].MIG != nil || s[0].GPU.Index != 4 {
		t.Errorf("share %+v", s[0])
	}

	daemons := mps.Daemons(c)
	if len(daemons) != 2 {
		t.Fatalf("daemons %+v", daemons)
	}
	for _, d := range daemons {
		wantPct, wantMem := 25, uint64(35942)
		if d.UUID == inv.GPUs[5].UUID {
			wantPct, wantMem = 50, 71885 // the largest share's
		}
		if d.ThreadPercent != wantPct || d.PinnedMemLimitMiB != wantMem {
			t.Errorf("daemon %+v, want %d%% and %d MiB", d, wantPct, wantMem)
		}
	}

	// What a task of two shares of GPU 4 gets: their sum, and GPU 4's daemon.
	shares, err := c.Lookup(g4+"/mps/1", g4+"/mps/3")
	if err != nil {
		t.Fatal(err)
	}
	e, err := edits(h, p, shares)
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": g4,
		"GPUMUX_SHARES":          g4 + "/mps/1," + g4 + "/mps/3",
		mps.EnvPipe:              "/run/gpumux/mps",
		mps.EnvThreads:           "50",
		mps.EnvMemLimit:          "0=71884M",
	}
	if fmt.Sprint(e.Env) != fmt.Sprint(wantEnv) {
		t.Errorf("env\n got %v\nwant %v", e.Env, wantEnv)
	}
	if len(e.Mounts) != 1 || e.Mounts[0] != (share.Mount{HostPath: m.PipeDir(g4), ContainerPath: mps.PipeMount}) {
		t.Errorf("mounts %+v, want %s at %s", e.Mounts, m.PipeDir(g4), mps.PipeMount)
	}

	// One task, two MPS daemons: refused, since a process talks to one server.
	g5 := inv.GPUs[5].UUID
	two, _ := c.Lookup(g4+"/mps/0", g5+"/mps/1")
	if _, err := edits(h, p, two); err == nil || !strings.Contains(err.Error(), "must come from one device") {
		t.Errorf("MPS shares of two GPUs in one task: %v", err)
	}
	// MPS with a whole GPU: refused.
	mixed, _ := c.Lookup(g4+"/mps/0", inv.GPUs[0].UUID)
	if _, err := edits(h, p, mixed); err == nil || !strings.Contains(err.Error(), "cannot be combined with exclusive") {
		t.Errorf("MPS with an exclusive share: %v", err)
	}
}

// TestEditsMemLimit: the task's memory limit is in NVIDIA's documented form,
// whole GiB as G.
func TestEditsMemLimit(t *testing.T) {
	m := mps.NewManager(t.TempDir())
	p := mps.NewProvider(m)
	for _, tc := range []struct {
		mib  []uint64
		want string
	}{
		{[]uint64{2048, 2048}, "0=4G"},
		{[]uint64{1000}, "0=1000M"},
		{[]uint64{35942, 35942}, "0=71884M"},
	} {
		var shares []share.Share
		for i, mib := range tc.mib {
			shares = append(shares, share.Share{ID: share.SubID("GPU-a", share.MPS, i), Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-a"}, MemoryMiB: mib, ThreadPercent: 10})
		}
		e := share.Edits{Env: map[string]string{}}
		if err := p.Edits(shares, shares, &e); err != nil {
			t.Fatal(err)
		}
		if e.Env[mps.EnvMemLimit] != tc.want || e.Env[mps.EnvThreads] != fmt.Sprint(10*len(tc.mib)) {
			t.Errorf("%v MiB: %s=%q, %s=%q; want %q", tc.mib, mps.EnvMemLimit, e.Env[mps.EnvMemLimit], mps.EnvThreads, e.Env[mps.EnvThreads], tc.want)
		}
	}
}

func TestOffersOnMIG(t *testing.T) {
	h, inv := simHost(t) // GPU 7: 1× 3g.71gb, 2× 2g.35gb
	m := mps.NewManager(t.TempDir())
	p := mps.NewProvider(m)
	c := catalogOf(t, p, inv, share.GPURule{Match: "7", Mechanism: share.MPS, MIGDevices: map[string]int{"3g.71gb": 1, "2g.35gb": 2}, Shares: 2})
	got := map[string]string{}
	for _, g := range c.Groups {
		if g.Mechanism == share.MPS {
			a := g.Attrs
			got[g.Name] = fmt.Sprintf("%d× %d MiB %d%% %d SMs %s", len(g.Shares), a.MemoryMiB, a.ComputePercent, a.SMCount, a.MIGProfile)
		}
	}
	want := map[string]string{
		"H200-mps-3g.71gb-50pct": "2× 35712 MiB 22% 30 SMs 3g.71gb",
		"H200-mps-2g.35gb-50pct": "4× 16640 MiB 12% 16 SMs 2g.35gb",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups\n got %v\nwant %v", got, want)
	}
	daemons := mps.Daemons(c)
	if len(daemons) != 3 {
		t.Fatalf("want a daemon per MIG instance, got %+v", daemons)
	}
	for _, d := range daemons {
		if !strings.HasPrefix(d.UUID, "MIG-") || d.ThreadPercent != 50 {
			t.Errorf("daemon %+v: want a MIG UUID and 50%% of its instance", d)
		}
	}
	var big gpu.MIGInstance
	for _, inst := range inv.GPUs[7].MIGInstances {
		if inst.Profile == "3g.71gb" {
			big = inst
		}
	}
	shares, err := c.Lookup(big.UUID + "/mps/1")
	if err != nil {
		t.Fatal(err)
	}
	if shares[0].Parent() != big.UUID || shares[0].GPU.Index != 7 {
		t.Errorf("share %+v: want it on the instance of GPU 7", shares[0])
	}
	e, err := edits(h, p, shares)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"NVIDIA_VISIBLE_DEVICES": big.UUID,
		"CUDA_VISIBLE_DEVICES":   big.UUID,
		mps.EnvThreads:           "50",
		mps.EnvMemLimit:          "0=35712M",
	} {
		if e.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, e.Env[k], v)
		}
	}
	if len(e.Mounts) != 1 || e.Mounts[0].HostPath != m.PipeDir(big.UUID) {
		t.Errorf("mounts %+v: want the MIG instance's own daemon", e.Mounts)
	}
	caps := 0
	for _, d := range e.DeviceNodes {
		if strings.HasPrefix(d.ContainerPath, "/dev/nvidia-caps/") {
			caps++
		}
	}
	if caps != 2 {
		t.Errorf("device nodes %+v: want the instance's two caps nodes", e.DeviceNodes)
	}
	// Shares of two instances of one GPU are of two daemons: refused.
	var other string
	for _, inst := range inv.GPUs[7].MIGInstances {
		if inst.UUID != big.UUID {
			other = inst.UUID
		}
	}
	two, _ := c.Lookup(big.UUID+"/mps/0", other+"/mps/0")
	if _, err := edits(h, p, two); err == nil || !strings.Contains(err.Error(), "must come from one device") {
		t.Errorf("MPS shares of two MIG instances in one task: %v", err)
	}
}

// TestOffersOnlyMPSGPUs: the provider offers nothing of GPUs of other
// mechanisms.
func TestOffersOnlyMPSGPUs(t *testing.T) {
	_, inv := simHost(t)
	p := mps.NewProvider(mps.NewManager(t.TempDir()))
	as, err := (&share.Layout{GPUs: []share.GPURule{{Match: "0-3", Mechanism: share.TimeSlice, Replicas: 2}}}).Assign(inv)
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(context.Background(), inv, as)
	if err != nil || len(offers) != 0 {
		t.Errorf("offers %+v, %v", offers, err)
	}
	if p.Mechanism() != share.MPS {
		t.Errorf("Mechanism %s", p.Mechanism())
	}
}

// TestHealthWithoutAgent: a front door that does not run the daemons sees
// a share as healthy while the daemon its pid file names runs.
func TestHealthWithoutAgent(t *testing.T) {
	m := mps.NewManager(t.TempDir())
	p := mps.NewProvider(m)
	s := share.Share{ID: "GPU-a/mps/0", Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-a", Index: 3}}
	ok, why := p.Health(s)
	if ok || !strings.Contains(why, "no MPS control daemon serves GPU-a (GPU 3)") || !strings.Contains(why, m.PipeDir("GPU-a")) {
		t.Errorf("no daemon: %v %q", ok, why)
	}
	pidFile := filepath.Join(m.PipeDir("GPU-a"), "nvidia-cuda-mps-control.pid")
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o755); err != nil {
		t.Fatal(err)
	}
	// A live process: this one.
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintln(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, why := p.Health(s); !ok {
		t.Errorf("a live daemon: unhealthy: %q", why)
	}
	// A pid file that names no process.
	if err := os.WriteFile(pidFile, []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, _ := p.Health(s); ok {
		t.Error("a dead daemon: healthy")
	}
}
