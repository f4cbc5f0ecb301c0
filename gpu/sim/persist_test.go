package sim_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

func TestOpen(t *testing.T) {
	if got := strings.Join(sim.Names(), ","); got != "dgxa100,dgxh100,dgxh200" {
		t.Errorf("Names() = %s", got)
	}
	_, err := sim.Open("dgx1", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `"dgx1"`) || !strings.Contains(err.Error(), "dgxa100, dgxh100, dgxh200") {
		t.Errorf("Open(dgx1) error %v, want one naming the value and the valid names", err)
	}
	dir := t.TempDir()
	n, err := sim.Open("dgxa100", dir, sim.WithGPUCount(2))
	if err != nil {
		t.Fatal(err)
	}
	if n.Dir() != filepath.Join(dir, "sim", "dgxa100") || n.DevRoot() != filepath.Join(n.Dir(), "dev") ||
		n.MigMinorsPath() != filepath.Join(n.Dir(), "proc", "driver", "nvidia-caps", "mig-minors") {
		t.Errorf("paths %s %s %s", n.Dir(), n.DevRoot(), n.MigMinorsPath())
	}
	if _, err := os.Stat(filepath.Join(n.Dir(), "state.json")); err != nil {
		t.Error(err)
	}
	if _, err := sim.Open("dgxa100", dir, sim.WithGPUCount(4)); err == nil {
		t.Error("reopening with another GPU count succeeded")
	}
	if _, err := sim.Open("dgxa100", dir); err != nil {
		t.Errorf("reopening without options: %v", err)
	}
	if _, err := sim.Open("dgxa100", t.TempDir(), sim.WithGPUCount(9)); err == nil {
		t.Error("WithGPUCount(9) succeeded")
	}
}

func TestInitRequired(t *testing.T) {
	n, err := sim.Open("dgxh100", t.TempDir(), sim.WithGPUCount(1))
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	_, ret := lib.DeviceGetCount()
	expect(t, ret, nvml.ERROR_UNINITIALIZED, "DeviceGetCount before Init")
	check(t, lib.Init(), "Init")
	check(t, lib.Init(), "Init again")
	d := device(t, lib, 0)
	check(t, lib.Shutdown(), "Shutdown")
	_, ret = d.GetName()
	check(t, ret, "GetName with one Init left")
	check(t, lib.Shutdown(), "Shutdown")
	_, ret = d.GetUUID()
	expect(t, ret, nvml.ERROR_UNINITIALIZED, "GetUUID after Shutdown")
	expect(t, lib.Shutdown(), nvml.ERROR_UNINITIALIZED, "extra Shutdown")
}

func TestDeviceHandles(t *testing.T) {
	n, lib := open(t, "dgxh100", t.TempDir())
	count, ret := lib.DeviceGetCount()
	check(t, ret, "DeviceGetCount")
	if count != 8 {
		t.Fatalf("%d GPUs", count)
	}
	_, ret = lib.DeviceGetHandleByIndex(8)
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "DeviceGetHandleByIndex(8)")
	d3 := device(t, lib, 3)
	pci, _ := d3.GetPciInfo()
	if s := cString(pci.BusId[:]); s != "00000000:5D:00.0" {
		t.Errorf("BusId %q", s)
	}
	if s := cString(pci.BusIdLegacy[:]); s != "0000:5D:00.0" {
		t.Errorf("BusIdLegacy %q", s)
	}
	if pci.Bus != 0x5D || pci.PciDeviceId != 0x233010DE {
		t.Errorf("PCI info %+v", pci)
	}
	for _, id := range []string{"00000000:5D:00.0", "0000:5d:00.0", "5D:00.0"} {
		d, ret := lib.DeviceGetHandleByPciBusId(id)
		check(t, ret, "DeviceGetHandleByPciBusId(%s)", id)
		if d != d3 {
			t.Errorf("DeviceGetHandleByPciBusId(%s) is not GPU 3", id)
		}
	}
	_, ret = lib.DeviceGetHandleByPciBusId("00000000:5E:00.0")
	expect(t, ret, nvml.ERROR_NOT_FOUND, "unknown bus id")
	_, ret = lib.DeviceGetHandleByPciBusId("gpu3")
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "malformed bus id")
	u := uuidOf(t, d3)
	if !strings.HasPrefix(u, "GPU-") || len(u) != 40 {
		t.Errorf("UUID %q", u)
	}
	if d, _ := lib.DeviceGetHandleByUUID(u); d != d3 {
		t.Error("DeviceGetHandleByUUID is not GPU 3")
	}
	_, ret = lib.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
	expect(t, ret, nvml.ERROR_NOT_FOUND, "unknown UUID")
	// The Interface's Device* functions forward to the handle.
	name, ret := lib.DeviceGetName(d3)
	check(t, ret, "DeviceGetName")
	if name != "NVIDIA H100 80GB HBM3" {
		t.Errorf("DeviceGetName %q", name)
	}
	_, ret = lib.DeviceGetName(nil)
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "DeviceGetName(nil)")

	// Telemetry and processes set by another "process".
	other, err := sim.Open("dgxh100", filepath.Dir(filepath.Dir(n.Dir())))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.SetTelemetry(3, sim.Telemetry{GPUUtil: 87, MemoryUtil: 40, TemperatureC: 61, PowerMilliwatts: 512000}); err != nil {
		t.Fatal(err)
	}
	if err := other.SetProcesses(u, 10, 11); err != nil {
		t.Fatal(err)
	}
	util, _ := d3.GetUtilizationRates()
	temp, _ := d3.GetTemperature(nvml.TEMPERATURE_GPU)
	power, _ := d3.GetPowerUsage()
	if util.Gpu != 87 || util.Memory != 40 || temp != 61 || power != 512000 {
		t.Errorf("telemetry %+v %d %d", util, temp, power)
	}
	procs, _ := d3.GetComputeRunningProcesses()
	if len(procs) != 2 || procs[1].Pid != 11 || procs[0].GpuInstanceId != 0xFFFFFFFF {
		t.Errorf("processes %+v", procs)
	}
	mem, _ := d3.GetMemoryInfo()
	if mem.Used != (454+2048)<<20 || mem.Free != mem.Total-mem.Used {
		t.Errorf("memory %+v", mem)
	}
	_, ret = d3.GetTemperature(nvml.TEMPERATURE_COUNT)
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "unknown temperature sensor")
}

