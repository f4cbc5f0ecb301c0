// Package plugin is gpumux's Nomad device plugin: it advertises a node's GPU
// shares (whole GPUs, MIG instances, MPS shares, time-slice replicas) as
// device groups with rich attributes, so that jobs pick a mechanism with
// constraints, and turns a reservation into the container edits the share
// model computes.
//
// With a remote block in its config it also offers shares of other hosts'
// GPUs, served by gpumux-remoted and found by remote/pool at every
// fingerprint (remote.go); a node without the NVIDIA driver then offers
// those only.
package plugin
