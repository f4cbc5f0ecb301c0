package timeslice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
	"github.com/gpumux/gpumux/timeslice"
)

// node is two H200 and a T4.
var node = &gpu.Node{DriverVersion: "580.159.04", CUDAVersion: "13.0", GPUs: []gpu.GPU{
	{Index: 0, UUID: "GPU-h0", Minor: 0, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0"},
	{Index: 1, UUID: "GPU-h1", Minor: 1, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0"},
	{Index: 2, UUID: "GPU-t4", Minor: 5, Model: "Tesla T4", MemoryMiB: 15360, SMCount: 40, ComputeCapability: "7.5"},
}}

func TestOffers(t *testing.T) {
	p := timeslice.New()
	if p.Mechanism() != share.TimeSlice {
		t.Errorf("Mechanism %s", p.Mechanism())
	}
	as, err := (&share.Layout{GPUs: []share.GPURule{
		{Match: "*H200*", Mechanism: share.TimeSlice, Replicas: 4},
		{Match: "2", Mechanism: share.TimeSlice, Replicas: 3},
	}}).Assign(node)
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(context.Background(), node, as)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.NewCatalog(offers)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Groups) != 2 || c.Len() != 4+4+3 {
		t.Fatalf("groups %+v", c.Groups)
	}
	h, t4 := c.Groups[0], c.Groups[1]
	wantAttrs := share.Attributes{Mechanism: share.TimeSlice, MemoryMiB: 143771 / 4, ComputePercent: 25, SMCount: 132,
		MemoryIsolation: share.None, FaultIsolation: false, CUDAComputeCapability: "9.0", DriverVersion: "580.159.04", CUDAVersion: "13.0"}
	if h.Name != "H200-timeslice-4x" || h.Profile != "4x" || h.Spread != share.SpreadDistinctGPUs || h.Attrs != wantAttrs {
		t.Errorf("group %s, profile %q, spread %d, attributes %+v", h.Name, h.Profile, h.Spread, h.Attrs)
	}
	if t4.Name != "Tesla-T4-timeslice-3x" || t4.Attrs.MemoryMiB != 5120 || t4.Attrs.ComputePercent != 33 || t4.Attrs.ParentUUID != "GPU-t4" {
		t.Errorf("group %s: %+v", t4.Name, t4.Attrs)
	}
	for i, s := range h.Shares {
		g := node.GPUs[i/4]
		want := share.Share{ID: share.SubID(g.UUID, share.TimeSlice, i%4), Mechanism: share.TimeSlice, GPU: share.RefOf(&g),
			Replica: i % 4, Replicas: 4, MemoryMiB: 143771 / 4, ComputePercent: 25, SMCount: 132}
		if s != want {
			t.Errorf("share %d\n got %+v\nwant %+v", i, s, want)
		}
	}
	if timeslice.Properties != (share.Properties{MemoryIsolation: share.None, FaultIsolation: false}) {
		t.Errorf("Properties %+v", timeslice.Properties)
	}
}

func TestOffersRefuseNoReplicas(t *testing.T) {
	// Layout validation refuses fewer than 2 replicas; the provider still
	// refuses an assignment without any rather than divide by zero.
	as := []share.Assignment{{GPUIndex: 1, Rule: 0, Mechanism: share.TimeSlice}}
	if _, err := timeslice.New().Offers(context.Background(), node, as); err == nil || !strings.Contains(err.Error(), "GPU 1: timeslice with 0 replicas") {
		t.Errorf("0 replicas: %v", err)
	}
}

func TestEditsAndHealth(t *testing.T) {
	p := timeslice.New()
	s := share.Share{ID: "GPU-h0/timeslice/0", Mechanism: share.TimeSlice, GPU: share.GPURef{UUID: "GPU-h0"}}
	e := share.Edits{Env: map[string]string{"GPUMUX_SHARES": s.ID}}
	if err := p.Edits([]share.Share{s}, []share.Share{s}, &e); err != nil || len(e.Env) != 1 || len(e.Mounts) != 0 || len(e.DeviceNodes) != 0 {
		t.Errorf("Edits: %v, %+v", err, e)
	}
	if ok, why := p.Health(s); !ok {
		t.Errorf("Health: %s", why)
	}
}
