package sim_test

import (
	"slices"
	"strings"
	"testing"

	nvlib "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

type placed struct{ profile, start uint32 }

func TestGPUInstanceCreateErrors(t *testing.T) {
	tests := []struct {
		name      string
		migOff    bool
		setup     []placed // created first, must succeed
		profile   uint32
		placement *nvml.GpuInstancePlacement // nil: CreateGpuInstance
		want      nvml.Return
	}{
		{name: "MIG disabled", migOff: true, profile: 19, want: nvml.ERROR_NOT_SUPPORTED},
		{name: "MIG disabled with placement", migOff: true, profile: 19, placement: &nvml.GpuInstancePlacement{Start: 0, Size: 1}, want: nvml.ERROR_NOT_SUPPORTED},
		{name: "unknown profile id", profile: 99, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "3g at start 2", profile: 9, placement: &nvml.GpuInstancePlacement{Start: 2, Size: 4}, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "3g with size 3", profile: 9, placement: &nvml.GpuInstancePlacement{Start: 0, Size: 3}, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "1g at slot 7", profile: 19, placement: &nvml.GpuInstancePlacement{Start: 7, Size: 1}, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "1g.35gb at odd start", profile: 15, placement: &nvml.GpuInstancePlacement{Start: 1, Size: 2}, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "4g at 4", profile: 5, placement: &nvml.GpuInstancePlacement{Start: 4, Size: 4}, want: nvml.ERROR_INVALID_ARGUMENT},
		{name: "2g overlapping 3g", setup: []placed{{9, 0}}, profile: 14, placement: &nvml.GpuInstancePlacement{Start: 2, Size: 2}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "1g on 1g.35gb", setup: []placed{{15, 6}}, profile: 19, placement: &nvml.GpuInstancePlacement{Start: 6, Size: 1}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "same slot twice", setup: []placed{{19, 3}}, profile: 19, placement: &nvml.GpuInstancePlacement{Start: 3, Size: 1}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "7g after a 1g", setup: []placed{{19, 6}}, profile: 0, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "second +me (count 1)", setup: []placed{{20, 0}}, profile: 20, placement: &nvml.GpuInstancePlacement{Start: 1, Size: 1}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "eighth 1g", setup: []placed{{19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 4}, {19, 5}, {19, 6}}, profile: 19, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "fifth 1g.35gb", setup: []placed{{15, 0}, {15, 2}, {15, 4}, {15, 6}}, profile: 15, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "4g after 3g at 0", setup: []placed{{9, 0}}, profile: 5, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
		{name: "3g next to 4g", setup: []placed{{5, 0}}, profile: 9, want: nvml.SUCCESS},
		{name: "1g.35gb on slots 6-7 next to six 1g", setup: []placed{{19, 0}, {19, 1}, {19, 2}, {19, 3}, {19, 4}, {19, 5}}, profile: 15, placement: &nvml.GpuInstancePlacement{Start: 6, Size: 2}, want: nvml.SUCCESS},
		{name: "1g.35gb over a 1g at 6", setup: []placed{{19, 6}}, profile: 15, placement: &nvml.GpuInstancePlacement{Start: 6, Size: 2}, want: nvml.ERROR_INSUFFICIENT_RESOURCES},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(1))
			d := device(t, lib, 0)
			if !tc.migOff {
				enableMig(t, d)
			}
			for _, s := range tc.setup {
				createGI(t, d, s.profile, s.start)
			}
			info := &nvml.GpuInstanceProfileInfo{Id: tc.profile}
			if tc.profile != 99 {
				info = giProfile(t, d, tc.profile)
			}
			var ret nvml.Return
			if tc.placement != nil {
				_, ret = d.CreateGpuInstanceWithPlacement(info, tc.placement)
			} else {
				_, ret = d.CreateGpuInstance(info)
			}
			expect(t, ret, tc.want, "create profile %d", tc.profile)
		})
	}
}