func cString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// TestPersistenceAcrossProcesses uses two Nodes on one directory as two
// processes (a plugin and a CLI).
func TestPersistenceAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	n1, lib1 := open(t, "dgxh200", dir, sim.WithGPUCount(2))
	d1 := device(t, lib1, 1)
	enableMig(t, d1)
	gi := createGI(t, d1, 14, 2) // 2g at 2:2 -> GI 4
	ci := createFullCI(t, gi)
	m1, ret := d1.GetMigDeviceHandleByIndex(0)
	check(t, ret, "GetMigDeviceHandleByIndex")
	migUUID := uuidOf(t, m1)

	n2, lib2 := open(t, "dgxh200", dir)
	for i := 0; i < 2; i++ {
		if a, b := uuidOf(t, device(t, lib1, i)), uuidOf(t, device(t, lib2, i)); a != b {
			t.Errorf("GPU %d UUID %s vs %s", i, a, b)
		}
	}
	d2 := device(t, lib2, 1)
	if cur, pend, _ := d2.GetMigMode(); cur != 1 || pend != 1 {
		t.Errorf("MIG mode in the other process %d/%d", cur, pend)
	}
	gi2, ret := d2.GetGpuInstanceById(4)
	check(t, ret, "GetGpuInstanceById(4) in the other process")
	ci2, ret := gi2.GetComputeInstanceById(0)
	check(t, ret, "GetComputeInstanceById(0)")
	m2, ret := lib2.DeviceGetHandleByUUID(migUUID)
	check(t, ret, "MIG UUID in the other process")

	// Processes set in process 2 block destroys in process 1.
	if err := n2.SetProcesses(migUUID, 77); err != nil {
		t.Fatal(err)
	}
	expect(t, ci.Destroy(), nvml.ERROR_IN_USE, "destroy CI with a process (set by the other process)")
	if err := n1.SetProcesses(migUUID); err != nil {
		t.Fatal(err)
	}
	check(t, ci2.Destroy(), "destroy CI in process 2")
	check(t, gi2.Destroy(), "destroy GI in process 2")

	// Process 1's handles now refer to destroyed instances.
	_, ret = gi.GetInfo()
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "stale GI handle")
	expect(t, ci.Destroy(), nvml.ERROR_INVALID_ARGUMENT, "stale CI handle")
	_, ret = m1.GetName()
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "stale MIG device handle")
	_, ret = m2.GetUUID()
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "stale MIG device handle (process 2)")
	_, ret = lib1.DeviceGetHandleByUUID(migUUID)
	expect(t, ret, nvml.ERROR_NOT_FOUND, "destroyed MIG UUID")

	// A GI recreated at the same place (same id) is a new instance: old
	// handles stay invalid.
	createGI(t, d2, 14, 2)
	_, ret = gi.GetInfo()
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "handle of a recreated GI")
	gis, ret := d1.GetGpuInstances(giProfile(t, d1, 14))
	check(t, ret, "GetGpuInstances")
	if len(gis) != 1 || gis[0] == gi {
		t.Errorf("GetGpuInstances after recreate: %v", gis)
	}

	// The state decodes leniently: unknown fields are ignored.
	path := filepath.Join(n1.Dir(), "state.json")
	raw, _ := os.ReadFile(path)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["someFutureField"] = map[string]any{"x": 1}
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, lib3 := open(t, "dgxh200", dir)
	if _, ret := device(t, lib3, 1).GetGpuInstanceById(4); ret != nvml.SUCCESS {
		t.Errorf("GI lost after lenient decode: %v", ret)
	}
}

