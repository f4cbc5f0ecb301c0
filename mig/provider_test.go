package mig_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/share"
)

// providerCatalog assigns inv under rules and groups the provider's offers.
func providerCatalog(t *testing.T, p *mig.Provider, inv *gpu.Node, rules ...share.GPURule) *share.Catalog {
	t.Helper()
	as, err := (&share.Layout{GPUs: rules}).Assign(inv)
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(context.Background(), inv, as)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.NewCatalog(offers)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func inventory(t *testing.T, h *gpu.Host) *gpu.Node {
	t.Helper()
	inv, err := h.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func TestProviderStartAndOffers(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	// GPU 6 was split by hand; no rule matches it.
	if _, err := mig.Apply(ctx, h, 6, map[string]int{"1g.18gb": 2, "3g.71gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	rules := []share.GPURule{
		{Match: "7", Mechanism: share.MIG, MIGDevices: map[string]int{"3g.71gb": 1, "2g.35gb": 2}},
		{Match: "5", Mechanism: share.MPS, MIGDevices: map[string]int{"7g.141gb": 1}, Shares: 2},
	}
	var steps []string
	p := mig.NewProvider(h, func(format string, args ...any) { steps = append(steps, fmt.Sprintf(format, args...)) })
	if p.Mechanism() != share.MIG {
		t.Errorf("Mechanism %s", p.Mechanism())
	}
	as, err := (&share.Layout{GPUs: rules}).Assign(inventory(t, h))
	if err != nil {
		t.Fatal(err)
	}
	// Start applies the layouts of the rules with mig_devices: mig's, and
	// mps's on MIG instances.
	if err := p.Start(ctx, inventory(t, h), as); err != nil {
		t.Fatal(err)
	}
	if len(steps) == 0 {
		t.Error("Start reported no progress")
	}
	inv := inventory(t, h)
	if n := len(inv.GPUs[5].MIGInstances); n != 1 || inv.GPUs[5].MIGInstances[0].Profile != "7g.141gb" {
		t.Errorf("GPU 5 (mps on MIG): instances %+v", inv.GPUs[5].MIGInstances)
	}

	c := providerCatalog(t, p, inv, rules...)
	got := map[string]string{}
	for _, g := range c.Groups {
		a := g.Attrs
		got[g.Name] = fmt.Sprintf("%d× %d MiB %d%% %d SMs %s %s fault=%v parent=%s spread=%d",
			len(g.Shares), a.MemoryMiB, a.ComputePercent, a.SMCount, a.MIGProfile, a.MemoryIsolation, a.FaultIsolation, a.ParentUUID, g.Spread)
		for _, s := range g.Shares {
			if s.Mechanism != share.MIG || s.MIG == nil || s.MIG.UUID != s.ID || s.Parent() != s.ID || s.MIG.Profile != g.Profile {
				t.Errorf("group %s: share %+v", g.Name, s)
			}
			if s.GPU.Index != 6 && s.GPU.Index != 7 {
				t.Errorf("share %s of GPU %d, which is not mig's", s.ID, s.GPU.Index)
			}
		}
	}
	// GPU 6 (in MIG mode, unmatched) and GPU 7 (mig); not GPU 5 (mps).
	g6, g7 := inv.GPUs[6].UUID, inv.GPUs[7].UUID
	want := map[string]string{
		"H200-mig-1g.18gb": "2× 16384 MiB 12% 16 SMs 1g.18gb hard fault=true parent=" + g6 + " spread=0",
		"H200-mig-3g.71gb": "2× 71424 MiB 45% 60 SMs 3g.71gb hard fault=true parent= spread=0",
		"H200-mig-2g.35gb": "2× 33280 MiB 24% 32 SMs 2g.35gb hard fault=true parent=" + g7 + " spread=0",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups\n got %v\nwant %v", got, want)
	}
	if mig.Properties != (share.Properties{MemoryIsolation: share.Hard, FaultIsolation: true}) {
		t.Errorf("Properties %+v", mig.Properties)
	}

	// Edits add nothing to the device edits.
	shares := c.Groups[0].Shares[:1]
	e, err := share.DeviceEdits(shares, h)
	if err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprint(e)
	if err := p.Edits(shares, shares, &e); err != nil || fmt.Sprint(e) != before {
		t.Errorf("Edits: %v, changed %s to %v", err, before, e)
	}

	// Start again: the layouts are in place, nothing changes.
	if err := p.Start(ctx, inv, as); err != nil {
		t.Fatal(err)
	}
	if again := providerCatalog(t, p, inventory(t, h), rules...); fmt.Sprint(share.SortedIDs(again.Shares())) != fmt.Sprint(share.SortedIDs(c.Shares())) {
		t.Errorf("a second Start changed the instances: %v → %v", share.SortedIDs(c.Shares()), share.SortedIDs(again.Shares()))
	}
}

func TestProviderHealth(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	if _, err := mig.Apply(ctx, h, 6, map[string]int{"1g.18gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	p := mig.NewProvider(h, nil)
	c := providerCatalog(t, p, inventory(t, h))
	if c.Len() != 2 {
		t.Fatalf("%d shares, want GPU 6's two instances", c.Len())
	}
	old := c.Shares()[0]
	for _, s := range c.Shares() {
		if ok, why := p.Health(s); !ok {
			t.Errorf("%s unhealthy: %s", s.ID, why)
		}
	}
	// The instances are replaced: the old shares' are gone.
	if _, err := mig.Apply(ctx, h, 6, map[string]int{"7g.141gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	c2 := providerCatalog(t, p, inventory(t, h))
	if ok, why := p.Health(old); ok || !strings.Contains(why, old.MIG.UUID) || !strings.Contains(why, "no longer exists") || !strings.Contains(why, "GPU 6") {
		t.Errorf("a share of a destroyed instance: %v %q", ok, why)
	}
	if ok, why := p.Health(c2.Shares()[0]); !ok {
		t.Errorf("the new instance: %s", why)
	}
	// A provider that has not offered anything yet does not judge.
	if ok, _ := mig.NewProvider(h, nil).Health(old); !ok {
		t.Error("Health before any Offers: unhealthy")
	}
}

// TestProviderStartKeepsWhatItCannotChange: a GPU whose layout cannot be
// applied keeps its instances; the error names it, and the other GPUs'
// layouts are applied.
func TestProviderStartKeepsWhatItCannotChange(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	if _, err := mig.Apply(ctx, h, 1, map[string]int{"7g.141gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	busy := inventory(t, h).GPUs[1].MIGInstances[0].UUID
	if err := h.Simulated().SetProcesses(busy, 4242); err != nil {
		t.Fatal(err)
	}
	rules := []share.GPURule{
		{Match: "1", Mechanism: share.MIG, MIGDevices: map[string]int{"1g.18gb": 7}},
		{Match: "2", Mechanism: share.MIG, MIGDevices: map[string]int{"2g.35gb": 3}},
	}
	inv := inventory(t, h)
	as, err := (&share.Layout{GPUs: rules}).Assign(inv)
	if err != nil {
		t.Fatal(err)
	}
	p := mig.NewProvider(h, nil)
	err = p.Start(ctx, inv, as)
	if !errors.Is(err, mig.ErrBusy) || !strings.Contains(err.Error(), "GPU 1: MIG layout not applied, the GPU keeps its current instances") {
		t.Fatalf("Start: %v", err)
	}
	after := inventory(t, h)
	if len(after.GPUs[1].MIGInstances) != 1 || after.GPUs[1].MIGInstances[0].UUID != busy {
		t.Errorf("GPU 1 changed: %+v", after.GPUs[1].MIGInstances)
	}
	if len(after.GPUs[2].MIGInstances) != 3 {
		t.Errorf("GPU 2 not applied: %+v", after.GPUs[2].MIGInstances)
	}
	// Both GPUs' instances are offered.
	if c := providerCatalog(t, p, after, rules...); c.Len() != 4 {
		t.Errorf("%d shares, want 1 of GPU 1 and 3 of GPU 2", c.Len())
	}
	if err := p.Reconcile(ctx, nil); err != nil {
		t.Error(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Error(err)
	}
}
