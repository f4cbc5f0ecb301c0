package timeslice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// Properties are a replica's guarantees under the limiter: its memory and
// time are enforced at the CUDA API in the container ("soft": a program
// that bypasses the driver library could escape), and faults are shared.
var Properties = share.Properties{MemoryIsolation: share.Soft, FaultIsolation: false}

// Unlimited are a replica's guarantees with limit = "off": none.
var Unlimited = share.Properties{MemoryIsolation: share.None, FaultIsolation: false}

// Where a limited replica's pieces appear in the container, and the
// variables that tell the limiter (timeslice/limiter/README.md).
const (
	LibMount    = "/run/gpumux/limiter/lib"    // the limiter's libcuda.so.1 and libnvidia-ml.so.1, read-only
	LimitsMount = "/run/gpumux/limiter/limits" // the replica's limits, written by gpumux, read-only
	StateMount  = "/run/gpumux/limiter/state"  // the replica's accounting, shared by its processes
	NodeMount   = "/run/gpumux/limiter/node"   // the device's registry of busy replicas, shared by all its replicas
	EnvLimits   = "GPUMUX_LIMITER_LIMITS"
	EnvState    = "GPUMUX_LIMITER_STATE"
	EnvNode     = "GPUMUX_LIMITER_NODE"
	// EnvCUDA and EnvNVML tell the limiter where the real libraries are:
	// the host driver's, which the node core mounts.
	EnvCUDA = "GPUMUX_LIMITER_CUDA"
	EnvNVML = "GPUMUX_LIMITER_NVML"
	// Lib is the limiter's driver library, in a node's limiter_dir.
	Lib = "libcuda.so.1"
)

// Provider offers the replicas of each GPU assigned to "timeslice" (or of
// each MIG instance of one in MIG mode): "<device UUID>/timeslice/<n>",
// grouped as "<model>-timeslice-<N>x" for equal replicas and
// "<model>-timeslice-<P>pct" for replica_sizes ("-<profile>" after
// "timeslice" on MIG instances). Unless limit = "off", a container of a
// replica gets gpumux's limiter, which holds it to its memory and time.
type Provider struct {
	stateDir   string
	limiterDir string
}

// New returns the provider of a node whose state directory holds the
// replicas' limits and accounting, and whose limiter is in limiterDir.
func New(stateDir, limiterDir string) Provider {
	return Provider{stateDir: stateDir, limiterDir: limiterDir}
}

// Mechanism is share.TimeSlice.
func (Provider) Mechanism() share.Mechanism { return share.TimeSlice }

// device is what a replica splits: a GPU, or one of its MIG instances.
type device struct {
	uuid      string
	mig       *gpu.MIGInstance
	memoryMiB uint64
	smCount   int
	percent   int // of the GPU's SMs
	profile   string
}

func devicesOf(g *gpu.GPU) []device {
	if !g.MIGEnabled {
		return []device{{uuid: g.UUID, memoryMiB: g.MemoryMiB, smCount: g.SMCount, percent: 100}}
	}
	out := make([]device, len(g.MIGInstances))
	for i := range g.MIGInstances {
		inst := g.MIGInstances[i]
		out[i] = device{uuid: inst.UUID, mig: &inst, memoryMiB: inst.MemoryMiB, smCount: inst.SMCount, percent: share.PercentOf(inst.SMCount, g.SMCount), profile: inst.Profile}
	}
	return out
}

// Offers returns the replicas of every time-slice GPU.
func (p Provider) Offers(_ context.Context, node *gpu.Node, as []share.Assignment) ([]share.Offer, error) {
	var out []share.Offer
	for _, ag := range share.Assigned(node, as, share.TimeSlice) {
		g, a := ag.GPU, ag.Assignment
		pcts := a.ReplicaPercent
		if len(pcts) == 0 {
			return nil, fmt.Errorf("GPU %d: timeslice without replicas", g.Index)
		}
		props, spread, suffix := Properties, share.SpreadAlone, ""
		switch a.Limit {
		case share.LimitOff:
			props, spread, suffix = Unlimited, share.SpreadDistinctGPUs, "-off"
		case share.LimitShare:
			suffix = "-share"
		}
		equal := a.Replicas > 0
		for _, d := range devicesOf(g) {
			for k, pct := range pcts {
				attrs := share.BaseAttributes(node, g, share.TimeSlice, props)
				attrs.SMCount, attrs.MIGProfile = d.smCount, d.profile
				var size string
				if equal { // as before replica_sizes: the device divided by N
					attrs.MemoryMiB = d.memoryMiB / uint64(len(pcts))
					attrs.ComputePercent = d.percent / len(pcts)
					size = fmt.Sprintf("%dx", len(pcts))
				} else {
					attrs.MemoryMiB = d.memoryMiB * uint64(pct) / 100
					attrs.ComputePercent = d.percent * pct / 100
					size = fmt.Sprintf("%dpct", pct)
				}
				// Replicas limited otherwise than by "cap" (the default)
				// are groups of their own: their guarantees differ.
				profile := strings.TrimPrefix(d.profile+"-"+size, "-") + suffix
				out = append(out, share.Offer{
					Group: share.GroupName(g.Model, string(share.TimeSlice), profile), Profile: profile,
					Attrs: attrs, Spread: spread,
					Share: share.Share{
						ID: share.SubID(d.uuid, share.TimeSlice, k), Mechanism: share.TimeSlice, GPU: share.RefOf(g), MIG: d.mig,
						Replica: k, Replicas: len(pcts),
						MemoryMiB: attrs.MemoryMiB, ComputePercent: attrs.ComputePercent, SMCount: d.smCount,
						TimePercent: pct, Limit: a.Limit,
					},
				})
			}
		}
	}
	return out, nil
}

