// Package plugin is gpumux's Nomad device plugin: it advertises a node's GPU
// shares (whole GPUs, MIG instances, time-slice replicas) as device groups with
// rich attributes, so that jobs pick a mechanism with constraints, and turns a
// reservation into the container edits the share model computes.
package plugin
