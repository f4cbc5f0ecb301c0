package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/share"
)

// Holders says who holds the node's shares: containers of gpumux-runtime
// (leases in the node's lease store) and, when asked, the live allocations
// of the node's Nomad client.
type Holders struct {
	// Shares maps a held share (or device) ID to who holds it, e.g.
	// "container web-1" or "Nomad allocation 1a2b3c4d (job train, task main)".
	Shares map[string][]string
	// Leases is how many shares containers hold (gpumux-runtime's leases).
	Leases int
	// Note is for the user: why Nomad was not asked, when it was not.
	Note string
}

// Of says who holds share (or device) id, "" if nobody.
func (h *Holders) Of(id string) string { return strings.Join(h.Shares[id], " and ") }

// Device says who holds a device (GPU or MIG instance) or a share on it.
func (h *Holders) Device(uuid string) string {
	var who []string
	for id, list := range h.Shares {
		if share.DeviceOf(id) == uuid {
			who = append(who, list...)
		}
	}
	sort.Strings(who)
	return strings.Join(slices.Compact(who), " and ")
}

func (h *Holders) add(id, who string) {
	for _, w := range h.Shares[id] {
		if w == who {
			return
		}
	}
	h.Shares[id] = append(h.Shares[id], who)
	sort.Strings(h.Shares[id])
}

// NomadOff is the Nomad address that means: do not ask Nomad.
const NomadOff = "off"

// DefaultNomadAddr is where the node's Nomad agent listens when neither a
// flag nor NOMAD_ADDR names it.
var DefaultNomadAddr = "http://127.0.0.1:4646"

// nomadTimeout bounds the questions to the Nomad agent.
const nomadTimeout = 10 * time.Second

// HoldersOption says whom Holders asks besides the lease store.
type HoldersOption func(*holdersOptions)

type holdersOptions struct {
	nomadAddr     string
	nomadExplicit bool
}

// AskNomad makes Holders ask the Nomad agent at addr ("" for
// DefaultNomadAddr, NomadOff for none) which live allocations of the node
// hold devices. explicit says whether the user named the address: where no
// agent listens at the default address, the node runs no Nomad client, and
// that is a note, not an error.
func AskNomad(addr string, explicit bool) HoldersOption {
	return func(o *holdersOptions) { o.nomadAddr, o.nomadExplicit = addr, explicit }
}

// Holders reads who holds the node's shares: the lease store, read without
// creating a store where there is none, and Nomad if asked (AskNomad).
func (n *Node) Holders(ctx context.Context, opts ...HoldersOption) (*Holders, error) {
	o := holdersOptions{nomadAddr: NomadOff}
	for _, opt := range opts {
		opt(&o)
	}
	h := &Holders{Shares: map[string][]string{}}
	leases, err := lease.ReadIn(ctx, n.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	for id, container := range leases {
		h.add(id, "container "+container)
	}
	h.Leases = len(leases)
	if o.nomadAddr == NomadOff {
		return h, nil
	}
	held, note, err := nomadHolders(ctx, o.nomadAddr, o.nomadExplicit)
	if err != nil {
		return nil, err
	}
	h.Note = note
	for id, who := range held {
		h.add(id, who)
	}
	return h, nil
}

// leaseHolder says which container holds a device, reading the lease store
// once, the first time it is asked (the mig provider's Start asks it while
// the plugin starts, when Nomad's own allocations cannot be asked for). A
// store that cannot be read holds every device, so that nothing is
// destroyed under a container.
func (n *Node) leaseHolder(uuid string) string {
	n.leasesOnce.Do(func() {
		h, err := n.Holders(context.Background())
		if err != nil {
			n.leasesErr = fmt.Errorf("the lease store cannot be read: %w", err)
			return
		}
		n.leases = h
	})
	if n.leasesErr != nil {
		return n.leasesErr.Error()
	}
	return n.leases.Device(uuid)
}

// leaseCache is the lease store as leaseHolder read it.
type leaseCache struct {
	leasesOnce sync.Once
	leases     *Holders
	leasesErr  error
}

// nomadHolders returns who holds each device of this node in Nomad: for every
// device ID (a share ID of gpumux's plugin, or a UUID of NVIDIA's) that a
// task of a live allocation of the node holds, "Nomad allocation <id> (job
// <job>, task <task>)". An allocation is live until Nomad's client reports
// it complete, failed or lost; a task of it holds its devices until it is
// dead. Where no agent listens at the default address, the node runs no
// Nomad client: it returns no holders and a note to print. Any other
// failure is an error, since the allocations it could not see may hold
// devices.
func nomadHolders(ctx context.Context, addr string, explicit bool) (map[string]string, string, error) {
	if addr == "" {
		addr = DefaultNomadAddr
	}
	cfg := api.DefaultConfig() // NOMAD_TOKEN, NOMAD_CACERT, ... as the nomad command reads them
	cfg.Address = addr
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("Nomad agent %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, nomadTimeout)
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(ctx)
	var self api.AgentSelf
	if _, err := client.Raw().Query("/v1/agent/self", &self, q); err != nil {
		if !explicit && errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Sprintf("no Nomad agent listens at %s, so no Nomad allocation was checked (--nomad ADDR or NOMAD_ADDR names the agent; --nomad off skips this)", addr), nil
		}
		return nil, "", nomadError(addr, "asking the agent who it is", err)
	}
	nodeID := self.Stats["client"]["node_id"]
	if nodeID == "" {
		return nil, fmt.Sprintf("the Nomad agent at %s runs no client, so this node has no Nomad allocations", addr), nil
	}
	allocs, _, err := client.Nodes().Allocations(nodeID, q)
	if err != nil {
		return nil, "", nomadError(addr, "listing the allocations of node "+nodeID, err)
	}
	return allocationHolders(allocs), "", nil
}

func nomadError(addr, what string, err error) error {
	return fmt.Errorf("Nomad agent at %s: %s: %w (Nomad allocations that hold devices cannot be seen; fix the address or NOMAD_TOKEN, or pass --nomad off on a node whose GPUs Nomad does not use)", addr, what, err)
}

// allocationHolders maps the device IDs held by the live tasks of allocs to
// their holder.
func allocationHolders(allocs []*api.Allocation) map[string]string {
	holders := map[string]string{}
	for _, a := range allocs {
		if a == nil || a.ClientTerminalStatus() || a.AllocatedResources == nil {
			continue
		}
		for task, res := range a.AllocatedResources.Tasks {
			if ts := a.TaskStates[task]; res == nil || ts != nil && ts.State == "dead" {
				continue
			}
			for _, d := range res.Devices {
				if d == nil {
					continue
				}
				for _, id := range d.DeviceIDs {
					holders[id] = fmt.Sprintf("Nomad allocation %s (job %s, task %s)", shortID(a.ID), a.JobID, task)
				}
			}
		}
	}
	return holders
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
