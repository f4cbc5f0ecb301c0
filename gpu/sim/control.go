package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Test and demo controls. They do not need nvml Init, and their effects are
// persisted: every process that opened the same node sees them.

// InjectXid records an XID error on a whole GPU. Event sets registered on the
// GPU for nvml.EventTypeXidCriticalError receive it with GpuInstanceId and
// ComputeInstanceId 0xFFFFFFFF.
func (n *Node) InjectXid(gpuIndex int, xid uint64) error {
	return n.transact(func(st *state) error {
		if st.gpu(gpuIndex) == nil {
			return fmt.Errorf("sim: InjectXid: no GPU %d on %s (%d GPUs)", gpuIndex, n.name, len(st.GPUs))
		}
		st.addEvent(gpuIndex, noInstance, noInstance, nvml.EventTypeXidCriticalError, xid)
		return nil
	})
}

// InjectMigXid records an XID error attributed to the MIG device (giID, ciID)
// of a GPU; the event carries those ids. The MIG device must exist.
func (n *Node) InjectMigXid(gpuIndex, giID, ciID int, xid uint64) error {
	return n.transact(func(st *state) error {
		g := st.gpu(gpuIndex)
		if g == nil {
			return fmt.Errorf("sim: InjectMigXid: no GPU %d on %s", gpuIndex, n.name)
		}
		gi := g.gi(uint32(giID))
		if giID < 0 || ciID < 0 || gi == nil || gi.ci(uint32(ciID)) == nil {
			return fmt.Errorf("sim: InjectMigXid: GPU %d has no MIG device gi%d/ci%d", gpuIndex, giID, ciID)
		}
		st.addEvent(gpuIndex, uint32(giID), uint32(ciID), nvml.EventTypeXidCriticalError, xid)
		return nil
	})
}

func (st *state) addEvent(gpuIndex int, gi, ci uint32, typ, data uint64) {
	if st.NextEventSeq == 0 {
		st.NextEventSeq = 1
	}
	st.Events = append(st.Events, event{
		Seq: st.NextEventSeq, GPU: gpuIndex, GI: gi, CI: ci, Type: typ, Data: data, Time: time.Now().UTC(),
	})
	st.NextEventSeq++
	if len(st.Events) > maxEvents {
		st.Events = append([]event(nil), st.Events[len(st.Events)-maxEvents:]...)
	}
}

// SetProcesses sets the processes running on a GPU (UUID "GPU-...", only
// while MIG is disabled) or on a MIG device (UUID "MIG-..."). They are
// reported by GetComputeRunningProcesses, use 1 GiB of memory each, and make
// Destroy of the MIG device's compute instance return ERROR_IN_USE (and a
// MIG mode change only pending). No pids clears the list.
func (n *Node) SetProcesses(uuid string, pids ...uint32) error {
	return n.transact(func(st *state) error {
		list := append([]uint32(nil), pids...)
		for _, g := range st.GPUs {
			if g.UUID == uuid {
				if g.MigCurrent == nvml.DEVICE_MIG_ENABLE && len(list) > 0 {
					return fmt.Errorf("sim: SetProcesses: GPU %s is in MIG mode; processes run on its MIG devices", uuid)
				}
				g.Processes = list
				return nil
			}
		}
		if _, _, ci := st.findMig(uuid); ci != nil {
			ci.Processes = list
			return nil
		}
		return fmt.Errorf("sim: SetProcesses: no GPU or MIG device %q on %s", uuid, n.name)
	})
}

// FailCreateAfter makes the (k+1)-th GPU instance create from now on (counting
// only creates that would otherwise succeed, in any process) fail with
// ERROR_INSUFFICIENT_RESOURCES, once; k < 0 disables it.
func (n *Node) FailCreateAfter(k int) error {
	return n.transact(func(st *state) error {
		st.FailCreateCountdown = 0
		if k >= 0 {
			st.FailCreateCountdown = k + 1
		}
		return nil
	})
}

// mutationFault is a fault injected at the (Skip+1)-th NVML call that
// changes state from when it was set, in whichever process makes it: a
// failure with Return, or, with Kill, the death of that process by SIGKILL
// before the call takes effect. It fires once.
type mutationFault struct {
	Skip   int  `json:"skip"`
	Kill   bool `json:"kill,omitempty"`
	Return int  `json:"return,omitempty"`
}

// errKilled tells update that an injected kill fires.
var errKilled = errors.New("sim: killed by an injected fault")

