package plugin

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/gpumux/gpumux/gpu"
)

// Stats sends, every interval, each share's usage: memory used/total as the
// summary, plus utilisation, temperature and power where NVML reports them. A
// MIG share reports its instance's memory; replicas report their whole GPU.
func (p *Plugin) Stats(ctx context.Context, interval time.Duration) (<-chan *device.StatsResponse, error) {
	if interval <= 0 {
		return nil, errors.New("stats interval must be positive")
	}
	out := make(chan *device.StatsResponse)
	go func() {
		defer close(out)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				timer.Reset(interval)
			}
			resp := p.collectStats(ctx)
			if resp == nil {
				continue // not fingerprinted yet
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (p *Plugin) collectStats(ctx context.Context) *device.StatsResponse {
	n, catalog, err := p.current()
	if err != nil {
		return nil
	}
	usage, err := n.Host().Usage(ctx)
	if err != nil {
		return &device.StatsResponse{Error: err}
	}
	now := time.Now()
	resp := &device.StatsResponse{}
	for _, g := range catalog.Groups {
		gs := &device.DeviceGroupStats{Vendor: Vendor, Type: DeviceType, Name: g.Name, InstanceStats: map[string]*device.DeviceStats{}}
		for _, s := range g.Shares {
			if u, ok := usage[s.Parent()]; ok {
				gs.InstanceStats[s.ID] = deviceStats(u, now)
			}
		}
		resp.Groups = append(resp.Groups, gs)
	}
	return resp
}

func deviceStats(u gpu.Usage, at time.Time) *device.DeviceStats {
	memory := &structs.StatValue{
		IntNumeratorVal:   ptr(int64(u.MemoryUsedMiB)),
		IntDenominatorVal: ptr(int64(u.MemoryTotalMiB)),
		Unit:              "MiB",
		Desc:              "GPU memory used",
	}
	attrs := map[string]*structs.StatValue{"memory": memory}
	if u.GPUUtilPercent != nil {
		attrs["utilization"] = &structs.StatValue{IntNumeratorVal: ptr(int64(*u.GPUUtilPercent)), Unit: "%", Desc: "GPU utilization"}
	}
	if u.TemperatureC != nil {
		attrs["temperature"] = &structs.StatValue{IntNumeratorVal: ptr(int64(*u.TemperatureC)), Unit: "C", Desc: "GPU temperature"}
	}
	if u.PowerWatts != nil {
		attrs["power"] = &structs.StatValue{FloatNumeratorVal: ptr(*u.PowerWatts), Unit: "W", Desc: "Power draw"}
	}
	return &device.DeviceStats{Summary: memory, Stats: &structs.StatObject{Attributes: attrs}, Timestamp: at}
}

func ptr[T any](v T) *T { return &v }
