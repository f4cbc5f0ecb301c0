package plugin

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/gpumux/gpumux/gpu"
)

// Stats sends, every interval, each share's usage under nomad-device-nvidia's
// names: memory used/total as the summary, plus utilisation, temperature,
// power and BAR1 where NVML reports them. A MIG share reports its
// instance's memory only; replicas and MPS shares report their whole GPU.
func (p *Plugin) Stats(ctx context.Context, interval time.Duration) (<-chan *device.StatsResponse, error) {
	if !p.enabled() {
		return nil, device.ErrPluginDisabled
	}
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

// Stat names: nomad-device-nvidia's, so that what reads them (dashboards
// over Nomad's API, nomad node status) keeps working.
const (
	StatMemory            = "Memory state"
	StatGPUUtilization    = "GPU utilization"
	StatMemoryUtilization = "Memory utilization"
	StatEncoder           = "Encoder utilization"
	StatDecoder           = "Decoder utilization"
	StatTemperature       = "Temperature"
	StatPower             = "Power usage"
	StatBAR1              = "BAR1 buffer state"
)

// deviceStats turns a device's usage into Nomad's stats: memory used/total
// as the summary, and each figure NVML reported.
func deviceStats(u gpu.Usage, at time.Time) *device.DeviceStats {
	memory := &structs.StatValue{
		IntNumeratorVal:   ptr(int64(u.MemoryUsedMiB)),
		IntDenominatorVal: ptr(int64(u.MemoryTotalMiB)),
		Unit:              structs.UnitMiB,
		Desc:              "UsedMemory / TotalMemory",
	}
	attrs := map[string]*structs.StatValue{StatMemory: memory}
	percent := func(name string, v *uint32, desc string) {
		if v != nil {
			attrs[name] = &structs.StatValue{IntNumeratorVal: ptr(int64(*v)), Unit: "%", Desc: desc}
		}
	}
	percent(StatGPUUtilization, u.GPUUtilPercent, "Percent of time over the past sample period during which one or more kernels were executing on the GPU.")
	percent(StatMemoryUtilization, u.MemoryUtilPercent, "Percent of time over the past sample period during which device memory was being read or written.")
	percent(StatEncoder, u.EncoderUtilPercent, "Percent of time over the past sample period during which the GPU's video encoder was used.")
	percent(StatDecoder, u.DecoderUtilPercent, "Percent of time over the past sample period during which the GPU's video decoder was used.")
	if u.TemperatureC != nil {
		attrs[StatTemperature] = &structs.StatValue{IntNumeratorVal: ptr(int64(*u.TemperatureC)), Unit: "C", Desc: "GPU temperature"}
	}
	if u.PowerWatts != nil {
		power := &structs.StatValue{FloatNumeratorVal: ptr(*u.PowerWatts), Unit: structs.UnitW, Desc: "Power draw of the GPU and its memory"}
		if u.PowerLimitWatts != nil {
			power.FloatDenominatorVal = ptr(*u.PowerLimitWatts)
			power.Desc += " / its power limit"
		}
		attrs[StatPower] = power
	}
	if u.BAR1TotalMiB > 0 {
		attrs[StatBAR1] = &structs.StatValue{
			IntNumeratorVal:   ptr(int64(u.BAR1UsedMiB)),
			IntDenominatorVal: ptr(int64(u.BAR1TotalMiB)),
			Unit:              structs.UnitMiB,
			Desc:              "UsedBAR1 / TotalBAR1",
		}
	}
	return &device.DeviceStats{Summary: memory, Stats: &structs.StatObject{Attributes: attrs}, Timestamp: at}
}

func ptr[T any](v T) *T { return &v }
