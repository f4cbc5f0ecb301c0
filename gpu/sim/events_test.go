package sim_test

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

func TestXidEvents(t *testing.T) {
	dir := t.TempDir()
	_, lib := open(t, "dgxh100", dir, sim.WithGPUCount(3))
	cli, err := sim.Open("dgxh100", dir) // the injector is another "process"
	if err != nil {
		t.Fatal(err)
	}
	d0, d1, d2 := device(t, lib, 0), device(t, lib, 1), device(t, lib, 2)

	supported, ret := d0.GetSupportedEventTypes()
	check(t, ret, "GetSupportedEventTypes")
	if supported&nvml.EventTypeXidCriticalError == 0 {
		t.Fatalf("XID events not supported: %#x", supported)
	}
	set, ret := lib.EventSetCreate()
	check(t, ret, "EventSetCreate")
	expect(t, d0.RegisterEvents(nvml.EventTypePowerSourceChange, set), nvml.ERROR_NOT_SUPPORTED, "unsupported event type")
	expect(t, d0.RegisterEvents(nvml.EventTypeXidCriticalError, nil), nvml.ERROR_INVALID_ARGUMENT, "nil event set")

	// Events before the registration are not delivered.
	if err := cli.InjectXid(0, 31); err != nil {
		t.Fatal(err)
	}
	check(t, d0.RegisterEvents(nvml.EventTypeXidCriticalError, set), "RegisterEvents(GPU 0)")
	check(t, d1.RegisterEvents(nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, set), "RegisterEvents(GPU 1)")
	_, ret = set.Wait(50)
	expect(t, ret, nvml.ERROR_TIMEOUT, "Wait with no new event")

	// GPU 2 is not registered: its event is skipped.
	if err := cli.InjectXid(2, 13); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		if err := cli.InjectXid(1, 79); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	e, ret := set.Wait(5000)
	check(t, ret, "Wait")
	if e.Device != d1 || e.EventType != nvml.EventTypeXidCriticalError || e.EventData != 79 ||
		e.GpuInstanceId != 0xFFFFFFFF || e.ComputeInstanceId != 0xFFFFFFFF {
		t.Errorf("event %+v", e)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("Wait took %v", time.Since(start))
	}
	_ = d2

	// An XID on a MIG device carries its GI/CI ids.
	enableMig(t, d0)
	gi := createGI(t, d0, 14, 4) // GI 5
	createFullCI(t, gi)
	if err := cli.InjectMigXid(0, 5, 0, 94); err != nil {
		t.Fatal(err)
	}
	if err := cli.InjectMigXid(0, 6, 0, 94); err == nil {
		t.Error("InjectMigXid on a missing MIG device succeeded")
	}
	e, ret = lib.EventSetWait(set, 1000)
	check(t, ret, "EventSetWait")
	if e.Device != d0 || e.EventData != 94 || e.GpuInstanceId != 5 || e.ComputeInstanceId != 0 {
		t.Errorf("MIG event %+v", e)
	}

	// A second event set (e.g. another plugin) gets its own copy.
	set2, _ := lib.EventSetCreate()
	check(t, d0.RegisterEvents(nvml.EventTypeXidCriticalError, set2), "RegisterEvents(set2)")
	if err := cli.InjectXid(0, 48); err != nil {
		t.Fatal(err)
	}
	for _, s := range []nvml.EventSet{set, set2} {
		e, ret := s.Wait(1000)
		check(t, ret, "Wait")
		if e.EventData != 48 {
			t.Errorf("event %+v", e)
		}
	}
	if err := cli.InjectXid(9, 1); err == nil {
		t.Error("InjectXid on GPU 9 succeeded")
	}
	check(t, set.Free(), "Free")
	_, ret = set.Wait(0)
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "Wait after Free")
}