// Edits gives a limited replica's container the limiter: its libraries
// first on LD_LIBRARY_PATH, pointed at the real driver libraries the node
// core mounted (e.DriverLibraries), the replica's limits (read-only), its
// accounting directory, and its device's registry, where the replicas of
// one GPU (or MIG instance) lay out their windows of GPU time. The limiter holds one replica per process, so a
// task gets at most one limited replica and nothing else.
func (p Provider) Edits(mine, all []share.Share, e *share.Edits) error {
	var limited []share.Share
	for _, s := range mine {
		if s.Limit != share.LimitOff {
			limited = append(limited, s)
		}
	}
	if len(limited) == 0 {
		return nil
	}
	if len(all) > 1 {
		return fmt.Errorf("shares %v: a limited time-slice replica is alone in its task (gpumux's limiter replaces libcuda.so.1 for the whole task and holds it to one replica's size); ask for one larger replica, or set limit = \"off\" on these GPUs", share.SortedIDs(all))
	}
	s := limited[0]
	if err := p.checkLimiter(); err != nil {
		return fmt.Errorf("share %s: %w", s.ID, err)
	}
	dir, err := p.writeLimits(s)
	if err != nil {
		return fmt.Errorf("share %s: %w", s.ID, err)
	}
	e.Env[share.EnvLibraryPath] = LibMount
	e.Env[EnvLimits] = LimitsMount
	e.Env[EnvState] = StateMount
	e.Env[EnvNode] = NodeMount
	// The limiter's libraries come first on LD_LIBRARY_PATH, so programs
	// load them; they load the real ones from where the driver's files
	// are mounted.
	for env, soname := range map[string]string{EnvCUDA: "libcuda.so.1", EnvNVML: "libnvidia-ml.so.1"} {
		if path, ok := e.DriverLibraries[soname]; ok {
			e.Env[env] = path
		}
	}
	e.Mounts = append(e.Mounts,
		share.Mount{HostPath: p.limiterDir, ContainerPath: LibMount, ReadOnly: true},
		share.Mount{HostPath: filepath.Join(dir, "state"), ContainerPath: StateMount},
		share.Mount{HostPath: filepath.Join(dir, "limits"), ContainerPath: LimitsMount, ReadOnly: true},
		share.Mount{HostPath: p.NodeDir(s), ContainerPath: NodeMount},
	)
	return nil
}

// Health reports a limited replica unusable while the limiter is not
// installed; the node's XID watch covers the GPU itself.
func (p Provider) Health(s share.Share) (bool, string) {
	if s.Limit == share.LimitOff {
		return true, ""
	}
	if err := p.checkLimiter(); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// checkLimiter says why the limiter cannot be given to a container.
func (p Provider) checkLimiter() error {
	lib := filepath.Join(p.limiterDir, Lib)
	fi, err := os.Stat(lib)
	switch {
	case err != nil:
		return fmt.Errorf("limiter %s: %w (install gpumux's limiter there, or set limiter_dir; limit = \"off\" runs replicas without it)", lib, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("limiter %s is not a regular file", lib)
	}
	return nil
}

// Dir is where a replica's limits and accounting live on the host:
// <state_dir>/timeslice/<device UUID>/<n>.
func (p Provider) Dir(s share.Share) string {
	return filepath.Join(p.stateDir, "timeslice", s.Parent(), strconv.Itoa(s.Replica))
}

// NodeDir is where the replicas of a share's device register while they
// launch work: <state_dir>/timeslice/<device UUID>/node.
func (p Provider) NodeDir(s share.Share) string {
	return filepath.Join(p.stateDir, "timeslice", s.Parent(), "node")
}

// writeLimits writes a replica's limits file (atomically, the same bytes
// for the same replica) and makes its accounting directory, writable by
// the container's user, whoever that is (sticky, as /tmp).
func (p Provider) writeLimits(s share.Share) (string, error) {
	dir := p.Dir(s)
	for _, shared := range []string{filepath.Join(dir, "state"), p.NodeDir(s)} {
		if err := os.MkdirAll(shared, 0o755); err != nil {
			return "", err
		}
		if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
			return "", err
		}
	}
	limits := fmt.Sprintf("version=1\nshare=%s\nmemory_bytes=%d\ncompute_percent=%d\npolicy=%s\n", s.ID, s.MemoryMiB<<20, s.TimePercent, s.Limit)
	path := filepath.Join(dir, "limits")
	if old, err := os.ReadFile(path); err == nil && string(old) == limits {
		return dir, nil
	}
	tmp, err := os.CreateTemp(dir, ".limits-")
	if err != nil {
		return "", err
	}
	_, werr := tmp.WriteString(limits)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return dir, nil
}
