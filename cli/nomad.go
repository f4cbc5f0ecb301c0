package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpumux/gpumux/runtimehook/lease"
	"github.com/hashicorp/nomad/api"
)

// NomadOff is the --nomad value that skips asking Nomad.
const NomadOff = "off"

// defaultNomadAddr is where the node's Nomad agent listens when neither
// --nomad nor NOMAD_ADDR names it.
var defaultNomadAddr = "http://127.0.0.1:4646"

// nomadTimeout bounds the questions to the Nomad agent.
const nomadTimeout = 10 * time.Second

// nomadHolders returns who holds each device of this node in Nomad: for every
// device ID (a share ID of gpumux's plugin, or a UUID of NVIDIA's) that a
// task of a live allocation of the node holds, "Nomad allocation <id> (job
// <job>, task <task>)". An allocation is live until Nomad's client reports
// it complete, failed or lost; a task of it holds its devices until it is
// dead. addr is the agent's address ("" for the default); explicit says
// whether the user named it (--nomad or NOMAD_ADDR). Where no agent
// listens at the default address, the node runs no Nomad client: it
// returns no holders and a note to print. Any other failure is an error,
// since the allocations it could not see may hold instances.
func nomadHolders(ctx context.Context, addr string, explicit bool) (map[string]string, string, error) {
	if addr == "" {
		addr = defaultNomadAddr
	}
	cfg := api.DefaultConfig() // NOMAD_TOKEN, NOMAD_CACERT, ... as the nomad command reads them
	cfg.Address = addr
	client, err := api.NewClient(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("--nomad %s: %w", addr, err)
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
	return fmt.Errorf("Nomad agent at %s: %s: %w (Nomad allocations that hold MIG instances cannot be seen; fix the address or NOMAD_TOKEN, or pass --nomad off on a node whose GPUs Nomad does not use)", addr, what, err)
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

// heldInstances returns who holds each MIG instance (or GPU) of the node:
// containers of gpumux-runtime (a lease in the node's lease store, of the
// instance or of an MPS share on it), read without creating a store where
// there is none, and, unless nomadAddr is NomadOff, the live allocations of
// the node's Nomad client (of the instance or of a share on it). Notes for
// the user go to warn.
func heldInstances(ctx context.Context, stateDir, nomadAddr string, nomadExplicit bool, warn io.Writer) (func(uuid string) string, error) {
	leases, err := lease.ReadIn(ctx, stateDir)
	if err != nil {
		return nil, err
	}
	holder := map[string][]string{}
	add := func(shareID, who string) {
		parent := lease.Parent(shareID)
		for _, w := range holder[parent] {
			if w == who {
				return
			}
		}
		holder[parent] = append(holder[parent], who)
	}
	for shareID, container := range leases {
		add(shareID, "container "+container)
	}
	if nomadAddr != NomadOff {
		held, note, err := nomadHolders(ctx, nomadAddr, nomadExplicit)
		if err != nil {
			return nil, err
		}
		if note != "" {
			fmt.Fprintf(warn, "note: %s\n", note)
		}
		for id, who := range held {
			add(id, who)
		}
	}
	for _, list := range holder {
		sort.Strings(list)
	}
	return func(uuid string) string { return strings.Join(holder[uuid], " and ") }, nil
}
