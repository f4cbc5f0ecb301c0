package gpu

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ciProfileForSlices maps a GPU instance's slice count to the compute instance
// profile that spans all of it.
var ciProfileForSlices = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// Inventory reads every GPU, its MIG profiles and its MIG instances.
func (h *Host) Inventory(ctx context.Context) (*Node, error) {
	driver, ret := h.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("reading driver version: %w", nvmlError(ret))
	}
	cuda, ret := h.lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("reading CUDA driver version: %w", nvmlError(ret))
	}
	count, ret := h.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %w", nvmlError(ret))
	}
	minors, err := h.cachedMigMinors()
	if err != nil {
		return nil, err
	}
	node := &Node{
		DriverVersion: driver,
		CUDAVersion:   fmt.Sprintf("%d.%d", cuda/1000, cuda%1000/10),
		GPUs:          make([]GPU, 0, count),
	}
	for i := 0; i < count; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, err := h.readGPU(i, minors)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		node.GPUs = append(node.GPUs, g)
	}
	return node, nil
}

func (h *Host) readGPU(index int, minors migMinors) (GPU, error) {
	dev, ret := h.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("handle: %w", nvmlError(ret))
	}
	g := GPU{Index: index}
	if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("reading UUID: %w", nvmlError(ret))
	}
	fixed, err := h.cachedFixed(dev, g.UUID)
	if err != nil {
		return GPU{}, err
	}
	g.Minor, g.Model, g.PCIBusID, g.MemoryMiB, g.ComputeCapability = fixed.minor, fixed.model, fixed.pciBusID, fixed.memoryMiB, fixed.cc
	g.SMCount = fixed.smCount
	g.Hardware = h.cachedSettings(dev, g.UUID, fixed.hardware)
	current, pending, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		g.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
		g.MIGPending = pending == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
		return g, nil // no MIG on this model
	default:
		return GPU{}, fmt.Errorf("reading MIG mode: %w", nvmlError(ret))
	}
	g.MIGCapable = true
	if g.MIGProfiles, err = h.cachedProfiles(dev, g.UUID, g.MemoryMiB<<20); err != nil {
		return GPU{}, err
	}
	if g.MIGEnabled {
		if g.MIGInstances, err = h.readInstances(dev, g, minors); err != nil {
			return GPU{}, err
		}
		if g.MIGIncomplete, err = readIncomplete(dev, g); err != nil {
			return GPU{}, err
		}
	}
	return g, nil
}

// readIncomplete lists the GPU instances of g that have no compute
// instance (g.MIGInstances lists those that have one: MIG devices), by GI
// id. Where NVML does not let this process list GPU instances, it reports
// none.
func readIncomplete(dev nvml.Device, g GPU) ([]MIGInstance, error) {
	complete := map[int]bool{}
	for _, inst := range g.MIGInstances {
		complete[inst.GIID] = true
	}
	var out []MIGInstance
	for _, p := range g.MIGProfiles {
		if p.MaxCount < 1 {
			continue
		}
		// go-nvml sizes its buffer by InstanceCount and passes only Id.
		gis, ret := dev.GetGpuInstances(&nvml.GpuInstanceProfileInfo{Id: uint32(p.GIProfileID), InstanceCount: uint32(p.MaxCount)})
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NO_PERMISSION, nvml.ERROR_NOT_SUPPORTED:
			return nil, nil
		default:
			return nil, fmt.Errorf("listing GPU instances of %s: %w", p.Name, nvmlError(ret))
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("GPU instance of %s: %w", p.Name, nvmlError(ret))
			}
			if complete[int(info.Id)] {
				continue
			}
			out = append(out, MIGInstance{
				Profile: p.Name, GIProfileID: p.GIProfileID, GIID: int(info.Id), CIID: -1,
				Placement: Placement{Start: int(info.Placement.Start), Size: int(info.Placement.Size)},
				MemoryMiB: p.MemoryMiB, SMCount: p.SMCount, GICapMinor: -1, CICapMinor: -1,
			})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].GIID < out[b].GIID })
	return out, nil
}

