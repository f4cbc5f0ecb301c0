//go:build gpu

package gpu_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu"
)

// TestRealInventory reads the machine's GPUs through the real NVML (read-only)
// and checks every H200 against the readings the simulated node copies.
// Run on a GPU machine: go test -tags gpu -run Real ./gpu/
func TestRealInventory(t *testing.T) {
	h, err := gpu.OpenNVML()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	node, err := h.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.MarshalIndent(node, "", "  ")
	t.Logf("inventory:\n%s", out)
	if len(node.GPUs) == 0 {
		t.Fatal("no GPUs")
	}
	for _, g := range node.GPUs {
		if g.Model == "NVIDIA H200" {
			checkH200(t, g)
		}
		if _, err := os.Stat(h.DevicePath("nvidia" + itoa(g.Minor))); err != nil {
			t.Errorf("GPU %d: device node for minor %d: %v", g.Index, g.Minor, err)
		}
	}
	usage, err := h.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	u, ok := usage[node.GPUs[0].UUID]
	if !ok || u.MemoryTotalMiB != node.GPUs[0].MemoryMiB || u.TemperatureC == nil || u.PowerWatts == nil {
		t.Errorf("usage of GPU 0: %+v", u)
	}
	t.Logf("usage of GPU 0: memory %d/%d MiB, temperature %v C, power %v/%v W, BAR1 %d/%d MiB, utilization GPU %v%% memory %v%% encoder %v%% decoder %v%%",
		u.MemoryUsedMiB, u.MemoryTotalMiB, deref(u.TemperatureC), deref(u.PowerWatts), deref(u.PowerLimitWatts), u.BAR1UsedMiB, u.BAR1TotalMiB,
		deref(u.GPUUtilPercent), deref(u.MemoryUtilPercent), deref(u.EncoderUtilPercent), deref(u.DecoderUtilPercent))
	if u.BAR1TotalMiB == 0 || u.PowerLimitWatts == nil {
		t.Errorf("usage of GPU 0 lacks BAR1 or the power limit: %+v", u)
	}

	// The XID watch registers on the real driver and stops when cancelled.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	events, err := h.WatchXIDs(wctx)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		t.Logf("XID seen during the test: %+v", ev)
	}
}

// TestRealSMCountSource records where a whole GPU's SM count comes from on the
// real driver: GetAttributes is for MIG handles only; the core count works.
func TestRealSMCountSource(t *testing.T) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	defer lib.Shutdown()
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	_, attrRet := dev.GetAttributes()
	cores, coresRet := dev.GetNumGpuCores()
	t.Logf("GPU 0: GetAttributes -> %v; GetNumGpuCores -> %d, %v", attrRet, cores, coresRet)
	if coresRet != nvml.SUCCESS || cores == 0 {
		t.Fatalf("GetNumGpuCores = %d, %v", cores, coresRet)
	}
}
