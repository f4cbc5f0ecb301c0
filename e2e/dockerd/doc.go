// Package dockerd drives a private Docker engine from Go tests: Debian's
// dockerd (docker.io) with its data root, exec root, socket, pid file,
// daemon.json and log in one short temp dir, no networking of its own
// (--bridge=none, no iptables), the vfs storage driver, its containers in a
// cgroup parent of their own, and, as its containerd, a private one started
// through e2e/ctrd (never the system containerd, which dockerd would
// otherwise use when /run/containerd/containerd.sock exists). Images come
// from `docker import` of a rootfs holding the probe (e2e/probe): there is no
// registry.
//
// A test edits daemon.json before the engine starts (WithConfigure: e.g.
// `gpumux runtime configure --runtime=docker --config <daemon.json>`) and
// drives the engine with the docker CLI (Daemon.Docker) or through Nomad's
// docker driver (its `endpoint` is Daemon.Host). On cleanup the harness
// removes the containers, stops dockerd, then the containerd, and fails the
// test if anything is left behind: processes, mounts, the containers'
// cgroups, or files dockerd writes outside its dir (/etc/docker/key.json,
// shim sockets, /run/docker).
//
// The package itself has no build tag so that `go vet ./...` covers it; the
// tests that use it carry the `e2e` build tag and need root.
package dockerd
