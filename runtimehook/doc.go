// Package runtimehook is gpumux-runtime: an OCI runtime wrapper around runc
// for containerd (runc options BinaryName) and Docker (runtimes). Only
// `create` is changed: the container's request (gpumux.io/* annotations or
// GPUMUX_* env, parsed strictly by node.ParseRequest) is served by the node
// core (node.Lease): the share policy (share.Choose) picks among its shares
// that no other container holds and that can be used now, they are leased
// in the node-local lease store (package node/lease), and the node core's
// container edits are applied to config.json with the CDI library. A share that cannot be used
// now (no MPS daemon: run gpumux agent or the Nomad plugin) fails the create
// before runc starts, with the reason (once: no hook checks it again within
// the same runc create); a poststop hook releases them; leases of
// containers runc no longer knows are reclaimed. Every other subcommand is
// runc's, untouched, and a container that asks for nothing is not touched.
//
// With a remote block in the node config, remote shares (other hosts' GPUs,
// found by remote/pool) are leased the same way; the pool is looked at only
// for a container that asks for remote, or an auto one that no local share
// fits (remote.go).
package runtimehook