func TestGPUInstanceIDsFollowSlotTree(t *testing.T) {
	tests := []struct {
		profile, start, size, id uint32
	}{
		{0, 0, 8, 0},
		{5, 0, 4, 1},
		{9, 0, 4, 1}, {9, 4, 4, 2},
		{14, 0, 2, 3}, {14, 2, 2, 4}, {14, 4, 2, 5},
		{15, 0, 2, 3}, {15, 6, 2, 6},
		{19, 0, 1, 7}, {19, 3, 1, 10}, {19, 6, 1, 13},
		{20, 5, 1, 12},
	}
	_, lib := open(t, "dgxh100", t.TempDir(), sim.WithGPUCount(1))
	d := device(t, lib, 0)
	enableMig(t, d)
	for _, tc := range tests {
		gi := createGI(t, d, tc.profile, tc.start)
		info, ret := gi.GetInfo()
		check(t, ret, "GetInfo")
		if info.Id != tc.id || info.ProfileId != tc.profile || info.Placement != (nvml.GpuInstancePlacement{Start: tc.start, Size: tc.size}) {
			t.Errorf("profile %d at %d: got id %d %+v, want id %d size %d", tc.profile, tc.start, info.Id, info, tc.id, tc.size)
		}
		if info.Device != d {
			t.Errorf("GpuInstanceInfo.Device is not the parent handle")
		}
		again, ret := d.GetGpuInstanceById(int(tc.id))
		check(t, ret, "GetGpuInstanceById(%d)", tc.id)
		if again != gi {
			t.Errorf("GetGpuInstanceById(%d) returned another handle", tc.id)
		}
		check(t, gi.Destroy(), "Destroy")
	}
}

func TestCreateGpuInstancePlacementPolicy(t *testing.T) {
	ids := func(t *testing.T, opts []sim.Option, creates ...uint32) ([]uint32, nvml.Return) {
		t.Helper()
		_, lib := open(t, "dgxh100", t.TempDir(), append(opts, sim.WithGPUCount(1))...)
		d := device(t, lib, 0)
		enableMig(t, d)
		var out []uint32
		for _, p := range creates {
			gi, ret := d.CreateGpuInstance(giProfile(t, d, p))
			if ret != nvml.SUCCESS {
				return out, ret
			}
			info, _ := gi.GetInfo()
			out = append(out, info.Id)
		}
		return out, nvml.SUCCESS
	}
	bestFit := []sim.Option(nil)
	firstFree := []sim.Option{sim.WithFirstFreePlacement()}
	tests := []struct {
		name    string
		opts    []sim.Option
		creates []uint32
		wantIDs []uint32
		want    nvml.Return
	}{
		{"first free: two 3g", firstFree, []uint32{9, 9}, []uint32{1, 2}, nvml.SUCCESS},
		{"first free: seven 1g", firstFree, []uint32{19, 19, 19, 19, 19, 19, 19}, []uint32{7, 8, 9, 10, 11, 12, 13}, nvml.SUCCESS},
		{"first free: 3g then 4g fails", firstFree, []uint32{9, 5}, []uint32{1}, nvml.ERROR_INSUFFICIENT_RESOURCES},
		// Real H100 (current driver): a 3g lands on 4:4 (GI 2), then a 2g on 0:2 (GI 3).
		{"best fit: 3g then 2g", bestFit, []uint32{9, 14}, []uint32{2, 3}, nvml.SUCCESS},
		// MIG user guide: seven 1g.5gb get GI ids 13, 11, 12, 7, 8, 9, 10.
		{"best fit: seven 1g", bestFit, []uint32{19, 19, 19, 19, 19, 19, 19}, []uint32{13, 11, 12, 7, 8, 9, 10}, nvml.SUCCESS},
		{"best fit: 3g then 4g", bestFit, []uint32{9, 5}, []uint32{2, 1}, nvml.SUCCESS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ret := ids(t, tc.opts, tc.creates...)
			expect(t, ret, tc.want, "creates %v", tc.creates)
			if !slices.Equal(got, tc.wantIDs) {
				t.Errorf("GI ids %v, want %v", got, tc.wantIDs)
			}
		})
	}
}

func TestGpuInstanceQueries(t *testing.T) {
	_, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(1))
	d := device(t, lib, 0)
	p1g := giProfile(t, d, 19)

	_, ret := d.GetGpuInstanceRemainingCapacity(p1g)
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "remaining capacity with MIG disabled")
	_, ret = d.GetGpuInstances(p1g)
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "GetGpuInstances with MIG disabled")
	_, ret = d.GetGpuInstanceById(7)
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "GetGpuInstanceById with MIG disabled")
	_, ret = d.GetGpuInstancePossiblePlacements(p1g)
	check(t, ret, "placements do not depend on the MIG mode")

	enableMig(t, d)
	createGI(t, d, 9, 4) // 3g at 4:4
	createGI(t, d, 19, 0)
	for _, tc := range []struct {
		profile uint32
		want    int
	}{{19, 3}, {20, 1}, {15, 1}, {14, 1}, {9, 0}, {5, 0}, {0, 0}} {
		got, ret := d.GetGpuInstanceRemainingCapacity(giProfile(t, d, tc.profile))
		check(t, ret, "GetGpuInstanceRemainingCapacity(%d)", tc.profile)
		if got != tc.want {
			t.Errorf("remaining capacity of profile %d: %d, want %d", tc.profile, got, tc.want)
		}
	}
	gis, ret := d.GetGpuInstances(p1g)
	check(t, ret, "GetGpuInstances")
	if len(gis) != 1 {
		t.Errorf("%d 1g instances, want 1", len(gis))
	}
	_, ret = d.GetGpuInstanceById(3)
	expect(t, ret, nvml.ERROR_NOT_FOUND, "GetGpuInstanceById(3)")
}

