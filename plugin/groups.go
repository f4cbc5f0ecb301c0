package plugin

import (
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"

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
	return attrs
}
