package gpu

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/gpu/sim"
)

// Errors callers branch on.
var (
	// ErrNoDriver means NVML could not be loaded or initialised: no NVIDIA
	// driver on this machine.
	ErrNoDriver = errors.New("NVIDIA driver not available")
	// ErrNotFound means a GPU, MIG instance or profile does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInUse means a change was refused because processes use the instance.
	ErrInUse = errors.New("in use")
	// ErrResetRequired means a MIG mode change waits for a GPU reset.
	ErrResetRequired = errors.New("GPU reset required")
	// ErrResetUnsupported means gpumux cannot reset the GPU itself: NVML
	// has no reset call, so on real GPUs an operator runs nvidia-smi -r.
	ErrResetUnsupported = errors.New("gpumux cannot reset this GPU")
)

// Host is the NVML client the rest of gpumux uses. It is safe for concurrent use.
type Host struct {
	lib       nvml.Interface
	devlib    device.Interface
	devRoot   string
	migMinors string
	simulated *sim.Node

	mu sync.Mutex // serialises NVML calls that change state

	// Tables fixed by the hardware and the loaded driver, read once.
	cacheMu  sync.Mutex
	profiles map[string][]MIGProfile // by GPU UUID
	fixed    map[string]fixed        // cachedFixed, by GPU UUID
	minors   migMinors               // nil until the table exists
	// Settings read again once older than settingsMaxAge (cachedSettings).
	settings       map[string]settings // by GPU UUID
	settingsMaxAge time.Duration
}

// Option configures a Host.
type Option func(*Host)

// WithDevRoot sets the directory holding the device nodes (default /dev).
func WithDevRoot(dir string) Option { return func(h *Host) { h.devRoot = dir } }

// WithMigMinors sets the path of the nvidia-caps mig-minors table
// (default /proc/driver/nvidia-caps/mig-minors).
func WithMigMinors(path string) Option { return func(h *Host) { h.migMinors = path } }

// DefaultSettingsMaxAge is how old an inventory's GPU settings (power
// limit, display and persistence modes) may be by default.
const DefaultSettingsMaxAge = 10 * time.Second

// WithSettingsMaxAge sets how old the GPU settings an inventory reports
// (power limit, display and persistence modes: read, never scheduled on)
// may be before they are read again (default DefaultSettingsMaxAge; 0:
// at every inventory).
func WithSettingsMaxAge(d time.Duration) Option { return func(h *Host) { h.settingsMaxAge = d } }

// New returns a Host over an already initialised NVML implementation.
func New(lib nvml.Interface, opts ...Option) *Host {
	h := &Host{
		lib:       lib,
		devlib:    device.New(lib),
		devRoot:   "/dev",
		migMinors: "/proc/driver/nvidia-caps/mig-minors",
		profiles:  map[string][]MIGProfile{},
		fixed:     map[string]fixed{},
		settings:  map[string]settings{},

		settingsMaxAge: DefaultSettingsMaxAge,
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// OpenNVML loads the real NVML library. On a machine without the NVIDIA driver
// it returns an error wrapping ErrNoDriver.
func OpenNVML(opts ...Option) (*Host, error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML init: %s (is the driver installed and libnvidia-ml.so.1 on the library path? on a machine without GPUs use a simulated node: %v)",
			ErrNoDriver, nvml.ErrorString(ret), sim.Names())
	}
	return New(lib, opts...), nil
}

// OpenSimulated opens the simulated node name (see package sim) whose state
// lives under stateDir, and creates its device nodes and its driver's
// user-space files (stubs: see sim.Node.EnsureDriverFiles).
func OpenSimulated(name, stateDir string, opts ...sim.Option) (*Host, error) {
	node, err := sim.Open(name, stateDir, opts...)
	if err != nil {
		return nil, err
	}
	if err := node.EnsureDeviceNodes(); err != nil {
		return nil, fmt.Errorf("simulated node %s: %w", name, err)
	}
	if err := node.EnsureDriverFiles(); err != nil {
		return nil, fmt.Errorf("simulated node %s: %w", name, err)
	}
	lib := node.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("simulated node %s: NVML init: %w", name, nvmlError(ret))
	}
	h := New(lib, WithDevRoot(node.DevRoot()), WithMigMinors(node.MigMinorsPath()))
	h.simulated = node
	return h, nil
}

// Open opens the node's GPUs: the simulated node simulate (under stateDir)
// when it is set, else the real NVML.
func Open(simulate, stateDir string) (*Host, error) {
	if simulate != "" {
		return OpenSimulated(simulate, stateDir)
	}
	return OpenNVML()
}

// Simulated returns the simulated node behind the Host, or nil on real hardware.
func (h *Host) Simulated() *sim.Node { return h.simulated }

// Close releases NVML.
func (h *Host) Close() error {
	if ret := h.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %w", nvmlError(ret))
	}
	return nil
}

// DevicePath returns the host path of a device node given its name under /dev
// (e.g. "nvidia0" or "nvidia-caps/nvidia-cap12").
func (h *Host) DevicePath(name string) string { return filepath.Join(h.devRoot, name) }

// DriverRoot is where the driver's user-space files are: "/" on a real
// host, the simulated driver (sim.Node.DriverRoot) on a simulated one.
func (h *Host) DriverRoot() string {
	if h.simulated != nil {
		return h.simulated.DriverRoot()
	}
	return "/"
}

// DriverVersion is the version of the driver NVML runs on ("580.159.04"):
// the version of its libraries' file names (libcuda.so.580.159.04).
func (h *Host) DriverVersion() (string, error) {
	v, ret := h.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("NVML driver version: %w", nvmlError(ret))
	}
	return v, nil
}

// nvmlError turns an NVML return code into an error that keeps the code, so
// callers can test it with errors.Is(err, nvml.ERROR_IN_USE).
func nvmlError(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return ret
}
