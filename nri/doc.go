// Package nri is gpumux's NRI plugin: a front door for containerd 1.7+/2.x
// (and CRI-O) through the Node Resource Interface, served by gpumux agent,
// with no runtime wrapper.
//
// On CreateContainer it reads what the container asks for — its gpumux.io/*
// annotations (else its pod's) or GPUMUX_* env, strictly, as gpumux-runtime
// does (node.ParseRequest) — leases the shares through the node core
// (node.Lease: the same lease store, the same policy, the same edits) and
// returns the edits as the container's adjustment: device nodes with their
// device cgroup rules, env, mounts and hooks, made by applying the edits
// with the CDI library, as gpumux-runtime applies them to config.json. A bad
// request, or one no share fits, fails the create with the reason. The
// shares go back on StopContainer and RemoveContainer; a container that
// asks for nothing is not adjusted, nor is one that a CDI device already
// gave a share (its GPUMUX_SHARES), nor one of a runtime handler that runs
// gpumux-runtime (skip_runtime_handlers).
//
// Leases carry the agent as their owner, so that the agent's reclaim loop
// leaves them alone while it runs, and the runc root of CRI containers, so
// that a later agent can tell whether their containers still exist.
package nri
