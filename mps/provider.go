package mps

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// Properties are an MPS share's guarantees: a hard memory limit (the pinned
// device memory limit), and one server whose fault fails every client.
var Properties = share.Properties{MemoryIsolation: share.Hard, FaultIsolation: false}

// Environment of an MPS client, and where its pipe directory is mounted.
const (
	EnvPipe     = "CUDA_MPS_PIPE_DIRECTORY"
	EnvThreads  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// PipeMount is where a share's pipe directory appears in the container.
	PipeMount = "/run/gpumux/mps"
)

// Provider is the mps mechanism: it splits each GPU assigned to "mps" (or
// each of its MIG instances) into shares of an MPS server, hands each share
// its server's pipe directory and limits, and, on a node agent, runs one
// control daemon per device through a Manager.
//
// A front door that does not run the daemons (gpumux-runtime, the CLI)
// sees a share as healthy while the daemon that its pid file names runs.
type Provider struct {
	m *Manager

	mu      sync.Mutex
	started bool
	stop    context.CancelFunc
	done    chan struct{}
}

// NewProvider returns the provider of a node whose state directory the
// Manager m keeps its daemons in.
func NewProvider(m *Manager) *Provider { return &Provider{m: m} }

// Mechanism is share.MPS.
func (p *Provider) Mechanism() share.Mechanism { return share.MPS }

// SMCount is how many SMs an MPS client limited to pct percent of the
// active threads gets: MPS hands out whole TPCs (two SMs), rounding down; on
// the H200 25% gave 32 of 132 SMs.
func SMCount(total, pct int) int {
	n := total * pct / 100 / 2 * 2
	if n < 2 {
		n = 2
	}
	return n
}

// Offers splits every mps GPU, or each MIG instance of an mps GPU in MIG
// mode, into the shares of its rule ("<device>/mps/<n>").
func (p *Provider) Offers(_ context.Context, node *gpu.Node, as []share.Assignment) ([]share.Offer, error) {
	var out []share.Offer
	for _, ag := range share.Assigned(node, as, share.MPS) {
		g, pcts := ag.GPU, ag.Assignment.MPSPercent
		base := share.BaseAttributes(node, g, share.MPS, Properties)
		if !g.MIGEnabled {
			for k, pct := range pcts {
				attrs := base
				attrs.MemoryMiB = g.MemoryMiB * uint64(pct) / 100
				attrs.ComputePercent = pct
				attrs.SMCount = SMCount(g.SMCount, pct)
				profile := fmt.Sprintf("%dpct", pct)
				out = append(out, share.Offer{
					Group: share.GroupName(g.Model, string(share.MPS), profile), Profile: profile,
					Attrs: attrs, Spread: share.SpreadOneDevice,
					Share: share.Share{
						ID: share.SubID(g.UUID, share.MPS, k), Mechanism: share.MPS, GPU: share.RefOf(g),
						MemoryMiB: attrs.MemoryMiB, ComputePercent: pct, SMCount: attrs.SMCount, ThreadPercent: pct,
					},
				})
			}
			continue
		}
		// MPS on MIG: each instance is split, with a daemon of its own.
		for i := range g.MIGInstances {
			inst := g.MIGInstances[i]
			for k, pct := range pcts {
				attrs := base
				attrs.MemoryMiB = inst.MemoryMiB * uint64(pct) / 100
				attrs.SMCount = SMCount(inst.SMCount, pct)
				attrs.ComputePercent = share.PercentOf(inst.SMCount, g.SMCount) * pct / 100
				attrs.MIGProfile = inst.Profile
				profile := fmt.Sprintf("%s-%dpct", inst.Profile, pct)
				out = append(out, share.Offer{
					Group: share.GroupName(g.Model, string(share.MPS), profile), Profile: profile,
					Attrs: attrs, Spread: share.SpreadOneDevice,
					Share: share.Share{
						ID: share.SubID(inst.UUID, share.MPS, k), Mechanism: share.MPS, GPU: share.RefOf(g), MIG: &inst,
						MemoryMiB: attrs.MemoryMiB, ComputePercent: attrs.ComputePercent, SMCount: attrs.SMCount, ThreadPercent: pct,
					},
				})
			}
		}
	}
	return out, nil
}

