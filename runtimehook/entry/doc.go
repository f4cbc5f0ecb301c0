// Package entry is gpumux-runtime, the binary a containerd shim or Docker
// runs for every runc call of every container. It imports only the standard
// library and the OCI spec's types, so that a call it hands to runc costs
// the start of a small program and an exec: it reads runc's arguments and,
// for `create`, the bundle's annotations and process env, and replaces
// itself with runc (syscall.Exec) unless the container asks for GPUs
// (Asks). A create that asks, and the hooks that need the node
// (create-runtime), are handed to gpumux-runtime-core, installed beside it,
// which links the node core (package runtimehook). The update-ldcache hook,
// which needs only the container's root, and the poststop hook, which needs
// only the lease store (named by GPUMUX_STATE_DIR in its environment), run
// here.
package entry
