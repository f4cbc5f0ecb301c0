package mig

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumux/gpumux/gpu"
)

func placementsOf(g *gpu.GPU) map[gpu.Placement]string {
	m := map[gpu.Placement]string{}
	for _, i := range g.MIGInstances {
		m[i.Placement] = i.Profile
	}
	return m
}

// TestCrashedApplyIsUndone leaves a GPU as a crashed apply would (its
// checkpoint written, one instance destroyed, a new one created) and checks
// that the next Apply restores the recorded layout before its own change.
func TestCrashedApplyIsUndone(t *testing.T) {
	ctx := context.Background()
	h, err := gpu.OpenSimulated("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dir := t.TempDir()
	if _, err := Apply(ctx, h, 2, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil, WithCheckpoint(dir)); err != nil {
		t.Fatal(err)
	}
	before, _ := readGPU(ctx, h, 2)
	if _, err := os.Stat(filepath.Join(dir, before.UUID+".json")); !os.IsNotExist(err) {
		t.Fatalf("a finished apply left its checkpoint: %v", err)
	}

	// The crash: the checkpoint of a change to 7× 1g.18gb, one 2g.35gb
	// already destroyed and one 1g.18gb created in its place.
	cp, err := lockCheckpoint(ctx, dir, before.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.write(checkpoint{Version: 1, GPU: before.UUID, Before: refsOf(before.MIGInstances), Want: map[string]int{"1g.18gb": 7}, Started: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cp.unlock()
	var twoG gpu.MIGInstance
	for _, inst := range before.MIGInstances {
		if inst.Profile == "2g.35gb" {
			twoG = inst
		}
	}
	if err := h.DestroyMIGInstance(ctx, 2, twoG.GIID); err != nil {
		t.Fatal(err)
	}
	oneG, _ := before.Profile("1g.18gb")
	if err := h.CreateMIGInstance(ctx, 2, oneG, gpu.Placement{Start: twoG.Placement.Start, Size: 1}); err != nil {
		t.Fatal(err)
	}

	// The next apply (here: to the same layout as before) restores first.
	var steps []string
	progress := func(f string, a ...any) { steps = append(steps, f) }
	if _, err := Apply(ctx, h, 2, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, progress, WithCheckpoint(dir)); err != nil {
		t.Fatal(err)
	}
	after, _ := readGPU(ctx, h, 2)
	if !maps.Equal(placementsOf(after), placementsOf(before)) {
		t.Errorf("after recovery: %v, want %v", placementsOf(after), placementsOf(before))
	}
	if len(steps) == 0 || steps[0] != "GPU %d: an apply started %s did not finish; restoring the layout it found (%s)" {
		t.Errorf("recovery not reported: %q", steps)
	}
	if _, err := os.Stat(filepath.Join(dir, before.UUID+".json")); !os.IsNotExist(err) {
		t.Errorf("the checkpoint is still there after recovery: %v", err)
	}
}

// TestCheckpointLockSerialisesApplies checks a second Apply of one GPU waits
// for the lock (and gives up when its context ends).
func TestCheckpointLockSerialisesApplies(t *testing.T) {
	dir := t.TempDir()
	cp, err := lockCheckpoint(context.Background(), dir, "GPU-x")
	if err != nil {
		t.Fatal(err)
	}
	defer cp.unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := lockCheckpoint(ctx, dir, "GPU-x"); err == nil {
		t.Fatal("a second lock of the same GPU was granted")
	}
}
