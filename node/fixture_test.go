package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
	"github.com/gpumux/gpumux/timeslice"
)

// t4Host is a simulated node's host with a Tesla T4 (no MIG support) added
// as GPU 8.
type t4Host struct{ *gpu.Host }

func (h t4Host) Inventory(ctx context.Context) (*gpu.Node, error) {
	inv, err := h.Host.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	inv.GPUs = append(inv.GPUs, gpu.GPU{Index: 8, UUID: "GPU-t4", Minor: 8, Model: "Tesla T4", MemoryMiB: 15360, SMCount: 40, ComputeCapability: "7.5"})
	return inv, nil
}

// openDGXHost opens the simulated 8×H200 node of a config and gives GPU 7
// 1× 3g.71gb and 2× 2g.35gb, plus the T4.
func openDGXHost(cfg *nodeconfig.Config) (node.Host, error) {
	h, err := gpu.OpenSimulated(cfg.Simulate, cfg.StateDir)
	if err != nil {
		return nil, err
	}
	if _, err := mig.Apply(context.Background(), h, 7, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
		h.Close()
		return nil, err
	}
	return t4Host{h}, nil
}

// openDGX opens the node core on the simulated node of openDGXHost laid out
// by rules, with a stand-in limiter (stubLimiter): time-slice replicas are
// limited (limit = "cap") unless a rule says otherwise.
func openDGX(t *testing.T, rules ...share.GPURule) *node.Node {
	t.Helper()
	return openDGXConfig(t, &nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), LimiterDir: stubLimiter(t), GPUs: rules})
}

// stubLimiter returns a limiter_dir holding a stand-in for the limiter's
// libcuda.so.1: the node only checks that it is there (a limited replica
// is unhealthy without it) and mounts the directory.
func stubLimiter(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, timeslice.Lib), []byte("not a library: a test's stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openDGXConfig opens the node core under cfg on openDGXHost's node.
func openDGXConfig(t *testing.T, cfg *nodeconfig.Config) *node.Node {
	t.Helper()
	n, err := node.Open(cfg, node.WithOpen(openDGXHost))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// dgxCatalog is the node's catalog and inventory.
func dgxCatalog(t *testing.T, n *node.Node, opts ...node.CatalogOption) (*share.Catalog, *gpu.Node) {
	t.Helper()
	ctx := context.Background()
	c, err := n.Catalog(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := n.Host().Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c, inv
}

// groupsByName indexes a catalog's groups.
func groupsByName(c *share.Catalog) map[string]share.Group {
	out := map[string]share.Group{}
	for _, g := range c.Groups {
		out[g.Name] = g
	}
	return out
}

// bigInstance is the 3g.71gb instance of GPU 7.
func bigInstance(t *testing.T, inv *gpu.Node) gpu.MIGInstance {
	t.Helper()
	for _, inst := range inv.GPUs[7].MIGInstances {
		if inst.Profile == "3g.71gb" {
			return inst
		}
	}
	t.Fatalf("GPU 7 has no 3g.71gb instance: %+v", inv.GPUs[7].MIGInstances)
	return gpu.MIGInstance{}
}
