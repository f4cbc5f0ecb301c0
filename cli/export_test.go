package cli

import "github.com/gpumux/gpumux/node"

// SetDefaultNomadAddr points the default Nomad agent address elsewhere (tests
// must not ask an agent that happens to run on this machine) and returns
// what restores it.
func SetDefaultNomadAddr(addr string) (restore func()) {
	old := node.DefaultNomadAddr
	node.DefaultNomadAddr = addr
	return func() { node.DefaultNomadAddr = old }
}
