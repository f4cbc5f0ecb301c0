package sim

import (
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Return codes follow the NVML documentation (nvml.h of driver 580):
//   - anything before Init (or after the last Shutdown): ERROR_UNINITIALIZED;
//   - GPU instance create/list/lookup/capacity while MIG is disabled:
//     ERROR_NOT_SUPPORTED ("If device doesn't have MIG mode enabled");
//   - a placement that is not one of the profile's placements:
//     ERROR_INVALID_ARGUMENT; a placement overlapping an existing GPU
//     instance, or the profile's instance count reached:
//     ERROR_INSUFFICIENT_RESOURCES;
//   - destroying a GPU instance with compute instances, or a compute instance
//     with processes: ERROR_IN_USE;
//   - GetGpuInstanceById/GetComputeInstanceById of an unknown id:
//     ERROR_NOT_FOUND; a handle whose instance was destroyed (by this or
//     another process): ERROR_INVALID_ARGUMENT.

const (
	supportedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError |
		nvml.EventTypeDoubleBitEccError | nvml.EventTypePState | nvml.EventTypeClock
	noInstance = 0xFFFFFFFF // GI/CI id of an event or process not in a MIG device
)

// library implements nvml.Interface.
type library struct {
	funcInterface
	n *Node
}

var (
	_ nvml.Interface       = (*library)(nil)
	_ nvml.Device          = (*gpu)(nil)
	_ nvml.Device          = (*migDevice)(nil)
	_ nvml.GpuInstance     = (*gpuInstance)(nil)
	_ nvml.ComputeInstance = (*computeInstance)(nil)
)

func newLibrary(n *Node) *library {
	l := &library{n: n}
	l.InitFunc = n.init
	l.InitWithFlagsFunc = func(uint32) nvml.Return { return n.init() }
	l.ShutdownFunc = n.shutdown
	l.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
	l.ExtensionsFunc = func() nvml.ExtendedInterface { return extensions{} }
	l.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return ifInit(n, n.model.driver) }
	l.SystemGetNVMLVersionFunc = func() (string, nvml.Return) { return ifInit(n, simNVML) }
	l.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return ifInit(n, n.model.cudaDriver) }
	l.SystemGetCudaDriverVersion_v2Func = l.SystemGetCudaDriverVersionFunc
	l.DeviceGetCountFunc = func() (int, nvml.Return) { return ifInit(n, len(n.gpus)) }
	l.DeviceGetHandleByIndexFunc = l.handleByIndex
	l.DeviceGetHandleByUUIDFunc = l.handleByUUID
	l.DeviceGetHandleByPciBusIdFunc = l.handleByPciBusID
	l.EventSetCreateFunc = n.eventSetCreate
	return l
}

func (n *Node) init() nvml.Return {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.initCount++
	return nvml.SUCCESS
}

func (n *Node) shutdown() nvml.Return {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.initCount == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	n.initCount--
	return nvml.SUCCESS
}

// ifInit returns v if the library is initialized.
func ifInit[T any](n *Node, v T) (T, nvml.Return) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.initCount == 0 {
		var zero T
		return zero, nvml.ERROR_UNINITIALIZED
	}
	return v, nvml.SUCCESS
}

