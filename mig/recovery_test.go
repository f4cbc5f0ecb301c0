package mig

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu"
)

func openSim(t *testing.T) *gpu.Host {
	t.Helper()
	h, err := gpu.OpenSimulated("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// layoutString writes a GPU's MIG layout exactly: its MIG mode (and a
// pending one), each MIG device by profile and placement, and each GPU
// instance without a compute instance.
func layoutString(g *gpu.GPU) string {
	var parts []string
	for _, i := range g.MIGInstances {
		parts = append(parts, i.Profile+"@"+i.Placement.String())
	}
	for _, i := range g.MIGIncomplete {
		parts = append(parts, i.Profile+"@"+i.Placement.String()+"(no CI)")
	}
	slices.Sort(parts)
	return fmt.Sprintf("mig=%v pending=%v [%s]", g.MIGEnabled, g.MIGPending, strings.Join(parts, " "))
}

// halfMake creates a GPU instance without a compute instance, as a change
// killed between the two creates leaves it.
func halfMake(t *testing.T, h *gpu.Host, index int, profile string, at gpu.Placement) {
	t.Helper()
	g, err := readGPU(context.Background(), h, index)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := g.Profile(profile)
	if !ok {
		t.Fatalf("no profile %s", profile)
	}
	dev, ret := h.Simulated().NVML().DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for idx := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(idx)
		if ret == nvml.SUCCESS && int(info.Id) == p.GIProfileID {
			if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)}); ret != nvml.SUCCESS {
				t.Fatalf("creating %s at %s: %v", profile, at, ret)
			}
			return
		}
	}
	t.Fatalf("no NVML profile for %s", profile)
}

// recoveryCase is a change of GPU 2 of a simulated H200: its layout before
// (set up by setup), the change, and the layout it must have after.
type recoveryCase struct {
	name   string
	setup  func(t *testing.T, h *gpu.Host)
	change func(ctx context.Context, h Host, opts ...ApplyOption) (Result, error)
	after  string // layoutString after the change succeeds
}

var recoveryCases = []recoveryCase{
	{
		name: "change the layout",
		setup: func(t *testing.T, h *gpu.Host) {
			if _, err := Apply(context.Background(), h, 2, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
				t.Fatal(err)
			}
		},
		change: func(ctx context.Context, h Host, opts ...ApplyOption) (Result, error) {
			return Apply(ctx, h, 2, map[string]int{"1g.18gb": 7}, nil, opts...)
		},
		after: "mig=true pending=true [1g.18gb@0:1 1g.18gb@1:1 1g.18gb@2:1 1g.18gb@3:1 1g.18gb@4:1 1g.18gb@5:1 1g.18gb@6:1]",
	},
	{
		name:  "enable MIG and create",
		setup: func(t *testing.T, h *gpu.Host) {},
		change: func(ctx context.Context, h Host, opts ...ApplyOption) (Result, error) {
			return Apply(ctx, h, 2, map[string]int{"3g.71gb": 2}, nil, opts...)
		},
		after: "mig=true pending=true [3g.71gb@0:4 3g.71gb@4:4]",
	},
	{
		name: "disable MIG with instances, in one step",
		setup: func(t *testing.T, h *gpu.Host) {
			if _, err := Apply(context.Background(), h, 2, map[string]int{"2g.35gb": 3, "1g.18gb": 1}, nil); err != nil {
				t.Fatal(err)
			}
		},
		change: func(ctx context.Context, h Host, opts ...ApplyOption) (Result, error) {
			return DisableMIG(ctx, h, 2, nil, opts...)
		},
		after: "mig=false pending=false []",
	},
	{
		name: "a GPU instance without a compute instance is removed",
		setup: func(t *testing.T, h *gpu.Host) {
			if _, err := Apply(context.Background(), h, 2, map[string]int{"4g.71gb": 1, "1g.18gb": 2}, nil); err != nil {
				t.Fatal(err)
			}
			halfMake(t, h, 2, "1g.18gb", gpu.Placement{Start: 5, Size: 1})
		},
		change: func(ctx context.Context, h Host, opts ...ApplyOption) (Result, error) {
			return Apply(ctx, h, 2, map[string]int{"4g.71gb": 1, "1g.18gb": 3}, nil, opts...)
		},
		after: "mig=true pending=true [1g.18gb@4:1 1g.18gb@5:1 1g.18gb@6:1 4g.71gb@0:4]",
	},
}

