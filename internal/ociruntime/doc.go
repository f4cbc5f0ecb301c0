// Package ociruntime is what gpumux-runtime's programs agree on: runc's
// command line as a containerd shim or Docker passes it (ParseInvocation),
// the programs' names (the C entry, gpumux-runtime-hook,
// gpumux-runtime-core), the hooks' names and the environment they read.
// It imports nothing of gpumux's, so that gpumux-runtime-hook (package
// runtimehook/entry), the core (runtimehook) and gpumux agent (through
// package ocicreate) share it without importing each other.
package ociruntime
