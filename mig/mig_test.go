package mig_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
)

func openH200(t *testing.T) *gpu.Host {
	t.Helper()
	h, err := gpu.OpenSimulated("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func gpuAt(t *testing.T, h *gpu.Host, index int) gpu.GPU {
	t.Helper()
	node, err := h.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return node.GPUs[index]
}

func TestFit(t *testing.T) {
	h := openH200(t)
	profiles := gpuAt(t, h, 0).MIGProfiles
	tests := []struct {
		want    map[string]int
		errPart string // empty: must fit
	}{
		{map[string]int{"1g.18gb": 7}, ""},
		{map[string]int{"7g.141gb": 1}, ""},
		{map[string]int{"4g.71gb": 1, "3g.71gb": 1}, ""},
		{map[string]int{"2g.35gb": 3, "1g.35gb": 1}, ""},
		// Needs backtracking: 3g.71gb first-fit at 0:4 leaves no room for two 2g.35gb.
		{map[string]int{"3g.71gb": 1, "2g.35gb": 2}, ""},
		{map[string]int{"3g.71gb": 2, "1g.18gb": 1}, "need 9 memory slots"},
		{map[string]int{"2g.35gb": 4}, "4× 2g.35gb: at most 3 fit"},
		{map[string]int{"4g.71gb": 1, "2g.35gb": 2}, "no non-overlapping placements exist for 2× 2g.35gb + 1× 4g.71gb: 1× 4g.71gb (at 0:4) and 2× 2g.35gb (at 0:2, 2:2, 4:2) overlap on memory slots 0-3"},
		{map[string]int{"9g.1tb": 1}, `profile "9g.1tb" does not exist`},
	}
	for _, tc := range tests {
		slots, err := mig.Fit(profiles, tc.want)
		if tc.errPart != "" {
			if !errors.Is(err, mig.ErrInfeasible) || !strings.Contains(err.Error(), tc.errPart) {
				t.Errorf("Fit(%v) = %v, want ErrInfeasible containing %q", tc.want, err, tc.errPart)
			}
			continue
		}
		if err != nil {
			t.Errorf("Fit(%v): %v", tc.want, err)
			continue
		}
		got := map[string]int{}
		for i, s := range slots {
			got[s.Profile.Name]++
			if !contains(s.Profile.Placements, s.Placement) {
				t.Errorf("Fit(%v): %s at %s is not a possible placement", tc.want, s.Profile.Name, s.Placement)
			}
			for _, o := range slots[:i] {
				if s.Placement.Overlaps(o.Placement) {
					t.Errorf("Fit(%v): %s at %s overlaps %s at %s", tc.want, s.Profile.Name, s.Placement, o.Profile.Name, o.Placement)
				}
			}
		}
		if !maps.Equal(got, tc.want) {
			t.Errorf("Fit(%v) placed %v", tc.want, got)
		}
	}
}

func contains(list []gpu.Placement, p gpu.Placement) bool {
	for _, x := range list {
		if x == p {
			return true
		}
	}
	return false
}

func layoutOf(g gpu.GPU) map[string]int {
	m := map[string]int{}
	for _, i := range g.MIGInstances {
		m[i.Profile]++
	}
	return m
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	var steps []string
	progress := func(f string, a ...any) { steps = append(steps, f) }

	want := map[string]int{"3g.71gb": 1, "2g.35gb": 2}
	res, err := mig.Apply(ctx, h, 6, want, progress)
	if err != nil {
		t.Fatal(err)
	}
	g := gpuAt(t, h, 6)
	if !g.MIGEnabled || !maps.Equal(layoutOf(g), want) || !res.Changed || len(res.Created) != 3 {
		t.Fatalf("after Apply: MIG %v, layout %v, result %+v", g.MIGEnabled, layoutOf(g), res)
	}
	if len(steps) == 0 || !strings.Contains(steps[0], "enabling MIG mode") {
		t.Errorf("progress did not report enabling MIG mode: %v", steps)
	}
	if other := gpuAt(t, h, 5); other.MIGEnabled {
		t.Error("Apply on GPU 6 changed GPU 5")
	}

	// Same layout again: nothing to do, UUIDs unchanged.
	res, err = mig.Apply(ctx, h, 6, want, nil)
	if err != nil || res.Changed {
		t.Fatalf("second Apply: %+v, %v", res, err)
	}
	if again := gpuAt(t, h, 6); again.MIGInstances[0].UUID != g.MIGInstances[0].UUID {
		t.Error("a no-op Apply recreated instances")
	}

	// A new layout replaces the old one.
	want = map[string]int{"1g.18gb": 7}
	if _, err := mig.Apply(ctx, h, 6, want, nil); err != nil {
		t.Fatal(err)
	}
	if got := layoutOf(gpuAt(t, h, 6)); !maps.Equal(got, want) {
		t.Fatalf("layout %v, want %v", got, want)
	}
}

func TestApplyRefusesBusyInstances(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	if _, err := mig.Apply(ctx, h, 1, map[string]int{"7g.141gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	before := gpuAt(t, h, 1)
	if err := h.Simulated().SetProcesses(before.MIGInstances[0].UUID, 4242); err != nil {
		t.Fatal(err)
	}
	_, err := mig.Apply(ctx, h, 1, map[string]int{"1g.18gb": 7}, nil)
	if !errors.Is(err, mig.ErrBusy) || !strings.Contains(err.Error(), "4242") || !strings.Contains(err.Error(), before.MIGInstances[0].UUID) {
		t.Fatalf("want ErrBusy naming the instance and pid, got %v", err)
	}
	if after := gpuAt(t, h, 1); after.MIGInstances[0].UUID != before.MIGInstances[0].UUID || len(after.MIGInstances) != 1 {
		t.Error("a refused Apply changed the layout")
	}
}

func TestApplyInfeasibleChangesNothing(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	if _, err := mig.Apply(ctx, h, 2, map[string]int{"2g.35gb": 3}, nil); err != nil {
		t.Fatal(err)
	}
	before := gpuAt(t, h, 2)
	_, err := mig.Apply(ctx, h, 2, map[string]int{"4g.71gb": 1, "2g.35gb": 2}, nil)
	if !errors.Is(err, mig.ErrInfeasible) {
		t.Fatalf("want ErrInfeasible, got %v", err)
	}
	if after := gpuAt(t, h, 2); !sameInstances(before, after) {
		t.Errorf("infeasible Apply changed the GPU: %v → %v", before.MIGInstances, after.MIGInstances)
	}
}

func TestApplyRollsBackOnFailure(t *testing.T) {
	ctx := context.Background()
	for _, failAfter := range []int{0, 1, 2} {
		h := openH200(t)
		if _, err := mig.Apply(ctx, h, 3, map[string]int{"3g.71gb": 1, "1g.18gb": 2}, nil); err != nil {
			t.Fatal(err)
		}
		before := gpuAt(t, h, 3)
		if err := h.Simulated().FailCreateAfter(failAfter); err != nil {
			t.Fatal(err)
		}
		_, err := mig.Apply(ctx, h, 3, map[string]int{"1g.18gb": 7}, nil)
		if !errors.Is(err, nvml.ERROR_INSUFFICIENT_RESOURCES) || !strings.Contains(err.Error(), "the previous layout (2× 1g.18gb + 1× 3g.71gb) was restored") {
			t.Fatalf("fail after %d: want the injected NVML error and a restored layout, got %v", failAfter, err)
		}
		after := gpuAt(t, h, 3)
		if !maps.Equal(layoutOf(after), layoutOf(before)) || !samePlacements(before, after) {
			t.Errorf("fail after %d: layout %v at %v, want %v at %v", failAfter, layoutOf(after), placements(after), layoutOf(before), placements(before))
		}
	}
}

func sameInstances(a, b gpu.GPU) bool {
	if len(a.MIGInstances) != len(b.MIGInstances) {
		return false
	}
	for i := range a.MIGInstances {
		if a.MIGInstances[i].UUID != b.MIGInstances[i].UUID {
			return false
		}
	}
	return true
}

func placements(g gpu.GPU) map[gpu.Placement]string {
	m := map[gpu.Placement]string{}
	for _, i := range g.MIGInstances {
		m[i.Placement] = i.Profile
	}
	return m
}

func samePlacements(a, b gpu.GPU) bool { return maps.Equal(placements(a), placements(b)) }

func TestFitLeavesRoomForLargeProfiles(t *testing.T) {
	h := openH200(t)
	profiles := gpuAt(t, h, 0).MIGProfiles
	slots, err := mig.Fit(profiles, map[string]int{"1g.18gb": 1})
	if err != nil || slots[0].Placement != (gpu.Placement{Start: 6, Size: 1}) {
		t.Fatalf("one 1g.18gb at %v (%v); want slot 6, which keeps 0:4 free for a 4g", slots, err)
	}
	slots, err = mig.FitAround(profiles, map[string]int{"4g.71gb": 1}, []gpu.Placement{slots[0].Placement})
	if err != nil || slots[0].Placement != (gpu.Placement{Start: 0, Size: 4}) {
		t.Errorf("a 4g around it: %v (%v)", slots, err)
	}
	if _, err := mig.FitAround(profiles, map[string]int{"4g.71gb": 1}, []gpu.Placement{{Start: 3, Size: 1}}); !errors.Is(err, mig.ErrInfeasible) || !strings.Contains(err.Error(), "around the instances that stay (3:1)") {
		t.Errorf("a 4g around a 1g at 3:1: %v", err)
	}
}

func TestApplyKeepsInstancesThatCanStay(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	if _, err := mig.Apply(ctx, h, 4, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	kept := instanceOf(t, gpuAt(t, h, 4), "3g.71gb")
	// The 3g is busy: it may stay, so the change goes ahead around it.
	if err := h.Simulated().SetProcesses(kept.UUID, 99); err != nil {
		t.Fatal(err)
	}
	res, err := mig.Apply(ctx, h, 4, map[string]int{"3g.71gb": 1, "1g.18gb": 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	after := gpuAt(t, h, 4)
	if got := instanceOf(t, after, "3g.71gb"); got.UUID != kept.UUID || got.Placement != kept.Placement {
		t.Errorf("the 3g.71gb was rebuilt: %+v, was %+v", got, kept)
	}
	if len(res.Destroyed) != 2 || len(res.Created) != 4 || !maps.Equal(layoutOf(after), map[string]int{"3g.71gb": 1, "1g.18gb": 4}) {
		t.Errorf("destroyed %d, created %d, layout %v", len(res.Destroyed), len(res.Created), layoutOf(after))
	}
	// A layout without it would destroy the busy 3g: refused, nothing changes.
	_, err = mig.Apply(ctx, h, 4, map[string]int{"1g.18gb": 7}, nil)
	if !errors.Is(err, mig.ErrBusy) || !strings.Contains(err.Error(), kept.UUID) || !strings.Contains(err.Error(), "pids [99]") {
		t.Errorf("destroying a busy instance: %v", err)
	}
	if !sameInstances(after, gpuAt(t, h, 4)) {
		t.Error("a refused apply changed the GPU")
	}
}

func TestPlanGivesUpIdleInstancesThatBlock(t *testing.T) {
	ctx := context.Background()
	h := openH200(t)
	// A 1g.18gb in the middle (slot 3) blocks the only 4g placement.
	g := gpuAt(t, h, 5)
	var oneG gpu.MIGProfile
	for _, p := range g.MIGProfiles {
		if p.Name == "1g.18gb" {
			oneG = p
		}
	}
	if err := h.EnableMIG(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := h.CreateMIGInstance(ctx, 5, oneG, gpu.Placement{Start: 3, Size: 1}); err != nil {
		t.Fatal(err)
	}
	g = gpuAt(t, h, 5)
	want := map[string]int{"4g.71gb": 1, "1g.18gb": 1}
	plan, err := mig.PlanGPU(&g, want, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Keep) != 0 || len(plan.Destroy) != 1 || len(plan.Create) != 2 {
		t.Errorf("plan keeps %v, destroys %v, creates %v; want the idle 1g moved out of the 4g's way", plan.Keep, plan.Destroy, plan.Create)
	}
	// Busy, it cannot move: the layout is refused with the reason.
	busy := func(string) bool { return true }
	if _, err := mig.PlanGPU(&g, want, busy, false); !errors.Is(err, mig.ErrInfeasible) || !strings.Contains(err.Error(), "around the instances that stay (1g.18gb at 3:1): 1× 4g.71gb can only be placed at 0:4, which overlaps 1g.18gb at 3:1 (slot 3), an instance that stays") {
		t.Errorf("with the 1g busy: %v", err)
	}
	if _, err := mig.Apply(ctx, h, 5, want, nil); err != nil {
		t.Fatal(err)
	}
	if got := layoutOf(gpuAt(t, h, 5)); !maps.Equal(got, want) {
		t.Errorf("layout %v", got)
	}
}

func instanceOf(t *testing.T, g gpu.GPU, profile string) gpu.MIGInstance {
	t.Helper()
	for _, inst := range g.MIGInstances {
		if inst.Profile == profile {
			return inst
		}
	}
	t.Fatalf("GPU %d has no %s: %+v", g.Index, profile, g.MIGInstances)
	return gpu.MIGInstance{}
}
