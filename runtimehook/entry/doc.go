// Package entry holds what gpumux-runtime's routing rests on and the hooks
// that need no node core.
//
// gpumux-runtime itself, the program a containerd shim or Docker runs for
// every runc call of every container, is a small static C program
// (cmd/gpumux-runtime): it execs runc unless a create's spec may ask for
// GPUs (a superset of what node.ParseRequest finds a request in), hands such
// a create (and any hook it does not know, which the core refuses by name)
// to gpumux-runtime-core, which links the node core (package
// runtimehook), and the update-ldcache and poststop hooks to
// gpumux-runtime-hook, whose command line is this package's Main. The
// update-ldcache hook needs only the container's root; the poststop hook
// only the lease store, named by GPUMUX_STATE_DIR in its environment.
//
// ParseInvocation (package ociruntime) reads runc's arguments.
package entry
