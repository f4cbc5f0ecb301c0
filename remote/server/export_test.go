package server

import "time"

// WithExpiredLinger sets how long a connection stays open after its
// token has expired (expiredLinger), for tests.
func WithExpiredLinger(d time.Duration) Option { return func(s *Server) { s.expiredLinger = d } }
