package sim_test

import (
	"fmt"
	"reflect"
	"testing"

	nvlib "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

// TestNoMethodPanics calls every method of every simulated type with zero
// arguments: implemented or not, none may panic (the generated mocks panic
// on a nil ...Func). Unimplemented methods return ERROR_NOT_SUPPORTED.
func TestNoMethodPanics(t *testing.T) {
	_, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(1))
	for i := 0; i < 100; i++ {
		lib.Init() // stay initialized whatever Shutdown calls the sweep makes
	}
	d := device(t, lib, 0)
	enableMig(t, d)
	gi := createGI(t, d, 9, 0)
	ci := createFullCI(t, gi)
	mig, ret := d.GetMigDeviceHandleByIndex(0)
	check(t, ret, "GetMigDeviceHandleByIndex")
	set, ret := lib.EventSetCreate()
	check(t, ret, "EventSetCreate")

	targets := []struct {
		name string
		v    any
		typ  reflect.Type
	}{
		{"Interface", lib, reflect.TypeOf((*nvml.Interface)(nil)).Elem()},
		{"Device", d, reflect.TypeOf((*nvml.Device)(nil)).Elem()},
		{"MIG Device", mig, reflect.TypeOf((*nvml.Device)(nil)).Elem()},
		{"GpuInstance", gi, reflect.TypeOf((*nvml.GpuInstance)(nil)).Elem()},
		{"ComputeInstance", ci, reflect.TypeOf((*nvml.ComputeInstance)(nil)).Elem()},
		{"EventSet", set, reflect.TypeOf((*nvml.EventSet)(nil)).Elem()},
	}
	calls := 0
	for _, tc := range targets {
		v := reflect.ValueOf(tc.v)
		for i := 0; i < tc.typ.NumMethod(); i++ {
			m := tc.typ.Method(i)
			fn := v.MethodByName(m.Name)
			args := make([]reflect.Value, fn.Type().NumIn())
			for j := range args {
				args[j] = reflect.Zero(fn.Type().In(j))
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s.%s panicked: %v", tc.name, m.Name, r)
					}
				}()
				if fn.Type().IsVariadic() {
					fn.CallSlice(args)
				} else {
					fn.Call(args)
				}
				calls++
			}()
		}
	}
	t.Logf("%d methods called", calls)

	// Unimplemented methods report ERROR_NOT_SUPPORTED.
	_, ret = d.GetFanSpeed()
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "GetFanSpeed")
	_, ret = lib.DeviceGetNumaNodeId(d)
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "DeviceGetNumaNodeId")
	_, ret = gi.GetActiveVgpus()
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "GetActiveVgpus")
	_, ret = mig.GetMinorNumber()
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "MIG GetMinorNumber")
	if err := lib.Extensions().LookupSymbol("nvmlDeviceGetGpuFabricInfoV"); err == nil {
		t.Error("LookupSymbol of a handler-returning symbol succeeded")
	}
	if err := lib.Extensions().LookupSymbol("nvmlDeviceGetMigMode"); err != nil {
		t.Error(err)
	}
}

// TestGoNvlib runs the go-nvlib walks device plugins use.
func TestGoNvlib(t *testing.T) {
	_, lib := open(t, "dgxa100", t.TempDir(), sim.WithGPUCount(2))
	d1 := device(t, lib, 1)
	enableMig(t, d1)
	createFullCI(t, createGI(t, d1, 19, 6))
	nl := nvlib.New(lib)
	devs, err := nl.GetDevices()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, dev := range devs {
		mig, err := dev.IsMigEnabled()
		if err != nil {
			t.Fatal(err)
		}
		bus, err := dev.GetPCIBusID()
		if err != nil {
			t.Fatal(err)
		}
		fabric, err := dev.IsFabricAttached()
		if err != nil {
			t.Fatal(err)
		}
		arch, err := dev.GetArchitectureAsString()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %v %v %s", bus, mig, fabric, arch))
	}
	if fmt.Sprint(got) != "[0000:07:00.0 false false Ampere 0000:0f:00.0 true false Ampere]" {
		t.Errorf("devices %v", got)
	}
	profiles, err := nl.GetMigProfiles()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range profiles {
		names = append(names, p.String())
	}
	want := "[1g.5gb 1c.2g.10gb 2g.10gb 1c.3g.20gb 2c.3g.20gb 3g.20gb 1c.4g.20gb 2c.4g.20gb 4g.20gb 1c.7g.40gb 2c.7g.40gb 3c.7g.40gb 4c.7g.40gb 7g.40gb 1g.5gb+me 1g.10gb]"
	if fmt.Sprint(names) != want {
		t.Errorf("go-nvlib profiles\n %v\nwant\n %v", names, want)
	}
	migs, err := nl.GetMigDevices()
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) != 1 {
		t.Fatalf("%d MIG devices", len(migs))
	}
	if p, err := migs[0].GetProfile(); err != nil || p.String() != "1g.5gb" {
		t.Errorf("MIG profile %v %v", p, err)
	}
}