// coresPerSM is the number of CUDA cores in one SM, by compute capability.
var coresPerSM = map[string]int{
	"6.0": 64, "6.1": 128, "6.2": 128,
	"7.0": 64, "7.2": 64, "7.5": 64,
	"8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128,
	"9.0": 128, "10.0": 128, "10.3": 128, "12.0": 128, "12.1": 128,
}

// smCount returns a whole GPU's SM count. NVML has no direct query:
// nvmlDeviceGetAttributes answers only for MIG device handles (seen on an
// H200), so the count is the GPU's CUDA cores over the cores of one SM.
// It is 0 when neither is known.
func smCount(dev nvml.Device, cc string) int {
	if attrs, ret := dev.GetAttributes(); ret == nvml.SUCCESS && attrs.MultiprocessorCount > 0 {
		return int(attrs.MultiprocessorCount)
	}
	cores, ret := dev.GetNumGpuCores()
	if per := coresPerSM[cc]; ret == nvml.SUCCESS && per > 0 {
		return cores / per
	}
	return 0
}

// cachedSettings is readHardware of a GPU, read again once it is older
// than the Host's settingsMaxAge: the power limit and the display and
// persistence modes are settings an administrator changes, reported
// (fingerprint attributes, metrics) and never scheduled on, and the power
// limit is slow to read on an H200 (0.6 ms a call: 20 % of gpumux agent's
// create decision, BenchmarkServerCreateRealGPU).
func (h *Host) cachedSettings(dev nvml.Device, uuid string, fixed Hardware) Hardware {
	h.cacheMu.Lock()
	s, ok := h.settings[uuid]
	h.cacheMu.Unlock()
	if now := time.Now(); !ok || now.Sub(s.at) >= h.settingsMaxAge || s.hw.fixedPart() != fixed {
		// Read without the lock: a slow NVML call holds up no other GPU's
		// cached reads.
		s = settings{hw: readHardware(dev, fixed), at: now}
		h.cacheMu.Lock()
		h.settings[uuid] = s
		h.cacheMu.Unlock()
	}
	return s.hw
}

// settings is readHardware's last read of a GPU, and when.
type settings struct {
	hw Hardware
	at time.Time
}

// fixedPart is h without what readHardware adds to the fixed values.
func (h Hardware) fixedPart() Hardware {
	h.PowerLimitW, h.DisplayMode, h.PersistenceMode = 0, StateUnknown, StateUnknown
	return h
}

// readHardware reads what NVML reports of a whole GPU beyond what gpumux
// schedules on, on top of fixed, what the hardware fixes (readFixedHardware,
// read once per GPU). Every read is optional: a field NVML does not answer
// for this model or driver stays zero.
func readHardware(dev nvml.Device, fixed Hardware) Hardware {
	h := fixed
	if mw, ret := dev.GetPowerManagementLimit(); ret == nvml.SUCCESS {
		h.PowerLimitW = int(mw / 1000)
	}
	if mode, ret := dev.GetDisplayMode(); ret == nvml.SUCCESS {
		h.DisplayMode = stateOf(mode)
	}
	if mode, ret := dev.GetPersistenceMode(); ret == nvml.SUCCESS {
		h.PersistenceMode = stateOf(mode)
	}
	return h
}

// readFixedHardware reads the Hardware fields the hardware fixes: BAR1's
// size, the maximum clocks and PCIe link. The maximum clocks are slow to
// read on an H200 (about 1.8 ms a call, most of an inventory's time:
// BenchmarkServerCreateRealGPU's profile in docs/benchmarks.md).
func readFixedHardware(dev nvml.Device) Hardware {
	var h Hardware
	if bar1, ret := dev.GetBAR1MemoryInfo(); ret == nvml.SUCCESS {
		h.BAR1MiB = bar1.Bar1Total >> 20
	}
	if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_GRAPHICS); ret == nvml.SUCCESS {
		h.MaxCoresClockMHz = int(mhz)
	}
	if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		h.MaxMemoryClockMHz = int(mhz)
	}
	if gen, ret := dev.GetMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
		h.PCIeGeneration = int(gen)
	}
	if width, ret := dev.GetMaxPcieLinkWidth(); ret == nvml.SUCCESS {
		h.PCIeWidth = int(width)
	}
	return h
}

