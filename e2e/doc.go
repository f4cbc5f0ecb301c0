// Package e2e holds gpumux's end-to-end tests: a real Nomad agent built from
// source (and, for the runtime, a real containerd and runc) driving the gpumux
// binaries on a simulated GPU node. The tests carry the `e2e` build tag and
// need root:
//
//	make test-e2e
//
// Subpackage nomadagent starts and drives Nomad dev agents for these tests
// and for the demo.
package e2e
