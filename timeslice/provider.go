package timeslice

import (
	"context"
	"fmt"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// Properties are a replica's guarantees: none, until the limiter.
var Properties = share.Properties{MemoryIsolation: share.None, FaultIsolation: false}

// Provider offers the replicas of each GPU assigned to "timeslice":
// "<GPU UUID>/timeslice/<n>", grouped as "<model>-timeslice-<N>x".
type Provider struct{}

// New returns the provider.
func New() Provider { return Provider{} }

// Mechanism is share.TimeSlice.
func (Provider) Mechanism() share.Mechanism { return share.TimeSlice }

// Offers returns the replicas of every time-slice GPU.
func (Provider) Offers(_ context.Context, node *gpu.Node, as []share.Assignment) ([]share.Offer, error) {
	var out []share.Offer
	for _, ag := range share.Assigned(node, as, share.TimeSlice) {
		g, n := ag.GPU, ag.Assignment.Replicas
		if n < 1 {
			return nil, fmt.Errorf("GPU %d: timeslice with %d replicas", g.Index, n)
		}
		attrs := share.BaseAttributes(node, g, share.TimeSlice, Properties)
		attrs.MemoryMiB = g.MemoryMiB / uint64(n)
		attrs.ComputePercent = 100 / n
		profile := fmt.Sprintf("%dx", n)
		for r := 0; r < n; r++ {
			out = append(out, share.Offer{
				Group: share.GroupName(g.Model, string(share.TimeSlice), profile), Profile: profile,
				Attrs: attrs, Spread: share.SpreadDistinctGPUs,
				Share: share.Share{
					ID: share.SubID(g.UUID, share.TimeSlice, r), Mechanism: share.TimeSlice, GPU: share.RefOf(g),
					Replica: r, Replicas: n,
					MemoryMiB: attrs.MemoryMiB, ComputePercent: attrs.ComputePercent, SMCount: g.SMCount,
				},
			})
		}
	}
	return out, nil
}

// Edits adds nothing yet: a replica needs its GPU's device nodes.
func (Provider) Edits(_, _ []share.Share, _ *share.Edits) error { return nil }

// Health is always good: the node's XID watch covers the GPU itself.
func (Provider) Health(share.Share) (bool, string) { return true, "" }
