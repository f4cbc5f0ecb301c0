package sim

import (
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Handles of MIG devices, GPU instances and compute instances. They name
// their instance by (GPU index, GI id, CI id) plus the GI's serial or the
// MIG UUID, and look it up in the current state on every call, so a handle
// stays usable across reloads and reports ERROR_INVALID_ARGUMENT once its
// instance is gone (destroyed here or by another process).

// ---- MIG device handles ----

// migDevice is the handle of a MIG device (GPU instance + compute instance).
type migDevice struct {
	funcDevice
	n    *Node
	idx  int // parent GPU
	gi   uint32
	ci   uint32
	uuid string
}

func (n *Node) migHandleLocked(idx int, gi *giState, ci *ciState) *migDevice {
	if h, ok := n.migs[ci.UUID]; ok {
		return h
	}
	d := &migDevice{n: n, idx: idx, gi: gi.ID, ci: ci.ID, uuid: ci.UUID}
	parent := n.gpus[idx]
	d.GetIndexFunc = d.getIndex
	d.GetUUIDFunc = func() (uuid string, ret nvml.Return) {
		ret = d.read(func(*gpuState, *giState, *ciState) nvml.Return { uuid = d.uuid; return nvml.SUCCESS })
		return uuid, ret
	}
	d.GetNameFunc = d.getName
	d.GetPciInfoFunc = parent.getPciInfo
	d.GetMemoryInfoFunc = d.getMemoryInfo
	d.GetCudaComputeCapabilityFunc = parent.GetCudaComputeCapabilityFunc
	d.GetArchitectureFunc = parent.GetArchitectureFunc
	d.GetBrandFunc = parent.GetBrandFunc
	d.GetAttributesFunc = d.getAttributes
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return ifInit(n, true) }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (dev nvml.Device, ret nvml.Return) {
		ret = d.read(func(*gpuState, *giState, *ciState) nvml.Return { dev = parent; return nvml.SUCCESS })
		return dev, ret
	}
	d.GetGpuInstanceIdFunc = func() (id int, ret nvml.Return) {
		ret = d.read(func(*gpuState, *giState, *ciState) nvml.Return { id = int(d.gi); return nvml.SUCCESS })
		return id, ret
	}
	d.GetComputeInstanceIdFunc = func() (id int, ret nvml.Return) {
		ret = d.read(func(*gpuState, *giState, *ciState) nvml.Return { id = int(d.ci); return nvml.SUCCESS })
		return id, ret
	}
	d.GetComputeRunningProcessesFunc = func() (out []nvml.ProcessInfo, ret nvml.Return) {
		ret = d.read(func(_ *gpuState, gi *giState, ci *ciState) nvml.Return {
			out = migProcesses(gi, ci)
			return nvml.SUCCESS
		})
		return out, ret
	}
	n.migs[ci.UUID] = d
	return d
}