// fixed is what the hardware fixes of a whole GPU that an inventory
// reports: its identity (minor number, name, PCI bus ID, memory, compute
// capability: five NVML calls per GPU and inventory otherwise), its SM
// count (nvmlDeviceGetNumGpuCores, 0.4 ms a call on an H200) and
// readFixedHardware's fields.
type fixed struct {
	minor               int
	model, pciBusID, cc string
	memoryMiB           uint64
	hardware            Hardware
	smCount             int
}

// cachedFixed reads the fixed values of the GPU of UUID uuid once.
func (h *Host) cachedFixed(dev nvml.Device, uuid string) (fixed, error) {
	h.cacheMu.Lock()
	f, ok := h.fixed[uuid]
	h.cacheMu.Unlock()
	if ok {
		return f, nil
	}
	var err error
	read := func(what string, fn func() nvml.Return) {
		if err == nil {
			if ret := fn(); ret != nvml.SUCCESS {
				err = fmt.Errorf("reading %s: %w", what, nvmlError(ret))
			}
		}
	}
	read("minor number", func() (r nvml.Return) { f.minor, r = dev.GetMinorNumber(); return })
	read("name", func() (r nvml.Return) { f.model, r = dev.GetName(); return })
	read("PCI info", func() nvml.Return {
		pci, r := dev.GetPciInfo()
		f.pciBusID = busID(pci)
		return r
	})
	read("memory", func() nvml.Return {
		mem, r := dev.GetMemoryInfo()
		f.memoryMiB = mem.Total >> 20
		return r
	})
	read("compute capability", func() nvml.Return {
		major, minor, r := dev.GetCudaComputeCapability()
		f.cc = fmt.Sprintf("%d.%d", major, minor)
		return r
	})
	if err != nil {
		return fixed{}, err
	}
	f.hardware, f.smCount = readFixedHardware(dev), smCount(dev, f.cc)
	if f.smCount > 0 { // a read that failed is tried again next time
		h.cacheMu.Lock()
		h.fixed[uuid] = f
		h.cacheMu.Unlock()
	}
	return f, nil
}

func stateOf(s nvml.EnableState) State {
	if s == nvml.FEATURE_ENABLED {
		return StateEnabled
	}
	return StateDisabled
}

func busID(pci nvml.PciInfo) string {
	b := make([]byte, 0, len(pci.BusId))
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// cachedProfiles returns the GPU's MIG profiles, read once per GPU: the table
// is fixed by the hardware, and reading it is most of an inventory's NVML
// calls (about 16 profile and placement queries per GPU).
func (h *Host) cachedProfiles(dev nvml.Device, uuid string, memBytes uint64) ([]MIGProfile, error) {
	h.cacheMu.Lock()
	defer h.cacheMu.Unlock()
	p, ok := h.profiles[uuid]
	if !ok {
		var err error
		if p, err = h.readProfiles(dev, memBytes); err != nil {
			return nil, err
		}
		h.profiles[uuid] = p
	}
	return append([]MIGProfile(nil), p...), nil // each snapshot owns its slice
}

func (h *Host) readProfiles(dev nvml.Device, memBytes uint64) ([]MIGProfile, error) {
	var profiles []MIGProfile
	for idx := 0; idx < nvml.GPU_INSTANCE_PROFILE_COUNT; idx++ {
		info, ret := dev.GetGpuInstanceProfileInfo(idx)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("reading MIG profile %d: %w", idx, nvmlError(ret))
		}
		ciIdx, ok := ciProfileForSlices[int(info.SliceCount)]
		if !ok {
			continue
		}
		name, err := h.devlib.NewMigProfile(idx, ciIdx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, memBytes)
		if err != nil {
			return nil, fmt.Errorf("naming MIG profile %d: %w", idx, err)
		}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("reading placements of %s: %w", name, nvmlError(ret))
		}
		p := MIGProfile{
			Name:        name.String(),
			GIProfileID: int(info.Id),
			CIProfileID: ciIdx,
			Slices:      int(info.SliceCount),
			MemoryMiB:   info.MemorySizeMB,
			SMCount:     int(info.MultiprocessorCount),
			MaxCount:    int(info.InstanceCount),
		}
		for _, pl := range placements {
			p.Placements = append(p.Placements, Placement{Start: int(pl.Start), Size: int(pl.Size)})
		}
		profiles = append(profiles, p)
	}
	return profiles, nil
}

