package node_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
)

// TestIgnoredGPUIsLeftAlone: a GPU in ignored_gpu_ids is out of the node's
// inventory, so the gpu block that names it does not reach it and nothing
// on it is offered; the other GPU of the block is served.
func TestIgnoredGPUIsLeftAlone(t *testing.T) {
	stateDir := t.TempDir()
	h, err := gpu.OpenSimulated("dgxh200", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(context.Background())
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	ignored := inv.GPUs[1].UUID
	n, err := node.Open(&nodeconfig.Config{Simulate: "dgxh200", StateDir: stateDir, LimiterDir: stubLimiter(t), IgnoredGPUIDs: []string{ignored},
		GPUs: []share.GPURule{{Match: "0-1", Mechanism: share.TimeSlice, Replicas: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	seen, err := n.Host().Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(seen.GPUs) != 7 || slices.ContainsFunc(seen.GPUs, func(g gpu.GPU) bool { return g.UUID == ignored }) {
		t.Errorf("the node sees %d GPUs, the ignored %s among them or not", len(seen.GPUs), ignored)
	}
	c, err := n.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Shares() {
		if s.GPU.UUID == ignored {
			t.Errorf("share %s of the ignored GPU is offered", s.ID)
		}
	}
	if got := groupNamesOf(c); !slices.Equal(got, []string{"H200", "H200-timeslice-2x"}) || c.Len() != 6+2 {
		t.Errorf("groups %v, %d shares; want 6 whole GPUs and GPU 0's 2 replicas", got, c.Len())
	}
}

func TestDisabledNodeOpensNothing(t *testing.T) {
	off := false
	opened := false
	_, err := node.Open(&nodeconfig.Config{Enabled: &off, StateDir: t.TempDir()},
		node.WithOpen(func(*nodeconfig.Config) (node.Host, error) { opened = true; return nil, errors.New("opened") }))
	if !errors.Is(err, node.ErrDisabled) || opened {
		t.Errorf("Open with enabled = false: %v (GPUs opened: %v), want ErrDisabled without opening", err, opened)
	}
}
