package gpu

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Usage reads the current usage of every GPU and MIG instance, keyed by UUID.
// MIG instances report their own memory; NVML gives utilisation, temperature,
// power and BAR1 only for the whole GPU, so those are left unset on MIG
// instances.
func (h *Host) Usage(ctx context.Context) (map[string]Usage, error) {
	count, ret := h.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %w", nvmlError(ret))
	}
	out := make(map[string]Usage)
	for i := 0; i < count; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dev, ret := h.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: %w", i, nvmlError(ret))
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d UUID: %w", i, nvmlError(ret))
		}
		out[uuid] = deviceUsage(dev, true)
		if current, _, ret := dev.GetMigMode(); ret != nvml.SUCCESS || current != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		max, ret := dev.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			continue
		}
		for m := 0; m < max; m++ {
			mig, ret := dev.GetMigDeviceHandleByIndex(m)
			if ret != nvml.SUCCESS {
				continue
			}
			if id, ret := mig.GetUUID(); ret == nvml.SUCCESS {
				out[id] = deviceUsage(mig, false)
			}
		}
	}
	return out, nil
}

func deviceUsage(dev nvml.Device, whole bool) Usage {
	var u Usage
	if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		u.MemoryUsedMiB, u.MemoryTotalMiB = mem.Used>>20, mem.Total>>20
	}
	if !whole {
		return u
	}
	if util, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		u.GPUUtilPercent, u.MemoryUtilPercent = &util.Gpu, &util.Memory
	}
	if enc, _, ret := dev.GetEncoderUtilization(); ret == nvml.SUCCESS {
		u.EncoderUtilPercent = &enc
	}
	if dec, _, ret := dev.GetDecoderUtilization(); ret == nvml.SUCCESS {
		u.DecoderUtilPercent = &dec
	}
	if t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		u.TemperatureC = &t
	}
	if mw, ret := dev.GetPowerUsage(); ret == nvml.SUCCESS {
		w := float64(mw) / 1000
		u.PowerWatts = &w
	}
	if mw, ret := dev.GetPowerManagementLimit(); ret == nvml.SUCCESS {
		w := float64(mw) / 1000
		u.PowerLimitWatts = &w
	}
	if bar1, ret := dev.GetBAR1MemoryInfo(); ret == nvml.SUCCESS {
		u.BAR1UsedMiB, u.BAR1TotalMiB = bar1.Bar1Used>>20, bar1.Bar1Total>>20
	}
	return u
}