func (l *library) handleByIndex(index int) (nvml.Device, nvml.Return) {
	var dev nvml.Device
	ret := l.n.view(func(st *state) nvml.Return {
		if index < 0 || index >= len(l.n.gpus) {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		dev = l.n.gpus[index]
		return nvml.SUCCESS
	})
	return dev, ret
}

// handleByUUID accepts GPU and MIG UUIDs, like the real library.
func (l *library) handleByUUID(uuid string) (nvml.Device, nvml.Return) {
	var dev nvml.Device
	ret := l.n.view(func(st *state) nvml.Return {
		if uuid == "" {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		for _, g := range st.GPUs {
			if g.UUID == uuid {
				dev = l.n.gpus[g.Index]
				return nvml.SUCCESS
			}
		}
		if g, gi, ci := st.findMig(uuid); ci != nil {
			dev = l.n.migHandleLocked(g.Index, gi, ci)
			return nvml.SUCCESS
		}
		return nvml.ERROR_NOT_FOUND
	})
	return dev, ret
}

// handleByPciBusID accepts "domain:bus:device.function" (4 or 8 hex digit
// domain, any case) and "bus:device.function".
func (l *library) handleByPciBusID(busID string) (nvml.Device, nvml.Return) {
	var dev nvml.Device
	ret := l.n.view(func(st *state) nvml.Return {
		want, ok := parseBusID(busID)
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		for _, g := range st.GPUs {
			if have, _ := parseBusID(g.PciBusID); have == want {
				dev = l.n.gpus[g.Index]
				return nvml.SUCCESS
			}
		}
		return nvml.ERROR_NOT_FOUND
	})
	return dev, ret
}

func parseBusID(s string) ([4]uint64, bool) {
	var out [4]uint64
	parts := strings.Split(strings.TrimSpace(s), ":")
	switch len(parts) {
	case 2:
		parts = append([]string{"0"}, parts...)
	case 3:
	default:
		return out, false
	}
	devfn := strings.Split(parts[2], ".")
	if len(devfn) != 2 {
		return out, false
	}
	fields := []string{parts[0], parts[1], devfn[0], devfn[1]}
	bits := []int{32, 8, 8, 8}
	for i, f := range fields {
		v, err := strconv.ParseUint(f, 16, bits[i])
		if err != nil {
			return out, false
		}
		out[i] = v
	}
	return out, true
}

func pciInfo(m *model, g *gpuState) nvml.PciInfo {
	id, _ := parseBusID(g.PciBusID)
	p := nvml.PciInfo{
		Domain:         uint32(id[0]),
		Bus:            uint32(id[1]),
		Device:         uint32(id[2]),
		PciDeviceId:    m.pciDeviceID,
		PciSubSystemId: m.pciSubsystemID,
	}
	copyCString(p.BusId[:], g.PciBusID)
	copyCString(p.BusIdLegacy[:], strings.TrimPrefix(g.PciBusID, "0000"))
	return p
}

func copyCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// processBytes is the memory used by the processes of a GPU (all its MIG
// devices when MIG is enabled).
func processBytes(g *gpuState) uint64 {
	count := len(g.Processes)
	for _, m := range g.migDevices() {
		count += len(m.ci.Processes)
	}
	return uint64(count) * processMiB * mib
}

// ---- full GPU handles ----

// gpu is the handle of a whole GPU.
type gpu struct {
	funcDevice
	n   *Node
	idx int
}

func newGPU(n *Node, idx int) *gpu {
	d := &gpu{n: n, idx: idx}
	d.GetIndexFunc = func() (int, nvml.Return) { return ifInit(n, idx) }
	d.GetMinorNumberFunc = d.getMinorNumber
	d.GetUUIDFunc = d.getUUID
	d.GetNameFunc = func() (string, nvml.Return) { return ifInit(n, n.model.gpuName) }
	d.GetPciInfoFunc = d.getPciInfo
	d.GetMemoryInfoFunc = d.getMemoryInfo
	d.GetMemoryInfo_v2Func = d.getMemoryInfoV2
	d.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) {
		_, ret := ifInit(n, 0)
		return n.model.ccMajor, n.model.ccMinor, ret
	}
	d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return ifInit(n, n.model.arch) }
	d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return ifInit(n, nvml.BRAND_NVIDIA) }
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return ifInit(n, nvml.COMPUTEMODE_DEFAULT) }
	// Real NVML answers nvmlDeviceGetAttributes for MIG device handles only
	// (seen on an H200, driver 580.159.04): a whole GPU's SM count comes from
	// its core count.
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		_, ret := ifInit(n, 0)
		if ret == nvml.SUCCESS {
			ret = nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.DeviceAttributes{}, ret
	}
	d.GetNumGpuCoresFunc = func() (int, nvml.Return) {
		return ifInit(n, int(n.model.smCount)*n.model.coresPerSM)
	}
	d.GetMigModeFunc = d.getMigMode
	d.SetMigModeFunc = d.setMigMode
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return ifInit(n, false) }
	d.GetMaxMigDeviceCountFunc = d.getMaxMigDeviceCount
	d.GetMigDeviceHandleByIndexFunc = d.getMigDeviceHandleByIndex
	d.GetGpuInstanceProfileInfoFunc = d.getGpuInstanceProfileInfo
	d.GetGpuInstancePossiblePlacementsFunc = d.getGpuInstancePossiblePlacements
	d.GetGpuInstanceRemainingCapacityFunc = d.getGpuInstanceRemainingCapacity
	d.CreateGpuInstanceFunc = func(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		return d.createGpuInstance(info, nil)
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		if pl == nil {
			_, ret := ifInit(n, 0)
			if ret == nvml.SUCCESS {
				ret = nvml.ERROR_INVALID_ARGUMENT
			}
			return nil, ret
		}
		return d.createGpuInstance(info, pl)
	}
	d.GetGpuInstancesFunc = d.getGpuInstances
	d.GetGpuInstanceByIdFunc = d.getGpuInstanceByID
	d.GetComputeRunningProcessesFunc = d.getComputeRunningProcesses
	d.GetUtilizationRatesFunc = d.getUtilizationRates
	d.GetTemperatureFunc = d.getTemperature
	d.GetPowerUsageFunc = d.getPowerUsage
	d.GetPowerManagementLimitFunc = func() (uint32, nvml.Return) { return ifInit(n, n.model.powerLimitMW) }
	d.GetEnforcedPowerLimitFunc = d.GetPowerManagementLimitFunc
	d.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) {
		used := uint64(bar1IdleMiB * mib)
		return ifInit(n, nvml.BAR1Memory{Bar1Total: n.model.bar1Bytes, Bar1Used: used, Bar1Free: n.model.bar1Bytes - used})
	}
	d.GetMaxClockInfoFunc = d.getMaxClockInfo
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return ifInit(n, int(n.model.pcieGen)) }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return ifInit(n, int(n.model.pcieWidth)) }
	// The H200 reports a display attached (nvidia-smi: "Display Attached:
	// Yes", the display mode) but not active, with persistence mode on.
	d.GetDisplayModeFunc = func() (nvml.EnableState, nvml.Return) { return ifInit(n, nvml.FEATURE_ENABLED) }
	d.GetDisplayActiveFunc = func() (nvml.EnableState, nvml.Return) { return ifInit(n, nvml.FEATURE_DISABLED) }
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return ifInit(n, nvml.FEATURE_ENABLED) }
	d.GetEncoderUtilizationFunc = d.getCodecUtilization
	d.GetDecoderUtilizationFunc = d.getCodecUtilization
	d.RegisterEventsFunc = d.registerEvents
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return ifInit(n, uint64(supportedEvents)) }
	return d
}