// Edits adds what MPS shares need: the daemon's pipe directory, mounted at
// PipeMount, and the shares' SM percentage and memory limit as client
// settings, which can only lower the daemon's defaults. A process talks to
// one MPS server, so a task's MPS shares must all be on one device, and
// cannot be mixed with other mechanisms; several shares of one device add
// up.
func (p *Provider) Edits(mine, all []share.Share, e *share.Edits) error {
	if err := share.Alone(share.MPS, all, "a process talks to one MPS server"); err != nil {
		return err
	}
	device, err := share.OneDevice(mine, "device", "a process talks to one MPS server")
	if err != nil {
		return err
	}
	var pct int
	var mem uint64
	for _, s := range mine {
		pct += s.ThreadPercent
		mem += s.MemoryMiB
	}
	e.Env[EnvPipe] = PipeMount
	e.Env[EnvThreads] = fmt.Sprint(pct)
	e.Env[EnvMemLimit] = "0=" + FormatMemLimit(mem) // device 0: the one device the task sees
	e.Mounts = append(e.Mounts, share.Mount{HostPath: p.m.PipeDir(device), ContainerPath: PipeMount})
	return nil
}

// Health reports whether a share's daemon takes clients: the Manager's
// view on a node agent, else whether the daemon its pid file names runs.
func (p *Provider) Health(s share.Share) (bool, string) {
	p.mu.Lock()
	started := p.started
	p.mu.Unlock()
	if started {
		return p.m.Health(s.Parent())
	}
	if pid := readPIDFile(p.m.PipeDir(s.Parent())); pid > 0 && procAlive(pid) {
		return true, ""
	}
	return false, fmt.Sprintf("no MPS control daemon serves %s (GPU %d) under %s: start `gpumux agent` on this node, or the gpumux Nomad plugin, which run the daemons",
		s.Parent(), s.GPU.Index, p.m.PipeDir(s.Parent()))
}

// Daemons lists the daemons a catalog's MPS shares need, one per device,
// with the defaults of its largest share (a client can only lower them).
func Daemons(c *share.Catalog) []Device {
	var out []Device
	index := map[string]int{}
	for _, s := range c.Shares() {
		if s.Mechanism != share.MPS {
			continue
		}
		i, ok := index[s.Parent()]
		if !ok {
			i = len(out)
			index[s.Parent()] = i
			out = append(out, Device{UUID: s.Parent()})
		}
		d := &out[i]
		d.ThreadPercent = max(d.ThreadPercent, s.ThreadPercent)
		d.PinnedMemLimitMiB = max(d.PinnedMemLimitMiB, s.MemoryMiB)
	}
	return out
}

// Start runs the Manager's health loop until Stop or ctx ends; the daemons
// themselves start with the first Reconcile. Starting twice is a no-op.
func (p *Provider) Start(ctx context.Context, _ *gpu.Node, _ []share.Assignment) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return nil
	}
	ctx, p.stop = context.WithCancel(ctx)
	p.done = make(chan struct{})
	p.started = true
	go func(done chan struct{}) {
		defer close(done)
		p.m.Run(ctx)
	}(p.done)
	return nil
}

// Reconcile makes the daemons match the catalog: one per device with MPS
// shares. Daemons of devices that left MPS are drained by the Manager,
// never quit under their clients.
func (p *Provider) Reconcile(ctx context.Context, c *share.Catalog) error {
	return p.m.Reconcile(ctx, Daemons(c))
}

// Stop ends the health loop and leaves the daemons running: their clients
// keep working, and the next agent adopts them. Stopping twice, or before
// Start, is a no-op.
func (p *Provider) Stop(ctx context.Context) error {
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.started, p.stop, p.done = false, nil, nil
	p.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Changed ticks when a daemon's health changes.
func (p *Provider) Changed() <-chan struct{} { return p.m.Changed() }

// Status is every daemon's status (see Manager.Status).
func (p *Provider) Status() []Status { return p.m.Status() }
