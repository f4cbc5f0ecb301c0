// Package timeslice will configure time-slicing beyond what the share model
// already offers: the GPU's compute policy (time-slice length) and a limiter
// that enforces each replica's fair share of memory and compute.
//
// Time-slice replicas themselves (IDs, sizes, container edits) are computed by
// package share and work today; this package holds no code yet.
package timeslice