// read runs fn on the current state of this GPU.
func (d *gpu) read(fn func(g *gpuState) nvml.Return) nvml.Return {
	return d.n.view(func(st *state) nvml.Return { return fn(st.GPUs[d.idx]) })
}

func (d *gpu) getMinorNumber() (minor int, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return { minor = g.Minor; return nvml.SUCCESS })
	return minor, ret
}

func (d *gpu) getUUID() (uuid string, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return { uuid = g.UUID; return nvml.SUCCESS })
	return uuid, ret
}

func (d *gpu) getPciInfo() (p nvml.PciInfo, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return { p = pciInfo(d.n.model, g); return nvml.SUCCESS })
	return p, ret
}

// getMemoryInfo reports the v1 numbers: used includes the memory the driver
// reserves (616 MiB on an idle H200) plus 1 GiB per simulated process.
func (d *gpu) getMemoryInfo() (m nvml.Memory, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		total := d.n.model.memoryBytes
		used := min(d.n.model.reservedBytes+processBytes(g), total)
		m = nvml.Memory{Total: total, Used: used, Free: total - used}
		return nvml.SUCCESS
	})
	return m, ret
}

func (d *gpu) getMemoryInfoV2() (m nvml.Memory_v2, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		total, reserved := d.n.model.memoryBytes, d.n.model.reservedBytes
		used := min(processBytes(g), total-reserved)
		m = nvml.Memory_v2{Total: total, Reserved: reserved, Used: used, Free: total - reserved - used}
		m.Version = nvml.STRUCT_VERSION(m, 2)
		return nvml.SUCCESS
	})
	return m, ret
}

