package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// EnableMIG turns MIG mode on for GPU index. When the driver needs a GPU reset
// to finish the change, it returns an error wrapping ErrResetRequired; it
// never resets the GPU itself (see ResetGPU).
func (h *Host) EnableMIG(ctx context.Context, index int) error {
	return h.change(ctx, index, func(dev nvml.Device) error {
		// go-nvml returns the activation status first, then the result.
		activation, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: enabling MIG mode: %w", index, nvmlError(ret))
		}
		current, _, ret := dev.GetMigMode()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: reading MIG mode: %w", index, nvmlError(ret))
		}
		if current != nvml.DEVICE_MIG_ENABLE {
			return fmt.Errorf("GPU %d: MIG mode is pending (activation status %v): %w", index, activation, ErrResetRequired)
		}
		return nil
	})
}

// DisableMIG turns MIG mode off for GPU index. It destroys nothing: while the
// GPU holds GPU instances it refuses, and the caller must remove them first.
// When the driver needs a GPU reset to finish the change, it returns an error
// wrapping ErrResetRequired; it never resets the GPU itself (see ResetGPU).
func (h *Host) DisableMIG(ctx context.Context, index int) error {
	return h.change(ctx, index, func(dev nvml.Device) error {
		n := 0
		for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
			info, ret := dev.GetGpuInstanceProfileInfo(idx)
			if ret != nvml.SUCCESS {
				continue
			}
			gis, ret := dev.GetGpuInstances(&info)
			if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
				return fmt.Errorf("GPU %d: listing GPU instances: %w", index, nvmlError(ret))
			}
			n += len(gis)
		}
		if n > 0 {
			return fmt.Errorf("GPU %d: cannot disable MIG mode while it holds %d GPU instance(s); remove them first (e.g. apply a layout with mig-enabled: true and mig-devices: {})", index, n)
		}
		activation, ret := dev.SetMigMode(nvml.DEVICE_MIG_DISABLE)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: disabling MIG mode: %w", index, nvmlError(ret))
		}
		current, _, ret := dev.GetMigMode()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: reading MIG mode: %w", index, nvmlError(ret))
		}
		if current != nvml.DEVICE_MIG_DISABLE {
			return fmt.Errorf("GPU %d: disabling MIG mode is pending (activation status %v): %w", index, activation, ErrResetRequired)
		}
		return nil
	})
}

// ResetGPU resets GPU index, which makes a pending MIG mode current and
// destroys every MIG instance on the GPU. Callers reset only a GPU whose MIG
// mode change waits for a reset, and only while nothing uses it.
//
// NVML has no call that resets a GPU (nvml.h declares none, and go-nvml
// v0.13 wraps none; nvidia-smi -r uses the driver's private interface), so on
// real GPUs ResetGPU changes nothing and returns an error wrapping
// ErrResetUnsupported that says to run nvidia-smi -r -i <index>. On a
// simulated node it resets the simulated GPU (sim.Node.ResetGPU), and
// refuses with an error wrapping ErrInUse while processes run on it.
func (h *Host) ResetGPU(ctx context.Context, index int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if h.simulated == nil {
		return fmt.Errorf("GPU %d: %w: NVML offers no GPU reset; reset it yourself when no process uses it (nvidia-smi -r -i %d), then run the command again", index, ErrResetUnsupported, index)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.simulated.ResetGPU(index); err != nil {
		if errors.Is(err, nvml.ERROR_IN_USE) {
			return fmt.Errorf("GPU %d: resetting: %w (%w)", index, ErrInUse, err)
		}
		return fmt.Errorf("GPU %d: resetting: %w", index, err)
	}
	return h.simulated.EnsureDeviceNodes()
}

// CreateMIGInstance creates a GPU instance of the named profile at placement
// on GPU index, with one full-size compute instance. On any
// failure nothing is left behind.
func (h *Host) CreateMIGInstance(ctx context.Context, index int, profile MIGProfile, at Placement) error {
	return h.change(ctx, index, func(dev nvml.Device) error {
		return createInstance(dev, index, profile, at)
	})
}

func createInstance(dev nvml.Device, index int, profile MIGProfile, at Placement) (err error) {
	info, ret := giProfileInfo(dev, profile.GIProfileID)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: profile %s: %w", index, profile.Name, nvmlError(ret))
	}
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)})
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: creating %s at %s: %w", index, profile.Name, at, nvmlError(ret))
	}
	defer func() {
		if err != nil {
			gi.Destroy()
		}
	}()
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(profile.CIProfileID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: compute profile of %s: %w", index, profile.Name, nvmlError(ret))
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: creating compute instance in %s: %w", index, profile.Name, nvmlError(ret))
	}
	return nil
}

// DestroyMIGInstance destroys the compute instances of GPU instance giID on GPU
// index, then the GPU instance. NVML refuses (ERROR_IN_USE) while processes run.
func (h *Host) DestroyMIGInstance(ctx context.Context, index, giID int) error {
	return h.change(ctx, index, func(dev nvml.Device) error {
		return destroyInstance(dev, index, giID)
	})
}

func destroyInstance(dev nvml.Device, index, giID int) error {
	gi, ret := dev.GetGpuInstanceById(giID)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: GPU instance %d: %w", index, giID, nvmlError(ret))
	}
	for ciIdx := 0; ciIdx < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; ciIdx++ {
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciIdx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&ciInfo)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: compute instances of GPU instance %d: %w", index, giID, nvmlError(ret))
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: destroying a compute instance of GPU instance %d: %w", index, giID, nvmlError(ret))
			}
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: destroying GPU instance %d: %w", index, giID, nvmlError(ret))
	}
	return nil
}

// Processes returns the PIDs of compute processes on a GPU or MIG instance,
// given its UUID.
func (h *Host) Processes(ctx context.Context, uuid string) ([]uint32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dev, ret := h.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("device %s: %w", uuid, nvmlError(ret))
	}
	procs, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("processes on %s: %w", uuid, nvmlError(ret))
	}
	pids := make([]uint32, len(procs))
	for i, p := range procs {
		pids[i] = p.Pid
	}
	return pids, nil
}

// change runs one MIG change on GPU index under the Host's lock, then brings
// a simulated node's device nodes up to date (the real driver does that
// itself).
func (h *Host) change(ctx context.Context, index int, do func(dev nvml.Device) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	dev, ret := h.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: %w (%w)", index, nvmlError(ret), ErrNotFound)
	}
	if err := do(dev); err != nil {
		return err
	}
	if h.simulated == nil {
		return nil
	}
	return h.simulated.EnsureDeviceNodes()
}

func giProfileInfo(dev nvml.Device, id int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
		info, ret := dev.GetGpuInstanceProfileInfo(idx)
		if ret == nvml.SUCCESS && int(info.Id) == id {
			return info, nvml.SUCCESS
		}
	}
	return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_FOUND
}
