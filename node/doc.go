// Package node is gpumux's node core: what every front door — the Nomad
// plugin, gpumux-runtime, the gpumux CLI and gpumux agent — does with a
// node, done once.
//
//	n, err := node.Open(cfg, node.WithLogger(logger))   // real NVML, a simulated node, or remote GPUs only
//	c, err := n.Catalog(ctx)                            // the shares the node offers under its layout
//	ok, why := n.Health(s)                              // XIDs, and the mechanism's own (MPS daemon, MIG instance, remote server)
//	e, err := n.Edits(shares)                           // what a container needs to use them, the driver's files included
//	h, err := n.Holders(ctx)                            // who holds what: leases, and Nomad allocations
//
// A node agent (the plugin, gpumux agent) also runs the node: Start takes
// the state directory's lock, applies the config's MIG layouts and starts
// the MPS daemons' watch; Watch rebuilds the catalog every period and
// whenever a GPU's or a daemon's health changes, reconciling the
// mechanisms to it; Stop leaves daemons and instances in place for the
// next agent.
//
// Each mechanism is a Provider (exclusive, mig, mps, timeslice, remote),
// registered in one list (providers). The core knows no mechanism by name:
// a new mechanism is a package implementing Provider, and, if it has
// something to run on the node, Lifecycle, added to that list
// (docs/design.md, "Where a new mechanism goes").
//
// The node's lease store (package lease) is under the core too: containers
// started through gpumux-runtime hold their shares there, and the Nomad
// plugin records reservations there for gpumux-runtime to claim.
package node
