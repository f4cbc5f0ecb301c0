package mig_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
)

// stays builds instances that stay: "profile@start:size".
func stays(list ...string) []gpu.MIGInstance {
	var out []gpu.MIGInstance
	for _, s := range list {
		var inst gpu.MIGInstance
		var start, size int
		for i := len(s) - 1; i >= 0; i-- {
			if s[i] == '@' {
				inst.Profile = s[:i]
				if _, err := fmt.Sscanf(s[i+1:], "%d:%d", &start, &size); err != nil {
					panic(s)
				}
				break
			}
		}
		inst.Placement = gpu.Placement{Start: start, Size: size}
		out = append(out, inst)
	}
	return out
}

func profilesOf(t *testing.T, node string) []gpu.MIGProfile {
	t.Helper()
	h, err := gpu.OpenSimulated(node, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	n, err := h.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n.GPUs[0].MIGProfiles
}

// The H200 (as read on a real one, fixtures/nvidia-h200) and the A100 share
// the placement table: 1g at 0..6 (size 1), 2g at 0, 2, 4, 3g at 0 and 4
// (size 4), 4g only at 0 (size 4), 1g.35gb/1g.10gb at 0, 2, 4, 6 (size 2).
// Slot 7 takes only instances of size 2 or more.
func TestFitReasons(t *testing.T) {
	tests := []struct {
		node string
		want map[string]int
		stay []gpu.MIGInstance
		err  string // the whole error
	}{
		{
			node: "dgxh200", want: map[string]int{"4g.71gb": 1, "2g.35gb": 2},
			err: "layout does not fit: no non-overlapping placements exist for 2× 2g.35gb + 1× 4g.71gb: " +
				"1× 4g.71gb (at 0:4) and 2× 2g.35gb (at 0:2, 2:2, 4:2) overlap on memory slots 0-3; together they need 8 memory slots, and their placements cover only slots 0-5",
		},
		{
			// Eight slots, but slot 7 takes no 1g.18gb.
			node: "dgxh200", want: map[string]int{"2g.35gb": 3, "1g.18gb": 2},
			err: "layout does not fit: no non-overlapping placements exist for 2× 1g.18gb + 3× 2g.35gb: " +
				"3× 2g.35gb (at 0:2, 2:2, 4:2) and 2× 1g.18gb (at 0:1, 1:1, 2:1, 3:1, 4:1, 5:1, 6:1) overlap on memory slots 0-5; together they need 8 memory slots, and their placements cover only slots 0-6",
		},
		{
			// No two of them conflict; the three do.
			node: "dgxh200", want: map[string]int{"4g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2},
			err: "layout does not fit: no non-overlapping placements exist for 2× 1g.18gb + 1× 2g.35gb + 1× 4g.71gb: " +
				"1× 4g.71gb (at 0:4), 1× 2g.35gb (at 0:2, 2:2, 4:2) and 2× 1g.18gb (at 0:1, 1:1, 2:1, 3:1, 4:1, 5:1, 6:1) overlap on memory slots 0-5; together they need 8 memory slots, and their placements cover only slots 0-6",
		},
		{
			// Only the conflicting pair is named, not the 1g.35gb that fits.
			node: "dgxh200", want: map[string]int{"4g.71gb": 1, "2g.35gb": 2, "1g.35gb": 0},
			err: "layout does not fit: no non-overlapping placements exist for 2× 2g.35gb + 1× 4g.71gb: " +
				"1× 4g.71gb (at 0:4) and 2× 2g.35gb (at 0:2, 2:2, 4:2) overlap on memory slots 0-3; together they need 8 memory slots, and their placements cover only slots 0-5",
		},
		{
			node: "dgxh200", want: map[string]int{"4g.71gb": 1}, stay: stays("3g.71gb@0:4"),
			err: "layout does not fit: no non-overlapping placements exist for 1× 4g.71gb around the instances that stay (3g.71gb at 0:4): " +
				"1× 4g.71gb can only be placed at 0:4, which overlaps 3g.71gb at 0:4 (slots 0-3), an instance that stays",
		},
		{
			node: "dgxh200", want: map[string]int{"3g.71gb": 1, "2g.35gb": 1}, stay: stays("1g.18gb@1:1", "1g.18gb@5:1"),
			err: "layout does not fit: no non-overlapping placements exist for 1× 2g.35gb + 1× 3g.71gb around the instances that stay (1g.18gb at 1:1, 1g.18gb at 5:1): " +
				"1× 3g.71gb needs one of its placements 0:4, 4:4, and none is free: 0:4 overlaps 1g.18gb at 1:1 (slot 1), 4:4 overlaps 1g.18gb at 5:1 (slot 5); those instances stay",
		},
		{
			node: "dgxh200", want: map[string]int{"1g.35gb": 3}, stay: stays("1g.18gb@1:1", "1g.18gb@3:1"),
			err: "layout does not fit: no non-overlapping placements exist for 3× 1g.35gb around the instances that stay (1g.18gb at 1:1, 1g.18gb at 3:1): " +
				"3× 1g.35gb need 3 of its placements 0:2, 2:2, 4:2, 6:2, and only 4:2, 6:2 are free: 0:2 overlaps 1g.18gb at 1:1 (slot 1), 2:2 overlaps 1g.18gb at 3:1 (slot 3); those instances stay",
		},
		{
			// Each fits around the 1g alone; together they do not.
			node: "dgxh200", want: map[string]int{"3g.71gb": 1, "2g.35gb": 1}, stay: stays("1g.18gb@4:1"),
			err: "layout does not fit: no non-overlapping placements exist for 1× 2g.35gb + 1× 3g.71gb around the instances that stay (1g.18gb at 4:1): " +
				"1× 3g.71gb (at 0:4) and 1× 2g.35gb (at 0:2, 2:2) overlap on memory slots 0-3; together they need 6 memory slots, and their placements cover only slots 0-3; in the way: 1g.18gb at 4:1 (slot 4), which stays",
		},
		{
			node: "dgxh200", want: map[string]int{"3g.71gb": 2}, stay: stays("1g.18gb@6:1"),
			err: "layout does not fit: 2× 3g.71gb need 8 memory slots; the GPU has 8, and 1 is held by instances that stay (1g.18gb at 6:1)",
		},
		{
			node: "dgxa100", want: map[string]int{"4g.20gb": 1, "2g.10gb": 2},
			err: "layout does not fit: no non-overlapping placements exist for 2× 2g.10gb + 1× 4g.20gb: " +
				"1× 4g.20gb (at 0:4) and 2× 2g.10gb (at 0:2, 2:2, 4:2) overlap on memory slots 0-3; together they need 8 memory slots, and their placements cover only slots 0-5",
		},
		{
			node: "dgxa100", want: map[string]int{"2g.10gb": 3, "1g.5gb": 2},
			err: "layout does not fit: no non-overlapping placements exist for 2× 1g.5gb + 3× 2g.10gb: " +
				"3× 2g.10gb (at 0:2, 2:2, 4:2) and 2× 1g.5gb (at 0:1, 1:1, 2:1, 3:1, 4:1, 5:1, 6:1) overlap on memory slots 0-5; together they need 8 memory slots, and their placements cover only slots 0-6",
		},
		{
			node: "dgxa100", want: map[string]int{"4g.20gb": 1}, stay: stays("1g.5gb@3:1"),
			err: "layout does not fit: no non-overlapping placements exist for 1× 4g.20gb around the instances that stay (1g.5gb at 3:1): " +
				"1× 4g.20gb can only be placed at 0:4, which overlaps 1g.5gb at 3:1 (slot 3), an instance that stays",
		},
		{
			node: "dgxa100", want: map[string]int{"3g.20gb": 2}, stay: stays("1g.10gb@2:2", "2g.10gb@4:2"),
			err: "layout does not fit: 2× 3g.20gb need 8 memory slots; the GPU has 8, and 4 are held by instances that stay (1g.10gb at 2:2, 2g.10gb at 4:2)",
		},
		{
			node: "dgxa100", want: map[string]int{"3g.20gb": 1}, stay: stays("1g.5gb@1:1", "1g.5gb@6:1"),
			err: "layout does not fit: no non-overlapping placements exist for 1× 3g.20gb around the instances that stay (1g.5gb at 1:1, 1g.5gb at 6:1): " +
				"1× 3g.20gb needs one of its placements 0:4, 4:4, and none is free: 0:4 overlaps 1g.5gb at 1:1 (slot 1), 4:4 overlaps 1g.5gb at 6:1 (slot 6); those instances stay",
		},
		{
			node: "dgxa100", want: map[string]int{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, stay: stays("1g.5gb@5:1"),
			err: "layout does not fit: no non-overlapping placements exist for 1× 1g.5gb + 1× 2g.10gb + 1× 3g.20gb around the instances that stay (1g.5gb at 5:1): " +
				"1× 3g.20gb (at 0:4) and 1× 2g.10gb (at 0:2, 2:2) overlap on memory slots 0-3; together they need 6 memory slots, and their placements cover only slots 0-3; in the way: 1g.5gb at 5:1 (slot 5), which stays",
		},
	}
	profiles := map[string][]gpu.MIGProfile{}
	for _, tc := range tests {
		if profiles[tc.node] == nil {
			profiles[tc.node] = profilesOf(t, tc.node)
		}
		_, err := mig.FitAroundInstances(profiles[tc.node], tc.want, tc.stay)
		if !errors.Is(err, mig.ErrInfeasible) || err.Error() != tc.err {
			t.Errorf("%s: FitAroundInstances(%v around %v):\n got %v\nwant %s", tc.node, tc.want, tc.stay, err, tc.err)
		}
	}
}

// Placements alone (FitAround) name the instance by its placement.
func TestFitAroundNamesPlacements(t *testing.T) {
	profiles := profilesOf(t, "dgxh200")
	_, err := mig.FitAround(profiles, map[string]int{"4g.71gb": 1}, []gpu.Placement{{Start: 3, Size: 1}})
	want := "layout does not fit: no non-overlapping placements exist for 1× 4g.71gb around the instances that stay (3:1): " +
		"1× 4g.71gb can only be placed at 0:4, which overlaps the instance at 3:1 (slot 3), an instance that stays"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
