// Package netns builds a private network of Linux network namespaces for
// e2e tests that run several hosts on one machine (a Nomad server and its
// clients): one namespace per host, each with its own address on one
// subnet, joined by a bridge that lives in a namespace of its own, and a
// link from the test's (root) namespace to that bridge, so that the test
// reaches every host and every host reaches the test's servers.
//
//	root namespace            gmxe2e-NAME-net            gmxe2e-NAME-NODE
//	gmxe2e-NAME (.1)  ──veth──  host ┐
//	                                 br0 ── n-NODE ──veth── eth0 (.10, .11, …)
//
// The bridge has a namespace of its own so that the host's bridge firewall
// (br_netfilter with a FORWARD policy of DROP, as Docker leaves it) never
// sees the hosts' traffic. It is built with iproute2's `ip`; processes are
// run in a namespace with util-linux's `nsenter --net`, which enters the
// network namespace only: `ip netns exec` would also give the process a
// mount namespace of its own (to remount /sys), where the mounts a Nomad
// client makes for its tasks are invisible to the leftover checks.
//
// Every name begins with Prefix and the network's name, so that what a
// killed run left is found and removed when the next run of the same
// network starts (logged), and Close (run by t.Cleanup) fails the test if
// a process, namespace, binding or link of the network is left.
//
// The package has no build tag so that `go vet ./...` covers it; the tests
// that use it carry the `e2e` tag and run as root.
package netns