func (d *gpu) getMigMode() (current, pending int, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		current, pending = g.MigCurrent, g.MigPending
		return nvml.SUCCESS
	})
	return current, pending, ret
}

// setMigMode sets the current and pending mode. Disabling MIG while GPU
// instances exist fails with ERROR_IN_USE. Changing the mode while processes
// run on the GPU only sets the pending mode and reports activation status
// ERROR_IN_USE, as the driver does when it cannot reset a busy GPU; on a GPU
// marked with RequireResetForModeChange it only sets the pending mode and
// reports ERROR_RESET_REQUIRED, as the driver does where it cannot reset the
// GPU itself: the change then waits for ResetGPU.
func (d *gpu) setMigMode(mode int) (activation, ret nvml.Return) {
	activation = nvml.SUCCESS
	ret = d.n.update(func(st *state) nvml.Return {
		g := st.GPUs[d.idx]
		if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if mode == nvml.DEVICE_MIG_DISABLE && len(g.GIs) > 0 {
			return nvml.ERROR_IN_USE
		}
		g.MigPending = mode
		if mode != g.MigCurrent && len(g.Processes) > 0 {
			activation = nvml.ERROR_IN_USE
			return nvml.SUCCESS
		}
		if mode != g.MigCurrent && g.ResetForModeChange {
			activation = nvml.ERROR_RESET_REQUIRED
			return nvml.SUCCESS
		}
		g.MigCurrent = mode
		return nvml.SUCCESS
	})
	if ret != nvml.SUCCESS {
		return ret, ret
	}
	return activation, ret
}

func (d *gpu) getMaxMigDeviceCount() (count int, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if g.MigCurrent == nvml.DEVICE_MIG_ENABLE {
			count = maxMigDevs
		}
		return nvml.SUCCESS
	})
	return count, ret
}

// getMigDeviceHandleByIndex: MIG devices are ordered by GI id, then CI id.
// MIG disabled: ERROR_NOT_SUPPORTED; index outside 0..6:
// ERROR_INVALID_ARGUMENT; no MIG device at index: ERROR_NOT_FOUND.
func (d *gpu) getMigDeviceHandleByIndex(index int) (dev nvml.Device, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if g.MigCurrent != nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		if index < 0 || index >= maxMigDevs {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		migs := g.migDevices()
		if index >= len(migs) {
			return nvml.ERROR_NOT_FOUND
		}
		dev = d.n.migHandleLocked(d.idx, migs[index].gi, migs[index].ci)
		return nvml.SUCCESS
	})
	return dev, ret
}