// TestConcurrentCreates races GPU instance creates from two Nodes (as two
// processes) on one state directory: placements must never overlap.
func TestConcurrentCreates(t *testing.T) {
	dir := t.TempDir()
	_, lib1 := open(t, "dgxh200", dir, sim.WithGPUCount(1))
	_, lib2 := open(t, "dgxh200", dir)
	enableMig(t, device(t, lib1, 0))
	profiles := []uint32{19, 19, 15, 14, 9, 19, 20, 5, 19, 14}

	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[nvml.Return]int{}
	for w := 0; w < 8; w++ {
		for _, lib := range []nvml.Interface{lib1, lib2} {
			wg.Add(1)
			go func(lib nvml.Interface, w int) {
				defer wg.Done()
				d, _ := lib.DeviceGetHandleByIndex(0)
				for i := 0; i < 6; i++ {
					var info nvml.GpuInstanceProfileInfo
					for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
						if p, ret := d.GetGpuInstanceProfileInfo(idx); ret == nvml.SUCCESS && p.Id == profiles[(w+i)%len(profiles)] {
							info = p
						}
					}
					_, ret := d.CreateGpuInstance(&info)
					mu.Lock()
					results[ret]++
					mu.Unlock()
				}
			}(lib, w)
		}
	}
	wg.Wait()
	for ret := range results {
		if ret != nvml.SUCCESS && ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
			t.Errorf("unexpected return %v", ret)
		}
	}

	// Check the final layout from a third "process".
	_, lib3 := open(t, "dgxh200", dir)
	d := device(t, lib3, 0)
	var slots [8]uint32
	total := 0
	for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
		p, ret := d.GetGpuInstanceProfileInfo(idx)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := d.GetGpuInstances(&p)
		check(t, ret, "GetGpuInstances")
		if uint32(len(gis)) > p.InstanceCount {
			t.Errorf("%d instances of profile %d (max %d)", len(gis), p.Id, p.InstanceCount)
		}
		for _, gi := range gis {
			info, _ := gi.GetInfo()
			for s := info.Placement.Start; s < info.Placement.Start+info.Placement.Size; s++ {
				if slots[s] != 0 {
					t.Errorf("slot %d used by GI %d and GI %d", s, slots[s]-1, info.Id)
				}
				slots[s] = info.Id + 1
			}
			total++
		}
	}
	t.Logf("create results: %v", results)
	if total != results[nvml.SUCCESS] || total == 0 {
		t.Errorf("%d GIs exist, %d creates succeeded", total, results[nvml.SUCCESS])
	}
}

func TestDestroyAndMigModeRules(t *testing.T) {
	n, lib := open(t, "dgxa100", t.TempDir(), sim.WithGPUCount(1))
	d := device(t, lib, 0)
	gpuUUID := uuidOf(t, d)

	// Processes on the whole GPU: enabling MIG only becomes pending.
	if err := n.SetProcesses(gpuUUID, 100); err != nil {
		t.Fatal(err)
	}
	activation, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	check(t, ret, "SetMigMode with a process")
	expect(t, activation, nvml.ERROR_IN_USE, "activation with a process")
	if cur, pend, _ := d.GetMigMode(); cur != 0 || pend != 1 {
		t.Errorf("MIG mode %d/%d, want 0/1", cur, pend)
	}
	if err := n.SetProcesses(gpuUUID); err != nil {
		t.Fatal(err)
	}
	enableMig(t, d)
	_, ret = d.SetMigMode(2)
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "SetMigMode(2)")

	gi := createGI(t, d, 9, 0)
	ci := createFullCI(t, gi)
	_, ret = d.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	expect(t, ret, nvml.ERROR_IN_USE, "disable MIG with GIs")
	expect(t, gi.Destroy(), nvml.ERROR_IN_USE, "destroy GI with a CI")
	m, _ := d.GetMigDeviceHandleByIndex(0)
	if err := n.SetProcesses(uuidOf(t, m), 1, 2); err != nil {
		t.Fatal(err)
	}
	expect(t, ci.Destroy(), nvml.ERROR_IN_USE, "destroy CI with processes")
	if err := n.SetProcesses(uuidOf(t, m)); err != nil {
		t.Fatal(err)
	}
	check(t, ci.Destroy(), "destroy CI")
	expect(t, ci.Destroy(), nvml.ERROR_INVALID_ARGUMENT, "destroy CI twice")
	check(t, gi.Destroy(), "destroy GI")
	activation, ret = d.SetMigMode(nvml.DEVICE_MIG_DISABLE)
	check(t, ret, "disable MIG")
	check(t, activation, "disable MIG activation")
	if err := n.SetProcesses("MIG-nope"); err == nil {
		t.Error("SetProcesses on an unknown UUID succeeded")
	}
}

