package mig_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
)

// randomLayout draws a layout that fits an H200: profiles added at random
// while they still fit.
func randomLayout(r *rand.Rand, profiles []gpu.MIGProfile) map[string]int {
	want := map[string]int{}
	for tries := 0; tries < 12; tries++ {
		p := profiles[r.IntN(len(profiles))]
		want[p.Name]++
		if _, err := mig.Fit(profiles, want); err != nil {
			if want[p.Name]--; want[p.Name] == 0 {
				delete(want, p.Name)
			}
		}
	}
	return want
}

// TestApplyProperties checks, for random current and wanted layouts on the
// strict simulator, that a successful apply leaves exactly the wanted
// layout, keeps the instances the plan keeps (same UUIDs), and that an apply
// whose k-th create fails leaves exactly the previous instances at their
// placements.
func TestApplyProperties(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	h := openH200(t)
	profiles := gpuAt(t, h, 0).MIGProfiles
	for i := 0; i < 60; i++ {
		index := i % 8
		from, to := randomLayout(r, profiles), randomLayout(r, profiles)
		if _, err := mig.Apply(ctx, h, index, from, nil); err != nil {
			t.Fatalf("case %d: applying %v: %v", i, from, err)
		}
		before := gpuAt(t, h, index)
		plan, err := mig.PlanGPU(&before, to, nil, false)
		if err != nil {
			t.Fatalf("case %d: plan %v → %v: %v", i, from, to, err)
		}
		if fail := r.IntN(3) == 0 && len(plan.Create) > 0; fail {
			k := r.IntN(len(plan.Create))
			if err := h.Simulated().FailCreateAfter(k); err != nil {
				t.Fatal(err)
			}
			if _, err := mig.Apply(ctx, h, index, to, nil); err == nil {
				t.Fatalf("case %d: %v → %v with create %d failing succeeded", i, from, to, k+1)
			}
			h.Simulated().FailCreateAfter(-1)
			if after := gpuAt(t, h, index); !maps.Equal(placements(after), placements(before)) {
				t.Fatalf("case %d: a failed %v → %v left %v, want %v", i, from, to, placements(after), placements(before))
			}
			continue
		}
		if _, err := mig.Apply(ctx, h, index, to, nil); err != nil {
			t.Fatalf("case %d: %v → %v: %v", i, from, to, err)
		}
		after := gpuAt(t, h, index)
		if got := layoutOf(after); !maps.Equal(got, to) {
			t.Fatalf("case %d: %v → %v gave %v", i, from, to, got)
		}
		uuids := map[string]bool{}
		for _, inst := range after.MIGInstances {
			uuids[inst.UUID] = true
		}
		for _, kept := range plan.Keep {
			if !uuids[kept.UUID] {
				t.Errorf("case %d: %v → %v rebuilt %s (%s at %s), which the plan keeps", i, from, to, kept.UUID, kept.Profile, kept.Placement)
			}
		}
	}
}

// BenchmarkPlanGPU plans random layout changes on the GPUs of an 8×H200 node.
func BenchmarkPlanGPU(b *testing.B) {
	ctx := context.Background()
	h, err := gpu.OpenSimulated("dgxh200", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	node, _ := h.Inventory(ctx)
	profiles := node.GPUs[0].MIGProfiles
	r := rand.New(rand.NewPCG(3, 4))
	for i := range node.GPUs {
		if _, err := mig.Apply(ctx, h, i, randomLayout(r, profiles), nil); err != nil {
			b.Fatal(err)
		}
	}
	if node, err = h.Inventory(ctx); err != nil {
		b.Fatal(err)
	}
	wants := make([]map[string]int, 64)
	for i := range wants {
		wants[i] = randomLayout(r, profiles)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g := &node.GPUs[i%8]
		if _, err := mig.PlanGPU(g, wants[i%len(wants)], nil, false); err != nil {
			b.Fatal(err)
		}
	}
}
