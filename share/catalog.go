package share

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpumux/gpumux/gpu"
)

// Share is one schedulable unit of GPU: what a workload is granted.
type Share struct {
	// ID is stable across restarts (see the grammar in id.go): the GPU UUID
	// (exclusive), the MIG UUID (mig), or "<device UUID>/<mechanism>/<n>"
	// for replicas, MPS shares and remote shares of a device.
	ID        string
	Mechanism Mechanism
	GPU       GPURef
	MIG       *gpu.MIGInstance // set for shares on a MIG instance
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
	// TimePercent is a time-slice replica's part of its device's time
	// (the GPU, or its MIG instance), and Limit how the limiter holds it
	// (and its memory) to it.
	TimePercent int
	Limit       Limit
}

// GPURef is what a share needs to know of its physical GPU.
type GPURef struct {
	Index    int
	UUID     string
	Minor    int
	Model    string
	PCIBusID string
}

// RefOf is the GPURef of a node's GPU.
func RefOf(g *gpu.GPU) GPURef {
	return GPURef{Index: g.Index, UUID: g.UUID, Minor: g.Minor, Model: g.Model, PCIBusID: g.PCIBusID}
}

// Group is a set of interchangeable shares: same model, mechanism and size.
// Schedulers offer a group as one kind of device.
type Group struct {
	Name      string // unique on the node, e.g. "H200-mig-3g.71gb"
	Model     string
	Mechanism Mechanism
	Profile   string // MIG profile, "<n>x" for time-slice replicas, "" for whole GPUs
	Attrs     Attributes
	// Spread is how a request for several shares of the group's mechanism
	// takes them (see Choose).
	Spread Spread `json:"-"`
	Shares []Share
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
	// Hardware is what NVML reports of the shares' physical GPUs, as far as
	// they all agree (zero for remote groups: their GPUs are not read here).
	Hardware gpu.Hardware
}

// Offer is one share as a mechanism's provider offers it: the share, and
// the group it belongs to with the group's attributes. Offers of one group
// name must agree on everything but the share.
type Offer struct {
	Group   string // see GroupName
	Profile string
	Attrs   Attributes
	Spread  Spread
	Share   Share
}

// GroupName names a group: the model without its "NVIDIA " prefix, spaces
// as "-", then each non-empty part: GroupName("NVIDIA H200") is "H200",
// GroupName("NVIDIA H200", "mig", "3g.71gb") is "H200-mig-3g.71gb".
func GroupName(model string, parts ...string) string {
	name := strings.ReplaceAll(strings.TrimPrefix(model, "NVIDIA "), " ", "-")
	for _, p := range parts {
		if p != "" {
			name += "-" + p
		}
	}
	return name
}

// Naming is how a node names the device groups of whole GPUs and of MIG
// instances; the groups of the other mechanisms have gpumux's names under
// both.
type Naming string

// Namings.
const (
	// NamingGpumux is GroupName's: "H200", "H200-mig-3g.71gb".
	NamingGpumux Naming = "gpumux"
	// NamingNVIDIA is nomad-device-nvidia's, NVML's names of the devices:
	// "NVIDIA H200", "NVIDIA H200 MIG 3g.71gb".
	NamingNVIDIA Naming = "nomad-device-nvidia"
)

// Namings lists the valid Namings.
var Namings = []Naming{NamingGpumux, NamingNVIDIA}

// Rename names the groups of whole GPUs and MIG instances among offers
// under n.
func (n Naming) Rename(offers []Offer) {
	if n != NamingNVIDIA {
		return
	}
	for i := range offers {
		o := &offers[i]
		switch o.Share.Mechanism {
		case Exclusive:
			o.Group = o.Share.GPU.Model
		case MIG:
			o.Group = o.Share.GPU.Model + " MIG " + o.Profile
		}
	}
}

// BaseAttributes are the attributes every share of a node's GPU g has:
// the mechanism's guarantees, and what the GPU and its driver are.
func BaseAttributes(node *gpu.Node, g *gpu.GPU, m Mechanism, p Properties) Attributes {
	return Attributes{
		Mechanism:             m,
		SMCount:               g.SMCount,
		MemoryIsolation:       p.MemoryIsolation,
		FaultIsolation:        p.FaultIsolation,
		CUDAComputeCapability: g.ComputeCapability,
		DriverVersion:         node.DriverVersion,
		CUDAVersion:           node.CUDAVersion,
		Hardware:              g.Hardware,
	}
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

// NewCatalog groups offers by group name, in the order the names first
// appear, and sets the attributes that depend on every share of a group
// (parent_uuid, remote_addr, and of the hardware what all the group's GPUs
// agree on). A share ID offered twice is an error.
func NewCatalog(offers []Offer) (*Catalog, error) {
	byName := map[string]int{}
	c := &Catalog{}
	for _, o := range offers {
		i, ok := byName[o.Group]
		if !ok {
			i = len(c.Groups)
			byName[o.Group] = i
			c.Groups = append(c.Groups, Group{
				Name: o.Group, Model: o.Share.GPU.Model, Mechanism: o.Share.Mechanism,
				Profile: o.Profile, Attrs: o.Attrs, Spread: o.Spread,
			})
		}
		c.Groups[i].Attrs.Hardware = c.Groups[i].Attrs.Hardware.Common(o.Attrs.Hardware)
		c.Groups[i].Shares = append(c.Groups[i].Shares, o.Share)
	}
	for gi := range c.Groups {
		g := &c.Groups[gi]
		g.Attrs.ParentUUID = commonParent(g.Shares)
		g.Attrs.RemoteAddr = commonAddr(g.Shares)
	}
	if err := c.index(); err != nil {
		return nil, err
	}
	return c, nil
}

// index builds the lookup by share ID.
func (c *Catalog) index() error {
	c.byID = map[string]*Share{}
	for gi := range c.Groups {
		for si := range c.Groups[gi].Shares {
			s := &c.Groups[gi].Shares[si]
			if _, dup := c.byID[s.ID]; dup {
				return fmt.Errorf("share %s is offered twice", s.ID)
			}
			c.byID[s.ID] = s
		}
	}
	return nil
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

// Shares returns every share of the catalog, in group order.
func (c *Catalog) Shares() []Share {
	var out []Share
	for _, g := range c.Groups {
		out = append(out, g.Shares...)
	}
	return out
}

// PercentOf is part as a whole percentage of whole (0 when whole is 0).
func PercentOf(part, whole int) int {
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

func commonAddr(shares []Share) string {
	if len(shares) == 0 || shares[0].Remote == nil {
		return ""
	}
	a := shares[0].Remote.Addr
	for _, s := range shares[1:] {
		if s.Remote == nil || s.Remote.Addr != a {
			return ""
		}
	}
	return a
}
