package share_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

type testPaths struct{}

func (testPaths) DevicePath(name string) string { return "/sim/dev/" + name }

func TestDeviceEdits(t *testing.T) {
	whole := share.Share{ID: "GPU-a", Mechanism: share.Exclusive, GPU: share.GPURef{UUID: "GPU-a", Minor: 3}}
	rep := func(n int) share.Share {
		return share.Share{ID: share.SubID("GPU-b", share.TimeSlice, n), Mechanism: share.TimeSlice, GPU: share.GPURef{UUID: "GPU-b", Minor: 2}}
	}
	inst := &gpu.MIGInstance{UUID: "MIG-c", GICapMinor: 1000, CICapMinor: 1001}
	onMIG := share.Share{ID: "MIG-c/mps/1", Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-c", Minor: 7}, MIG: inst}
	remote := func(n int) share.Share {
		return share.Share{ID: share.SubID("GPU-r", share.Remote, n), Mechanism: share.Remote, GPU: share.GPURef{UUID: "GPU-r", Minor: -1}, Remote: &share.RemoteGPU{Addr: "10.0.0.5:7070", UUID: "GPU-r"}}
	}
	ctl := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
	for _, tc := range []struct {
		name    string
		shares  []share.Share
		env     map[string]string
		devices []string // container paths, in order
	}{
		{"whole GPU", []share.Share{whole},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a", "GPUMUX_SHARES": "GPU-a"},
			append(slices.Clone(ctl), "/dev/nvidia3")},
		{"two replicas of one GPU: its devices once", []share.Share{rep(0), rep(1)},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-b", "GPUMUX_SHARES": "GPU-b/timeslice/0,GPU-b/timeslice/1"},
			append(slices.Clone(ctl), "/dev/nvidia2")},
		{"two GPUs", []share.Share{whole, rep(1)},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b", "GPUMUX_SHARES": "GPU-a,GPU-b/timeslice/1"},
			append(slices.Clone(ctl), "/dev/nvidia3", "/dev/nvidia2")},
		{"a share on a MIG instance", []share.Share{onMIG},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "MIG-c", "CUDA_VISIBLE_DEVICES": "MIG-c", "GPUMUX_SHARES": "MIG-c/mps/1"},
			append(slices.Clone(ctl), "/dev/nvidia7", "/dev/nvidia-caps/nvidia-cap1000", "/dev/nvidia-caps/nvidia-cap1001")},
		{"remote shares: their IDs only", []share.Share{remote(0), remote(2)},
			map[string]string{"GPUMUX_SHARES": "GPU-r/remote/0,GPU-r/remote/2"},
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := share.DeviceEdits(tc.shares, testPaths{})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(e.Env) != fmt.Sprint(tc.env) {
				t.Errorf("env\n got %v\nwant %v", e.Env, tc.env)
			}
			var got []string
			for _, d := range e.DeviceNodes {
				got = append(got, d.ContainerPath)
				if d.HostPath != "/sim/dev/"+strings.TrimPrefix(d.ContainerPath, "/dev/") || d.Permissions != "rw" {
					t.Errorf("device %s: host path %s, permissions %q", d.ContainerPath, d.HostPath, d.Permissions)
				}
			}
			if !slices.Equal(got, tc.devices) {
				t.Errorf("devices\n got %v\nwant %v", got, tc.devices)
			}
			if len(e.Mounts) != 0 {
				t.Errorf("mounts %+v: the mechanisms add those", e.Mounts)
			}
		})
	}
	if _, err := share.DeviceEdits(nil, testPaths{}); err == nil {
		t.Error("no shares: no error")
	}
}

func TestDeviceEditsRefuseMIGWithoutCapMinors(t *testing.T) {
	s := share.Share{ID: "MIG-x", Mechanism: share.MIG, MIG: &gpu.MIGInstance{UUID: "MIG-x", GICapMinor: -1, CICapMinor: -1}}
	if _, err := share.DeviceEdits([]share.Share{s}, testPaths{}); err == nil || !strings.Contains(err.Error(), "mig-minors") {
		t.Fatalf("want an error about mig-minors, got %v", err)
	}
}

func TestAloneAndOneDevice(t *testing.T) {
	a0 := share.Share{ID: "GPU-a/mps/0", Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-a"}}
	a1 := share.Share{ID: "GPU-a/mps/1", Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-a"}}
	b0 := share.Share{ID: "GPU-b/mps/0", Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-b"}}
	m0 := share.Share{ID: "MIG-m/mps/0", Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-a"}, MIG: &gpu.MIGInstance{UUID: "MIG-m"}}
	whole := share.Share{ID: "GPU-c", Mechanism: share.Exclusive, GPU: share.GPURef{UUID: "GPU-c"}}

	if err := share.Alone(share.MPS, []share.Share{a0, b0}, "why"); err != nil {
		t.Errorf("Alone, all mps: %v", err)
	}
	err := share.Alone(share.MPS, []share.Share{a0, whole}, "one server")
	if err == nil || !strings.Contains(err.Error(), "mps shares cannot be combined with exclusive shares in one task (one server)") {
		t.Errorf("Alone, mixed: %v", err)
	}

	if dev, err := share.OneDevice([]share.Share{a0, a1}, "device", "why"); err != nil || dev != "GPU-a" {
		t.Errorf("OneDevice(one GPU) = %q, %v", dev, err)
	}
	if dev, err := share.OneDevice([]share.Share{m0}, "device", "why"); err != nil || dev != "MIG-m" {
		t.Errorf("OneDevice(a MIG instance) = %q, %v; want the instance", dev, err)
	}
	for _, ss := range [][]share.Share{{a0, b0}, {a0, m0}} { // a MIG instance is not its GPU
		if _, err := share.OneDevice(ss, "device", "one server"); err == nil || !strings.Contains(err.Error(), "mps shares must come from one device") || !strings.Contains(err.Error(), "one server") {
			t.Errorf("OneDevice(%v): %v", share.SortedIDs(ss), err)
		}
	}

	if got := share.SortedIDs([]share.Share{b0, whole, a1, a0}); !slices.Equal(got, []string{"GPU-a/mps/0", "GPU-a/mps/1", "GPU-b/mps/0", "GPU-c"}) {
		t.Errorf("SortedIDs = %v", got)
	}
}
