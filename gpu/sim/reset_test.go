package sim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

// migMode reads a GPU's current and pending MIG mode.
func migMode(t *testing.T, d nvml.Device) (int, int) {
	t.Helper()
	cur, pend, ret := d.GetMigMode()
	check(t, ret, "GetMigMode")
	return cur, pend
}

func TestRequireResetForModeChange(t *testing.T) {
	const on, off = nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_DISABLE
	tests := []struct {
		name           string
		startOn        bool // MIG enabled before the change (with the default, immediate, behaviour)
		requireReset   bool
		mode           int
		wantActivation nvml.Return
		wantBefore     [2]int // current, pending after SetMigMode
		wantAfter      [2]int // after ResetGPU
	}{
		{"enable, reset required", false, true, on, nvml.ERROR_RESET_REQUIRED, [2]int{off, on}, [2]int{on, on}},
		{"disable, reset required", true, true, off, nvml.ERROR_RESET_REQUIRED, [2]int{on, off}, [2]int{off, off}},
		{"enable, default", false, false, on, nvml.SUCCESS, [2]int{on, on}, [2]int{on, on}},
		{"same mode, reset required", true, true, on, nvml.SUCCESS, [2]int{on, on}, [2]int{on, on}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, lib := open(t, "dgxa100", t.TempDir(), sim.WithGPUCount(2))
			d := device(t, lib, 0)
			if tc.startOn {
				enableMig(t, d)
			}
			if err := n.RequireResetForModeChange(0, tc.requireReset); err != nil {
				t.Fatal(err)
			}
			activation, ret := d.SetMigMode(tc.mode)
			check(t, ret, "SetMigMode(%d)", tc.mode)
			expect(t, activation, tc.wantActivation, "SetMigMode(%d) activation", tc.mode)
			if cur, pend := migMode(t, d); [2]int{cur, pend} != tc.wantBefore {
				t.Fatalf("after SetMigMode: MIG mode %d/%d, want %v", cur, pend, tc.wantBefore)
			}
			if err := n.ResetGPU(0); err != nil {
				t.Fatal(err)
			}
			if cur, pend := migMode(t, d); [2]int{cur, pend} != tc.wantAfter {
				t.Fatalf("after ResetGPU: MIG mode %d/%d, want %v", cur, pend, tc.wantAfter)
			}
			if r, err := n.Resets(0); err != nil || r != 1 {
				t.Errorf("Resets(0) = %d, %v; want 1", r, err)
			}
			if r, err := n.Resets(1); err != nil || r != 0 {
				t.Errorf("Resets(1) = %d, %v; want 0 (GPU 1 was never reset)", r, err)
			}
		})
	}
}

func TestResetGPU(t *testing.T) {
	tests := []struct {
		name        string
		gpuProcs    bool // processes on the whole GPU (MIG off)
		migProcs    bool // processes on a MIG device of GPU 0
		wantErr     string
		wantInUse   bool
		wantGIsLeft int // on GPU 0 afterwards
	}{
		{name: "idle GPU with instances", wantGIsLeft: 0},
		{name: "process on a MIG device", migProcs: true, wantErr: "run on MIG device", wantInUse: true, wantGIsLeft: 2},
		{name: "process on the whole GPU", gpuProcs: true, wantErr: "processes [7] run on it", wantInUse: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(2))
			d0, d1 := device(t, lib, 0), device(t, lib, 1)
			enableMig(t, d1)
			createFullCI(t, createGI(t, d1, 9, 4)) // GPU 1 keeps its instance whatever GPU 0 does
			otherUUID := migUUID(t, d1, 0)
			if tc.gpuProcs {
				if err := n.SetProcesses(uuidOf(t, d0), 7); err != nil {
					t.Fatal(err)
				}
			} else {
				enableMig(t, d0)
				createFullCI(t, createGI(t, d0, 9, 0))
				createFullCI(t, createGI(t, d0, 14, 4))
				if tc.migProcs {
					if err := n.SetProcesses(migUUID(t, d0, 1), 9); err != nil {
						t.Fatal(err)
					}
				}
			}
			err := n.ResetGPU(0)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ResetGPU: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ResetGPU = %v, want an error containing %q", err, tc.wantErr)
			}
			if got := errors.Is(err, nvml.ERROR_IN_USE); got != tc.wantInUse {
				t.Errorf("ResetGPU error %v: errors.Is(ERROR_IN_USE) = %v, want %v", err, got, tc.wantInUse)
			}
			if got := countGIs(t, d0); got != tc.wantGIsLeft {
				t.Errorf("GPU 0 holds %d GPU instances after the reset, want %d", got, tc.wantGIsLeft)
			}
			if got := migUUID(t, d1, 0); got != otherUUID {
				t.Errorf("GPU 1's MIG device changed from %s to %s: a reset of GPU 0 touched GPU 1", otherUUID, got)
			}
			wantResets := 1
			if tc.wantErr != "" {
				wantResets = 0
			}
			if r, _ := n.Resets(0); r != wantResets {
				t.Errorf("Resets(0) = %d, want %d", r, wantResets)
			}
		})
	}
	n, _ := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(1))
	if err := n.ResetGPU(3); err == nil || !strings.Contains(err.Error(), "no GPU 3") {
		t.Errorf("ResetGPU(3) on a 1-GPU node = %v, want an error naming GPU 3", err)
	}
}

func migUUID(t *testing.T, d nvml.Device, index int) string {
	t.Helper()
	m, ret := d.GetMigDeviceHandleByIndex(index)
	check(t, ret, "GetMigDeviceHandleByIndex(%d)", index)
	return uuidOf(t, m)
}

func countGIs(t *testing.T, d nvml.Device) int {
	t.Helper()
	n := 0
	for i := 0; i < nvml.GPU_INSTANCE_PROFILE_COUNT; i++ {
		info, ret := d.GetGpuInstanceProfileInfo(i)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := d.GetGpuInstances(&info)
		if ret == nvml.SUCCESS {
			n += len(gis)
		}
	}
	return n
}
