// Package runtimehook will hold gpumux-runtime's logic: the OCI spec changes
// that inject a share's container edits at `create`, the createRuntime and
// poststop hooks, and the node-local lease store, so that containers started
// by containerd or Docker get the same shares as Nomad tasks.
//
// It holds no code yet; package share already computes the container edits it
// will apply.
package runtimehook
