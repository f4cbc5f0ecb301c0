package exclusive_test

import (
	"context"
	"testing"

	"github.com/gpumux/gpumux/exclusive"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// node is two H200 (GPU 1 in MIG mode) and a T4.
var node = &gpu.Node{DriverVersion: "580.159.04", CUDAVersion: "13.0", GPUs: []gpu.GPU{
	{Index: 0, UUID: "GPU-h0", Minor: 0, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", PCIBusID: "0000:18:00.0"},
	{Index: 1, UUID: "GPU-h1", Minor: 1, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", MIGCapable: true, MIGEnabled: true},
	{Index: 2, UUID: "GPU-t4", Minor: 5, Model: "Tesla T4", MemoryMiB: 15360, SMCount: 40, ComputeCapability: "7.5"},
}}

func TestOffers(t *testing.T) {
	p := exclusive.New()
	if p.Mechanism() != share.Exclusive {
		t.Errorf("Mechanism %s", p.Mechanism())
	}
	as, err := (&share.Layout{}).Assign(node) // all exclusive; GPU 1 is mig
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(context.Background(), node, as)
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 2 {
		t.Fatalf("offers %+v, want GPU 0 and the T4 (GPU 1 is in MIG mode)", offers)
	}
	h0, t4 := offers[0], offers[1]
	wantShare := share.Share{ID: "GPU-h0", Mechanism: share.Exclusive, MemoryMiB: 143771, ComputePercent: 100, SMCount: 132,
		GPU: share.GPURef{Index: 0, UUID: "GPU-h0", Minor: 0, Model: "NVIDIA H200", PCIBusID: "0000:18:00.0"}}
	if h0.Share != wantShare || h0.Group != "H200" || h0.Profile != "" || h0.Spread != share.SpreadAny {
		t.Errorf("GPU 0: %+v", h0)
	}
	wantAttrs := share.Attributes{Mechanism: share.Exclusive, MemoryMiB: 143771, ComputePercent: 100, SMCount: 132,
		MemoryIsolation: share.Hard, FaultIsolation: true, CUDAComputeCapability: "9.0", DriverVersion: "580.159.04", CUDAVersion: "13.0"}
	if h0.Attrs != wantAttrs {
		t.Errorf("GPU 0 attributes\n got %+v\nwant %+v", h0.Attrs, wantAttrs)
	}
	if t4.Group != "Tesla-T4" || t4.Share.ID != "GPU-t4" || t4.Share.GPU.Minor != 5 || t4.Attrs.MemoryMiB != 15360 || t4.Attrs.CUDAComputeCapability != "7.5" {
		t.Errorf("T4: %+v", t4)
	}
	if exclusive.Properties != (share.Properties{MemoryIsolation: share.Hard, FaultIsolation: true}) {
		t.Errorf("Properties %+v", exclusive.Properties)
	}

	// GPUs of other mechanisms are not offered.
	as, err = (&share.Layout{GPUs: []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 2}}}).Assign(node)
	if err != nil {
		t.Fatal(err)
	}
	offers, err = p.Offers(context.Background(), node, as)
	if err != nil || len(offers) != 1 || offers[0].Share.ID != "GPU-t4" {
		t.Errorf("with GPU 0 timeslice: %+v, %v", offers, err)
	}
}

func TestEditsAndHealth(t *testing.T) {
	p := exclusive.New()
	s := share.Share{ID: "GPU-h0", Mechanism: share.Exclusive, GPU: share.GPURef{UUID: "GPU-h0"}}
	e := share.Edits{Env: map[string]string{"GPUMUX_SHARES": "GPU-h0"}}
	if err := p.Edits([]share.Share{s}, []share.Share{s}, &e); err != nil || len(e.Env) != 1 || len(e.Mounts) != 0 || len(e.DeviceNodes) != 0 {
		t.Errorf("Edits: %v, %+v", err, e)
	}
	if ok, why := p.Health(s); !ok {
		t.Errorf("Health: %s", why)
	}
}
