package share_test

import (
	"context"
	"testing"

	"github.com/gpumux/gpumux/share"
)

// FuzzAssign feeds arbitrary gpu blocks to validation and assignment on a
// simulated 8×H200 node: no panic, and an accepted layout assigns every GPU
// exactly once with values its mechanism allows.
func FuzzAssign(f *testing.F) {
	node := testNode(f)
	stateDir := f.TempDir()
	f.Add("0-3", "timeslice", 4, "", 0, "4,5", "mig", "3g.71gb", 2)
	f.Add("GPU-x", "exclusive", 0, "", 0, "*H200*", "timeslice", "", 2)
	f.Add("7-3", "mig", 0, "1g.18gb", 7, "", "mps", "", 0)
	f.Add("4", "mps", 0, "", 0, "5", "mps", "50%", 3)
	f.Fuzz(func(t *testing.T, m1, mech1 string, rep1 int, prof1 string, n1 int, m2, mech2, prof2 string, n2 int) {
		rule := func(m, mech string, rep int, prof string, n int) share.GPURule {
			// The count doubles as MPS shares, the profile as a share size.
			r := share.GPURule{Match: m, Mechanism: share.Mechanism(mech), Replicas: rep, Shares: n}
			if share.Mechanism(mech) == share.MPS && prof != "" {
				r.ShareSizes, r.Shares = []string{prof, prof}, 0
			}
			if prof != "" {
				r.MIGDevices = map[string]int{prof: n}
			}
			return r
		}
		l := share.Layout{GPUs: []share.GPURule{rule(m1, mech1, rep1, prof1, n1), rule(m2, mech2, 0, prof2, n2)}}
		as, err := l.Assign(node)
		if err != nil {
			return
		}
		if len(as) != len(node.GPUs) {
			t.Fatalf("%d assignments for %d GPUs", len(as), len(node.GPUs))
		}
		for _, a := range as {
			switch a.Mechanism {
			case share.Exclusive:
			case share.TimeSlice:
				if a.Replicas < 2 || a.Replicas > share.MaxReplicas {
					t.Fatalf("accepted %d replicas", a.Replicas)
				}
			case share.MIG:
				if len(a.MIGDevices) == 0 {
					t.Fatal("accepted mig without a layout")
				}
			case share.MPS:
				sum := 0
				for _, p := range a.MPSPercent {
					sum += p
				}
				if len(a.MPSPercent) == 0 || sum > 100 {
					t.Fatalf("accepted MPS shares %v", a.MPSPercent)
				}
			default:
				t.Fatalf("accepted mechanism %q", a.Mechanism)
			}
		}
		// Every provider offers its shares of an accepted layout, and no
		// two offer one share ID.
		c, err := openFixed(t, stateDir, node, l.GPUs...).Catalog(context.Background())
		if err != nil {
			t.Fatalf("the node core cannot build the catalog of an accepted layout: %v", err)
		}
		for _, g := range c.Groups {
			for _, s := range g.Shares {
				if _, err := share.ParseID(s.ID); err != nil || s.Mechanism != g.Mechanism {
					t.Fatalf("group %s offers share %s (%s): %v", g.Name, s.ID, s.Mechanism, err)
				}
			}
		}
	})
}