func TestFailCreateAfter(t *testing.T) {
	dir := t.TempDir()
	_, lib := open(t, "dgxh200", dir, sim.WithGPUCount(1))
	cli, err := sim.Open("dgxh200", dir) // another "process" arms the failure
	if err != nil {
		t.Fatal(err)
	}
	d := device(t, lib, 0)
	enableMig(t, d)
	p := giProfile(t, d, 19)
	if err := cli.FailCreateAfter(1); err != nil {
		t.Fatal(err)
	}
	_, ret := d.CreateGpuInstanceWithPlacement(p, &nvml.GpuInstancePlacement{Start: 7, Size: 1})
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "invalid create (not counted)")
	_, ret = d.CreateGpuInstance(p)
	check(t, ret, "first create")
	_, ret = d.CreateGpuInstance(p)
	expect(t, ret, nvml.ERROR_INSUFFICIENT_RESOURCES, "second create (injected)")
	_, ret = d.CreateGpuInstance(p)
	check(t, ret, "third create (the failure is one-shot)")

	if err := cli.FailCreateAfter(0); err != nil {
		t.Fatal(err)
	}
	if err := cli.FailCreateAfter(-1); err != nil {
		t.Fatal(err)
	}
	_, ret = d.CreateGpuInstance(p)
	check(t, ret, "create after FailCreateAfter(-1)")
	if err := cli.FailCreateAfter(0); err != nil {
		t.Fatal(err)
	}
	_, ret = d.CreateGpuInstance(p)
	expect(t, ret, nvml.ERROR_INSUFFICIENT_RESOURCES, "next create after FailCreateAfter(0)")
	gis, _ := d.GetGpuInstances(p)
	if len(gis) != 3 {
		t.Errorf("%d GIs, want 3", len(gis))
	}
}

// TestTwoOSProcesses runs a real second process (this test binary) that
// creates GPU instances and injects an XID while this process waits for the
// event and then sees the instances.
func TestTwoOSProcesses(t *testing.T) {
	if dir := os.Getenv("SIM_CHILD_DIR"); dir != "" {
		childProcess(dir)
		return
	}
	dir := t.TempDir()
	_, lib := open(t, "dgxh200", dir, sim.WithGPUCount(1))
	d := device(t, lib, 0)
	enableMig(t, d)
	set, _ := lib.EventSetCreate()
	check(t, d.RegisterEvents(nvml.EventTypeXidCriticalError, set), "RegisterEvents")

	cmd := exec.Command(os.Args[0], "-test.run=^TestTwoOSProcesses$")
	cmd.Env = append(os.Environ(), "SIM_CHILD_DIR="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Start racing the child for the 1g slots once it is ready.
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if i > 1000 {
			t.Fatal("child not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mine := 0
	for i := 0; i < 7; i++ {
		if _, ret := d.CreateGpuInstance(giProfile(t, d, 19)); ret == nvml.SUCCESS {
			mine++
		}
	}
	e, ret := set.Wait(10000)
	check(t, ret, "Wait for the child's XID")
	if e.EventData != 43 {
		t.Errorf("event %+v", e)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	gis, ret := d.GetGpuInstances(giProfile(t, d, 19))
	check(t, ret, "GetGpuInstances")
	ids := map[uint32]bool{}
	for _, gi := range gis {
		info, _ := gi.GetInfo()
		ids[info.Id] = true
	}
	if len(gis) != 7 || len(ids) != 7 {
		t.Errorf("%d 1g GIs with %d distinct ids (%d mine), want 7", len(gis), len(ids), mine)
	}
	t.Logf("this process created %d of the 7 GPU instances", mine)
}

func childProcess(dir string) {
	n, err := sim.Open("dgxh200", dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lib := n.NVML()
	lib.Init()
	d, _ := lib.DeviceGetHandleByIndex(0)
	os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
			break
		}
	}
	for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
		if p, ret := d.GetGpuInstanceProfileInfo(idx); ret == nvml.SUCCESS && p.Id == 19 {
			for i := 0; i < 7; i++ {
				d.CreateGpuInstance(&p)
			}
		}
	}
	if err := n.InjectXid(0, 43); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
