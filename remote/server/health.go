package server

import (
	"errors"
	"fmt"
)

// Health says whether the server can take clients: nil once its backend
// is initialised and at least one listener is accepting connections,
// else the reason it cannot (gpumux-remoted's /healthz, for Nomad's
// checks and load balancers).
func (s *Server) Health() error {
	s.mu.Lock()
	accepting := s.accepting
	s.mu.Unlock()
	if accepting > 0 {
		return nil
	}
	if s.initDone.Load() && s.initErr != nil {
		return fmt.Errorf("not serving: %w", s.initErr)
	}
	return errNotServing
}

var errNotServing = errors.New("not serving: no listener is accepting connections (starting or stopping)")

// accept counts a listener that accepts connections until the returned
// function is called.
func (s *Server) accept() (done func()) {
	s.mu.Lock()
	s.accepting++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.accepting--
		s.mu.Unlock()
	}
}
