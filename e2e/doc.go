// Package e2e holds gpumux's end-to-end tests: a real Nomad agent built from
// source, a private containerd with Debian's runc, and a private Docker
// engine (Debian's docker.io), driving the gpumux binaries on a simulated
// GPU node. The tests need root and two build tags:
//
//	go test -tags 'e2e no_dynamic_plugins' ./e2e/...   (what make test-e2e runs)
//
// no_dynamic_plugins keeps containerd's client from linking Go's plugin
// package, which would make the test binary bind go-nvml's NVML symbols at
// start and die on a machine without the driver (see tags_e2e_test.go).
//
// Subpackage nomadagent starts and drives Nomad agents: dev agents (also
// for the demo), and the server-only and client-only agents of a cluster,
// each in a network namespace of its own that subpackage netns builds (a
// bridge in a namespace of its own, veth pairs, an address per host, a
// link from the test's namespace; stale namespaces of a killed run removed
// at start). TestCluster (cluster_e2e_test.go) runs the remote pool on such
// a cluster: a server, two simulated GPU nodes running gpumux-remoted as a
// Nomad job and a node without GPUs whose tasks use them, with a server's
// drain, a server killed under its task, and a job larger than the cluster.
// ctrd starts a private containerd and runs containers from a rootfs
// holding probe, a static program that prints the env, device nodes and
// mounts a container sees; dockerd starts a private dockerd on a ctrd
// containerd, with the probe rootfs imported as an image, for the docker CLI
// and Nomad's docker driver. internal/hostcheck holds the host inspection
// (mountinfo, /proc scanning by process group, marker, directory or
// network namespace, named namespaces and links, leftover reports) they
// share.
package e2e
