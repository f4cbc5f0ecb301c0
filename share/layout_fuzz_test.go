package share_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/share"
)

// FuzzAssign feeds arbitrary gpu blocks to validation and assignment on a
// simulated 8×H200 node (GPU 7 in MIG mode) plus a T4: no panic, an
// accepted layout assigns every GPU exactly once with values its mechanism
// allows, and the node core builds its catalog.
func FuzzAssign(f *testing.F) {
	node := testNode(f)
	stateDir := f.TempDir()
	// Refused layouts.
	f.Add("0-3", "timeslice", 4, "", 0, "4,5", "mig", "3g.71gb", 0)
	f.Add("GPU-x", "exclusive", 0, "", 0, "*H200*", "timeslice", "", 2)
	f.Add("7-3", "mig", 0, "1g.18gb", 7, "", "mps", "", 0)
	f.Add("8", "mig", 0, "1g.5gb", 1, "0", "timeslice", "1g.18gb", 1)
	// Accepted ones.
	f.Add("0-3", "timeslice", 4, "", 0, "4,5", "mps", "", 2)
	f.Add("0", "mig", 0, "3g.71gb", 2, "6", "mps", "2g.35gb", 3)
	f.Add("4", "mps", 0, "50%", 0, "*T4*", "exclusive", "", 0)
	f.Add("0", "mps", 0, "", 22, "1", "mps", "", 3) // GPU 7 unmatched: mig without a layout
	f.Add("7", "exclusive", 0, "", 0, "1-2", "mig", "7g.141gb", 1)
	f.Fuzz(func(t *testing.T, m1, mech1 string, rep1 int, prof1 string, n1 int, m2, mech2, prof2 string, n2 int) {
		// The profile is a MIG profile, or an MPS share size ("50%"); the
		// count is a number of MIG instances, or of MPS shares.
		rule := func(m, mech string, rep int, prof string, n int) share.GPURule {
			r := share.GPURule{Match: m, Mechanism: share.Mechanism(mech), Replicas: rep}
			switch {
			case r.Mechanism == share.MPS && strings.HasSuffix(prof, "%"):
				r.ShareSizes = []string{prof, prof}
			case r.Mechanism == share.MPS && prof != "": // MPS on MIG instances
				r.Shares, r.MIGDevices = n, map[string]int{prof: 1}
			case prof != "":
				r.MIGDevices = map[string]int{prof: n}
			default:
				r.Shares = n
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
		migMode := map[int]bool{}
		for _, g := range node.GPUs {
			migMode[g.Index] = g.MIGEnabled
		}
		for i, a := range as {
			if a.GPUIndex != node.GPUs[i].Index {
				t.Fatalf("assignment %d is of GPU %d, not %d", i, a.GPUIndex, node.GPUs[i].Index)
			}
			switch a.Mechanism {
			case share.Exclusive:
				if migMode[a.GPUIndex] {
					t.Fatalf("GPU %d is in MIG mode but was assigned whole", a.GPUIndex)
				}
			case share.TimeSlice:
				if a.Replicas < 2 || a.Replicas > share.MaxReplicas {
					t.Fatalf("accepted %d replicas", a.Replicas)
				}
			case share.MIG:
				// Without a layout only a GPU in MIG mode, to offer the
				// instances it has.
				if len(a.MIGDevices) == 0 && !migMode[a.GPUIndex] {
					t.Fatalf("accepted mig without a layout on GPU %d", a.GPUIndex)
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
				if s.Mechanism == share.Exclusive && migMode[s.GPU.Index] {
					t.Fatalf("GPU %d is in MIG mode but offered whole", s.GPU.Index)
				}
			}
		}
	})
}
