package plugin

import (
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// Device attribute names: a contract with job authors (ARCHITECTURE.md).
const (
	AttrMechanism       = "mechanism"
	AttrMemory          = "memory"
	AttrComputePercent  = "compute_percent"
	AttrSMCount         = "sm_count"
	AttrMemoryIsolation = "memory_isolation"
	AttrFaultIsolation  = "fault_isolation"
	AttrMIGProfile      = "mig_profile"
	AttrParentUUID      = "parent_uuid"
	AttrComputeCap      = "cuda_compute_capability"
	AttrDriverVersion   = "driver_version"
	AttrCUDAVersion     = "cuda_version"
	AttrModel           = "model"
	// AttrRemoteAddr is a remote group's server, when all its shares are on one.
	AttrRemoteAddr = "remote_addr"
)

// nomad-device-nvidia's attributes, with its names and units, of the
// shares' physical GPU. A group has each one its GPUs report and agree on.
const (
	AttrPower           = "power"            // W: the power limit
	AttrBAR1            = "bar1"             // MiB
	AttrCoresClock      = "cores_clock"      // MHz: the graphics clock's maximum
	AttrMemoryClock     = "memory_clock"     // MHz: the memory clock's maximum
	AttrPCIBandwidth    = "pci_bandwidth"    // MB/s, see pciBandwidthMBps
	AttrDisplayState    = "display_state"    // "1": a display is attached, "0": none
	AttrPersistenceMode = "persistence_mode" // "1": on, "0": off
)

// deviceGroups turns a catalog into Nomad device groups, with each share's
// health.
func deviceGroups(c *share.Catalog, healthy func(share.Share) (bool, string)) []*device.DeviceGroup {
	groups := make([]*device.DeviceGroup, 0, len(c.Groups))
	for _, g := range c.Groups {
		dg := &device.DeviceGroup{
			Vendor:     Vendor,
			Type:       DeviceType,
			Name:       g.Name,
			Attributes: attributes(g),
		}
		for _, s := range g.Shares {
			ok, why := healthy(s)
			d := &device.Device{ID: s.ID, Healthy: ok, HealthDesc: why}
			if s.GPU.PCIBusID != "" { // remote GPUs have none on this node
				d.HwLocality = &device.DeviceLocality{PciBusID: s.GPU.PCIBusID}
			}
			dg.Devices = append(dg.Devices, d)
		}
		groups = append(groups, dg)
	}
	return groups
}

func attributes(g share.Group) map[string]*structs.Attribute {
	a := g.Attrs
	attrs := map[string]*structs.Attribute{
		AttrMechanism:       structs.NewStringAttribute(string(a.Mechanism)),
		AttrMemory:          structs.NewIntAttribute(int64(a.MemoryMiB), structs.UnitMiB),
		AttrComputePercent:  structs.NewIntAttribute(int64(a.ComputePercent), ""),
		AttrSMCount:         structs.NewIntAttribute(int64(a.SMCount), ""),
		AttrMemoryIsolation: structs.NewStringAttribute(string(a.MemoryIsolation)),
		AttrFaultIsolation:  structs.NewBoolAttribute(a.FaultIsolation),
		AttrComputeCap:      structs.NewStringAttribute(a.CUDAComputeCapability),
		AttrModel:           structs.NewStringAttribute(g.Model),
	}
	if a.DriverVersion != "" { // unknown for remote GPUs: the protocol forwards CUDA, not NVML
		attrs[AttrDriverVersion] = structs.NewStringAttribute(a.DriverVersion)
	}
	if a.CUDAVersion != "" {
		attrs[AttrCUDAVersion] = structs.NewStringAttribute(a.CUDAVersion)
	}
	if a.RemoteAddr != "" {
		attrs[AttrRemoteAddr] = structs.NewStringAttribute(a.RemoteAddr)
	}
	if a.MIGProfile != "" {
		attrs[AttrMIGProfile] = structs.NewStringAttribute(a.MIGProfile)
	}
	if a.ParentUUID != "" {
		attrs[AttrParentUUID] = structs.NewStringAttribute(a.ParentUUID)
	}
	hardwareAttributes(a.Hardware, attrs)
	return attrs
}

// hardwareAttributes adds to attrs nomad-device-nvidia's attributes of the
// hardware that NVML reported, with its units and its values.
func hardwareAttributes(h gpu.Hardware, attrs map[string]*structs.Attribute) {
	ints := []struct {
		name  string
		value int64
		unit  string
	}{
		{AttrPower, int64(h.PowerLimitW), structs.UnitW},
		{AttrBAR1, int64(h.BAR1MiB), structs.UnitMiB},
		{AttrCoresClock, int64(h.MaxCoresClockMHz), structs.UnitMHz},
		{AttrMemoryClock, int64(h.MaxMemoryClockMHz), structs.UnitMHz},
		{AttrPCIBandwidth, pciBandwidthMBps(h.PCIeGeneration, h.PCIeWidth), structs.UnitMBPerS},
	}
	for _, a := range ints {
		if a.value > 0 {
			attrs[a.name] = structs.NewIntAttribute(a.value, a.unit)
		}
	}
	for name, st := range map[string]gpu.State{AttrDisplayState: h.DisplayMode, AttrPersistenceMode: h.PersistenceMode} {
		switch st {
		case gpu.StateEnabled:
			attrs[name] = structs.NewStringAttribute("1")
		case gpu.StateDisabled:
			attrs[name] = structs.NewStringAttribute("0")
		}
	}
}

// pciBandwidthMBps is the figure nomad-device-nvidia reports as
// pci_bandwidth for a link of generation gen and width lanes: 1024 MB/s per
// lane at PCIe 3, and 1024 more at each generation after it (0, no
// attribute, before PCIe 3 or when NVML reports no link). It understates
// PCIe 5 and 6 (about 3938 and 7563 MB/s per lane); it is kept so that job
// constraints written for nomad-device-nvidia compare the same numbers.
func pciBandwidthMBps(gen, width int) int64 {
	if gen < 3 || gen > 6 || width <= 0 {
		return 0
	}
	return int64(width) * int64(gen-2) * 1024
}
