package gpu_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/mig"
)

func openSim(t *testing.T, name string) *gpu.Host {
	t.Helper()
	h, err := gpu.OpenSimulated(name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestSimulatedNodes(t *testing.T) {
	tests := []struct {
		node     string
		model    string
		sms      int
		cc       string
		profiles []string
	}{
		{"dgxa100", "NVIDIA A100-SXM4-40GB", 108, "8.0", []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
		{"dgxh100", "NVIDIA H100 80GB HBM3", 132, "9.0", []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
		{"dgxh200", "NVIDIA H200", 132, "9.0", []string{"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			node, err := openSim(t, tc.node).Inventory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(node.GPUs) != 8 || node.DriverVersion == "" || node.CUDAVersion == "" {
				t.Fatalf("%d GPUs, driver %q, CUDA %q", len(node.GPUs), node.DriverVersion, node.CUDAVersion)
			}
			uuids := map[string]bool{}
			for i, g := range node.GPUs {
				if g.Index != i || g.Minor != i || g.Model != tc.model || g.SMCount != tc.sms || g.ComputeCapability != tc.cc || g.MIGEnabled {
					t.Errorf("GPU %d: %+v", i, g)
				}
				uuids[g.UUID] = true
				for _, p := range tc.profiles {
					if _, ok := g.Profile(p); !ok {
						t.Errorf("GPU %d lacks profile %s (has %v)", i, p, g.ProfileNames())
					}
				}
			}
			if len(uuids) != 8 {
				t.Errorf("UUIDs not unique: %v", uuids)
			}
		})
	}
}

func TestSimulatedH200MatchesRealReadings(t *testing.T) {
	node, err := openSim(t, "dgxh200").Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if node.DriverVersion != "580.159.04" || node.CUDAVersion != "13.0" {
		t.Errorf("driver %s, CUDA %s; the real H200 has 580.159.04, 13.0", node.DriverVersion, node.CUDAVersion)
	}
	for _, g := range node.GPUs {
		checkH200(t, g)
		// Settable on a real card, so checked on the simulation only.
		if g.Hardware.PersistenceMode != gpu.StateEnabled || g.Hardware.DisplayMode != gpu.StateEnabled {
			t.Errorf("GPU %d: persistence mode %v, display mode %v; the H200 reads enabled, enabled", g.Index, g.Hardware.PersistenceMode, g.Hardware.DisplayMode)
		}
	}
}

func TestHardwareCommon(t *testing.T) {
	a := gpu.Hardware{PowerLimitW: 700, BAR1MiB: 262144, MaxCoresClockMHz: 1980, MaxMemoryClockMHz: 3201, PCIeGeneration: 5, PCIeWidth: 16,
		DisplayMode: gpu.StateEnabled, PersistenceMode: gpu.StateEnabled}
	b := a
	b.PowerLimitW, b.PersistenceMode = 500, gpu.StateDisabled // nvidia-smi -pl 500 -pm 0 on one GPU
	want := a
	want.PowerLimitW, want.PersistenceMode = 0, gpu.StateUnknown
	if got := a.Common(b); got != want {
		t.Errorf("Common = %+v, want %+v", got, want)
	}
	if got := a.Common(a); got != a {
		t.Errorf("Common with itself = %+v, want %+v", got, a)
	}
}

func TestMIGInstancesInInventory(t *testing.T) {
	ctx := context.Background()
	h := openSim(t, "dgxh200")
	if _, err := mig.Apply(ctx, h, 5, map[string]int{"4g.71gb": 1, "3g.71gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	node, err := h.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := node.GPUs[5]
	if !g.MIGEnabled || len(g.MIGInstances) != 2 {
		t.Fatalf("GPU 5: MIG %v, instances %+v", g.MIGEnabled, g.MIGInstances)
	}
	for _, inst := range g.MIGInstances {
		want := map[string]struct {
			gi, sms int
			at      gpu.Placement
		}{"4g.71gb": {1, 64, gpu.Placement{Start: 0, Size: 4}}, "3g.71gb": {2, 60, gpu.Placement{Start: 4, Size: 4}}}[inst.Profile]
		if inst.GIID != want.gi || inst.CIID != 0 || inst.SMCount != want.sms || inst.Placement != want.at || inst.MemoryMiB != 71424 {
			t.Errorf("instance %+v, want GI %d CI 0 with %d SMs at %s", inst, want.gi, want.sms, want.at)
		}
		if !strings.HasPrefix(inst.UUID, "MIG-") {
			t.Errorf("MIG UUID %q", inst.UUID)
		}
		// Caps minors are keyed by the parent's device minor (5 here).
		if base := 3 + 5*135 + inst.GIID*9; inst.GICapMinor != base || inst.CICapMinor != base+1 {
			t.Errorf("%s: cap minors %d/%d, want %d/%d", inst.Profile, inst.GICapMinor, inst.CICapMinor, base, base+1)
		}
		for _, m := range []int{inst.GICapMinor, inst.CICapMinor} {
			if _, err := os.Stat(h.DevicePath("nvidia-caps/nvidia-cap" + itoa(m))); err != nil {
				t.Errorf("no device node for cap minor %d: %v", m, err)
			}
		}
	}
}

func TestDestroyInUseIsRefused(t *testing.T) {
	ctx := context.Background()
	h := openSim(t, "dgxh200")
	if _, err := mig.Apply(ctx, h, 0, map[string]int{"7g.141gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	node, _ := h.Inventory(ctx)
	inst := node.GPUs[0].MIGInstances[0]
	if err := h.Simulated().SetProcesses(inst.UUID, 7); err != nil {
		t.Fatal(err)
	}
	pids, err := h.Processes(ctx, inst.UUID)
	if err != nil || len(pids) != 1 || pids[0] != 7 {
		t.Fatalf("Processes = %v, %v", pids, err)
	}
	if err := h.DestroyMIGInstance(ctx, 0, inst.GIID); err == nil {
		t.Fatal("destroying an instance with processes succeeded")
	}
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	h := openSim(t, "dgxh200")
	if err := h.Simulated().SetTelemetry(2, sim.Telemetry{GPUUtil: 55, TemperatureC: 61, PowerMilliwatts: 312000}); err != nil {
		t.Fatal(err)
	}
	usage, err := h.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node, _ := h.Inventory(ctx)
	u := usage[node.GPUs[2].UUID]
	if u.MemoryTotalMiB != 143771 || u.GPUUtilPercent == nil || *u.GPUUtilPercent != 55 ||
		u.TemperatureC == nil || *u.TemperatureC != 61 || u.PowerWatts == nil || *u.PowerWatts != 312 {
		t.Errorf("usage of GPU 2: %+v", u)
	}
	if u.PowerLimitWatts == nil || *u.PowerLimitWatts != 700 || u.BAR1TotalMiB != 262144 || u.BAR1UsedMiB != 1 ||
		u.MemoryUtilPercent == nil || u.EncoderUtilPercent == nil || u.DecoderUtilPercent == nil {
		t.Errorf("usage of GPU 2: power limit %v W, BAR1 %d/%d MiB, memory/encoder/decoder utilization %v/%v/%v; want 700 W, 1/262144 MiB, all reported",
			deref(u.PowerLimitWatts), u.BAR1UsedMiB, u.BAR1TotalMiB, deref(u.MemoryUtilPercent), deref(u.EncoderUtilPercent), deref(u.DecoderUtilPercent))
	}
}

func TestWatchXIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := openSim(t, "dgxh200")
	events, err := h.WatchXIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node, _ := h.Inventory(ctx)
	s := h.Simulated()
	// 13 is an application error and must be skipped; 79 (fallen off the bus) must arrive.
	if err := s.InjectXid(4, 13); err != nil {
		t.Fatal(err)
	}
	if err := s.InjectXid(4, 79); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.GPUUUID != node.GPUs[4].UUID || ev.XID != 79 || ev.GIID != -1 {
			t.Errorf("event %+v, want XID 79 on GPU 4, whole GPU", ev)
		}
	case <-ctx.Done():
		t.Fatal("no XID event")
	}
	cancel()
	for range events { // the channel closes after cancellation
	}
}

func TestOpenNVMLWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver; the GPU-tagged tests cover it")
	}
	_, err := gpu.OpenNVML()
	if !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), "dgxh200") {
		t.Fatalf("want ErrNoDriver with a hint about simulated nodes, got %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestDisableMIG(t *testing.T) {
	ctx := context.Background()
	h := openSim(t, "dgxh200")
	if _, err := mig.Apply(ctx, h, 1, map[string]int{"1g.18gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	err := h.DisableMIG(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "remove them first") {
		t.Fatalf("DisableMIG with an instance: %v, want a refusal", err)
	}
	node, _ := h.Inventory(ctx)
	g := node.GPUs[1]
	if !g.MIGEnabled || len(g.MIGInstances) != 1 {
		t.Fatalf("refused DisableMIG changed GPU 1: MIG %v, instances %+v", g.MIGEnabled, g.MIGInstances)
	}
	if err := h.DestroyMIGInstance(ctx, 1, g.MIGInstances[0].GIID); err != nil {
		t.Fatal(err)
	}
	if err := h.DisableMIG(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Disabling a GPU already out of MIG mode is a no-op.
	if err := h.DisableMIG(ctx, 2); err != nil {
		t.Fatal(err)
	}
	node, _ = h.Inventory(ctx)
	if node.GPUs[1].MIGEnabled || node.GPUs[1].MIGPending || node.GPUs[2].MIGEnabled {
		t.Fatalf("after DisableMIG: GPU 1 MIG %v (pending %v), GPU 2 MIG %v", node.GPUs[1].MIGEnabled, node.GPUs[1].MIGPending, node.GPUs[2].MIGEnabled)
	}
}

// countingLib counts the maximum-clock and core-count reads of the
// devices it hands out, and their power-limit reads.
type countingLib struct {
	nvml.Interface
	reads *int
	power *int
}

func (l countingLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	return countingDevice{d, l.reads, l.power}, ret
}

type countingDevice struct {
	nvml.Device
	reads *int
	power *int
}

func (d countingDevice) GetPowerManagementLimit() (uint32, nvml.Return) {
	*d.power++
	return d.Device.GetPowerManagementLimit()
}

func (d countingDevice) GetMaxClockInfo(c nvml.ClockType) (uint32, nvml.Return) {
	*d.reads++
	return d.Device.GetMaxClockInfo(c)
}

func (d countingDevice) GetNumGpuCores() (int, nvml.Return) {
	*d.reads++
	return d.Device.GetNumGpuCores()
}

func (d countingDevice) GetName() (string, nvml.Return) {
	*d.reads++
	return d.Device.GetName()
}

func (d countingDevice) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	*d.reads++
	return d.Device.GetPciInfo()
}

func (d countingDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	*d.reads++
	return d.Device.GetMemoryInfo()
}

// TestFixedHardwareReadOnce: what the hardware fixes (the maximum clocks
// and the core count among it, slow to read on an H200; the name, PCI
// address and memory size) is read once per GPU, not at every inventory,
// and every inventory reports it.
func TestFixedHardwareReadOnce(t *testing.T) {
	s, err := sim.Open("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lib := s.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	reads, power := 0, 0
	h := gpu.New(countingLib{lib, &reads, &power})
	defer h.Close()
	gpus := threeInventories(t, h, func(g gpu.GPU) {
		if g.Hardware.MaxCoresClockMHz == 0 || g.Hardware.MaxMemoryClockMHz == 0 || g.Hardware.PCIeWidth == 0 || g.SMCount != 132 {
			t.Fatalf("GPU %d: hardware %+v, %d SMs; want its maximum clocks, PCIe link and 132 SMs", g.Index, g.Hardware, g.SMCount)
		}
		if g.Model == "" || g.PCIBusID == "" || g.MemoryMiB == 0 || g.ComputeCapability != "9.0" {
			t.Fatalf("GPU %d: %q at %q, %d MiB, compute capability %q", g.Index, g.Model, g.PCIBusID, g.MemoryMiB, g.ComputeCapability)
		}
	})
	if want := 6 * gpus; reads != want {
		t.Errorf("%d maximum-clock, core-count, name, PCI and memory reads over 3 inventories of %d GPUs; want %d (once per GPU and value)", reads, gpus, want)
	}
}

// TestSettingsReadAtMostEvery: the settings an inventory reports (the
// power limit among them, slow to read on an H200) are read again only
// once older than the Host's settings age; with an age of 0, at every
// inventory.
func TestSettingsReadAtMostEvery(t *testing.T) {
	s, err := sim.Open("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lib := s.NVML()
	for _, tc := range []struct {
		age    time.Duration
		perGPU int
	}{{time.Hour, 1}, {0, 3}} {
		if ret := lib.Init(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		reads, power := 0, 0
		h := gpu.New(countingLib{lib, &reads, &power}, gpu.WithSettingsMaxAge(tc.age))
		gpus := threeInventories(t, h, func(g gpu.GPU) {
			if g.Hardware.PowerLimitW == 0 {
				t.Fatalf("GPU %d: no power limit in %+v", g.Index, g.Hardware)
			}
		})
		h.Close()
		if want := tc.perGPU * gpus; power != want {
			t.Errorf("age %s: %d power-limit reads over 3 inventories of %d GPUs; want %d", tc.age, power, gpus, want)
		}
	}
}

// threeInventories takes three inventories of h, gives each GPU of each to
// check, and returns how many GPUs there are.
func threeInventories(t *testing.T, h *gpu.Host, check func(gpu.GPU)) int {
	t.Helper()
	var gpus int
	for range 3 {
		inv, err := h.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		gpus = len(inv.GPUs)
		for _, g := range inv.GPUs {
			check(g)
		}
	}
	return gpus
}
