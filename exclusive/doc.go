// Package exclusive is the mechanism that gives a workload a whole GPU:
// hard memory, compute and fault isolation, by the hardware. It has nothing
// to start on a node and adds nothing to a container's edits beyond the
// GPU's device nodes (share.DeviceEdits).
package exclusive