// getGpuInstanceProfileInfo takes an NVML_GPU_INSTANCE_PROFILE_* index and
// works whatever the MIG mode (as on the real H200).
func (d *gpu) getGpuInstanceProfileInfo(index int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	if _, ret := ifInit(d.n, 0); ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, ret
	}
	if index < 0 || index >= nvml.GPU_INSTANCE_PROFILE_COUNT {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	p := d.n.model.profileByIndex(index)
	if p == nil {
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return p.info, nvml.SUCCESS
}

func (d *gpu) getGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	if _, ret := ifInit(d.n, 0); ret != nvml.SUCCESS {
		return nil, ret
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p := d.n.model.profileByID(info.Id)
	if p == nil {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	out := make([]nvml.GpuInstancePlacement, len(p.starts))
	for i, s := range p.starts {
		out[i] = nvml.GpuInstancePlacement{Start: s, Size: p.size}
	}
	return out, nvml.SUCCESS
}

func countProfile(g *gpuState, profileID uint32) uint32 {
	var c uint32
	for _, gi := range g.GIs {
		if gi.ProfileID == profileID {
			c++
		}
	}
	return c
}

// giFree reports whether slots [start, start+size) are free.
func giFree(g *gpuState, start, size uint32) bool {
	for _, gi := range g.GIs {
		if overlaps(start, size, gi.Start, gi.Size) {
			return false
		}
	}
	return true
}

func freeStarts(g *gpuState, p *giProfile) []uint32 {
	var out []uint32
	for _, s := range p.starts {
		if giFree(g, s, p.size) {
			out = append(out, s)
		}
	}
	return out
}

// remainingGI is how many more GPU instances of p fit (greedy over the
// placements, which is optimal for equal-sized aligned placements).
func remainingGI(g *gpuState, p *giProfile) int {
	left := int(p.info.InstanceCount) - int(countProfile(g, p.info.Id))
	taken := &gpuState{GIs: append([]*giState(nil), g.GIs...)}
	n := 0
	for _, s := range p.starts {
		if n < left && giFree(taken, s, p.size) {
			taken.GIs = append(taken.GIs, &giState{Start: s, Size: p.size})
			n++
		}
	}
	return n
}

// pickPlacement chooses the placement of a GPU instance created without one.
func (n *Node) pickPlacement(g *gpuState, p *giProfile) (uint32, bool) {
	free := freeStarts(g, p)
	if len(free) == 0 {
		return 0, false
	}
	if !n.bestFit {
		return free[0], true
	}
	best, bestCost := free[0], -1
	for _, s := range free {
		cost := 0
		for i := range n.model.giProfiles {
			q := &n.model.giProfiles[i]
			if countProfile(g, q.info.Id) >= q.info.InstanceCount {
				continue
			}
			for _, qs := range freeStarts(g, q) {
				if overlaps(s, p.size, qs, q.size) {
					cost++
				}
			}
		}
		if bestCost < 0 || cost < bestCost {
			best, bestCost = s, cost
		}
	}
	return best, true
}

func (d *gpu) getGpuInstanceRemainingCapacity(info *nvml.GpuInstanceProfileInfo) (count int, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if info == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if g.MigCurrent != nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		p := d.n.model.profileByID(info.Id)
		if p == nil {
			return nvml.ERROR_NOT_SUPPORTED
		}
		count = remainingGI(g, p)
		return nvml.SUCCESS
	})
	return count, ret
}

func (d *gpu) createGpuInstance(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	var h *gpuInstance
	ret := d.n.update(func(st *state) nvml.Return {
		g := st.GPUs[d.idx]
		if info == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if g.MigCurrent != nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		p := d.n.model.profileByID(info.Id)
		if p == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		var start uint32
		if pl != nil {
			if pl.Size != p.size || !contains(p.starts, pl.Start) {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			start = pl.Start
		}
		if countProfile(g, p.info.Id) >= p.info.InstanceCount {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		if pl != nil {
			if !giFree(g, start, p.size) {
				return nvml.ERROR_INSUFFICIENT_RESOURCES
			}
		} else {
			s, ok := d.n.pickPlacement(g, p)
			if !ok {
				return nvml.ERROR_INSUFFICIENT_RESOURCES
			}
			start = s
		}
		if st.FailCreateCountdown > 0 {
			st.FailCreateCountdown--
			if st.FailCreateCountdown == 0 {
				st.forceSave = true
				return nvml.ERROR_INSUFFICIENT_RESOURCES
			}
		}
		gi := &giState{ID: giIDFor(start, p.size), ProfileID: p.info.Id, Start: start, Size: p.size, Serial: st.NextSerial}
		st.NextSerial++
		g.GIs = append(g.GIs, gi)
		sort.Slice(g.GIs, func(i, j int) bool { return g.GIs[i].ID < g.GIs[j].ID })
		h = d.n.giHandleLocked(d.idx, gi)
		return nvml.SUCCESS
	})
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return h, ret
}

func contains(list []uint32, v uint32) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (d *gpu) getGpuInstances(info *nvml.GpuInstanceProfileInfo) (out []nvml.GpuInstance, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if info == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if g.MigCurrent != nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		if d.n.model.profileByID(info.Id) == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		out = []nvml.GpuInstance{}
		for _, gi := range g.GIs {
			if gi.ProfileID == info.Id {
				out = append(out, d.n.giHandleLocked(d.idx, gi))
			}
		}
		return nvml.SUCCESS
	})
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return out, ret
}