// read runs fn on the MIG device's current state; a handle whose compute
// instance is gone (or was recreated) gets ERROR_INVALID_ARGUMENT.
func (d *migDevice) read(fn func(g *gpuState, gi *giState, ci *ciState) nvml.Return) nvml.Return {
	return d.n.view(func(st *state) nvml.Return {
		g := st.GPUs[d.idx]
		gi := g.gi(d.gi)
		if gi == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		ci := gi.ci(d.ci)
		if ci == nil || ci.UUID != d.uuid {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return fn(g, gi, ci)
	})
}

func (d *migDevice) profiles(gi *giState, ci *ciState) (*giProfile, *ciProfile) {
	p := d.n.model.profileByID(gi.ProfileID)
	return p, d.n.model.ciProfileByID(p, ci.ProfileID)
}

// getIndex returns the index to pass to GetMigDeviceHandleByIndex.
func (d *migDevice) getIndex() (index int, ret nvml.Return) {
	ret = d.read(func(g *gpuState, _ *giState, ci *ciState) nvml.Return {
		for i, m := range g.migDevices() {
			if m.ci == ci {
				index = i
			}
		}
		return nvml.SUCCESS
	})
	return index, ret
}

// getName returns e.g. "NVIDIA H200 MIG 1g.18gb" or "... MIG 1c.3g.71gb".
func (d *migDevice) getName() (name string, ret nvml.Return) {
	ret = d.read(func(_ *gpuState, gi *giState, ci *ciState) nvml.Return {
		_, cp := d.profiles(gi, ci)
		name = d.n.model.gpuName + " MIG " + cp.name
		return nvml.SUCCESS
	})
	return name, ret
}

func (d *migDevice) getMemoryInfo() (m nvml.Memory, ret nvml.Return) {
	ret = d.read(func(_ *gpuState, gi *giState, ci *ciState) nvml.Return {
		p, _ := d.profiles(gi, ci)
		total := p.info.MemorySizeMB * mib
		used := min(uint64(len(ci.Processes))*processMiB*mib, total)
		m = nvml.Memory{Total: total, Used: used, Free: total - used}
		return nvml.SUCCESS
	})
	return m, ret
}

func (d *migDevice) getAttributes() (a nvml.DeviceAttributes, ret nvml.Return) {
	ret = d.read(func(_ *gpuState, gi *giState, ci *ciState) nvml.Return {
		p, cp := d.profiles(gi, ci)
		a = nvml.DeviceAttributes{
			MultiprocessorCount:       cp.info.MultiprocessorCount,
			SharedCopyEngineCount:     cp.info.SharedCopyEngineCount,
			SharedDecoderCount:        cp.info.SharedDecoderCount,
			SharedEncoderCount:        cp.info.SharedEncoderCount,
			SharedJpegCount:           cp.info.SharedJpegCount,
			SharedOfaCount:            cp.info.SharedOfaCount,
			GpuInstanceSliceCount:     p.info.SliceCount,
			ComputeInstanceSliceCount: cp.info.SliceCount,
			MemorySizeMB:              p.info.MemorySizeMB,
		}
		return nvml.SUCCESS
	})
	return a, ret
}

// ---- GPU instances ----

type gpuInstance struct {
	funcGpuInstance
	n      *Node
	idx    int
	id     uint32
	serial uint64
}

func (n *Node) giHandleLocked(idx int, gi *giState) *gpuInstance {
	if h, ok := n.gis[gi.Serial]; ok {
		return h
	}
	h := &gpuInstance{n: n, idx: idx, id: gi.ID, serial: gi.Serial}
	h.GetInfoFunc = h.getInfo
	h.GetComputeInstanceProfileInfoFunc = h.getComputeInstanceProfileInfo
	h.GetComputeInstancePossiblePlacementsFunc = h.getComputeInstancePossiblePlacements
	h.GetComputeInstanceRemainingCapacityFunc = h.getComputeInstanceRemainingCapacity
	h.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		return h.createComputeInstance(info, nil, false)
	}
	h.CreateComputeInstanceWithPlacementFunc = func(info *nvml.ComputeInstanceProfileInfo, pl *nvml.ComputeInstancePlacement) (nvml.ComputeInstance, nvml.Return) {
		return h.createComputeInstance(info, pl, true)
	}
	h.GetComputeInstancesFunc = h.getComputeInstances
	h.GetComputeInstanceByIdFunc = h.getComputeInstanceByID
	h.DestroyFunc = h.destroy
	n.gis[gi.Serial] = h
	return h
}

