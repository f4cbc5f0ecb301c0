// Package mps will manage NVIDIA MPS control daemons for GPUs (and MIG
// instances) configured with mechanism = "mps": one daemon per device with
// private pipe and log directories under the state dir, per-share memory and
// SM limits, health watching and restart.
//
// It holds no code yet: the share model already reserves the mechanism
// (share.MPS, its attributes and isolation properties), and a layout that asks
// for it is refused with a clear error until this package lands.
package mps