func TestComputeInstances(t *testing.T) {
	_, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(1))
	d := device(t, lib, 0)
	enableMig(t, d)
	gi := createGI(t, d, 0, 0) // 7g.141gb

	// CI profiles of a 7g GI: 1c, 2c, 3c, 4c and the full 7g.
	var have []uint32
	for i := 0; i < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; i++ {
		p, ret := gi.GetComputeInstanceProfileInfo(i, 0)
		if ret == nvml.SUCCESS {
			have = append(have, p.SliceCount)
			continue
		}
		expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "CI profile %d", i)
	}
	if !slices.Equal(have, []uint32{1, 2, 3, 4, 7}) {
		t.Errorf("CI profile slices %v", have)
	}
	_, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_COUNT, 0)
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "CI profile index out of range")

	c4, c3, c1 := ciProfile(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE), ciProfile(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE), ciProfile(t, gi, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE)
	pl, ret := gi.GetComputeInstancePossiblePlacements(c3)
	check(t, ret, "CI placements")
	if !slices.Equal(pl, []nvml.ComputeInstancePlacement{{Start: 0, Size: 3}, {Start: 4, Size: 3}}) {
		t.Errorf("3c placements %v", pl)
	}
	_, ret = gi.CreateComputeInstanceWithPlacement(c3, &nvml.ComputeInstancePlacement{Start: 1, Size: 3})
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "3c at 1")

	ci4, ret := gi.CreateComputeInstance(c4)
	check(t, ret, "create 4c")
	ci3, ret := gi.CreateComputeInstanceWithPlacement(c3, &nvml.ComputeInstancePlacement{Start: 4, Size: 3})
	check(t, ret, "create 3c at 4")
	_, ret = gi.CreateComputeInstance(c1)
	expect(t, ret, nvml.ERROR_INSUFFICIENT_RESOURCES, "1c in a full GI")
	for want, ci := range []nvml.ComputeInstance{ci4, ci3} {
		info, ret := ci.GetInfo()
		check(t, ret, "CI GetInfo")
		if int(info.Id) != want || info.GpuInstance != gi || info.Device != d {
			t.Errorf("CI %d: %+v", want, info)
		}
	}
	// Ids: the smallest free id.
	check(t, ci4.Destroy(), "destroy CI 0")
	ci1, ret := gi.CreateComputeInstance(c1)
	check(t, ret, "create 1c")
	if info, _ := ci1.GetInfo(); info.Id != 0 || info.Placement.Start != 0 {
		t.Errorf("new CI %+v, want id 0 at 0", info)
	}
	_, ret = gi.GetComputeInstanceById(5)
	expect(t, ret, nvml.ERROR_NOT_FOUND, "GetComputeInstanceById(5)")
	cis, ret := gi.GetComputeInstances(c1)
	check(t, ret, "GetComputeInstances")
	if len(cis) != 1 || cis[0] != ci1 {
		t.Errorf("GetComputeInstances(1c) = %v", cis)
	}
	n, ret := gi.GetComputeInstanceRemainingCapacity(c1)
	check(t, ret, "CI remaining capacity")
	if n != 3 {
		t.Errorf("1c remaining capacity %d, want 3", n)
	}

	// A 2g GI only has the 1c and 2g CI profiles.
	check(t, ci1.Destroy(), "destroy 1c")
	check(t, ci3.Destroy(), "destroy 3c")
	check(t, gi.Destroy(), "destroy 7g")
	gi2 := createGI(t, d, 14, 2)
	have = nil
	for i := 0; i < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; i++ {
		if p, ret := gi2.GetComputeInstanceProfileInfo(i, 0); ret == nvml.SUCCESS {
			have = append(have, p.SliceCount)
		}
	}
	if !slices.Equal(have, []uint32{1, 2}) {
		t.Errorf("2g CI profile slices %v", have)
	}
	_, ret = gi2.CreateComputeInstance(c3)
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "3c CI in a 2g GI")
}

