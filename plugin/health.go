package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// healthTracker remembers critical XIDs. A GPU-wide XID makes every share of
// that GPU unhealthy; an XID that names a MIG instance only that instance.
// Shares stay unhealthy until the plugin restarts, as with NVIDIA's plugins:
// an XID that needs attention should not be forgotten by the next fingerprint.
type healthTracker struct {
	mu   sync.Mutex
	gpus map[string]string // GPU UUID → reason
	migs map[migKey]string // (GPU UUID, GI, CI) → reason
}

type migKey struct {
	gpu    string
	gi, ci int
}

func newHealthTracker() *healthTracker {
	return &healthTracker{gpus: map[string]string{}, migs: map[migKey]string{}}
}

// watch records XIDs until ctx is done; the returned channel ticks after each.
func (h *healthTracker) watch(ctx context.Context, host Host, logger hclog.Logger) <-chan struct{} {
	changed := make(chan struct{}, 1)
	events, err := host.WatchXIDs(ctx)
	if err != nil {
		logger.Warn("GPU health is not watched: XID events unavailable", "error", err)
		return changed
	}
	go func() {
		for ev := range events {
			logger.Error("critical XID error", "gpu", ev.GPUUUID, "gpu_instance", ev.GIID, "compute_instance", ev.CIID, "xid", ev.XID)
			h.record(ev, time.Now())
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	return changed
}

func (h *healthTracker) record(ev gpu.XIDEvent, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.GIID < 0 {
		h.gpus[ev.GPUUUID] = fmt.Sprintf("XID %d on GPU %s at %s", ev.XID, ev.GPUUUID, at.UTC().Format(time.RFC3339))
		return
	}
	h.migs[migKey{ev.GPUUUID, ev.GIID, ev.CIID}] = fmt.Sprintf("XID %d on MIG GPU instance %d / compute instance %d of %s at %s", ev.XID, ev.GIID, ev.CIID, ev.GPUUUID, at.UTC().Format(time.RFC3339))
}

// healthy reports whether a share may be used, and why not.
func (h *healthTracker) healthy(s share.Share) (bool, string) {
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
