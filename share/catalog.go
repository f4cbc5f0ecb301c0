package share

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpumux/gpumux/gpu"
)

// Share is one schedulable unit of GPU: what a workload is granted.
type Share struct {
	// ID is stable across restarts: the GPU UUID (exclusive), the MIG UUID
	// (mig), or "<parent UUID>/<mechanism>/<n>" for replicas, MPS shares and
	// remote shares of a parent.
	ID        string
	Mechanism Mechanism
	GPU       GPURef
	MIG       *gpu.MIGInstance // set for mig shares
	Replica   int              // 0-based, for time-slice replicas and remote shares
	Replicas  int
	// Remote is set for remote shares: the server's GPU (GPU then holds its
	// UUID, model and server-side index, and no device minor).
	Remote *RemoteGPU

	MemoryMiB      uint64
	ComputePercent int // of the whole GPU's SMs
	SMCount        int
	// ThreadPercent is an MPS share's active thread percentage, relative to
	// the device its daemon serves (the GPU, or its MIG instance).
	ThreadPercent int
}

// GPURef is what a share needs to know of its physical GPU.
type GPURef struct {
	Index    int
	UUID     string
	Minor    int
	Model    string
	PCIBusID string
}

// Group is a set of interchangeable shares: same model, mechanism and size.
// Schedulers offer a group as one kind of device.
type Group struct {
	Name      string // unique on the node, e.g. "H200-mig-3g.71gb"
	Model     string
	Mechanism Mechanism
	Profile   string // MIG profile, "<n>x" for time-slice replicas, "" for whole GPUs
	Attrs     Attributes
	Shares    []Share
}

// Attributes describe every share of a group; they are the user-facing device
// attributes (ARCHITECTURE.md).
type Attributes struct {
	Mechanism             Mechanism
	MemoryMiB             uint64 // per share
	ComputePercent        int
	SMCount               int
	MemoryIsolation       Isolation
	FaultIsolation        bool
	MIGProfile            string // mig only
	ParentUUID            string // when every share of the group has the same parent GPU
	CUDAComputeCapability string
	DriverVersion         string
	// CUDAVersion is the CUDA driver API version programs see, e.g. "13.0"
	// (a remote group's: its server's).
	CUDAVersion string
	// RemoteAddr is a remote group's server, when every share of the group
	// is on one.
	RemoteAddr string
}

// Catalog is every share a node offers under a layout.
type Catalog struct {
	Groups []Group
	byID   map[string]*Share
}

// Sentinel errors of Lookup.
var (
	ErrUnknownShare = errors.New("unknown share")
)

// Build computes the shares a node offers. MIG GPUs offer the instances that
// exist on them (applying mig_devices is the mig package's job).
func Build(node *gpu.Node, assignments []Assignment) (*Catalog, error) {
	byKey := map[string]*Group{}
	var order []string
	add := func(s Share, profile string, attrs Attributes) {
		key := groupName(s.GPU.Model, s.Mechanism, profile)
		g, ok := byKey[key]
		if !ok {
			g = &Group{Name: key, Model: s.GPU.Model, Mechanism: s.Mechanism, Profile: profile, Attrs: attrs}
			byKey[key] = g
			order = append(order, key)
		}
		g.Shares = append(g.Shares, s)
	}
	for _, a := range assignments {
		g := gpuByIndex(node, a.GPUIndex)
		if g == nil {
			return nil, fmt.Errorf("assignment for GPU %d, which the node does not have: %w", a.GPUIndex, gpu.ErrNotFound)
		}
		ref := GPURef{Index: g.Index, UUID: g.UUID, Minor: g.Minor, Model: g.Model, PCIBusID: g.PCIBusID}
		base := Attributes{
			Mechanism:             a.Mechanism,
			SMCount:               g.SMCount,
			CUDAComputeCapability: g.ComputeCapability,
			DriverVersion:         node.DriverVersion,
			CUDAVersion:           node.CUDAVersion,
		}
		mech := a.Mechanism
		if mech == Exclusive && g.MIGEnabled {
			// A GPU in MIG mode can only be used through its instances: offer
			// the ones that exist, whoever made them.
			mech = MIG
		}
		base.Mechanism = mech
		props := mech.Properties()
		base.MemoryIsolation, base.FaultIsolation = props.MemoryIsolation, props.FaultIsolation
		switch mech {
		case Exclusive:
			attrs := base
			attrs.MemoryMiB, attrs.ComputePercent = g.MemoryMiB, 100
			add(Share{ID: g.UUID, Mechanism: Exclusive, GPU: ref, MemoryMiB: g.MemoryMiB, ComputePercent: 100, SMCount: g.SMCount}, "", attrs)
		case TimeSlice:
			attrs := base
			attrs.MemoryMiB = g.MemoryMiB / uint64(a.Replicas)
			attrs.ComputePercent = 100 / a.Replicas
			for r := 0; r < a.Replicas; r++ {
				add(Share{
					ID: fmt.Sprintf("%s/%s/%d", g.UUID, TimeSlice, r), Mechanism: TimeSlice, GPU: ref,
					Replica: r, Replicas: a.Replicas,
					MemoryMiB: attrs.MemoryMiB, ComputePercent: attrs.ComputePercent, SMCount: g.SMCount,
				}, fmt.Sprintf("%dx", a.Replicas), attrs)
			}
		case MIG:
			for i := range g.MIGInstances {
				inst := g.MIGInstances[i]
				attrs := base
				attrs.MemoryMiB, attrs.SMCount, attrs.MIGProfile = inst.MemoryMiB, inst.SMCount, inst.Profile
				attrs.ComputePercent = percentOf(inst.SMCount, g.SMCount)
				add(Share{
					ID: inst.UUID, Mechanism: MIG, GPU: ref, MIG: &inst,
					MemoryMiB: inst.MemoryMiB, ComputePercent: attrs.ComputePercent, SMCount: inst.SMCount,
				}, inst.Profile, attrs)
			}
		case MPS:
			if !g.MIGEnabled {
				for k, pct := range a.MPSPercent {
					attrs := base
					attrs.MemoryMiB = g.MemoryMiB * uint64(pct) / 100
					attrs.ComputePercent = pct
					attrs.SMCount = MPSSMCount(g.SMCount, pct)
					add(Share{
						ID: fmt.Sprintf("%s/%s/%d", g.UUID, MPS, k), Mechanism: MPS, GPU: ref,
						MemoryMiB: attrs.MemoryMiB, ComputePercent: pct, SMCount: attrs.SMCount, ThreadPercent: pct,
					}, fmt.Sprintf("%dpct", pct), attrs)
				}
				continue
			}
			// MPS on MIG: each instance is split, with a daemon of its own.
			for i := range g.MIGInstances {
				inst := g.MIGInstances[i]
				for k, pct := range a.MPSPercent {
					attrs := base
					attrs.MemoryMiB = inst.MemoryMiB * uint64(pct) / 100
					attrs.SMCount = MPSSMCount(inst.SMCount, pct)
					attrs.ComputePercent = percentOf(inst.SMCount, g.SMCount) * pct / 100
					attrs.MIGProfile = inst.Profile
					add(Share{
						ID: fmt.Sprintf("%s/%s/%d", inst.UUID, MPS, k), Mechanism: MPS, GPU: ref, MIG: &inst,
						MemoryMiB: attrs.MemoryMiB, ComputePercent: attrs.ComputePercent, SMCount: attrs.SMCount, ThreadPercent: pct,
					}, fmt.Sprintf("%s-%dpct", inst.Profile, pct), attrs)
				}
			}
		default:
			return nil, fmt.Errorf("GPU %d: mechanism %q is not available in this version of gpumux", g.Index, a.Mechanism)
		}
	}
	c := &Catalog{}
	for _, key := range order {
		g := byKey[key]
		g.Attrs.ParentUUID = commonParent(g.Shares)
		c.Groups = append(c.Groups, *g)
	}
	c.index()
	return c, nil
}

