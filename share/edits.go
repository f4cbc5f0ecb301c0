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
	// Hooks are programs run as the container starts. Where a front door
	// cannot run hooks (a Nomad reservation), the container goes without.
	Hooks []Hook
	// DriverLibraries maps the SONAME of each host driver library the
	// mounts give ("libcuda.so.1") to its path in the container, for a
	// mechanism that puts a library of its own in front of the real one
	// (the time-slice limiter) and must find the real one. Not itself an
	// edit.
	DriverLibraries map[string]string
}

// Hook is an OCI hook: a host program that the runtime runs at one point
// of the container's start, with the container's state on its stdin.
type Hook struct {
	Stage string   // the OCI hook's name: HookCreateContainer
	Path  string   // the program, an absolute host path
	Args  []string // its arguments, Args[0] (its name) included
	Env   []string // its environment ("K=V"; a hook inherits none)
}

// HookCreateContainer is the OCI hook run in the container's namespaces
// once its mounts are made, before it switches to its root file system.
const HookCreateContainer = "createContainer"

// DeviceNode is a character device to expose in the container.
type DeviceNode struct {
	HostPath      string // e.g. /dev/nvidia3, or a simulated node's dev root
	ContainerPath string // e.g. /dev/nvidia3
	Permissions   string // cgroup permissions: "rw" or "rwm"
}

// Mount is a host path bind-mounted into the container, or a scratch
// directory.
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
	// Scratch makes it an empty tmpfs at ContainerPath (HostPath unused):
	// gpumux's directory (ScratchDir), below which the mechanisms mount
	// their pieces, so that runc makes their mountpoints in memory, not as
	// new files in the container's root (each one an inode allocation on
	// the root's file system, a copy-up on overlayfs).
	Scratch bool
}

// ScratchDir is gpumux's directory in containers: the limiter, MPS pipe
// directory, interposer and TLS files are mounted below it, on a tmpfs of
// its own (Mount.Scratch).
const ScratchDir = "/run/gpumux"

// Environment variables set for shares.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDADevices    = "CUDA_VISIBLE_DEVICES"
	EnvShares         = "GPUMUX_SHARES"
	// EnvReservation carries the token of a Nomad reservation, which
	// gpumux-runtime claims to honour GPUMUX_SHARES.
	EnvReservation = "GPUMUX_RESERVATION"
	// EnvLibraryPath is the dynamic linker's search path, which shares
	// whose driver library is gpumux's (remote) put first.
	EnvLibraryPath = "LD_LIBRARY_PATH"
)

// DevicePaths tells where the node keeps its device nodes.
type DevicePaths interface {
	// DevicePath maps a device node's name under /dev ("nvidia0") to its host path.
	DevicePath(name string) string
}

// DeviceEdits are the edits every share on one of the node's own devices
// needs, whatever its mechanism: the UUIDs in NVIDIA_VISIBLE_DEVICES (and
// CUDA_VISIBLE_DEVICES when MIG instances are among them), the share IDs in
// GPUMUX_SHARES, and the device nodes: the control and UVM nodes, each
// parent GPU's /dev/nvidia<minor>, and for shares on MIG instances their two
// nvidia-caps nodes. Shares on another host's GPU (Remote set) get only
// their IDs in GPUMUX_SHARES. Mechanisms add their own edits to these.
func DeviceEdits(shares []Share, paths DevicePaths) (Edits, error) {
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
		nodes = append(nodes, DeviceNode{HostPath: paths.DevicePath(name), ContainerPath: "/dev/" + name, Permissions: "rw"})
	}
	for _, s := range shares {
		ids = append(ids, s.ID)
		if s.Remote != nil {
			continue
		}
		for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
			addNode(n)
		}
		addNode(fmt.Sprintf("nvidia%d", s.GPU.Minor))
		uuid := s.GPU.UUID
		if s.MIG != nil { // a MIG instance, whole or shared
			if s.MIG.GICapMinor < 0 || s.MIG.CICapMinor < 0 {
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
	env := map[string]string{EnvShares: strings.Join(ids, ",")}
	if len(visible) > 0 {
		env[EnvVisibleDevices] = strings.Join(visible, ",")
	}
	if anyMIG {
		env[EnvCUDADevices] = env[EnvVisibleDevices]
	}
	return Edits{Env: env, DeviceNodes: nodes}, nil
}

// Alone checks that a task's shares are all of mechanism m, for mechanisms
// whose shares cannot be combined with others in one task; why says why.
func Alone(m Mechanism, all []Share, why string) error {
	for _, s := range all {
		if s.Mechanism != m {
			return fmt.Errorf("shares %v: %s shares cannot be combined with %s shares in one task (%s)", SortedIDs(all), m, s.Mechanism, why)
		}
	}
	return nil
}

// OneDevice checks that shares all run on one device (see Share.Parent),
// and returns it; what names the device ("device", "GPU") and why says why
// they must.
func OneDevice(shares []Share, what, why string) (string, error) {
	var parent string
	for _, s := range shares {
		if parent != "" && s.Parent() != parent {
			return "", fmt.Errorf("shares %v: a task's %s shares must come from one %s (%s and %s): %s; ask for one larger share instead", SortedIDs(shares), s.Mechanism, what, parent, s.Parent(), why)
		}
		parent = s.Parent()
	}
	return parent, nil
}

// IDs returns the IDs of shares, in their order.
func IDs(shares []Share) []string {
	ids := make([]string, len(shares))
	for i, s := range shares {
		ids[i] = s.ID
	}
	return ids
}

// SortedIDs returns the IDs of shares, sorted.
func SortedIDs(shares []Share) []string {
	ids := IDs(shares)
	sort.Strings(ids)
	return ids
}
