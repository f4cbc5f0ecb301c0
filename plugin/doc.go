// Package plugin is gpumux's Nomad device plugin: Nomad's types over the
// node core (package node), which the plugin runs as the node's agent. It
// advertises a node's shares (whole GPUs, MIG instances, MPS shares,
// time-slice replicas, remote shares) as device groups with rich
// attributes, so that jobs pick a mechanism with constraints, and turns a
// reservation into the container edits the node core computes.
//
// The plugin and gpumux agent are the two ways to run a node; they refuse
// to run the same state directory at once (node.ErrAgentRunning).
package plugin
