package sim

import (
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sources of the tables below:
//
//   - dgxh200: a real H200 with driver 580.159.04 (nvidia-smi -q, nvidia-smi
//     mig -lgip/-lgipp, NVML queries; copied into testdata/h200.json): also
//     its power limit (700 W), BAR1 (262144 MiB, 1 MiB used when idle), max
//     clocks (1980 MHz graphics, 3201 MHz memory), PCIe link (gen 5, x16),
//     persistence mode (enabled) and display (attached, not active).
//   - dgxh100 and dgxa100 BAR1, max clocks and PCIe links are the
//     H100-SXM5-80GB's (131072 MiB, 1980/2619 MHz, gen 5 x16) and the
//     A100-SXM4-40GB's (65536 MiB, 1410/1215 MHz, gen 4 x16) from NVIDIA's
//     data sheets and nvidia-smi -q of those cards.
//   - dgxh100: nvidia-smi mig -lgip of an "NVIDIA H100 80GB HBM3" (memory
//     9.75/19.62/39.50/79.25 GiB, SMs 16/16/26/32/60/64/132) and nvidia-smi -q
//     of a DGX H100 (81559 MiB, 454 MiB reserved, device 0x233010DE,
//     subsystem 0x16C110DE, bus ids 18,2A,3A,5D,9A,AB,BA,DB).
//   - dgxa100: NVIDIA MIG user guide tables for A100-SXM4-40GB (memory
//     4.75/9.62/19.50/39.25 GiB, SMs 14/14/14/28/42/56/98, NVDEC/JPEG/OFA
//     per profile). Total memory 40960 MiB as reported by current drivers.
//     Reserved memory is not documented for the 40GB part; 763 MiB is the
//     value measured on an A100-SXM4-80GB.
//
// Placements are identical on the three GPUs (8 memory slots):
// 1g {0..6}:1, 1g+me {0..6}:1, 1g.2x {0,2,4,6}:2, 2g {0,2,4}:2, 3g {0,4}:4,
// 4g {0}:4, 7g {0}:8.

const (
	memorySlots = 8 // memory slots of a MIG-capable GPU
	mib         = 1 << 20
	maxMigDevs  = 7    // nvmlDeviceGetMaxMigDeviceCount when MIG is enabled
	maxCIPerGI  = 8    // compute instance ids per GPU instance (ci0..ci7 in mig-minors)
	maxGIPerGPU = 15   // GPU instance ids per GPU (gi0..gi14 in mig-minors)
	processMiB  = 1024 // memory each simulated process uses
	bar1IdleMiB = 1    // BAR1 in use on an idle GPU (the H200's)
)

// giProfile is one GPU instance profile of a model.
type giProfile struct {
	index  int    // NVML_GPU_INSTANCE_PROFILE_*: the argument of GetGpuInstanceProfileInfo
	name   string // as printed by nvidia-smi and go-nvlib, e.g. "1g.18gb"
	info   nvml.GpuInstanceProfileInfo
	size   uint32   // placement size in memory slots
	starts []uint32 // possible placement starts
}

// ciProfile is one compute instance profile inside a GPU instance profile.
type ciProfile struct {
	index  int // NVML_COMPUTE_INSTANCE_PROFILE_* (equal to info.Id)
	name   string
	info   nvml.ComputeInstanceProfileInfo
	size   uint32   // placement size in compute slices
	starts []uint32 // possible placement starts
}

// model describes one simulated node: its GPU model and the DGX around it.
type model struct {
	node           string
	gpuName        string
	arch           nvml.DeviceArchitecture
	ccMajor        int
	ccMinor        int
	memoryBytes    uint64
	reservedBytes  uint64
	smCount        uint32
	coresPerSM     int    // CUDA cores per SM: 64 on A100, 128 on Hopper
	sliceSMs       uint32 // SMs of one compute slice (1c)
	pciDeviceID    uint32
	pciSubsystemID uint32
	busNumbers     []uint32 // PCI bus of GPU 0..7
	driver         string
	cudaDriver     int
	powerLimitMW   uint32
	bar1Bytes      uint64
	maxClocksMHz   [2]uint32 // graphics, memory (nvmlDeviceGetMaxClockInfo)
	pcieGen        uint32    // max link generation
	pcieWidth      uint32    // max link width
	idle           Telemetry
	giProfiles     []giProfile
}

// gp is a row of a GPU instance profile table:
// index, id, name, slices, instances, SMs, memory MB, CE, DEC, ENC, JPEG, OFA, placement size, starts.
func gp(index int, id uint32, name string, slices, instances, sms uint32, memMB uint64,
	ce, dec, enc, jpeg, ofa, size uint32, starts ...uint32) giProfile {
	return giProfile{
		index: index,
		name:  name,
		info: nvml.GpuInstanceProfileInfo{
			Id: id, IsP2pSupported: 0, SliceCount: slices, InstanceCount: instances,
			MultiprocessorCount: sms, CopyEngineCount: ce, DecoderCount: dec, EncoderCount: enc,
			JpegCount: jpeg, OfaCount: ofa, MemorySizeMB: memMB,
		},
		size:   size,
		starts: starts,
	}
}

const (
	p1    = nvml.GPU_INSTANCE_PROFILE_1_SLICE
	p1me  = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1
	p1mem = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2
	p2    = nvml.GPU_INSTANCE_PROFILE_2_SLICE
	p3    = nvml.GPU_INSTANCE_PROFILE_3_SLICE
	p4    = nvml.GPU_INSTANCE_PROFILE_4_SLICE
	p7    = nvml.GPU_INSTANCE_PROFILE_7_SLICE
)

// Driver 580.159.04 (CUDA 13.0) supports all three GPUs; the simulated
// nodes all run it.
const (
	simDriver     = "580.159.04"
	simCudaDriver = 13000
	simNVML       = "13.580.159.04"
)

var dgxBusA100 = []uint32{0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD}
var dgxBusHopper = []uint32{0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB}

var models = map[string]*model{
	"dgxa100": {
		node: "dgxa100", gpuName: "NVIDIA A100-SXM4-40GB", arch: nvml.DEVICE_ARCH_AMPERE,
		ccMajor: 8, ccMinor: 0, memoryBytes: 40960 * mib, reservedBytes: 763 * mib,
		smCount: 108, coresPerSM: 64, sliceSMs: 14, pciDeviceID: 0x20B010DE, pciSubsystemID: 0x134F10DE,
		busNumbers: dgxBusA100, driver: simDriver, cudaDriver: simCudaDriver,
		powerLimitMW: 400000, idle: Telemetry{TemperatureC: 31, PowerMilliwatts: 57000},
		bar1Bytes: 65536 * mib, maxClocksMHz: [2]uint32{1410, 1215}, pcieGen: 4, pcieWidth: 16,
		giProfiles: []giProfile{
			//  index id  name          sl inst SMs  memMB  CE DEC ENC JPG OFA size starts
			gp(p1, 19, "1g.5gb", 1, 7, 14, 4864, 1, 0, 0, 0, 0, 1, 0, 1, 2, 3, 4, 5, 6),
			gp(p2, 14, "2g.10gb", 2, 3, 28, 9856, 2, 1, 0, 0, 0, 2, 0, 2, 4),
			gp(p3, 9, "3g.20gb", 3, 2, 42, 19968, 3, 2, 0, 0, 0, 4, 0, 4),
			gp(p4, 5, "4g.20gb", 4, 1, 56, 19968, 4, 2, 0, 0, 0, 4, 0),
			gp(p7, 0, "7g.40gb", 7, 1, 98, 40192, 7, 5, 0, 1, 1, 8, 0),
			gp(p1me, 20, "1g.5gb+me", 1, 1, 14, 4864, 1, 1, 0, 1, 1, 1, 0, 1, 2, 3, 4, 5, 6),
			gp(p1mem, 15, "1g.10gb", 1, 4, 14, 9856, 1, 1, 0, 0, 0, 2, 0, 2, 4, 6),
		},
	},
	"dgxh100": {
		node: "dgxh100", gpuName: "NVIDIA H100 80GB HBM3", arch: nvml.DEVICE_ARCH_HOPPER,
		ccMajor: 9, ccMinor: 0, memoryBytes: 81559 * mib, reservedBytes: 454 * mib,
		smCount: 132, coresPerSM: 128, sliceSMs: 16, pciDeviceID: 0x233010DE, pciSubsystemID: 0x16C110DE,
		busNumbers: dgxBusHopper, driver: simDriver, cudaDriver: simCudaDriver,
		powerLimitMW: 700000, idle: Telemetry{TemperatureC: 30, PowerMilliwatts: 100890},
		bar1Bytes: 131072 * mib, maxClocksMHz: [2]uint32{1980, 2619}, pcieGen: 5, pcieWidth: 16,
		giProfiles: []giProfile{
			//  index id  name          sl inst SMs  memMB  CE DEC ENC JPG OFA size starts
			gp(p1, 19, "1g.10gb", 1, 7, 16, 9984, 1, 1, 0, 1, 0, 1, 0, 1, 2, 3, 4, 5, 6),
			gp(p2, 14, "2g.20gb", 2, 3, 32, 20096, 2, 2, 0, 2, 0, 2, 0, 2, 4),
			gp(p3, 9, "3g.40gb", 3, 2, 60, 40448, 3, 3, 0, 3, 0, 4, 0, 4),
			gp(p4, 5, "4g.40gb", 4, 1, 64, 40448, 4, 4, 0, 4, 0, 4, 0),
			gp(p7, 0, "7g.80gb", 7, 1, 132, 81152, 8, 7, 0, 7, 1, 8, 0),
			gp(p1me, 20, "1g.10gb+me", 1, 1, 16, 9984, 1, 1, 0, 1, 1, 1, 0, 1, 2, 3, 4, 5, 6),
			gp(p1mem, 15, "1g.20gb", 1, 4, 26, 20096, 1, 1, 0, 1, 0, 2, 0, 2, 4, 6),
		},
	},
	"dgxh200": {
		node: "dgxh200", gpuName: "NVIDIA H200", arch: nvml.DEVICE_ARCH_HOPPER,
		ccMajor: 9, ccMinor: 0, memoryBytes: 150754820096, reservedBytes: 616 * mib,
		smCount: 132, coresPerSM: 128, sliceSMs: 16, pciDeviceID: 0x233510DE, pciSubsystemID: 0x18BF10DE,
		busNumbers: dgxBusHopper, driver: simDriver, cudaDriver: simCudaDriver,
		powerLimitMW: 700000, idle: Telemetry{TemperatureC: 39, PowerMilliwatts: 130990},
		bar1Bytes: 262144 * mib, maxClocksMHz: [2]uint32{1980, 3201}, pcieGen: 5, pcieWidth: 16,
		giProfiles: []giProfile{
			//  index id  name          sl inst SMs  memMB   CE DEC ENC JPG OFA size starts
			gp(p1, 19, "1g.18gb", 1, 7, 16, 16384, 1, 1, 0, 1, 0, 1, 0, 1, 2, 3, 4, 5, 6),
			gp(p2, 14, "2g.35gb", 2, 3, 32, 33280, 2, 2, 0, 2, 0, 2, 0, 2, 4),
			gp(p3, 9, "3g.71gb", 3, 2, 60, 71424, 3, 3, 0, 3, 0, 4, 0, 4),
			gp(p4, 5, "4g.71gb", 4, 1, 64, 71424, 4, 4, 0, 4, 0, 4, 0),
			gp(p7, 0, "7g.141gb", 7, 1, 132, 143360, 8, 7, 0, 7, 1, 8, 0),
			gp(p1me, 20, "1g.18gb+me", 1, 1, 16, 16384, 1, 1, 0, 1, 1, 1, 0, 1, 2, 3, 4, 5, 6),
			gp(p1mem, 15, "1g.35gb", 1, 4, 26, 33280, 1, 1, 0, 1, 0, 2, 0, 2, 4, 6),
		},
	},
}

// Names lists the simulated nodes: "dgxa100", "dgxh100", "dgxh200".
func Names() []string {
	names := make([]string, 0, len(models))
	for name := range models {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// profileByIndex returns the GPU instance profile for an NVML profile index.
func (m *model) profileByIndex(index int) *giProfile {
	for i := range m.giProfiles {
		if m.giProfiles[i].index == index {
			return &m.giProfiles[i]
		}
	}
	return nil
}

// profileByID returns the GPU instance profile with the given profile id.
func (m *model) profileByID(id uint32) *giProfile {
	for i := range m.giProfiles {
		if m.giProfiles[i].info.Id == id {
			return &m.giProfiles[i]
		}
	}
	return nil
}

// ciSliceProfiles are the compute instance profiles by compute slice count.
var ciSliceProfiles = []struct {
	index  int
	slices uint32
}{
	{nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 1},
	{nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, 2},
	{nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 3},
	{nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, 4},
	{nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, 7},
}

// ciProfiles lists the compute instance profiles of a GPU instance profile:
// a CI with c compute slices exists for c == g (the full GI, with all the
// GI's SMs) and for smaller c with 2c <= g+1 (1c.7g, 2c.7g, 3c.7g, 4c.7g,
// 1c.4g, 2c.4g, 1c.3g, 2c.3g, 1c.2g), as nvidia-smi mig -lcip lists them.
// A partial CI gets c times the SMs of one slice. CI placements are aligned
// to c rounded up to a power of two ({0,4}:3 in a 7g GI). All engines of the
// GI are shared by its CIs.
func (m *model) ciProfiles(gi *giProfile) []ciProfile {
	g := gi.info.SliceCount
	var out []ciProfile
	for _, c := range ciSliceProfiles {
		if c.slices > g || (c.slices < g && 2*c.slices > g+1) {
			continue
		}
		sms := c.slices * m.sliceSMs
		name := fmt.Sprintf("%dc.%s", c.slices, gi.name)
		if c.slices == g {
			sms = gi.info.MultiprocessorCount
			name = gi.name
		}
		step := uint32(1)
		for step < c.slices {
			step *= 2
		}
		var starts []uint32
		for s := uint32(0); s+c.slices <= g; s += step {
			starts = append(starts, s)
		}
		out = append(out, ciProfile{
			index: c.index,
			name:  name,
			info: nvml.ComputeInstanceProfileInfo{
				Id:                    uint32(c.index),
				SliceCount:            c.slices,
				InstanceCount:         uint32(len(starts)),
				MultiprocessorCount:   sms,
				SharedCopyEngineCount: gi.info.CopyEngineCount,
				SharedDecoderCount:    gi.info.DecoderCount,
				SharedEncoderCount:    gi.info.EncoderCount,
				SharedJpegCount:       gi.info.JpegCount,
				SharedOfaCount:        gi.info.OfaCount,
			},
			size:   c.slices,
			starts: starts,
		})
	}
	return out
}

// ciProfileByID returns the compute instance profile id of GI profile gi.
func (m *model) ciProfileByID(gi *giProfile, id uint32) *ciProfile {
	for _, p := range m.ciProfiles(gi) {
		if p.info.Id == id {
			return &p
		}
	}
	return nil
}

// giIDFor returns the GPU instance id the driver assigns to a placement: the
// ids follow the memory-slot tree (8 -> 0; 4 -> 1,2; 2 -> 3..6; 1 -> 7..14).
func giIDFor(start, size uint32) uint32 {
	switch size {
	case 8:
		return 0
	case 4:
		return 1 + start/4
	case 2:
		return 3 + start/2
	default:
		return 7 + start
	}
}

// giAccessMinor is the nvidia-caps minor of gpu<minor>/gi<id>/access, as in
// /proc/driver/nvidia-caps/mig-minors.
func giAccessMinor(gpuMinor int, gi uint32) int {
	return 3 + gpuMinor*maxGIPerGPU*(maxCIPerGI+1) + int(gi)*(maxCIPerGI+1)
}

// ciAccessMinor is the nvidia-caps minor of gpu<minor>/gi<gi>/ci<ci>/access.
func ciAccessMinor(gpuMinor int, gi, ci uint32) int {
	return giAccessMinor(gpuMinor, gi) + 1 + int(ci)
}

func overlaps(aStart, aSize, bStart, bSize uint32) bool {
	return aStart < bStart+bSize && bStart < aStart+aSize
}
