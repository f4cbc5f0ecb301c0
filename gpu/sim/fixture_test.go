package sim_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	nvlib "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

// h200Fixture holds facts measured on a real H200 (driver 580.159.04),
// copied into testdata/h200.json from /work/shared/fixtures/nvidia-h200
// (h200-nvml.json, h200-smi.txt, h200-nvidia-smi-q.xml); see its "_source".
type h200Fixture struct {
	Name                  string `json:"name"`
	MemoryTotal           uint64 `json:"memoryTotal"`
	MemoryReservedMiB     uint64 `json:"memoryReservedMiB"`
	MultiprocessorCount   uint32 `json:"multiprocessorCount"`
	CudaComputeCapability []int  `json:"cudaComputeCapability"`
	PciDeviceID           uint32 `json:"pciDeviceId"`
	PciSubSystemID        uint32 `json:"pciSubSystemId"`
	DriverVersion         string `json:"driverVersion"`
	CudaDriverVersion     int    `json:"cudaDriverVersion"`
	MigMode               []int  `json:"migMode"`
	MaxMigDeviceCount     int    `json:"maxMigDeviceCount"`
	GpuInstanceProfiles   []struct {
		Index               int      `json:"index"`
		Error               string   `json:"error"`
		ID                  uint32   `json:"id"`
		IsP2pSupported      uint32   `json:"isP2pSupported"`
		SliceCount          uint32   `json:"sliceCount"`
		InstanceCount       uint32   `json:"instanceCount"`
		MultiprocessorCount uint32   `json:"multiprocessorCount"`
		CopyEngineCount     uint32   `json:"copyEngineCount"`
		DecoderCount        uint32   `json:"decoderCount"`
		EncoderCount        uint32   `json:"encoderCount"`
		JpegCount           uint32   `json:"jpegCount"`
		OfaCount            uint32   `json:"ofaCount"`
		MemorySizeMB        uint64   `json:"memorySizeMB"`
		Name                string   `json:"name"`
		PlacementStarts     []uint32 `json:"placementStarts"`
		PlacementSize       uint32   `json:"placementSize"`
	} `json:"gpuInstanceProfiles"`
	DeviceNodes   map[string][2]uint32 `json:"deviceNodes"`
	MigMinorsHead []string             `json:"migMinorsHead"`
}

func loadH200Fixture(t *testing.T) *h200Fixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/h200.json")
	if err != nil {
		t.Fatal(err)
	}
	var f h200Fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

