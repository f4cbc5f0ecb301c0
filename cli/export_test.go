package cli

// SetDefaultNomadAddr points the default Nomad agent address elsewhere (tests
// must not ask an agent that happens to run on this machine) and returns
// what restores it.
func SetDefaultNomadAddr(addr string) (restore func()) {
	old := defaultNomadAddr
	defaultNomadAddr = addr
	return func() { defaultNomadAddr = old }
}
