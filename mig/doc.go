// Package mig changes the MIG layout of GPUs: it finds non-overlapping
// placements for a wanted set of instances (Fit) and applies a layout to a GPU
// without leaving it half-configured (Apply): it refuses while instances are in
// use, plans before it destroys anything, and restores the previous layout
// (MIG mode, and instances at their previous placements) if any step
// fails. With WithCheckpoint it records that layout before any change, so
// that the next Apply of the GPU restores it after a crash or a kill at any
// instant. GPU instances without a compute instance, which such a kill can
// leave (gpu.GPU.MIGIncomplete), are destroyed. DisableMIG destroys idle
// instances and disables MIG mode in one step. A layout that cannot fit
// is refused with why: the profiles that overlap, on which memory slots, and
// the instances that stay in their way.
//
// A MIG mode change the driver leaves pending until a GPU reset is an error
// (gpu.ErrResetRequired), unless WithReset lets Apply and DisableMIG reset
// that GPU, and only while nothing uses it. NVML has no reset call, so on
// real GPUs the reset is refused with the nvidia-smi command to run.
package mig
