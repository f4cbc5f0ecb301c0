// Package conformance holds gpumux's conformance suite (conformance_test.go):
// one table of tests that every sharing mechanism runs on every simulated
// node. It has no code of its own; `go test ./node/conformance/` runs it.
//
// For each mechanism (exclusive, mig, mps, mps on MIG instances, timeslice,
// remote) on each simulated node (dgxa100, dgxh100, dgxh200) it proves:
//
//  1. The same edits through every front door. The Nomad plugin runs the
//     node in-process (SetConfig, then Fingerprint, which starts the node
//     as its agent: MIG layouts, MPS daemons). For shares of the
//     mechanism, the plugin's Reserve, gpumux-runtime's create of a bundle
//     that carries the reservation (GPUMUX_SHARES and GPUMUX_RESERVATION,
//     as Nomad's docker driver does) and `gpumux cdi generate` must give
//     the same environment, device nodes (container path, host path,
//     cgroup permissions), mounts (container path, host path, read-only)
//     and createContainer hooks, once normalised: the reservation token is
//     left out, a remote token (minted per container) is masked, what the
//     bundle had before the runtime rewrote it is ignored, and the
//     reservation, which cannot carry hooks, is expected to want the
//     driver's update-ldcache hook for local shares. A local share's
//     reservation carries the simulated driver's libcuda.so.1 and
//     nvidia-smi read-only; a remote share's nothing of the real driver. Remote shares are not
//     in the CDI spec (a spec handed to every container cannot carry a
//     per-container token), and the suite checks they are absent.
//  2. Health transitions. A healthy share becomes unhealthy, with a
//     reason, in the plugin's fingerprint, and Reserve refuses it: a
//     critical XID on its GPU (exclusive, timeslice), a MIG XID on its
//     instance, whose sibling instance stays healthy (mig), a killed MPS
//     control daemon that may not start again, while the other device's
//     daemon serves on (mps), a stopped gpumux-remoted, named in the reason
//     (remote). For MPS, a node agent with a short health interval then
//     sees the daemon gone by itself, and restarts it; while the daemon
//     cannot start, neither that node nor the plugin spins.
//  3. Start and stop are idempotent. With node.Open directly: Start twice,
//     Stop twice, Start after Stop, Close after Stop; a second agent on
//     the same state directory fails with node.ErrAgentRunning naming the
//     holder (the plugin, or gpumux agent) and succeeds once the first
//     stops; every provider that implements node.Lifecycle is started and
//     stopped twice directly.
//
// Adding a mechanism: add a row to the mechanisms table in
// conformance_test.go (its gpu block, or remote block, and the number of
// shares it offers per node), a case to the health sub-test's switch saying
// how one of its shares becomes unhealthy, and its provider to
// allProviders. Anything it starts (daemons, servers) must be stopped by the
// case's cleanup. The suite runs under -race on two cores in CI: keep a
// case to a few seconds.
package conformance
