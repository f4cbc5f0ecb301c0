package share

import (
	"fmt"
	"strings"
)

// Edits are what a container needs to use a set of shares, independent of how
// they are applied (a Nomad ContainerReservation, an OCI spec, a CDI spec).
type Edits struct {
	Env         map[string]string
	DeviceNodes []DeviceNode
	Mounts      []Mount
}

// DeviceNode is a character device to expose in the container.
type DeviceNode struct {
	HostPath      string // e.g. /dev/nvidia3, or a simulated node's dev root
	ContainerPath string // e.g. /dev/nvidia3
	Permissions   string // cgroup permissions: "rw" or "rwm"
}

// Mount is a host path bind-mounted into the container.
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
}

// Environment variables set for every share.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDADevices    = "CUDA_VISIBLE_DEVICES"
	EnvShares         = "GPUMUX_SHARES"
)

// DevicePathFunc maps a device node's name under /dev (e.g. "nvidia0") to its
// host path.
type DevicePathFunc func(name string) string

// EditsFor computes the container edits of a set of shares: the UUIDs in
// NVIDIA_VISIBLE_DEVICES (and CUDA_VISIBLE_DEVICES when MIG instances are
// among them), the share IDs in GPUMUX_SHARES, and the device nodes: the
// control and UVM nodes, each parent GPU's /dev/nvidia<minor>, and for MIG
// instances their two nvidia-caps nodes.
func EditsFor(shares []Share, devPath DevicePathFunc) (Edits, error) {
	if len(shares) == 0 {
		return Edits{}, fmt.Errorf("no shares")
	}
	var (
		visible, ids []string
		anyMIG       bool
		nodes        []DeviceNode
		seen         = map[string]bool{}
		seenVisible  = map[string]bool{}
	)
	addNode := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		nodes = append(nodes, DeviceNode{HostPath: devPath(name), ContainerPath: "/dev/" + name, Permissions: "rw"})
	}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		addNode(n)
	}
	for _, s := range shares {
		ids = append(ids, s.ID)
		addNode(fmt.Sprintf("nvidia%d", s.GPU.Minor))
		uuid := s.GPU.UUID
		if s.Mechanism == MIG {
			if s.MIG == nil || s.MIG.GICapMinor < 0 || s.MIG.CICapMinor < 0 {
				return Edits{}, fmt.Errorf("share %s: the MIG capability device minors are unknown (is /proc/driver/nvidia-caps/mig-minors readable?)", s.ID)
			}
			anyMIG = true
			uuid = s.MIG.UUID
			addNode(fmt.Sprintf("nvidia-caps/nvidia-cap%d", s.MIG.GICapMinor))
			addNode(fmt.Sprintf("nvidia-caps/nvidia-cap%d", s.MIG.CICapMinor))
		}
		if !seenVisible[uuid] {
			seenVisible[uuid] = true
			visible = append(visible, uuid)
		}
	}
	env := map[string]string{
		EnvVisibleDevices: strings.Join(visible, ","),
		EnvShares:         strings.Join(ids, ","),
	}
	if anyMIG {
		env[EnvCUDADevices] = env[EnvVisibleDevices]
	}
	return Edits{Env: env, DeviceNodes: nodes}, nil
}
