package gpu

import "fmt"

// Node is a snapshot of one machine's GPUs.
type Node struct {
	DriverVersion string // e.g. "580.159.04"
	CUDAVersion   string // CUDA driver API version, e.g. "13.0"
	GPUs          []GPU
	// Ignored are the indexes of GPUs the node has but leaves alone
	// (ignored_gpu_ids): not in GPUs, yet no index a gpu block may not
	// name.
	Ignored []int `json:",omitempty"`
}

// GPU is one physical GPU.
type GPU struct {
	Index             int
	UUID              string // "GPU-…"
	Minor             int    // device minor: /dev/nvidia<Minor>
	PCIBusID          string
	Model             string // NVML's name, e.g. "NVIDIA H200"
	MemoryMiB         uint64
	SMCount           int
	ComputeCapability string // e.g. "9.0"
	MIGCapable        bool
	MIGEnabled        bool // current MIG mode
	MIGPending        bool // pending MIG mode (differs from MIGEnabled until a reset)
	MIGProfiles       []MIGProfile
	MIGInstances      []MIGInstance
	// Hardware is what else NVML reports of the GPU: the attributes
	// nomad-device-nvidia offers.
	Hardware Hardware
	// MIGIncomplete are GPU instances without a compute instance: what a
	// change interrupted between creating a GPU instance and its compute
	// instance (or between destroying them) leaves. They are no MIG device
	// (no UUID, CIID -1, nothing can run on them) but hold their memory
	// slots; mig.Apply destroys them.
	MIGIncomplete []MIGInstance
}

// Hardware is what NVML reports of a GPU beyond what gpumux schedules on.
// A zero field is one NVML did not report for this GPU (ERROR_NOT_SUPPORTED
// on its model, ERROR_DEPRECATED on its driver, or any other error: none of
// them is worth failing an inventory for).
type Hardware struct {
	PowerLimitW       int    // nvmlDeviceGetPowerManagementLimit, in W
	BAR1MiB           uint64 // total BAR1 memory
	MaxCoresClockMHz  int    // nvmlDeviceGetMaxClockInfo(NVML_CLOCK_GRAPHICS)
	MaxMemoryClockMHz int    // nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)
	PCIeGeneration    int    // nvmlDeviceGetMaxPcieLinkGeneration
	PCIeWidth         int    // nvmlDeviceGetMaxPcieLinkWidth, in lanes
	DisplayMode       State  // nvmlDeviceGetDisplayMode: a display is connected
	PersistenceMode   State  // nvmlDeviceGetPersistenceMode
}

// Common is what h and o agree on: each field that differs is zero.
func (h Hardware) Common(o Hardware) Hardware {
	keep := func(a, b int) int {
		if a == b {
			return a
		}
		return 0
	}
	c := Hardware{
		PowerLimitW:       keep(h.PowerLimitW, o.PowerLimitW),
		MaxCoresClockMHz:  keep(h.MaxCoresClockMHz, o.MaxCoresClockMHz),
		MaxMemoryClockMHz: keep(h.MaxMemoryClockMHz, o.MaxMemoryClockMHz),
		PCIeGeneration:    keep(h.PCIeGeneration, o.PCIeGeneration),
		PCIeWidth:         keep(h.PCIeWidth, o.PCIeWidth),
	}
	if h.BAR1MiB == o.BAR1MiB {
		c.BAR1MiB = h.BAR1MiB
	}
	if h.DisplayMode == o.DisplayMode {
		c.DisplayMode = h.DisplayMode
	}
	if h.PersistenceMode == o.PersistenceMode {
		c.PersistenceMode = h.PersistenceMode
	}
	return c
}

// State is an NVML feature state that may be unknown.
type State uint8

// States of a feature.
const (
	StateUnknown State = iota
	StateDisabled
	StateEnabled
)

// MIGProfile is one GPU instance profile the GPU supports, with its full-size
// compute instance.
type MIGProfile struct {
	Name        string // as go-nvlib prints it, e.g. "3g.71gb"
	GIProfileID int    // NVML's GPU instance profile id (info.Id), e.g. 9
	CIProfileID int    // NVML's compute instance profile id of the full-size CI
	Slices      int    // compute slices
	MemoryMiB   uint64
	SMCount     int
	MaxCount    int         // how many fit on an empty GPU
	Placements  []Placement // possible placements, in memory slots
}

// Placement is where a GPU instance sits, in memory slots (8 on current GPUs).
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

func (p Placement) String() string { return fmt.Sprintf("%d:%d", p.Start, p.Size) }

// Overlaps reports whether two placements share a memory slot.
func (p Placement) Overlaps(q Placement) bool {
	return p.Start < q.Start+q.Size && q.Start < p.Start+p.Size
}

// MIGInstance is one MIG device: a GPU instance with a compute instance.
type MIGInstance struct {
	UUID        string // "MIG-…"
	Profile     string // e.g. "3g.71gb"
	GIProfileID int
	GIID        int
	CIID        int
	Placement   Placement
	MemoryMiB   uint64
	SMCount     int
	// Minors of /dev/nvidia-caps/nvidia-cap<N> that grant access to the GPU
	// instance and the compute instance, from /proc/driver/nvidia-caps/mig-minors.
	GICapMinor int
	CICapMinor int
}

// Profile returns the MIG profile with the given name, or false.
func (g *GPU) Profile(name string) (MIGProfile, bool) {
	for _, p := range g.MIGProfiles {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// ProfileNames lists the names of the GPU's MIG profiles.
func (g *GPU) ProfileNames() []string {
	names := make([]string, len(g.MIGProfiles))
	for i, p := range g.MIGProfiles {
		names[i] = p.Name
	}
	return names
}

// Usage is what a GPU or MIG instance is using right now. Fields NVML cannot
// report for that device are nil.
type Usage struct {
	MemoryUsedMiB  uint64
	MemoryTotalMiB uint64
	GPUUtilPercent *uint32
	// MemoryUtilPercent is the part of the sample period during which
	// device memory was read or written.
	MemoryUtilPercent  *uint32
	EncoderUtilPercent *uint32
	DecoderUtilPercent *uint32
	TemperatureC       *uint32
	PowerWatts         *float64
	// PowerLimitWatts is the power management limit PowerWatts is drawn
	// against.
	PowerLimitWatts *float64
	// BAR1UsedMiB and BAR1TotalMiB are the BAR1 memory (the GPU memory
	// mapped for the CPU and peers) in use and in all; BAR1TotalMiB is 0 when
	// NVML does not report it.
	BAR1UsedMiB  uint64
	BAR1TotalMiB uint64
}

// XIDEvent is a critical error the driver reported for a GPU, or for one MIG
// instance of it (GIID/CIID >= 0).
type XIDEvent struct {
	GPUUUID string
	GIID    int // -1 when the event concerns the whole GPU
	CIID    int
	XID     uint64
}
