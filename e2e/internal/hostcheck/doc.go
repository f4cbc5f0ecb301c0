// Package hostcheck holds the host inspection shared by the e2e harnesses
// (e2e/nomadagent, e2e/ctrd, e2e/dockerd, e2e/netns) and the probe program
// (e2e/probe): the mounts of /proc/self/mountinfo (package
// internal/mountinfo reads them: the mounts under a dir, the cgroup
// hierarchies), where the tools the harnesses run are cached, scanning
// /proc for the live processes that belong to a daemon under test (by pid,
// process group, command line, inherited marker environment, root or cwd,
// network namespace, and optionally descent), listing the named network
// namespaces, their bindings in /run/netns and the network interfaces a
// harness made, reporting and removing what a stopped daemon left behind,
// reporting a failed test's daemon log, and filtering the environment the
// harnesses start their processes with.
//
// It reads the host as it is and depends on the standard library and
// internal/mountinfo only (no cgo, no build tag), so that the static probe can use it and `go vet ./...`
// covers it. Being internal to e2e, it is no API of gpumux.
package hostcheck
