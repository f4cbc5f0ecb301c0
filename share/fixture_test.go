package share_test

import (
	"context"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
)

// testNode is a simulated 8×H200 node whose GPU 7 carries 1× 3g.71gb and
// 2× 2g.35gb, plus a GPU without MIG support appended as index 8.
func testNode(t testing.TB) *gpu.Node {
	t.Helper()
	ctx := context.Background()
	h, err := gpu.OpenSimulated("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := mig.Apply(ctx, h, 7, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs = append(inv.GPUs, gpu.GPU{Index: 8, UUID: "GPU-t4", Minor: 8, Model: "Tesla T4", MemoryMiB: 15360, SMCount: 40, ComputeCapability: "7.5"})
	return inv
}

// fixedHost is a node.Host whose GPUs are a hand-made inventory: what the
// node core's Catalog and Edits use of a host, and nothing else (the
// embedded nil Host panics if anything more is asked of it).
type fixedHost struct {
	node.Host
	inv *gpu.Node
}

func (h fixedHost) Inventory(context.Context) (*gpu.Node, error) { return h.inv, nil }
func (fixedHost) DevicePath(name string) string                  { return "/sim/dev/" + name }
func (fixedHost) Close() error                                   { return nil }

// openFixed opens a node core over the inventory inv, laid out by rules.
func openFixed(t testing.TB, stateDir string, inv *gpu.Node, rules ...share.GPURule) *node.Node {
	t.Helper()
	cfg := &nodeconfig.Config{StateDir: stateDir, GPUs: rules}
	n, err := node.Open(cfg, node.WithOpen(func(*nodeconfig.Config) (node.Host, error) { return fixedHost{inv: inv}, nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// catalogOf builds the catalog of the inventory inv under the given gpu
// blocks, as the node core does: each mechanism's provider's offers.
func catalogOf(t testing.TB, inv *gpu.Node, rules ...share.GPURule) *share.Catalog {
	t.Helper()
	c, err := openFixed(t, t.TempDir(), inv, rules...).Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// offersOf turns a catalog back into offers, so that tests can add other
// offers (remote.OffersOf) to a node's catalog.
func offersOf(c *share.Catalog) []share.Offer {
	var out []share.Offer
	for _, g := range c.Groups {
		for _, s := range g.Shares {
			out = append(out, share.Offer{Group: g.Name, Profile: g.Profile, Attrs: g.Attrs, Spread: g.Spread, Share: s})
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func groupNames(c *share.Catalog) []string {
	var out []string
	for _, g := range c.Groups {
		out = append(out, g.Name)
	}
	return out
}
