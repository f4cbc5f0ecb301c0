package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// Health reports whether a share may be used now, and why not: no critical
// XID on its GPU or MIG instance (seen by a node agent's watch), for a
// share on the node's own GPUs the driver's files that its container
// needs (DriverFiles, and their staged tree), and its mechanism's own check (an MPS daemon that
// answers, a MIG instance that still exists, a remote server that was
// reached).
func (n *Node) Health(s share.Share) (bool, string) {
	if ok, why := n.xids.healthy(s); !ok {
		return false, why
	}
	if s.Remote == nil {
		if _, _, err := n.driverReady(); err != nil {
			return false, err.Error()
		}
	}
	p, err := n.provider(s.Mechanism)
	if err != nil {
		return false, err.Error()
	}
	return p.Health(s)
}

// xidTracker remembers critical XIDs. A GPU-wide XID makes every share of
// that GPU unhealthy; an XID that names a MIG instance only that instance.
// Shares stay unhealthy until the agent restarts, as with NVIDIA's plugins:
// an XID that needs attention should not be forgotten by the next catalog.
type xidTracker struct {
	mu     sync.Mutex
	gpus   map[string]string // GPU UUID → reason
	migs   map[migKey]string // (GPU UUID, GI, CI) → reason
	counts map[string]uint64 // GPU UUID → XIDs seen
}

type migKey struct {
	gpu    string
	gi, ci int
}

func newXIDTracker() *xidTracker {
	return &xidTracker{gpus: map[string]string{}, migs: map[migKey]string{}, counts: map[string]uint64{}}
}

// watch records XIDs until ctx is done; changed ticks after each.
func (h *xidTracker) watch(ctx context.Context, n *Node, changed chan<- struct{}) {
	events, err := n.host.WatchXIDs(ctx)
	if err != nil {
		n.logger.Warn("GPU health is not watched: XID events unavailable", "error", err)
		return
	}
	go func() {
		for ev := range events {
			n.logger.Error("critical XID error", "gpu", ev.GPUUUID, "gpu_instance", ev.GIID, "compute_instance", ev.CIID, "xid", ev.XID)
			h.record(ev, time.Now())
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
}

func (h *xidTracker) record(ev gpu.XIDEvent, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[ev.GPUUUID]++
	if ev.GIID < 0 {
		h.gpus[ev.GPUUUID] = fmt.Sprintf("XID %d on GPU %s at %s", ev.XID, ev.GPUUUID, at.UTC().Format(time.RFC3339))
		return
	}
	h.migs[migKey{ev.GPUUUID, ev.GIID, ev.CIID}] = fmt.Sprintf("XID %d on MIG GPU instance %d / compute instance %d of %s at %s", ev.XID, ev.GIID, ev.CIID, ev.GPUUUID, at.UTC().Format(time.RFC3339))
}

// healthy reports whether a share may be used, and why not.
func (h *xidTracker) healthy(s share.Share) (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if why, bad := h.gpus[s.GPU.UUID]; bad {
		return false, why
	}
	if s.MIG != nil {
		if why, bad := h.migs[migKey{s.GPU.UUID, s.MIG.GIID, s.MIG.CIID}]; bad {
			return false, why
		}
	}
	return true, ""
}

// gpuHealth is a GPU's XID state: whether it is healthy and how many XIDs
// were seen on it (its MIG instances' included).
func (h *xidTracker) gpuHealth(uuid string) (healthy bool, xids uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, bad := h.gpus[uuid]
	return !bad, h.counts[uuid]
}