// index builds the lookup by share ID.
func (c *Catalog) index() {
	c.byID = map[string]*Share{}
	for gi := range c.Groups {
		for si := range c.Groups[gi].Shares {
			s := &c.Groups[gi].Shares[si]
			c.byID[s.ID] = s
		}
	}
}

// MPSSMCount is how many SMs an MPS client limited to pct percent of the
// active threads gets: MPS hands out whole TPCs (two SMs), rounding down; on
// the H200 25% gave 32 of 132 SMs.
func MPSSMCount(total, pct int) int {
	n := total * pct / 100 / 2 * 2
	if n < 2 {
		n = 2
	}
	return n
}

// MPSDaemon is the MPS control daemon a device needs, with the defaults of
// its largest share (a client can only lower them).
type MPSDaemon struct {
	UUID              string // GPU-… (MIG-… for MPS on MIG)
	ThreadPercent     int
	PinnedMemLimitMiB uint64
}

// MPSDaemons lists the daemons the catalog's MPS shares need, one per device.
func (c *Catalog) MPSDaemons() []MPSDaemon {
	var out []MPSDaemon
	index := map[string]int{}
	for _, g := range c.Groups {
		for _, s := range g.Shares {
			if s.Mechanism != MPS {
				continue
			}
			i, ok := index[s.Parent()]
			if !ok {
				i = len(out)
				index[s.Parent()] = i
				out = append(out, MPSDaemon{UUID: s.Parent()})
			}
			d := &out[i]
			d.ThreadPercent = max(d.ThreadPercent, s.ThreadPercent)
			d.PinnedMemLimitMiB = max(d.PinnedMemLimitMiB, s.MemoryMiB)
		}
	}
	return out
}

// Parent is the UUID of the device a share runs on: its MIG instance, or
// its GPU.
func (s Share) Parent() string {
	if s.MIG != nil {
		return s.MIG.UUID
	}
	return s.GPU.UUID
}

// Lookup returns the shares with the given IDs, in order. IDs the catalog does
// not hold are all named in one error wrapping ErrUnknownShare.
func (c *Catalog) Lookup(ids ...string) ([]Share, error) {
	out := make([]Share, 0, len(ids))
	var unknown []string
	for _, id := range ids {
		if s, ok := c.byID[id]; ok {
			out = append(out, *s)
		} else {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w: %s (this node offers %d shares; the layout may have changed)", ErrUnknownShare, strings.Join(unknown, ", "), len(c.byID))
	}
	return out, nil
}

// Len is the number of shares in the catalog.
func (c *Catalog) Len() int { return len(c.byID) }

func groupName(model string, m Mechanism, profile string) string {
	name := strings.ReplaceAll(strings.TrimPrefix(model, "NVIDIA "), " ", "-")
	if m == Exclusive {
		return name
	}
	if profile == "" {
		return name + "-" + string(m)
	}
	return name + "-" + string(m) + "-" + profile
}

func gpuByIndex(node *gpu.Node, index int) *gpu.GPU {
	for i := range node.GPUs {
		if node.GPUs[i].Index == index {
			return &node.GPUs[i]
		}
	}
	return nil
}

func percentOf(part, whole int) int {
	if whole <= 0 {
		return 0
	}
	return part * 100 / whole
}

func commonParent(shares []Share) string {
	if len(shares) == 0 {
		return ""
	}
	p := shares[0].GPU.UUID
	for _, s := range shares[1:] {
		if s.GPU.UUID != p {
			return ""
		}
	}
	return p
}