func (d *gpu) getGpuInstanceByID(id int) (out nvml.GpuInstance, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if g.MigCurrent != nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		if id < 0 {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		gi := g.gi(uint32(id))
		if gi == nil {
			return nvml.ERROR_NOT_FOUND
		}
		out = d.n.giHandleLocked(d.idx, gi)
		return nvml.SUCCESS
	})
	return out, ret
}

// getComputeRunningProcesses lists the whole-GPU processes, or with MIG
// enabled the processes of every MIG device with their GI/CI ids.
func (d *gpu) getComputeRunningProcesses() (out []nvml.ProcessInfo, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		out = []nvml.ProcessInfo{}
		for _, pid := range g.Processes {
			out = append(out, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: processMiB * mib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance})
		}
		for _, m := range g.migDevices() {
			out = append(out, migProcesses(m.gi, m.ci)...)
		}
		return nvml.SUCCESS
	})
	return out, ret
}

func migProcesses(gi *giState, ci *ciState) []nvml.ProcessInfo {
	out := []nvml.ProcessInfo{}
	for _, pid := range ci.Processes {
		out = append(out, nvml.ProcessInfo{Pid: pid, UsedGpuMemory: processMiB * mib, GpuInstanceId: gi.ID, ComputeInstanceId: ci.ID})
	}
	return out
}

// getUtilizationRates is not supported in MIG mode (nvidia-smi shows N/A).
func (d *gpu) getUtilizationRates() (u nvml.Utilization, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if g.MigCurrent == nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		u = nvml.Utilization{Gpu: g.Telemetry.GPUUtil, Memory: g.Telemetry.MemoryUtil}
		return nvml.SUCCESS
	})
	return u, ret
}

// getMaxClockInfo answers for the graphics (and SM) and memory clocks.
func (d *gpu) getMaxClockInfo(clock nvml.ClockType) (uint32, nvml.Return) {
	switch clock {
	case nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM:
		return ifInit(d.n, d.n.model.maxClocksMHz[0])
	case nvml.CLOCK_MEM:
		return ifInit(d.n, d.n.model.maxClocksMHz[1])
	}
	if _, ret := ifInit(d.n, 0); ret != nvml.SUCCESS {
		return 0, ret
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

// getCodecUtilization is the encoder's and decoder's: nothing simulated
// encodes or decodes video, and, like the GPU's utilization, it is not
// reported in MIG mode. The sampling period is the driver's, 167 ms.
func (d *gpu) getCodecUtilization() (util, periodUs uint32, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if g.MigCurrent == nvml.DEVICE_MIG_ENABLE {
			return nvml.ERROR_NOT_SUPPORTED
		}
		periodUs = 167000
		return nvml.SUCCESS
	})
	return 0, periodUs, ret
}

func (d *gpu) getTemperature(sensor nvml.TemperatureSensors) (t uint32, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return {
		if sensor != nvml.TEMPERATURE_GPU {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		t = g.Telemetry.TemperatureC
		return nvml.SUCCESS
	})
	return t, ret
}

func (d *gpu) getPowerUsage() (mw uint32, ret nvml.Return) {
	ret = d.read(func(g *gpuState) nvml.Return { mw = g.Telemetry.PowerMilliwatts; return nvml.SUCCESS })
	return mw, ret
}