// FailMutation makes the (k+1)-th NVML call that changes state from now on
// (SetMigMode, creating or destroying a GPU or compute instance; calls
// that would fail anyway count too), in any process, fail with ret and
// change nothing, once. It replaces a fault set before; k < 0 clears it.
func (n *Node) FailMutation(k int, ret nvml.Return) error {
	if k >= 0 && ret == nvml.SUCCESS {
		return errors.New("sim: FailMutation: a failure needs an NVML error code, not SUCCESS")
	}
	return n.setFault(k, &mutationFault{Skip: k, Return: int(ret)})
}

// KillAtMutation makes the process that makes the (k+1)-th NVML call that
// changes state from now on (counted as by FailMutation), in any process,
// die by SIGKILL before the call takes effect, once: what a crash or
// kill -9 of that process at that instant leaves. It replaces a fault set
// before; k < 0 clears it.
func (n *Node) KillAtMutation(k int) error {
	return n.setFault(k, &mutationFault{Skip: k, Kill: true})
}

func (n *Node) setFault(k int, f *mutationFault) error {
	return n.transact(func(st *state) error {
		st.Fault = nil
		if k >= 0 {
			st.Fault = f
		}
		return nil
	})
}

// FaultPending reports whether a fault set by FailMutation or
// KillAtMutation has not fired yet.
func (n *Node) FaultPending() (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.refreshLocked(); err != nil {
		return false, err
	}
	return n.st.Fault != nil, nil
}

// SetTelemetry sets what a GPU reports for utilization, temperature and
// power.
func (n *Node) SetTelemetry(gpuIndex int, t Telemetry) error {
	return n.transact(func(st *state) error {
		g := st.gpu(gpuIndex)
		if g == nil {
			return fmt.Errorf("sim: SetTelemetry: no GPU %d on %s", gpuIndex, n.name)
		}
		g.Telemetry = t
		return nil
	})
}

// RequireResetForModeChange makes MIG mode changes of a GPU wait for a reset,
// as on GPUs whose driver cannot reset them itself (A100s in many setups,
// pass-through VMs): SetMigMode then only sets the pending mode and reports
// activation status ERROR_RESET_REQUIRED, and ResetGPU makes the pending
// mode current. false restores the default: a change takes effect at once
// unless processes run on the GPU.
func (n *Node) RequireResetForModeChange(gpuIndex int, on bool) error {
	return n.transact(func(st *state) error {
		g := st.gpu(gpuIndex)
		if g == nil {
			return fmt.Errorf("sim: RequireResetForModeChange: no GPU %d on %s (%d GPUs)", gpuIndex, n.name, len(st.GPUs))
		}
		g.ResetForModeChange = on
		return nil
	})
}

// ResetGPU resets a GPU as nvidia-smi -r does: its pending MIG mode becomes
// the current one and every GPU and compute instance on it is destroyed (a
// MIG configuration does not survive a reset). While processes run on the
// GPU or on one of its MIG devices it fails with an error wrapping
// nvml.ERROR_IN_USE and changes nothing. Other GPUs are not touched.
func (n *Node) ResetGPU(gpuIndex int) error {
	return n.transact(func(st *state) error {
		g := st.gpu(gpuIndex)
		if g == nil {
			return fmt.Errorf("sim: ResetGPU: no GPU %d on %s (%d GPUs)", gpuIndex, n.name, len(st.GPUs))
		}
		if len(g.Processes) > 0 {
			return fmt.Errorf("sim: ResetGPU: GPU %d: %w: processes %v run on it", gpuIndex, nvml.ERROR_IN_USE, g.Processes)
		}
		for _, m := range g.migDevices() {
			if len(m.ci.Processes) > 0 {
				return fmt.Errorf("sim: ResetGPU: GPU %d: %w: processes %v run on MIG device %s", gpuIndex, nvml.ERROR_IN_USE, m.ci.Processes, m.ci.UUID)
			}
		}
		g.GIs = nil
		g.MigCurrent = g.MigPending
		g.Resets++
		return nil
	})
}

// Resets returns how many times a GPU was reset with ResetGPU, by any
// process.
func (n *Node) Resets(gpuIndex int) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.refreshLocked(); err != nil {
		return 0, err
	}
	g := n.st.gpu(gpuIndex)
	if g == nil {
		return 0, fmt.Errorf("sim: Resets: no GPU %d on %s (%d GPUs)", gpuIndex, n.name, len(n.st.GPUs))
	}
	return g.Resets, nil
}