func (h *Host) readInstances(dev nvml.Device, g GPU, minors migMinors) ([]MIGInstance, error) {
	max, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("reading MIG device count: %w", nvmlError(ret))
	}
	var out []MIGInstance
	for i := 0; i < max; i++ {
		mig, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: %w", i, nvmlError(ret))
		}
		inst, err := h.readInstance(dev, mig, g, minors)
		if err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", i, err)
		}
		out = append(out, inst)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].GIID != out[b].GIID {
			return out[a].GIID < out[b].GIID
		}
		return out[a].CIID < out[b].CIID
	})
	return out, nil
}

func (h *Host) readInstance(dev, mig nvml.Device, g GPU, minors migMinors) (MIGInstance, error) {
	var inst MIGInstance
	var ret nvml.Return
	if inst.UUID, ret = mig.GetUUID(); ret != nvml.SUCCESS {
		return inst, fmt.Errorf("UUID: %w", nvmlError(ret))
	}
	if inst.GIID, ret = mig.GetGpuInstanceId(); ret != nvml.SUCCESS {
		return inst, fmt.Errorf("GPU instance id: %w", nvmlError(ret))
	}
	if inst.CIID, ret = mig.GetComputeInstanceId(); ret != nvml.SUCCESS {
		return inst, fmt.Errorf("compute instance id: %w", nvmlError(ret))
	}
	gi, ret := dev.GetGpuInstanceById(inst.GIID)
	if ret != nvml.SUCCESS {
		return inst, fmt.Errorf("GPU instance %d: %w", inst.GIID, nvmlError(ret))
	}
	giInfo, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		return inst, fmt.Errorf("GPU instance %d info: %w", inst.GIID, nvmlError(ret))
	}
	inst.GIProfileID = int(giInfo.ProfileId)
	inst.Placement = Placement{Start: int(giInfo.Placement.Start), Size: int(giInfo.Placement.Size)}
	for _, p := range g.MIGProfiles {
		if p.GIProfileID == inst.GIProfileID {
			inst.Profile, inst.MemoryMiB, inst.SMCount = p.Name, p.MemoryMiB, p.SMCount
		}
	}
	if inst.Profile == "" {
		return inst, fmt.Errorf("GPU instance %d has profile id %d, which the GPU does not list: %w", inst.GIID, inst.GIProfileID, ErrNotFound)
	}
	// A compute instance smaller than its GPU instance has fewer SMs.
	if attrs, ret := mig.GetAttributes(); ret == nvml.SUCCESS && attrs.MultiprocessorCount > 0 {
		inst.SMCount = int(attrs.MultiprocessorCount)
	}
	if mem, ret := mig.GetMemoryInfo(); ret == nvml.SUCCESS && mem.Total > 0 {
		inst.MemoryMiB = mem.Total >> 20
	}
	var err error
	if inst.GICapMinor, inst.CICapMinor, err = minors.lookup(g.Minor, inst.GIID, inst.CIID); err != nil && !errors.Is(err, errNoMigMinors) {
		return inst, err
	}
	return inst, nil
}
