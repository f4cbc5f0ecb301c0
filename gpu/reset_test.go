package gpu_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu"
)

func TestResetGPU(t *testing.T) {
	tests := []struct {
		name      string
		real      bool // drive the node through gpu.New, the path real NVML takes
		process   bool // a process runs on GPU 3
		wantErr   error
		wantInErr string
		wantMIG   bool // GPU 3's MIG mode afterwards
	}{
		{name: "simulated, idle", wantMIG: true},
		{name: "simulated, a process runs", process: true, wantErr: gpu.ErrInUse, wantInErr: "processes [77]"},
		{name: "real NVML has no reset", real: true, wantErr: gpu.ErrResetUnsupported, wantInErr: "nvidia-smi -r -i 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			sh, err := gpu.OpenSimulated("dgxh200", dir)
			if err != nil {
				t.Fatal(err)
			}
			defer sh.Close()
			s := sh.Simulated()
			if err := s.RequireResetForModeChange(3, true); err != nil {
				t.Fatal(err)
			}
			if err := sh.EnableMIG(ctx, 3); !errors.Is(err, gpu.ErrResetRequired) {
				t.Fatalf("EnableMIG on a GPU that needs a reset: %v, want ErrResetRequired", err)
			}
			node, _ := sh.Inventory(ctx)
			if g := node.GPUs[3]; g.MIGEnabled || !g.MIGPending {
				t.Fatalf("before the reset: MIG %v, pending %v; want off, pending on", g.MIGEnabled, g.MIGPending)
			}
			if tc.process {
				if err := s.SetProcesses(node.GPUs[3].UUID, 77); err != nil {
					t.Fatal(err)
				}
			}
			h := sh
			if tc.real {
				lib := s.NVML()
				if ret := lib.Init(); ret != nvml.SUCCESS {
					t.Fatal(ret)
				}
				h = gpu.New(lib) // no simulated node behind it: the real code path
				defer h.Close()
			}
			err = h.ResetGPU(ctx, 3)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("ResetGPU: %v", err)
			case tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantInErr)):
				t.Fatalf("ResetGPU = %v, want %v containing %q", err, tc.wantErr, tc.wantInErr)
			}
			node, _ = sh.Inventory(ctx)
			if g := node.GPUs[3]; g.MIGEnabled != tc.wantMIG || !g.MIGPending {
				t.Errorf("after ResetGPU: MIG %v (pending %v), want %v (pending on)", g.MIGEnabled, g.MIGPending, tc.wantMIG)
			}
			for i, g := range node.GPUs {
				if r, _ := s.Resets(i); i != 3 && r != 0 || g.MIGEnabled && i != 3 {
					t.Errorf("GPU %d was touched: %d resets, MIG %v", i, r, g.MIGEnabled)
				}
			}
		})
	}
}

// A mode change the driver leaves pending is ErrResetRequired, whatever held
// it back (go-nvml returns the activation status before the result).
func TestMIGModeChangePending(t *testing.T) {
	tests := []struct {
		name         string
		process      bool
		requireReset bool
		disable      bool
		wantPending  bool
	}{
		{name: "enable, process on the GPU", process: true, wantPending: true},
		{name: "enable, reset required", requireReset: true, wantPending: true},
		{name: "disable, reset required", requireReset: true, disable: true, wantPending: true},
		{name: "enable, immediate"},
		{name: "disable, immediate", disable: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h := openSim(t, "dgxa100")
			s := h.Simulated()
			if tc.disable {
				if err := h.EnableMIG(ctx, 0); err != nil {
					t.Fatal(err)
				}
			}
			node, _ := h.Inventory(ctx)
			if tc.process {
				if err := s.SetProcesses(node.GPUs[0].UUID, 5); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.RequireResetForModeChange(0, tc.requireReset); err != nil {
				t.Fatal(err)
			}
			change := h.EnableMIG
			if tc.disable {
				change = h.DisableMIG
			}
			err := change(ctx, 0)
			if got := errors.Is(err, gpu.ErrResetRequired); got != tc.wantPending || !tc.wantPending && err != nil {
				t.Fatalf("mode change: %v; want pending %v", err, tc.wantPending)
			}
			node, _ = h.Inventory(ctx)
			g := node.GPUs[0]
			if wantCurrent := tc.disable == tc.wantPending; g.MIGEnabled != wantCurrent || g.MIGPending != !tc.disable {
				t.Errorf("MIG %v (pending %v), want %v (pending %v)", g.MIGEnabled, g.MIGPending, wantCurrent, !tc.disable)
			}
		})
	}
}
