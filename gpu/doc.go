// Package gpu reads a node's NVIDIA GPUs and their MIG instances through NVML and
// changes their MIG layout. It is the lowest layer of gpumux: everything above it
// (the share model, the Nomad plugin, the MIG and MPS managers) sees GPUs only
// through a Host.
//
// A Host wraps any implementation of go-nvml's nvml.Interface: the real library
// (OpenNVML) or a simulated node from package gpu/sim (OpenSimulated), so that the
// same inventory code runs on an H200 and on a laptop without a driver.
package gpu
