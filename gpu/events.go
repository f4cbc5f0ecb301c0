package gpu

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// applicationXIDs are XIDs caused by the application, not the GPU (the same
// list NVIDIA's device plugins skip): a faulting kernel must not mark a GPU
// that others share as unhealthy.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// noInstance is what NVML reports as GPU/compute instance id for an event that
// concerns the whole GPU.
const noInstance = 0xFFFFFFFF

// WatchXIDs delivers the critical XID errors of every GPU until ctx is done,
// skipping the XIDs an application causes. The channel is closed when the
// watch ends; GPUs that cannot report events are skipped.
func (h *Host) WatchXIDs(ctx context.Context) (<-chan XIDEvent, error) {
	set, ret := h.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("creating NVML event set: %w", nvmlError(ret))
	}
	count, ret := h.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		set.Free()
		return nil, fmt.Errorf("counting GPUs: %w", nvmlError(ret))
	}
	uuids := map[string]bool{}
	for i := 0; i < count; i++ {
		dev, ret := h.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret == nvml.SUCCESS {
			if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
				uuids[uuid] = true
			}
		}
	}
	out := make(chan XIDEvent)
	go func() {
		defer close(out)
		defer set.Free()
		for ctx.Err() == nil {
			data, ret := set.Wait(500) // ms: how long a cancelled watch lingers
			if ret != nvml.SUCCESS || data.EventType != nvml.EventTypeXidCriticalError || applicationXIDs[data.EventData] {
				continue
			}
			uuid, ret := data.Device.GetUUID()
			if ret != nvml.SUCCESS || !uuids[uuid] {
				continue
			}
			ev := XIDEvent{GPUUUID: uuid, GIID: -1, CIID: -1, XID: data.EventData}
			if data.GpuInstanceId != noInstance {
				ev.GIID, ev.CIID = int(data.GpuInstanceId), int(data.ComputeInstanceId)
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
