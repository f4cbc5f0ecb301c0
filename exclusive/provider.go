package exclusive

import (
	"context"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// Properties are a whole GPU's guarantees.
var Properties = share.Properties{MemoryIsolation: share.Hard, FaultIsolation: true}

// Provider offers each GPU assigned to mechanism "exclusive" as one share,
// whose ID is the GPU's UUID and whose group is named after the model
// ("H200").
type Provider struct{}

// New returns the provider.
func New() Provider { return Provider{} }

// Mechanism is share.Exclusive.
func (Provider) Mechanism() share.Mechanism { return share.Exclusive }

// Offers returns one share per exclusive GPU.
func (Provider) Offers(_ context.Context, node *gpu.Node, as []share.Assignment) ([]share.Offer, error) {
	var out []share.Offer
	for _, ag := range share.Assigned(node, as, share.Exclusive) {
		g := ag.GPU
		attrs := share.BaseAttributes(node, g, share.Exclusive, Properties)
		attrs.MemoryMiB, attrs.ComputePercent = g.MemoryMiB, 100
		out = append(out, share.Offer{
			Group: share.GroupName(g.Model),
			Attrs: attrs,
			Share: share.Share{ID: g.UUID, Mechanism: share.Exclusive, GPU: share.RefOf(g), MemoryMiB: g.MemoryMiB, ComputePercent: 100, SMCount: g.SMCount},
		})
	}
	return out, nil
}

// Edits adds nothing: a whole GPU needs only its device nodes.
func (Provider) Edits(_, _ []share.Share, _ *share.Edits) error { return nil }

// Health is always good: the node's XID watch covers the GPU itself.
func (Provider) Health(share.Share) (bool, string) { return true, "" }
