package mig_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
)

func TestApplyReset(t *testing.T) {
	want := map[string]int{"3g.71gb": 2}
	tests := []struct {
		name         string
		requireReset bool
		process      bool // a process runs on GPU 2 (MIG off)
		heldGPU      bool // a container holds GPU 2 (a lease of the whole GPU)
		opts         []mig.ApplyOption
		wantErr      []error
		wantInErr    string
		wantReset    bool
	}{
		{name: "reset required, --reset", requireReset: true, opts: []mig.ApplyOption{mig.WithReset()}, wantReset: true},
		{name: "reset required, no --reset", requireReset: true, wantErr: []error{gpu.ErrResetRequired}, wantInErr: "run gpumux mig apply again with --reset (it resets GPU 2 only"},
		{name: "process on the GPU", process: true, opts: []mig.ApplyOption{mig.WithReset()}, wantErr: []error{mig.ErrBusy}, wantInErr: "GPU 2 is not reset: in use (pids [31])"},
		{name: "held GPU", requireReset: true, heldGPU: true, opts: []mig.ApplyOption{mig.WithReset()}, wantErr: []error{mig.ErrBusy}, wantInErr: "in use (held by container c9)"},
		{name: "held GPU, force", requireReset: true, heldGPU: true, opts: []mig.ApplyOption{mig.WithReset(), mig.WithForce()}, wantReset: true},
		{name: "no reset needed", opts: []mig.ApplyOption{mig.WithReset()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h := openH200(t)
			s := h.Simulated()
			// GPU 1 carries instances that a reset of it would destroy.
			if _, err := mig.Apply(ctx, h, 1, map[string]int{"7g.141gb": 1}, nil); err != nil {
				t.Fatal(err)
			}
			other := gpuAt(t, h, 1).MIGInstances[0].UUID
			for _, i := range []int{1, 2} {
				if err := s.RequireResetForModeChange(i, tc.requireReset); err != nil {
					t.Fatal(err)
				}
			}
			g := gpuAt(t, h, 2)
			if tc.process {
				if err := s.SetProcesses(g.UUID, 31); err != nil {
					t.Fatal(err)
				}
			}
			opts := tc.opts
			if tc.heldGPU {
				opts = append(opts, mig.WithHeld(func(uuid string) string {
					if uuid == g.UUID {
						return "container c9"
					}
					return ""
				}))
			}
			res, err := mig.Apply(ctx, h, 2, want, nil, opts...)
			for _, w := range tc.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("Apply: %v; want %v", err, w)
				}
			}
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !strings.Contains(errString(err), tc.wantInErr) {
				t.Errorf("Apply: %v; want it to say %q", err, tc.wantInErr)
			}
			if res.Reset != tc.wantReset {
				t.Errorf("Result.Reset = %v, want %v", res.Reset, tc.wantReset)
			}
			resets := map[int]int{}
			for i := 0; i < 8; i++ {
				if r, _ := s.Resets(i); r > 0 {
					resets[i] = r
				}
			}
			wantResets := map[int]int{}
			if tc.wantReset {
				wantResets[2] = 1
			}
			if !maps.Equal(resets, wantResets) {
				t.Errorf("resets per GPU %v, want %v", resets, wantResets)
			}
			after := gpuAt(t, h, 2)
			if ok := tc.wantErr == nil; after.MIGEnabled != ok || ok && !maps.Equal(layoutOf(after), want) {
				t.Errorf("GPU 2 afterwards: MIG %v, layout %v", after.MIGEnabled, layoutOf(after))
			}
			if got := gpuAt(t, h, 1).MIGInstances; len(got) != 1 || got[0].UUID != other {
				t.Errorf("GPU 1 changed: %+v", got)
			}
		})
	}
}

func TestDisableMIGReset(t *testing.T) {
	tests := []struct {
		name      string
		opts      []mig.ApplyOption
		wantErr   error
		wantReset bool
	}{
		{name: "--reset", opts: []mig.ApplyOption{mig.WithReset()}, wantReset: true},
		{name: "no --reset", wantErr: gpu.ErrResetRequired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h := openH200(t)
			if err := h.EnableMIG(ctx, 4); err != nil {
				t.Fatal(err)
			}
			if err := h.Simulated().RequireResetForModeChange(4, true); err != nil {
				t.Fatal(err)
			}
			var steps []string
			res, err := mig.DisableMIG(ctx, h, 4, func(f string, a ...any) { steps = append(steps, f) }, tc.opts...)
			if !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Fatalf("DisableMIG: %v, want %v", err, tc.wantErr)
			}
			g := gpuAt(t, h, 4)
			if res.Reset != tc.wantReset || g.MIGEnabled == tc.wantReset || g.MIGPending {
				t.Errorf("reset %v, MIG %v (pending %v); want reset %v, MIG %v, pending off", res.Reset, g.MIGEnabled, g.MIGPending, tc.wantReset, !tc.wantReset)
			}
			if tc.wantReset && !strings.Contains(strings.Join(steps, "\n"), "resetting the GPU to turn MIG mode %s") {
				t.Errorf("steps do not report the reset: %q", steps)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// On real GPUs (a Host without a simulated node behind it) --reset cannot
// reset: Apply fails with the nvidia-smi command to run and changes nothing.
func TestApplyResetOnRealNVML(t *testing.T) {
	ctx := context.Background()
	sh := openH200(t)
	s := sh.Simulated()
	if err := s.RequireResetForModeChange(3, true); err != nil {
		t.Fatal(err)
	}
	lib := s.NVML()
	if ret := lib.Init(); ret != 0 {
		t.Fatal(ret)
	}
	h := gpu.New(lib)
	defer h.Close()
	_, err := mig.Apply(ctx, h, 3, map[string]int{"7g.141gb": 1}, nil, mig.WithReset())
	if !errors.Is(err, gpu.ErrResetUnsupported) || !strings.Contains(err.Error(), "nvidia-smi -r -i 3") {
		t.Fatalf("Apply --reset on real NVML: %v; want ErrResetUnsupported naming nvidia-smi -r -i 3", err)
	}
	if g := gpuAt(t, sh, 3); g.MIGEnabled || !g.MIGPending || len(g.MIGInstances) != 0 {
		t.Errorf("GPU 3 changed: MIG %v (pending %v), %d instances", g.MIGEnabled, g.MIGPending, len(g.MIGInstances))
	}
	if r, _ := s.Resets(3); r != 0 {
		t.Errorf("GPU 3 was reset %d times", r)
	}
}
