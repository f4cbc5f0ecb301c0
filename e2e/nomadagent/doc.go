// Package nomadagent drives real Nomad agents from Go tests: a dev agent
// (`nomad agent -dev`, server and client in one), or the agents of a
// cluster, a server-only agent and client-only agents that join it, each
// in a network namespace of its own (package e2e/netns). It writes the
// agent configuration, starts the agent in its own process group, waits
// until it is ready (a leader elected; the client node ready with its
// drivers and devices), talks to it through the HTTP API and, on cleanup,
// stops it and asserts that nothing (agent, executors, logmon, task
// processes, mounts) is left behind.
//
// The package itself has no build tag so that `go vet ./...` covers it; the
// tests that use it carry the `e2e` build tag.
package nomadagent