func TestH200MatchesRealFixture(t *testing.T) {
	f := loadH200Fixture(t)
	_, lib := open(t, "dgxh200", t.TempDir())
	d := device(t, lib, 0)

	name, ret := d.GetName()
	check(t, ret, "GetName")
	mem, ret := d.GetMemoryInfo()
	check(t, ret, "GetMemoryInfo")
	mem2, ret := d.GetMemoryInfo_v2()
	check(t, ret, "GetMemoryInfo_v2")
	// Like the real driver, whole-GPU handles have no attributes; the SM
	// count comes from the core count (128 CUDA cores per Hopper SM).
	if _, ret := d.GetAttributes(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetAttributes on a whole GPU = %v, want ERROR_NOT_SUPPORTED as on the real H200", ret)
	}
	cores, ret := d.GetNumGpuCores()
	check(t, ret, "GetNumGpuCores")
	major, minor, ret := d.GetCudaComputeCapability()
	check(t, ret, "GetCudaComputeCapability")
	pci, ret := d.GetPciInfo()
	check(t, ret, "GetPciInfo")
	driver, ret := lib.SystemGetDriverVersion()
	check(t, ret, "SystemGetDriverVersion")
	cuda, ret := lib.SystemGetCudaDriverVersion()
	check(t, ret, "SystemGetCudaDriverVersion")
	cur, pending, ret := d.GetMigMode()
	check(t, ret, "GetMigMode")
	maxMig, ret := d.GetMaxMigDeviceCount()
	check(t, ret, "GetMaxMigDeviceCount")
	arch, ret := d.GetArchitecture()
	check(t, ret, "GetArchitecture")

	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"name", name, f.Name},
		{"memory total", mem.Total, f.MemoryTotal},
		{"memory v2 total", mem2.Total, f.MemoryTotal},
		{"memory v2 reserved MiB", mem2.Reserved >> 20, f.MemoryReservedMiB},
		{"SMs", uint32(cores / 128), f.MultiprocessorCount},
		{"compute capability", []int{major, minor}, f.CudaComputeCapability},
		{"PCI device id", pci.PciDeviceId, f.PciDeviceID},
		{"PCI subsystem id", pci.PciSubSystemId, f.PciSubSystemID},
		{"driver", driver, f.DriverVersion},
		{"CUDA driver", cuda, f.CudaDriverVersion},
		{"MIG mode", []int{cur, pending}, f.MigMode},
		{"max MIG devices (MIG disabled)", maxMig, f.MaxMigDeviceCount},
		{"architecture", arch, nvml.DeviceArchitecture(nvml.DEVICE_ARCH_HOPPER)},
	} {
		if !equal(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}

	byIndex := map[int]int{}
	for i, p := range f.GpuInstanceProfiles {
		byIndex[p.Index] = i
	}
	lib2 := nvlib.New(lib)
	for index := 0; index <= nvml.GPU_INSTANCE_PROFILE_COUNT; index++ {
		info, ret := d.GetGpuInstanceProfileInfo(index)
		i, known := byIndex[index]
		switch {
		case index == nvml.GPU_INSTANCE_PROFILE_COUNT:
			expect(t, ret, nvml.ERROR_INVALID_ARGUMENT, "profile index %d", index)
			continue
		case !known || f.GpuInstanceProfiles[i].Error != "":
			// The fixture probed indexes 0..15; "Not Supported" there, and
			// the simulator also rejects the newer 16, 17.
			expect(t, ret, nvml.ERROR_NOT_SUPPORTED, "profile index %d", index)
			continue
		}
		check(t, ret, "GetGpuInstanceProfileInfo(%d)", index)
		want := f.GpuInstanceProfiles[i]
		got := []uint64{uint64(info.Id), uint64(info.IsP2pSupported), uint64(info.SliceCount), uint64(info.InstanceCount),
			uint64(info.MultiprocessorCount), uint64(info.CopyEngineCount), uint64(info.DecoderCount), uint64(info.EncoderCount),
			uint64(info.JpegCount), uint64(info.OfaCount), info.MemorySizeMB}
		exp := []uint64{uint64(want.ID), uint64(want.IsP2pSupported), uint64(want.SliceCount), uint64(want.InstanceCount),
			uint64(want.MultiprocessorCount), uint64(want.CopyEngineCount), uint64(want.DecoderCount), uint64(want.EncoderCount),
			uint64(want.JpegCount), uint64(want.OfaCount), want.MemorySizeMB}
		if !slices.Equal(got, exp) {
			t.Errorf("profile index %d: got id,p2p,slices,inst,SMs,CE,DEC,ENC,JPEG,OFA,MB %v, want %v", index, got, exp)
		}

		placements, ret := d.GetGpuInstancePossiblePlacements(&info)
		check(t, ret, "GetGpuInstancePossiblePlacements(%d)", info.Id)
		var starts []uint32
		for _, p := range placements {
			starts = append(starts, p.Start)
			if p.Size != want.PlacementSize {
				t.Errorf("profile %d: placement size %d, want %d", info.Id, p.Size, want.PlacementSize)
			}
		}
		if !slices.Equal(starts, want.PlacementStarts) {
			t.Errorf("profile %d: placement starts %v, want %v", info.Id, starts, want.PlacementStarts)
		}

		// The name go-nvlib derives from the numbers must be the real one.
		p, err := lib2.NewMigProfile(index, fullCIIndex(info.SliceCount), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, mem.Total)
		if err != nil {
			t.Fatal(err)
		}
		if p.String() != want.Name {
			t.Errorf("profile index %d: go-nvlib name %q, want %q", index, p.String(), want.Name)
		}
	}
}

