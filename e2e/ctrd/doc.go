// Package ctrd drives a private containerd daemon from Go tests: it writes a
// configuration whose root, state, sockets and log all live in one short
// temp dir, starts `containerd --config` in its own process group, waits
// until it answers, runs containers from a minimal rootfs holding the probe
// program (e2e/probe) without any image, and, on cleanup, deletes the
// containers, stops the daemon and asserts that nothing (daemon, shims,
// runc, container processes, mounts, cgroups, shim sockets) is left behind.
// The system containerd, if any, is never touched.
//
// Containers run in the namespace "gpumux-e2e" through the runc shim
// (io.containerd.runc.v2); RunOpts.BinaryName swaps runc for a wrapper such
// as gpumux-runtime, as containerd's runc option `BinaryName` does.
//
// The package itself has no build tag so that `go vet ./...` covers it; the
// tests that use it carry the `e2e` build tag and need root.
package ctrd
