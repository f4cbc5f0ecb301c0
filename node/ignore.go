package node

import (
	"context"
	"slices"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
)

// ignoring is the Host of a node whose config lists GPUs in
// ignored_gpu_ids: its inventory leaves them out, so that gpumux leaves them
// alone altogether (no gpu block matches them, no MIG layout or MPS daemon
// is set up on them, nothing is offered on them, no metrics describe them).
// Ignored MIG instances are left out of the catalog instead (ignoredOffers):
// their GPU's layout still counts them, so that gpumux neither destroys nor
// recreates them.
type ignoring struct {
	Host
	cfg *nodeconfig.Config
}

// Inventory is the node's inventory without the ignored GPUs.
func (h ignoring) Inventory(ctx context.Context) (*gpu.Node, error) {
	inv, err := h.Host.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	out := *inv
	out.GPUs = slices.DeleteFunc(slices.Clone(inv.GPUs), func(g gpu.GPU) bool {
		if h.cfg.Ignored(g.UUID) {
			out.Ignored = append(out.Ignored, g.Index)
			return true
		}
		return false
	})
	return &out, nil
}

// withoutIgnored leaves out the offers on ignored MIG instances.
func withoutIgnored(cfg *nodeconfig.Config, offers []share.Offer) []share.Offer {
	if len(cfg.IgnoredGPUIDs) == 0 {
		return offers
	}
	return slices.DeleteFunc(offers, func(o share.Offer) bool {
		return o.Share.MIG != nil && cfg.Ignored(o.Share.MIG.UUID)
	})
}

// warnUnknownIgnored logs each of ignored_gpu_ids that is neither a GPU nor
// a MIG instance of the node: a UUID mistyped, or one of another node (one
// config file may serve several).
func warnUnknownIgnored(ctx context.Context, h Host, logger hclog.Logger) {
	ig, ok := h.(ignoring)
	if !ok {
		return
	}
	inv, err := ig.Host.Inventory(ctx)
	if err != nil {
		return // the catalog reports it
	}
	known := map[string]bool{}
	for _, g := range inv.GPUs {
		known[g.UUID] = true
		for _, m := range g.MIGInstances {
			known[m.UUID] = true
		}
	}
	for _, id := range ig.cfg.IgnoredGPUIDs {
		if !known[id] {
			logger.Warn("ignored_gpu_ids names no GPU or MIG instance of this node", "uuid", id)
		}
	}
}
