package share

import (
	"fmt"
	"sort"
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

// Environment variables set for shares.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDADevices    = "CUDA_VISIBLE_DEVICES"
	EnvShares         = "GPUMUX_SHARES"
	// EnvReservation carries the token of a Nomad reservation, which
	// gpumux-runtime claims to honour GPUMUX_SHARES.
	EnvReservation = "GPUMUX_RESERVATION"
	EnvMPSPipe     = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSThreads  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// MPSPipeMount is where an MPS share's pipe directory appears in the container.
const MPSPipeMount = "/run/gpumux/mps"

// Paths tells where the node keeps what containers are given.
type Paths interface {
	// DevicePath maps a device node's name under /dev ("nvidia0") to its host path.
	DevicePath(name string) string
	// MPSPipeDir is the host pipe directory of the MPS daemon serving a device.
	MPSPipeDir(uuid string) string
}

// EditsFor computes the container edits of a set of shares: the UUIDs in
// NVIDIA_VISIBLE_DEVICES (and CUDA_VISIBLE_DEVICES when MIG instances are
// among them), the share IDs in GPUMUX_SHARES, and the device nodes: the
// control and UVM nodes, each parent GPU's /dev/nvidia<minor>, and for MIG
// instances their two nvidia-caps nodes. MPS shares add their daemon's pipe
// directory and their limits (see mpsEdits). Remote shares get no device
// node and no NVIDIA_VISIBLE_DEVICES, but the interposer and a token for
// their server (see remoteEdits); paths must then be a RemoteAccess too.
func EditsFor(shares []Share, paths Paths) (Edits, error) {
	if len(shares) == 0 {
		return Edits{}, fmt.Errorf("no shares")
	}
	for _, s := range shares {
		if s.Mechanism == Remote {
			return remoteEdits(shares, paths)
		}
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
		nodes = append(nodes, DeviceNode{HostPath: paths.DevicePath(name), ContainerPath: "/dev/" + name, Permissions: "rw"})
	}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		addNode(n)
	}
	for _, s := range shares {
		ids = append(ids, s.ID)
		addNode(fmt.Sprintf("nvidia%d", s.GPU.Minor))
		uuid := s.GPU.UUID
		if s.MIG != nil { // a MIG instance, whole or shared through MPS
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
	edits := Edits{Env: env, DeviceNodes: nodes}
	return edits, mpsEdits(shares, paths, &edits)
}

// mpsEdits adds what MPS shares need: the daemon's pipe directory, mounted at
// MPSPipeMount, and the shares' SM percentage and memory limit as client
// settings, which can only lower the daemon's defaults. A process talks to one
// MPS server, so a task's MPS shares must all be on one device, and cannot be
// mixed with other mechanisms; several shares of one device add up.
func mpsEdits(shares []Share, paths Paths, e *Edits) error {
	var (
		parent string
		pct    int
		mem    uint64
	)
	for _, s := range shares {
		if s.Mechanism != MPS {
			continue
		}
		if parent != "" && s.Parent() != parent {
			return fmt.Errorf("shares %v: a task's MPS shares must come from one device (%s and %s); ask for one larger share instead", SortedIDs(shares), parent, s.Parent())
		}
		parent = s.Parent()
		pct += s.ThreadPercent
		mem += s.MemoryMiB
	}
	if parent == "" {
		return nil
	}
	for _, s := range shares {
		if s.Mechanism != MPS {
			return fmt.Errorf("shares %v: MPS shares cannot be combined with %s shares in one task", SortedIDs(shares), s.Mechanism)
		}
	}
	e.Env[EnvMPSPipe] = MPSPipeMount
	e.Env[EnvMPSThreads] = fmt.Sprint(pct)
	e.Env[EnvMPSMemLimit] = fmt.Sprintf("0=%dM", mem) // device 0: the one device the task sees
	e.Mounts = append(e.Mounts, Mount{HostPath: paths.MPSPipeDir(parent), ContainerPath: MPSPipeMount})
	return nil
}

// SortedIDs returns the IDs of shares, sorted.
func SortedIDs(shares []Share) []string {
	ids := make([]string, len(shares))
	for i, s := range shares {
		ids[i] = s.ID
	}
	sort.Strings(ids)
	return ids
}