func equal(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func fullCIIndex(slices uint32) int {
	return map[uint32]int{
		1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
		3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
		7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	}[slices]
}

// TestProfileNamesAndSMs checks, for every model, that go-nvlib names the
// GPU instance profiles with the real names (MIG user guide; H200 fixture)
// and the SM counts, and that each GI profile has a full-size CI profile with
// all of the GI's SMs.
func TestProfileNamesAndSMs(t *testing.T) {
	type row struct {
		index int
		id    uint32
		name  string
		sms   uint32
	}
	tests := []struct {
		node string
		gpu  string
		cc   [2]int
		rows []row
	}{
		{"dgxa100", "NVIDIA A100-SXM4-40GB", [2]int{8, 0}, []row{
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.5gb", 14},
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "1g.5gb+me", 14},
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "1g.10gb", 14},
			{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.10gb", 28},
			{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.20gb", 42},
			{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.20gb", 56},
			{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.40gb", 98},
		}},
		{"dgxh100", "NVIDIA H100 80GB HBM3", [2]int{9, 0}, []row{
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.10gb", 16},
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "1g.10gb+me", 16},
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "1g.20gb", 26},
			{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.20gb", 32},
			{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.40gb", 60},
			{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.40gb", 64},
			{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.80gb", 132},
		}},
		{"dgxh200", "NVIDIA H200", [2]int{9, 0}, []row{
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 19, "1g.18gb", 16},
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "1g.18gb+me", 16},
			{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "1g.35gb", 26},
			{nvml.GPU_INSTANCE_PROFILE_2_SLICE, 14, "2g.35gb", 32},
			{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 9, "3g.71gb", 60},
			{nvml.GPU_INSTANCE_PROFILE_4_SLICE, 5, "4g.71gb", 64},
			{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, "7g.141gb", 132},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			_, lib := open(t, tc.node, t.TempDir(), sim.WithGPUCount(1))
			d := device(t, lib, 0)
			name, _ := d.GetName()
			major, minor, _ := d.GetCudaComputeCapability()
			if name != tc.gpu || [2]int{major, minor} != tc.cc {
				t.Errorf("GPU %q CC %d.%d, want %q %v", name, major, minor, tc.gpu, tc.cc)
			}
			mem, ret := d.GetMemoryInfo()
			check(t, ret, "GetMemoryInfo")
			enableMig(t, d)
			nvl := nvlib.New(lib)
			supported := 0
			for i := 0; i < nvml.GPU_INSTANCE_PROFILE_COUNT; i++ {
				if _, ret := d.GetGpuInstanceProfileInfo(i); ret == nvml.SUCCESS {
					supported++
				}
			}
			if supported != len(tc.rows) {
				t.Errorf("%d supported GI profiles, want %d", supported, len(tc.rows))
			}
			for _, r := range tc.rows {
				info, ret := d.GetGpuInstanceProfileInfo(r.index)
				check(t, ret, "GetGpuInstanceProfileInfo(%d)", r.index)
				p, err := nvl.NewMigProfile(r.index, fullCIIndex(info.SliceCount), 0, info.MemorySizeMB, mem.Total)
				if err != nil {
					t.Fatal(err)
				}
				if info.Id != r.id || p.String() != r.name || info.MultiprocessorCount != r.sms {
					t.Errorf("index %d: id %d name %q SMs %d, want %d %q %d", r.index, info.Id, p.String(), info.MultiprocessorCount, r.id, r.name, r.sms)
				}
				// A GI of this profile has a full-size CI with all its SMs.
				gi, ret := d.CreateGpuInstance(&info)
				check(t, ret, "CreateGpuInstance(%s)", r.name)
				full := ciProfile(t, gi, fullCIIndex(info.SliceCount))
				if full.SliceCount != info.SliceCount || full.MultiprocessorCount != info.MultiprocessorCount {
					t.Errorf("%s: full CI has %d slices %d SMs, want %d and %d", r.name, full.SliceCount, full.MultiprocessorCount, info.SliceCount, info.MultiprocessorCount)
				}
				check(t, gi.Destroy(), "Destroy")
			}
		})
	}
}

func TestMigMinorsFile(t *testing.T) {
	f := loadH200Fixture(t)
	tests := []struct {
		name  string
		opts  []sim.Option
		first []string // first lines after config/monitor
		lines int
	}{
		{"8 GPUs", nil, nil, 2 + 8*15*9},
		{"minors not indexes", []sim.Option{sim.WithGPUCount(2), sim.WithMinors(5, 3)},
			[]string{"gpu3/gi0/access 408", "gpu3/gi0/ci0/access 409"}, 2 + 2*15*9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := sim.Open("dgxh200", t.TempDir(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(n.MigMinorsPath())
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
			if len(lines) != tc.lines {
				t.Errorf("%d lines, want %d", len(lines), tc.lines)
			}
			if tc.first == nil {
				if !slices.Equal(lines[:len(f.MigMinorsHead)], f.MigMinorsHead) {
					t.Errorf("first lines differ from the real H200:\n%s", strings.Join(lines[:len(f.MigMinorsHead)], "\n"))
				}
				if last := lines[len(lines)-1]; last != "gpu7/gi14/ci7/access 1082" {
					t.Errorf("last line %q", last)
				}
				return
			}
			if !slices.Equal(lines[2:2+len(tc.first)], tc.first) {
				t.Errorf("got %v, want %v", lines[2:2+len(tc.first)], tc.first)
			}
		})
	}
}
