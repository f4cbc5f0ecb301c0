package mig

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// Properties are a MIG instance's guarantees: the hardware partitions its
// memory, compute and faults.
var Properties = share.Properties{MemoryIsolation: share.Hard, FaultIsolation: true}

// Provider is the mig mechanism: it offers the MIG instances that exist on
// GPUs assigned to "mig" (and on every GPU in MIG mode), and, on a node
// agent, applies the layouts the config declares when it starts.
type Provider struct {
	host     Host
	progress Progress
	opts     []ApplyOption

	mu   sync.Mutex
	seen map[string]bool // instance UUIDs of the last Offers
}

// NewProvider returns the provider. host is used by Start only; progress
// receives Start's steps; opts are given to every Apply (WithHeld,
// WithCheckpoint).
func NewProvider(host Host, progress Progress, opts ...ApplyOption) *Provider {
	return &Provider{host: host, progress: progress, opts: opts}
}

// Mechanism is share.MIG.
func (p *Provider) Mechanism() share.Mechanism { return share.MIG }

// Offers returns one share per MIG instance of the mig GPUs, whoever made
// the instances.
func (p *Provider) Offers(_ context.Context, node *gpu.Node, as []share.Assignment) ([]share.Offer, error) {
	var out []share.Offer
	seen := map[string]bool{}
	for _, ag := range share.Assigned(node, as, share.MIG) {
		g := ag.GPU
		for i := range g.MIGInstances {
			inst := g.MIGInstances[i]
			seen[inst.UUID] = true
			attrs := share.BaseAttributes(node, g, share.MIG, Properties)
			attrs.MemoryMiB, attrs.SMCount, attrs.MIGProfile = inst.MemoryMiB, inst.SMCount, inst.Profile
			attrs.ComputePercent = share.PercentOf(inst.SMCount, g.SMCount)
			out = append(out, share.Offer{
				Group: share.GroupName(g.Model, string(share.MIG), inst.Profile), Profile: inst.Profile, Attrs: attrs,
				Share: share.Share{
					ID: inst.UUID, Mechanism: share.MIG, GPU: share.RefOf(g), MIG: &inst,
					MemoryMiB: inst.MemoryMiB, ComputePercent: attrs.ComputePercent, SMCount: inst.SMCount,
				},
			})
		}
	}
	p.mu.Lock()
	p.seen = seen
	p.mu.Unlock()
	return out, nil
}

// Edits adds nothing: the instance's capability device nodes and
// CUDA_VISIBLE_DEVICES are those of every share on a MIG instance
// (share.DeviceEdits).
func (p *Provider) Edits(_, _ []share.Share, _ *share.Edits) error { return nil }

// Health reports a share whose instance was not in the last inventory.
func (p *Provider) Health(s share.Share) (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen != nil && s.MIG != nil && !p.seen[s.MIG.UUID] {
		return false, fmt.Sprintf("MIG instance %s (%s on GPU %d) no longer exists", s.MIG.UUID, s.MIG.Profile, s.GPU.Index)
	}
	return true, ""
}

// Start applies the MIG layout of every GPU whose rule has mig_devices
// (mig GPUs, and mps on MIG instances). A GPU whose layout cannot be
// applied (instances in use, no fit) keeps its current instances in
// service; the errors are returned, joined, after every GPU was tried.
func (p *Provider) Start(ctx context.Context, node *gpu.Node, as []share.Assignment) error {
	var errs []error
	for _, a := range as {
		if len(a.MIGDevices) == 0 {
			continue
		}
		if _, err := Apply(ctx, p.host, a.GPUIndex, a.MIGDevices, p.progress, p.opts...); err != nil {
			errs = append(errs, fmt.Errorf("GPU %d: MIG layout not applied, the GPU keeps its current instances: %w", a.GPUIndex, err))
		}
	}
	return errors.Join(errs...)
}

// Reconcile does nothing: layouts change at start, or with gpumux mig apply.
func (p *Provider) Reconcile(context.Context, *share.Catalog) error { return nil }

// Stop does nothing: instances outlive the agent.
func (p *Provider) Stop(context.Context) error { return nil }
