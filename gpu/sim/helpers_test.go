package sim_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

// open opens node name in dir, initializes its NVML and shuts it down at the
// end of the test.
func open(t *testing.T, name, dir string, opts ...sim.Option) (*sim.Node, nvml.Interface) {
	t.Helper()
	n, err := sim.Open(name, dir, opts...)
	if err != nil {
		t.Fatalf("Open(%q): %v", name, err)
	}
	lib := n.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() { lib.Shutdown() })
	return n, lib
}

func device(t *testing.T, lib nvml.Interface, index int) nvml.Device {
	t.Helper()
	d, ret := lib.DeviceGetHandleByIndex(index)
	check(t, ret, "DeviceGetHandleByIndex(%d)", index)
	return d
}

// check fails the test unless ret is SUCCESS.
func check(t *testing.T, ret nvml.Return, what string, args ...any) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Fatalf(what+": %v", append(args, ret)...)
	}
}

// expect fails the test unless ret is want.
func expect(t *testing.T, ret, want nvml.Return, what string, args ...any) {
	t.Helper()
	if ret != want {
		t.Fatalf(what+": got %v, want %v", append(args, ret, want)...)
	}
}

func enableMig(t *testing.T, d nvml.Device) {
	t.Helper()
	activation, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	check(t, ret, "SetMigMode(enable)")
	check(t, activation, "SetMigMode(enable) activation")
}

// giProfile returns the GPU instance profile with the given profile id.
func giProfile(t *testing.T, d nvml.Device, id uint32) *nvml.GpuInstanceProfileInfo {
	t.Helper()
	for i := 0; i < nvml.GPU_INSTANCE_PROFILE_COUNT; i++ {
		info, ret := d.GetGpuInstanceProfileInfo(i)
		if ret == nvml.SUCCESS && info.Id == id {
			return &info
		}
	}
	t.Fatalf("no GPU instance profile with id %d", id)
	return nil
}

func createGI(t *testing.T, d nvml.Device, profileID, start uint32) nvml.GpuInstance {
	t.Helper()
	p := giProfile(t, d, profileID)
	gi, ret := d.CreateGpuInstanceWithPlacement(p, &nvml.GpuInstancePlacement{Start: start, Size: placementSize(profileID)})
	check(t, ret, "CreateGpuInstanceWithPlacement(profile %d, start %d)", profileID, start)
	return gi
}

// placementSize is the placement size (memory slots) of a profile id on the
// simulated GPUs.
func placementSize(profileID uint32) uint32 {
	switch profileID {
	case 0:
		return 8
	case 5, 9:
		return 4
	case 14, 15:
		return 2
	default:
		return 1
	}
}

// createFullCI creates the compute instance that spans the whole GPU instance.
func createFullCI(t *testing.T, gi nvml.GpuInstance) nvml.ComputeInstance {
	t.Helper()
	info, ret := gi.GetInfo()
	check(t, ret, "GpuInstance.GetInfo")
	giInfo := giProfile(t, info.Device, info.ProfileId)
	for i := nvml.COMPUTE_INSTANCE_PROFILE_COUNT - 1; i >= 0; i-- {
		p, ret := gi.GetComputeInstanceProfileInfo(i, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && p.SliceCount == giInfo.SliceCount {
			ci, ret := gi.CreateComputeInstance(&p)
			check(t, ret, "CreateComputeInstance")
			return ci
		}
	}
	t.Fatalf("no full-size CI profile for GI profile %d", info.ProfileId)
	return nil
}

func ciProfile(t *testing.T, gi nvml.GpuInstance, index int) *nvml.ComputeInstanceProfileInfo {
	t.Helper()
	p, ret := gi.GetComputeInstanceProfileInfo(index, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	check(t, ret, "GetComputeInstanceProfileInfo(%d)", index)
	return &p
}

func uuidOf(t *testing.T, d nvml.Device) string {
	t.Helper()
	u, ret := d.GetUUID()
	check(t, ret, "GetUUID")
	return u
}