func TestMigDeviceHandles(t *testing.T) {
	n, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(2))
	d := device(t, lib, 1)
	_, ret := d.GetMigDeviceHandleByIndex(0)
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "GetMigDeviceHandleByIndex with MIG disabled")
	enableMig(t, d)
	if c, _ := d.GetMaxMigDeviceCount(); c != 7 {
		t.Errorf("GetMaxMigDeviceCount %d, want 7", c)
	}

	// GI 2 (3g at 4:4) with two CIs (1c, 2c), GI 7 (1g at 0) with one.
	gi2 := createGI(t, d, 9, 4)
	gi7 := createGI(t, d, 19, 0)
	_, ret = gi2.CreateComputeInstance(ciProfile(t, gi2, nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE))
	check(t, ret, "2c")
	_, ret = gi2.CreateComputeInstance(ciProfile(t, gi2, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE))
	check(t, ret, "1c")
	createFullCI(t, gi7)

	want := []struct {
		gi, ci int
		name   string
		sms    uint32
		memMB  uint64
	}{
		{2, 0, "NVIDIA H200 MIG 2c.3g.71gb", 32, 71424},
		{2, 1, "NVIDIA H200 MIG 1c.3g.71gb", 16, 71424},
		{7, 0, "NVIDIA H200 MIG 1g.18gb", 16, 16384},
	}
	var uuids []string
	for i, w := range want {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		check(t, ret, "GetMigDeviceHandleByIndex(%d)", i)
		giID, _ := m.GetGpuInstanceId()
		ciID, _ := m.GetComputeInstanceId()
		name, _ := m.GetName()
		attrs, _ := m.GetAttributes()
		mem, _ := m.GetMemoryInfo()
		idx, _ := m.GetIndex()
		isMig, _ := m.IsMigDeviceHandle()
		parent, ret := m.GetDeviceHandleFromMigDeviceHandle()
		check(t, ret, "GetDeviceHandleFromMigDeviceHandle")
		if giID != w.gi || ciID != w.ci || name != w.name || attrs.MultiprocessorCount != w.sms ||
			attrs.MemorySizeMB != w.memMB || mem.Total != w.memMB<<20 || idx != i || !isMig || parent != d {
			t.Errorf("MIG device %d: gi %d ci %d %q SMs %d MB %d total %d index %d mig %v, want %+v",
				i, giID, ciID, name, attrs.MultiprocessorCount, attrs.MemorySizeMB, mem.Total, idx, isMig, w)
		}
		u := uuidOf(t, m)
		if !strings.HasPrefix(u, "MIG-") || len(u) != len("MIG-")+36 {
			t.Errorf("MIG UUID %q", u)
		}
		byUUID, ret := lib.DeviceGetHandleByUUID(u)
		check(t, ret, "DeviceGetHandleByUUID(%s)", u)
		if byUUID != m {
			t.Errorf("DeviceGetHandleByUUID(MIG) returned another handle")
		}
		uuids = append(uuids, u)
	}
	_, ret = d.GetMigDeviceHandleByIndex(3)
	expect(t, ret, nvml.ERROR_NOT_FOUND, "index past the MIG devices")
	_, ret = d.GetMigDeviceHandleByIndex(7)
	expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "index 7")
	if m, _ := lib.DeviceGetHandleByIndex(0); m != nil {
		if c, _ := m.GetMaxMigDeviceCount(); c != 0 {
			t.Errorf("GPU 0 (MIG disabled) max MIG devices %d, want 0", c)
		}
	}

	// go-nvlib sees the same MIG devices and names them.
	devs, err := nvlib.New(lib).GetMigDevices()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range devs {
		p, err := m.GetProfile()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p.String())
	}
	if !slices.Equal(names, []string{"2c.3g.71gb", "1c.3g.71gb", "1g.18gb"}) {
		t.Errorf("go-nvlib MIG profiles %v", names)
	}

	// Processes on MIG devices show up with their GI/CI ids.
	if err := n.SetProcesses(uuids[2], 4242); err != nil {
		t.Fatal(err)
	}
	procs, ret := d.GetComputeRunningProcesses()
	check(t, ret, "GetComputeRunningProcesses")
	if len(procs) != 1 || procs[0].Pid != 4242 || procs[0].GpuInstanceId != 7 || procs[0].ComputeInstanceId != 0 {
		t.Errorf("processes %+v", procs)
	}
	m, _ := lib.DeviceGetHandleByUUID(uuids[2])
	procs, _ = m.GetComputeRunningProcesses()
	if len(procs) != 1 {
		t.Errorf("MIG device processes %+v", procs)
	}
	if mem, _ := m.GetMemoryInfo(); mem.Used != 1<<30 {
		t.Errorf("MIG memory used %d, want 1 GiB", mem.Used)
	}
	_, ret = d.GetUtilizationRates()
	expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "utilization in MIG mode")
	if err := n.SetProcesses(uuidOf(t, d), 1); err == nil {
		t.Errorf("SetProcesses on a GPU in MIG mode succeeded")
	}
}
