// Package sim provides simulated GPU nodes for tests and demos only: never
// use it to drive real hardware decisions.
//
// A simulated node ("dgxa100", "dgxh100", "dgxh200") is an implementation of
// go-nvml's nvml.Interface that behaves like the real driver where the
// upstream go-nvml mocks are lax:
//
//   - Strict: MIG placements, overlaps and per-profile instance counts are
//     checked and fail with the NVML return codes the driver uses
//     (ERROR_INVALID_ARGUMENT, ERROR_INSUFFICIENT_RESOURCES, ERROR_IN_USE,
//     ERROR_NOT_SUPPORTED, ERROR_NOT_FOUND, ERROR_UNINITIALIZED before Init).
//   - Stateful and persistent: the node's state (UUIDs, MIG mode, GPU and
//     compute instances, processes, telemetry, injected XIDs) lives in
//     <stateDir>/sim/<name>/state.json. Every change is made under an
//     exclusive flock and written atomically (a new file renamed over the
//     old, with a strictly later mtime), and every read stats the file and
//     reloads it only when it changed, so several processes (a device plugin,
//     a CLI, a test) that open the same node see one machine.
//   - Faithful tables: the H200 numbers come from a real H200 (driver
//     580.159.04); the A100-SXM4-40GB and H100-SXM5-80GB numbers come from
//     NVIDIA's MIG user guide and real nvidia-smi output (see models.go).
//
// The node also creates device nodes (/dev/nvidia*, /dev/nvidia-caps/*) with
// the real major:minor numbers under DevRoot and writes a
// /proc/driver/nvidia-caps/mig-minors file, so runtime hooks can be tested
// without a GPU.
//
// Test and demo controls (InjectXid, InjectMigXid, SetProcesses,
// SetTelemetry, FailCreateAfter, FailMutation, KillAtMutation,
// RequireResetForModeChange) are persisted too, so one process can inject
// a fault that another process observes through NVML. FailMutation and
// KillAtMutation count the NVML calls that change state (SetMigMode,
// creating and destroying GPU and compute instances) in any process, and
// make the (k+1)-th fail, or kill the process making it with SIGKILL before
// it takes effect: a test walks k up to prove a change survives a failure
// or a crash at every step. ResetGPU stands in for the GPU reset NVML does not offer
// (nvidia-smi -r): it makes a pending MIG mode current and destroys the
// GPU's MIG instances, and refuses with ERROR_IN_USE while processes run;
// Resets counts the resets of a GPU.
//
// Limitations: every nvml method the simulator does not implement returns
// ERROR_NOT_SUPPORTED (never panics); the handles are built on the func-field
// types of zz_generated.funcs.go (go generate, see internal/genfuncs), which,
// unlike go-nvml's mocks, keep no record of calls. The go-nvml methods that return
// "...Handler"/"...V" helper structs (GetGpuInstanceProfileInfoV,
// GetComputeInstanceProfileInfoV, GetGpuFabricInfoV, GetTemperatureV, ...)
// return the zero helper, whose V1/V2 methods call straight into libnvml and
// abort the process when no driver is installed: use the non-V variants. The
// simulator's LookupSymbol reports those symbols as missing so that callers
// that check symbols (go-nvlib does) avoid them.
package sim
