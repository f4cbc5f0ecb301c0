package sim_test

import (
	"runtime"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

// TestNoPerCallMemory checks that NVML calls leave nothing behind: a device
// plugin fingerprints through the simulator every minute for days, and the
// go-nvml mocks the simulator once embedded kept a record of every call. The
// live heap after 50000 inventory-like calls (after GC) must not have grown
// by more than a small fraction of a byte per call.
func TestNoPerCallMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("slow under -short")
	}
	_, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(2))
	const gpus, migsPerGPU = 2, 7
	for i := 0; i < gpus; i++ {
		d := device(t, lib, i)
		enableMig(t, d)
		p := giProfile(t, d, 19) // 1g.18gb
		for j := 0; j < migsPerGPU; j++ {
			gi, ret := d.CreateGpuInstance(p)
			check(t, ret, "CreateGpuInstance")
			createFullCI(t, gi)
		}
	}

	// inventory walks the node like a fingerprint (go-nvlib and the
	// plugin), including calls with arguments, calls forwarded from
	// nvml.Interface to a handle and unimplemented calls, and returns how
	// many NVML calls it made.
	inventory := func() int {
		calls := 0
		call := func(ret nvml.Return, want nvml.Return, what string) {
			t.Helper()
			calls++
			if ret != want {
				t.Fatalf("%s: %v, want %v", what, ret, want)
			}
		}
		count, ret := lib.DeviceGetCount()
		call(ret, nvml.SUCCESS, "DeviceGetCount")
		for i := 0; i < count; i++ {
			d, ret := lib.DeviceGetHandleByIndex(i)
			call(ret, nvml.SUCCESS, "DeviceGetHandleByIndex")
			_, ret = d.GetUUID()
			call(ret, nvml.SUCCESS, "GetUUID")
			_, ret = lib.DeviceGetName(d)
			call(ret, nvml.SUCCESS, "DeviceGetName")
			_, ret = lib.DeviceGetPciInfo(d)
			call(ret, nvml.SUCCESS, "DeviceGetPciInfo")
			_, _, ret = d.GetMigMode()
			call(ret, nvml.SUCCESS, "GetMigMode")
			_, ret = d.GetMemoryInfo()
			call(ret, nvml.SUCCESS, "GetMemoryInfo")
			_, ret = d.GetTemperature(nvml.TEMPERATURE_GPU)
			call(ret, nvml.SUCCESS, "GetTemperature")
			_, ret = d.GetFanSpeed()
			call(ret, nvml.ERROR_NOT_SUPPORTED, "GetFanSpeed")
			_, ret = d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			call(ret, nvml.SUCCESS, "GetGpuInstanceProfileInfo")
			for j := 0; j < migsPerGPU; j++ {
				m, ret := d.GetMigDeviceHandleByIndex(j)
				call(ret, nvml.SUCCESS, "GetMigDeviceHandleByIndex")
				_, ret = m.GetUUID()
				call(ret, nvml.SUCCESS, "MIG GetUUID")
				_, ret = m.GetAttributes()
				call(ret, nvml.SUCCESS, "MIG GetAttributes")
				giID, ret := m.GetGpuInstanceId()
				call(ret, nvml.SUCCESS, "GetGpuInstanceId")
				ciID, ret := lib.DeviceGetComputeInstanceId(m)
				call(ret, nvml.SUCCESS, "DeviceGetComputeInstanceId")
				gi, ret := d.GetGpuInstanceById(giID)
				call(ret, nvml.SUCCESS, "GetGpuInstanceById")
				_, ret = gi.GetInfo()
				call(ret, nvml.SUCCESS, "GpuInstance GetInfo")
				ci, ret := gi.GetComputeInstanceById(ciID)
				call(ret, nvml.SUCCESS, "GetComputeInstanceById")
				_, ret = lib.ComputeInstanceGetInfo(ci)
				call(ret, nvml.SUCCESS, "ComputeInstanceGetInfo")
			}
		}
		calls++
		if err := lib.Extensions().LookupSymbol("nvmlDeviceGetMigMode"); err != nil {
			t.Fatal(err)
		}
		return calls
	}
	run := func(n int) int {
		calls := 0
		for calls < n {
			calls += inventory()
		}
		return calls
	}
	liveHeap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	const n = 50000
	run(n) // warm up: handle caches, sync.Pools, ...
	before := liveHeap()
	calls := run(n)
	after := liveHeap()
	growth := int64(after) - int64(before)
	t.Logf("live heap %d -> %d bytes after %d NVML calls: %+d bytes (%.3f bytes/call)",
		before, after, calls, growth, float64(growth)/float64(calls))
	// One recorded call is at least 8 bytes for most calls above; allow
	// well under one byte per call for GC and runtime noise.
	if limit := int64(calls) / 4; growth > limit {
		t.Errorf("live heap grew by %d bytes over %d calls (limit %d): per-call state accumulates", growth, calls, limit)
	}
}
