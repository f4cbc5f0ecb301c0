package mig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/gpu"
)

// WithCheckpoint makes Apply record, in dir, each GPU's change before it
// destroys anything, under an exclusive lock per GPU. An Apply that finds a
// checkpoint left by one that crashed first restores the layout recorded
// there, at its placements, then goes on.
func WithCheckpoint(dir string) ApplyOption { return func(o *applyOptions) { o.checkpoints = dir } }

// CheckpointDir is where gpumux keeps MIG checkpoints in a node's state
// directory.
func CheckpointDir(stateDir string) string { return filepath.Join(stateDir, "mig") }

// checkpoint is what an Apply in progress records for its GPU.
type checkpoint struct {
	Version int           `json:"version"`
	GPU     string        `json:"gpu"`
	Before  []instanceRef `json:"before"` // the instances before the change
	// MIGEnabled is the MIG mode before the change; absent (in checkpoints
	// of versions that wrote it after enabling MIG mode) means on.
	MIGEnabled *bool          `json:"migEnabled,omitempty"`
	Want       map[string]int `json:"want"`
	Started    time.Time      `json:"started"`
}

// before is the layout the checkpoint's change started from.
func (c *checkpoint) before() snapshot {
	return snapshot{MIGEnabled: c.MIGEnabled == nil || *c.MIGEnabled, Instances: c.Before}
}

type instanceRef struct {
	Profile   string        `json:"profile"`
	Placement gpu.Placement `json:"placement"`
}

// checkpoints is the checkpoint file of one GPU, held under its lock.
type checkpoints struct {
	path string
	lock *os.File
}

// lockCheckpoint takes GPU uuid's lock in dir (waiting for another Apply of
// the same GPU to finish).
func lockCheckpoint(ctx context.Context, dir, uuid string) (*checkpoints, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, uuid+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &checkpoints{path: filepath.Join(dir, uuid+".json"), lock: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *checkpoints) unlock() { c.lock.Close() }

// read returns the checkpoint a crashed Apply left, or nil.
func (c *checkpoints) read() (*checkpoint, error) {
	b, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", c.path, err)
	}
	return &cp, nil
}

func (c *checkpoints) write(cp checkpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	tmp := c.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	f.Close()
	return os.Rename(tmp, c.path)
}

func (c *checkpoints) clear() error {
	if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func refsOf(insts []gpu.MIGInstance) []instanceRef {
	refs := make([]instanceRef, len(insts))
	for i, inst := range insts {
		refs[i] = instanceRef{inst.Profile, inst.Placement}
	}
	return refs
}

// restore brings GPU index back to the layout before: its MIG mode, and
// the instances of before at their placements. It destroys every other
// instance, GPU instances without a compute instance included (an
// instance at a wanted placement is recreated whole), recreates what is
// missing, and turns MIG mode on or off as before had it (o says whether
// a mode change pending a reset may reset the GPU).
func restore(ctx context.Context, h Host, index int, before snapshot, o *applyOptions, progress Progress) error {
	g, err := readGPU(ctx, h, index)
	if err != nil {
		return err
	}
	if before.MIGEnabled && !g.MIGEnabled {
		progress("GPU %d: restore: enabling MIG mode", index)
		if g, err = changeMode(ctx, h, index, true, o, progress); err != nil {
			return err
		}
	}
	want := map[instanceRef]bool{}
	if before.MIGEnabled {
		for _, r := range before.Instances {
			want[r] = true
		}
	}
	have := map[instanceRef]bool{}
	var errs []error
	destroy := func(inst gpu.MIGInstance, what string) {
		progress("GPU %d: restore: destroying %s%s at %s", index, inst.Profile, what, inst.Placement)
		if err := h.DestroyMIGInstance(ctx, index, inst.GIID); err != nil {
			errs = append(errs, err)
		}
	}
	for _, inst := range g.MIGIncomplete {
		destroy(inst, " (a GPU instance without a compute instance)")
	}
	for _, inst := range g.MIGInstances {
		ref := instanceRef{inst.Profile, inst.Placement}
		if want[ref] {
			have[ref] = true
			continue
		}
		destroy(inst, "")
	}
	for _, r := range before.Instances {
		if have[r] || !before.MIGEnabled {
			continue
		}
		p, ok := g.Profile(r.Profile)
		if !ok {
			errs = append(errs, fmt.Errorf("GPU %d: restore: no profile %s", index, r.Profile))
			continue
		}
		progress("GPU %d: restore: recreating %s at %s", index, r.Profile, r.Placement)
		if err := h.CreateMIGInstance(ctx, index, p, r.Placement); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !before.MIGEnabled && (g.MIGEnabled || g.MIGPending) {
		progress("GPU %d: restore: disabling MIG mode", index)
		if _, err := changeMode(ctx, h, index, false, o, progress); err != nil {
			return err
		}
	}
	return nil
}
