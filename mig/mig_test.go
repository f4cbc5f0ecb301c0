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
		{map[string]int{"4g.71gb": 1, "2g.35gb": 2}, "no non-overlapping placements exist for 2× 2g.35gb + 1× 4g.71gb"},
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