// TestApplySurvivesAFailureAtEveryStep makes each NVML call that changes
// state fail in turn (the first, the second, ...) during each change, until
// a change runs through: each failure must leave GPU 2 exactly as it was
// (MIG mode, instances at their placements; GPU instances without a
// compute instance count as damage and are gone), the other GPUs
// untouched, and the next change must succeed.
func TestApplySurvivesAFailureAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, tc := range recoveryCases {
		t.Run(tc.name, func(t *testing.T) {
			for k := 0; ; k++ {
				if k > 60 {
					t.Fatal("the change never ran through")
				}
				h := openSim(t)
				tc.setup(t, h)
				g, _ := readGPU(ctx, h, 2)
				// What a failed change restores: the layout without any
				// GPU instance lacking a compute instance.
				before := layoutString(&gpu.GPU{MIGEnabled: g.MIGEnabled, MIGPending: g.MIGPending, MIGInstances: g.MIGInstances})
				others, _ := h.Inventory(ctx)
				if err := h.Simulated().FailMutation(k, nvml.ERROR_UNKNOWN); err != nil {
					t.Fatal(err)
				}
				_, err := tc.change(ctx, h, WithCheckpoint(t.TempDir()))
				fired, _ := h.Simulated().FaultPending()
				g, _ = readGPU(ctx, h, 2)
				if fired {
					// The fault was never reached: the change ran through.
					if err != nil || layoutString(g) != tc.after {
						t.Fatalf("without a fault: %v; layout %s, want %s", err, layoutString(g), tc.after)
					}
					if k < 2 {
						t.Fatalf("the change made only %d NVML changes", k)
					}
					return
				}
				if err == nil {
					t.Fatalf("step %d failed, but the change reports success (layout %s)", k+1, layoutString(g))
				}
				if got := layoutString(g); got != before {
					t.Fatalf("step %d failed (%v):\nlayout %s\nwant   %s", k+1, err, got, before)
				}
				now, _ := h.Inventory(ctx)
				for i := range now.GPUs {
					if i != 2 && layoutString(&now.GPUs[i]) != layoutString(&others.GPUs[i]) {
						t.Fatalf("step %d failed: GPU %d changed", k+1, i)
					}
				}
				if _, err := tc.change(ctx, h); err != nil {
					t.Fatalf("step %d failed; the next change: %v", k+1, err)
				}
				if g, _ := readGPU(ctx, h, 2); layoutString(g) != tc.after {
					t.Fatalf("step %d failed; after the next change: %s, want %s", k+1, layoutString(g), tc.after)
				}
			}
		})
	}
}

// TestInventoryShowsIncompleteInstances checks that a GPU instance without
// a compute instance is in the inventory (as MIGIncomplete, not a MIG
// device), and that an Apply to the layout the GPU otherwise has removes it.
func TestInventoryShowsIncompleteInstances(t *testing.T) {
	ctx := context.Background()
	h := openSim(t)
	if _, err := Apply(ctx, h, 2, map[string]int{"3g.71gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	halfMake(t, h, 2, "1g.18gb", gpu.Placement{Start: 0, Size: 1})
	g, _ := readGPU(ctx, h, 2)
	if len(g.MIGIncomplete) != 1 || g.MIGIncomplete[0].Profile != "1g.18gb" || g.MIGIncomplete[0].Placement != (gpu.Placement{Start: 0, Size: 1}) || g.MIGIncomplete[0].CIID != -1 || g.MIGIncomplete[0].UUID != "" {
		t.Fatalf("incomplete instances %+v, want 1g.18gb at 0:1", g.MIGIncomplete)
	}
	if len(g.MIGInstances) != 1 {
		t.Fatalf("MIG devices %+v, want the 3g.71gb only", g.MIGInstances)
	}
	res, err := Apply(ctx, h, 2, map[string]int{"3g.71gb": 1}, nil)
	g, _ = readGPU(ctx, h, 2)
	if err != nil || !res.Changed || len(g.MIGIncomplete) != 0 || !maps.Equal(counts(g.MIGInstances), map[string]int{"3g.71gb": 1}) {
		t.Errorf("Apply: %v, changed %v; layout %s", err, res.Changed, layoutString(g))
	}
}
