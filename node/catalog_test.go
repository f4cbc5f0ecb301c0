package node_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
)

func TestCatalogGroups(t *testing.T) {
	n := openDGX(t,
		share.GPURule{Match: "0-1", Mechanism: share.TimeSlice, Replicas: 4},
		share.GPURule{Match: "7", Mechanism: share.MIG, MIGDevices: map[string]int{"3g.71gb": 1, "2g.35gb": 2}})
	c, inv := dgxCatalog(t, n)
	byName := groupsByName(c)
	type want struct {
		shares  int
		mech    share.Mechanism
		mem     uint64
		percent int
		sms     int
		iso     share.Isolation
		fault   bool
		profile string
		parent  string
		spread  share.Spread
	}
	wants := map[string]want{
		"H200":              {5, share.Exclusive, 143771, 100, 132, share.Hard, true, "", "", share.SpreadAny},
		"H200-timeslice-4x": {8, share.TimeSlice, 143771 / 4, 25, 132, share.Soft, false, "", "", share.SpreadAlone}, // limited: soft, alone in its task
		"H200-mig-3g.71gb":  {1, share.MIG, 71424, 45, 60, share.Hard, true, "3g.71gb", inv.GPUs[7].UUID, share.SpreadAny},
		"H200-mig-2g.35gb":  {2, share.MIG, 33280, 24, 32, share.Hard, true, "2g.35gb", inv.GPUs[7].UUID, share.SpreadAny},
		"Tesla-T4":          {1, share.Exclusive, 15360, 100, 40, share.Hard, true, "", "GPU-t4", share.SpreadAny},
	}
	if len(byName) != len(wants) {
		t.Errorf("groups %v, want %d", slices.Sorted(maps.Keys(byName)), len(wants))
	}
	for name, w := range wants {
		g, ok := byName[name]
		if !ok {
			t.Errorf("no group %s (have %v)", name, slices.Sorted(maps.Keys(byName)))
			continue
		}
		a := g.Attrs
		got := want{len(g.Shares), a.Mechanism, a.MemoryMiB, a.ComputePercent, a.SMCount, a.MemoryIsolation, a.FaultIsolation, a.MIGProfile, a.ParentUUID, g.Spread}
		if got != w {
			t.Errorf("group %s = %+v, want %+v", name, got, w)
		}
		if a.DriverVersion != "580.159.04" && g.Model == "NVIDIA H200" || a.CUDAComputeCapability == "" {
			t.Errorf("group %s: driver %q, CC %q", name, a.DriverVersion, a.CUDAComputeCapability)
		}
		for _, s := range g.Shares {
			if s.Mechanism != g.Mechanism || s.MemoryMiB != a.MemoryMiB || s.ComputePercent != a.ComputePercent {
				t.Errorf("group %s: share %s is %s, %d MiB, %d%%", name, s.ID, s.Mechanism, s.MemoryMiB, s.ComputePercent)
			}
		}
	}
	// The providers' order (exclusive, mig, timeslice), then the order of
	// the GPUs and their instances.
	if got := groupNamesOf(c); !slices.Equal(got, []string{"H200", "Tesla-T4", "H200-mig-3g.71gb", "H200-mig-2g.35gb", "H200-timeslice-4x"}) {
		t.Errorf("group order %v", got)
	}
	// IDs: unique, stable forms, valid.
	seen := map[string]bool{}
	for _, s := range c.Shares() {
		if seen[s.ID] {
			t.Errorf("duplicate share ID %s", s.ID)
		}
		seen[s.ID] = true
		if _, err := share.ParseID(s.ID); err != nil {
			t.Errorf("share %s: %v", s.ID, err)
		}
	}
	if !seen[inv.GPUs[1].UUID+"/timeslice/3"] || !seen[inv.GPUs[2].UUID] || !seen[bigInstance(t, inv).UUID] {
		t.Errorf("share IDs do not have the documented forms: %v", slices.Sorted(maps.Keys(seen)))
	}
	// Current is a node agent's; Catalog does not set it.
	if n.Current() != nil {
		t.Error("Catalog set Current")
	}
}

func TestCatalogOffersMIGModeGPUInstances(t *testing.T) {
	for _, rules := range [][]share.GPURule{
		nil, // GPU 7 unmatched
		{{Match: "*H200*", Mechanism: share.Exclusive}},
	} {
		n := openDGX(t, rules...)
		c, _ := dgxCatalog(t, n)
		var migShares int
		for _, s := range c.Shares() {
			if s.Mechanism == share.MIG {
				migShares++
				if s.GPU.Index != 7 || s.MIG == nil {
					t.Errorf("MIG share %s on GPU %d", s.ID, s.GPU.Index)
				}
			}
			if s.Mechanism == share.Exclusive && s.GPU.Index == 7 {
				t.Errorf("rules %v: GPU 7 is in MIG mode but offered whole: %s", rules, s.ID)
			}
		}
		if migShares != 3 {
			t.Errorf("rules %v: want GPU 7's 3 existing MIG instances offered, got %d", rules, migShares)
		}
	}
}

func TestCatalogSkip(t *testing.T) {
	n := openDGX(t,
		share.GPURule{Match: "0-1", Mechanism: share.TimeSlice, Replicas: 2},
		share.GPURule{Match: "2", Mechanism: share.MPS, Shares: 2})
	all, _ := dgxCatalog(t, n)
	some, _ := dgxCatalog(t, n, node.Skip(share.TimeSlice), node.Skip(share.MPS))
	count := func(c *share.Catalog) map[share.Mechanism]int {
		out := map[share.Mechanism]int{}
		for _, s := range c.Shares() {
			out[s.Mechanism]++
		}
		return out
	}
	if got := fmt.Sprint(count(all)); got != "map[exclusive:5 mig:3 mps:2 timeslice:4]" {
		t.Errorf("catalog: %s", got)
	}
	if got := fmt.Sprint(count(some)); got != "map[exclusive:5 mig:3]" {
		t.Errorf("catalog skipping timeslice and mps: %s", got)
	}
}

func TestCatalogErrors(t *testing.T) {
	// A layout the node's GPUs refuse: Catalog says why.
	n := openDGX(t, share.GPURule{Match: "8", Mechanism: share.MIG, MIGDevices: map[string]int{"1g.5gb": 1}})
	if _, err := n.Catalog(context.Background()); !errors.Is(err, share.ErrInvalid) || !strings.Contains(err.Error(), "GPU 8 (Tesla T4) has no MIG support") {
		t.Errorf("mig on the T4: %v", err)
	}
	// A host that cannot be opened: Open fails, unless the config has a
	// remote block and there is no driver.
	broken := errors.New("no such GPU")
	if _, err := node.Open(&nodeconfig.Config{StateDir: t.TempDir()}, node.WithOpen(func(*nodeconfig.Config) (node.Host, error) { return nil, broken })); !errors.Is(err, broken) {
		t.Errorf("Open with a broken host: %v", err)
	}
}

// TestOpenSimulated opens a simulated node the way the front doors do,
// without WithOpen.
func TestOpenSimulated(t *testing.T) {
	n, err := node.Open(&nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), LimiterDir: stubLimiter(t),
		GPUs: []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := n.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := groupNamesOf(c); !slices.Equal(got, []string{"H200", "H200-timeslice-2x"}) || c.Len() != 7+2 {
		t.Errorf("groups %v, %d shares", got, c.Len())
	}
}

func groupNamesOf(c *share.Catalog) []string {
	var out []string
	for _, g := range c.Groups {
		out = append(out, g.Name)
	}
	return out
}