// resolve finds the GPU instance in st; ERROR_INVALID_ARGUMENT if it is gone.
func (h *gpuInstance) resolve(st *state) (*gpuState, *giState, *giProfile, nvml.Return) {
	g := st.GPUs[h.idx]
	gi := g.gi(h.id)
	if gi == nil || gi.Serial != h.serial {
		return nil, nil, nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return g, gi, h.n.model.profileByID(gi.ProfileID), nvml.SUCCESS
}

func (h *gpuInstance) read(fn func(gi *giState, p *giProfile) nvml.Return) nvml.Return {
	return h.n.view(func(st *state) nvml.Return {
		_, gi, p, ret := h.resolve(st)
		if ret != nvml.SUCCESS {
			return ret
		}
		return fn(gi, p)
	})
}

func (h *gpuInstance) getInfo() (info nvml.GpuInstanceInfo, ret nvml.Return) {
	ret = h.read(func(gi *giState, _ *giProfile) nvml.Return {
		info = nvml.GpuInstanceInfo{
			Device:    h.n.gpus[h.idx],
			Id:        gi.ID,
			ProfileId: gi.ProfileID,
			Placement: nvml.GpuInstancePlacement{Start: gi.Start, Size: gi.Size},
		}
		return nvml.SUCCESS
	})
	return info, ret
}

func (h *gpuInstance) getComputeInstanceProfileInfo(profile, engProfile int) (info nvml.ComputeInstanceProfileInfo, ret nvml.Return) {
	ret = h.read(func(_ *giState, p *giProfile) nvml.Return {
		if profile < 0 || profile >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT ||
			engProfile < 0 || engProfile >= nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		cp := h.n.model.ciProfileByID(p, uint32(profile))
		if cp == nil {
			return nvml.ERROR_NOT_SUPPORTED
		}
		info = cp.info
		return nvml.SUCCESS
	})
	return info, ret
}

// ciProfileOf validates a compute instance profile argument.
func (h *gpuInstance) ciProfileOf(p *giProfile, info *nvml.ComputeInstanceProfileInfo) (*ciProfile, nvml.Return) {
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	cp := h.n.model.ciProfileByID(p, info.Id)
	if cp == nil {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return cp, nvml.SUCCESS
}

func (h *gpuInstance) getComputeInstancePossiblePlacements(info *nvml.ComputeInstanceProfileInfo) (out []nvml.ComputeInstancePlacement, ret nvml.Return) {
	ret = h.read(func(_ *giState, p *giProfile) nvml.Return {
		cp, ret := h.ciProfileOf(p, info)
		if ret != nvml.SUCCESS {
			return ret
		}
		for _, s := range cp.starts {
			out = append(out, nvml.ComputeInstancePlacement{Start: s, Size: cp.size})
		}
		return nvml.SUCCESS
	})
	return out, ret
}

func ciFree(gi *giState, start, size uint32) bool {
	for _, ci := range gi.CIs {
		if overlaps(start, size, ci.Start, ci.Size) {
			return false
		}
	}
	return true
}

func countCIProfile(gi *giState, id uint32) uint32 {
	var c uint32
	for _, ci := range gi.CIs {
		if ci.ProfileID == id {
			c++
		}
	}
	return c
}

func (h *gpuInstance) getComputeInstanceRemainingCapacity(info *nvml.ComputeInstanceProfileInfo) (count int, ret nvml.Return) {
	ret = h.read(func(gi *giState, p *giProfile) nvml.Return {
		cp, ret := h.ciProfileOf(p, info)
		if ret != nvml.SUCCESS {
			return ret
		}
		left := int(cp.info.InstanceCount) - int(countCIProfile(gi, cp.info.Id))
		taken := &giState{CIs: append([]*ciState(nil), gi.CIs...)}
		for _, s := range cp.starts {
			if count < left && ciFree(taken, s, cp.size) {
				taken.CIs = append(taken.CIs, &ciState{Start: s, Size: cp.size})
				count++
			}
		}
		return nvml.SUCCESS
	})
	return count, ret
}

func (h *gpuInstance) createComputeInstance(info *nvml.ComputeInstanceProfileInfo, pl *nvml.ComputeInstancePlacement, withPlacement bool) (nvml.ComputeInstance, nvml.Return) {
	var out *computeInstance
	ret := h.n.update(func(st *state) nvml.Return {
		_, gi, p, ret := h.resolve(st)
		if ret != nvml.SUCCESS {
			return ret
		}
		if withPlacement && pl == nil {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		cp, ret := h.ciProfileOf(p, info)
		if ret != nvml.SUCCESS {
			return ret
		}
		var start uint32
		found := false
		if pl != nil {
			if pl.Size != cp.size || !contains(cp.starts, pl.Start) {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			start, found = pl.Start, ciFree(gi, pl.Start, cp.size)
		} else {
			for _, s := range cp.starts {
				if ciFree(gi, s, cp.size) {
					start, found = s, true
					break
				}
			}
		}
		if !found || countCIProfile(gi, cp.info.Id) >= cp.info.InstanceCount {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		id := uint32(0)
		for gi.ci(id) != nil {
			id++
		}
		if id >= maxCIPerGI {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		u, err := newUUID()
		if err != nil {
			return nvml.ERROR_UNKNOWN
		}
		ci := &ciState{ID: id, ProfileID: cp.info.Id, Start: start, Size: cp.size, UUID: "MIG-" + u}
		gi.CIs = append(gi.CIs, ci)
		sort.Slice(gi.CIs, func(i, j int) bool { return gi.CIs[i].ID < gi.CIs[j].ID })
		out = h.n.ciHandleLocked(h.idx, gi, ci)
		return nvml.SUCCESS
	})
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return out, ret
}

func (h *gpuInstance) getComputeInstances(info *nvml.ComputeInstanceProfileInfo) (out []nvml.ComputeInstance, ret nvml.Return) {
	ret = h.read(func(gi *giState, p *giProfile) nvml.Return {
		cp, ret := h.ciProfileOf(p, info)
		if ret != nvml.SUCCESS {
			return ret
		}
		out = []nvml.ComputeInstance{}
		for _, ci := range gi.CIs {
			if ci.ProfileID == cp.info.Id {
				out = append(out, h.n.ciHandleLocked(h.idx, gi, ci))
			}
		}
		return nvml.SUCCESS
	})
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return out, ret
}

func (h *gpuInstance) getComputeInstanceByID(id int) (out nvml.ComputeInstance, ret nvml.Return) {
	ret = h.read(func(gi *giState, _ *giProfile) nvml.Return {
		if id < 0 {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		ci := gi.ci(uint32(id))
		if ci == nil {
			return nvml.ERROR_NOT_FOUND
		}
		out = h.n.ciHandleLocked(h.idx, gi, ci)
		return nvml.SUCCESS
	})
	return out, ret
}

// destroy fails with ERROR_IN_USE while the GPU instance has compute
// instances (which is also where processes run).
func (h *gpuInstance) destroy() nvml.Return {
	return h.n.update(func(st *state) nvml.Return {
		g, gi, _, ret := h.resolve(st)
		if ret != nvml.SUCCESS {
			return ret
		}
		if len(gi.CIs) > 0 {
			return nvml.ERROR_IN_USE
		}
		for i, x := range g.GIs {
			if x == gi {
				g.GIs = append(g.GIs[:i], g.GIs[i+1:]...)
				break
			}
		}
		return nvml.SUCCESS
	})
}

// ---- compute instances ----

type computeInstance struct {
	funcComputeInstance
	n    *Node
	idx  int
	gi   uint32
	id   uint32
	uuid string
}

func (n *Node) ciHandleLocked(idx int, gi *giState, ci *ciState) *computeInstance {
	if h, ok := n.cis[ci.UUID]; ok {
		return h
	}
	h := &computeInstance{n: n, idx: idx, gi: gi.ID, id: ci.ID, uuid: ci.UUID}
	h.GetInfoFunc = h.getInfo
	h.DestroyFunc = h.destroy
	n.cis[ci.UUID] = h
	return h
}

func (h *computeInstance) resolve(st *state) (*giState, *ciState, nvml.Return) {
	gi := st.GPUs[h.idx].gi(h.gi)
	if gi == nil {
		return nil, nil, nvml.ERROR_INVALID_ARGUMENT
	}
	ci := gi.ci(h.id)
	if ci == nil || ci.UUID != h.uuid {
		return nil, nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return gi, ci, nvml.SUCCESS
}

func (h *computeInstance) getInfo() (info nvml.ComputeInstanceInfo, ret nvml.Return) {
	ret = h.n.view(func(st *state) nvml.Return {
		gi, ci, ret := h.resolve(st)
		if ret != nvml.SUCCESS {
			return ret
		}
		info = nvml.ComputeInstanceInfo{
			Device:      h.n.gpus[h.idx],
			GpuInstance: h.n.giHandleLocked(h.idx, gi),
			Id:          ci.ID,
			ProfileId:   ci.ProfileID,
			Placement:   nvml.ComputeInstancePlacement{Start: ci.Start, Size: ci.Size},
		}
		return nvml.SUCCESS
	})
	return info, ret
}

// destroy fails with ERROR_IN_USE while processes run on the MIG device.
func (h *computeInstance) destroy() nvml.Return {
	return h.n.update(func(st *state) nvml.Return {
		gi, ci, ret := h.resolve(st)
		if ret != nvml.SUCCESS {
			return ret
		}
		if len(ci.Processes) > 0 {
			return nvml.ERROR_IN_USE
		}
		for i, x := range gi.CIs {
			if x == ci {
				gi.CIs = append(gi.CIs[:i], gi.CIs[i+1:]...)
				break
			}
		}
		return nvml.SUCCESS
	})
}
