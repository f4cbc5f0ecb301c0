package server

import (
	"fmt"

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

// admitted is one token ID's claim on a GPU.
type admitted struct {
	dev   int
	quota uint64
}

// admit records c's quota on its GPU, or says why it does not fit. A token
// of an ID already admitted costs nothing if its quota is no larger than
// the ID's; a larger one raises the ID's if the rise fits (the ID's pool
// takes the largest quota of its tokens, quota.go). A token of an ID
// admitted on another GPU is refused: an ID's pool is on one GPU.
func (s *Server) admit(c token.Claims) error {
	if c.Quota == 0 || c.ID == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	was, ok := s.admitted[c.ID]
	if ok && was.dev != c.Device {
		return fmt.Errorf("token ID %s is admitted on GPU %d; a token of it for GPU %d is refused until the ID's connections are gone",
			c.ID, was.dev, c.Device)
	}
	if ok && c.Quota <= was.quota {
		return nil
	}
	var held uint64 // by the other IDs
	for id, a := range s.admitted {
		if a.dev == c.Device && id != c.ID {
			held += a.quota
		}
	}
	total := s.devMemory[c.Device]
	switch {
	case held+c.Quota <= total:
	case ok:
		return fmt.Errorf("GPU %d cannot raise token ID %s's quota from %d MiB to %d MiB: the other tenants it serves hold quotas of %d MiB of its %d MiB",
			c.Device, c.ID, was.quota>>20, c.Quota>>20, held>>20, total>>20)
	default:
		return fmt.Errorf("GPU %d cannot take a quota of %d MiB: the tenants it serves hold quotas of %d MiB of its %d MiB",
			c.Device, c.Quota>>20, held>>20, total>>20)
	}
	s.admitted[c.ID] = admitted{dev: c.Device, quota: c.Quota}
	return nil
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
