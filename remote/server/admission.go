package server

import (
	"fmt"
	"slices"

	"github.com/gpumux/gpumux/remote/token"
)

// Admission. Every client node that finds a server offers shares of its
// GPUs, so tasks on several nodes could together hold quotas past a GPU's
// memory. The server is the one place that sees them all: it admits a
// token ID only while the quotas of the IDs it serves on that GPU, plus
// the new one, fit in the GPU's memory; the handshake of one that does not
// fit is refused with the figures. An ID stays admitted while it has a
// logged-in connection (or, with tenant processes, a worker). Tokens
// without a quota (hand-made ones, insecure mode) are not counted.

// admitted is one token ID's claim on its GPUs.
type admitted struct {
	devs  []int
	quota uint64
}

// admit records c's quota on its GPUs, or says why it does not fit and
// which GPU refused it. A token of an ID already admitted costs nothing if
// its quota is no larger than the ID's; a larger one raises the ID's if
// the rise fits (the ID's pool takes the largest quota of its tokens,
// quota.go). A token of an ID admitted on other GPUs is refused: an ID's
// pool is on one set of GPUs. A quota over several GPUs is counted on each
// of them in full, as its holder may use all of it on any one.
func (s *Server) admit(c token.Claims) (int, error) {
	if c.Quota == 0 || c.ID == "" {
		return 0, nil
	}
	devs := c.Devices()
	s.mu.Lock()
	defer s.mu.Unlock()
	was, ok := s.admitted[c.ID]
	if ok && !slices.Equal(was.devs, devs) {
		return c.Device, fmt.Errorf("token ID %s is admitted on %s; a token of it for %s is refused until the ID's connections are gone",
			c.ID, gpus(was.devs), gpus(devs))
	}
	if ok && c.Quota <= was.quota {
		return 0, nil
	}
	for _, dev := range devs {
		var held uint64 // by the other IDs
		for id, a := range s.admitted {
			if id != c.ID && slices.Contains(a.devs, dev) {
				held += a.quota
			}
		}
		total := s.devMemory[dev]
		switch {
		case held+c.Quota <= total:
		case ok:
			return dev, fmt.Errorf("GPU %d cannot raise token ID %s's quota from %d MiB to %d MiB: the other tenants it serves hold quotas of %d MiB of its %d MiB",
				dev, c.ID, was.quota>>20, c.Quota>>20, held>>20, total>>20)
		default:
			return dev, fmt.Errorf("GPU %d cannot take a quota of %d MiB: the tenants it serves hold quotas of %d MiB of its %d MiB",
				dev, c.Quota>>20, held>>20, total>>20)
		}
	}
	s.admitted[c.ID] = admitted{devs: devs, quota: c.Quota}
	return 0, nil
}

// gpus names a token's GPUs in a message: "GPU 1", "GPUs [0 1]".
func gpus(devs []int) string {
	if len(devs) == 1 {
		return fmt.Sprintf("GPU %d", devs[0])
	}
	return fmt.Sprintf("GPUs %v", devs)
}

// releaseLocked forgets id's admission once nothing serves it: no
// logged-in connection, no connection's quota and no worker. s.mu is held.
func (s *Server) releaseLocked(id string) {
	if s.tenantConns[id] == 0 && s.quotas[id] == nil && s.tenants[id] == nil {
		delete(s.admitted, id)
	}
}

// Admitted reports the admitted quotas in bytes by token ID, for tests and
// metrics.
func (s *Server) Admitted() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]uint64, len(s.admitted))
	for id, a := range s.admitted {
		out[id] = a.quota
	}
	return out
}
