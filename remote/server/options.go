package server

import (
	"log/slog"
	"time"
)

// Defaults of New.
const (
	DefaultMaxClients           = 256
	DefaultMaxTenantConnections = 32
	DefaultMaxHandshakes        = 256
	DefaultMaxHandshakesPerPeer = 32
	DefaultHandshakeTimeout     = 3 * time.Second
	DefaultBusyPoll             = 50 * time.Microsecond
	// MaxBusyPoll bounds WithBusyPoll.
	MaxBusyPoll = 10 * time.Millisecond
)

// Option configures a Server.
type Option func(*Server)

// WithSecret sets the pool secret that client tokens must be signed with
// (token.Check). A server needs one unless WithInsecureNoAuth.
func WithSecret(secret []byte) Option {
	return func(s *Server) { s.secret = append([]byte(nil), secret...) }
}

// WithInsecureNoAuth admits every client without a token, with no quota,
// and shows it every device. For tests and demos only.
func WithInsecureNoAuth() Option { return func(s *Server) { s.insecure = true } }

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithMaxClients bounds the logged-in connections served at once (default
// DefaultMaxClients); one more is refused at its handshake. Connections
// still in their handshake do not count (WithMaxHandshakes).
func WithMaxClients(n int) Option { return func(s *Server) { s.maxClients = n } }

// WithMaxTenantConnections bounds the logged-in connections presenting one
// token ID (default DefaultMaxTenantConnections); one more is refused at
// its handshake. Connections without a token ID (WithInsecureNoAuth) are
// bounded by WithMaxClients only.
func WithMaxTenantConnections(n int) Option { return func(s *Server) { s.maxTenantConns = n } }

// WithMaxHandshakes bounds the connections whose handshake is under way
// (default DefaultMaxHandshakes): one more closes the oldest of them.
func WithMaxHandshakes(n int) Option { return func(s *Server) { s.maxHandshakes = n } }

// WithMaxHandshakesPerPeer bounds the handshakes under way from one peer:
// one IP address over TCP (IPv6: one /64), one user ID over a unix socket
// (default DefaultMaxHandshakesPerPeer). One more closes the oldest of
// that peer's.
func WithMaxHandshakesPerPeer(n int) Option { return func(s *Server) { s.maxHandshakesPerPeer = n } }

// WithHandshakeTimeout bounds the wait for a connection's handshake
// (default DefaultHandshakeTimeout).
func WithHandshakeTimeout(d time.Duration) Option { return func(s *Server) { s.handshakeTimeout = d } }

// WithBusyPoll sets how long a client's worker keeps polling for the
// client's next call after finishing one before it sleeps (default
// DefaultBusyPoll; 0 never polls). A worker is locked to its OS thread, and
// waking a sleeping locked thread costs a cross-thread wake-up on every
// call that waits; polling answers a client that calls again at once from
// the running thread, at the price of that much CPU time after each call.
func WithBusyPoll(d time.Duration) Option { return func(s *Server) { s.busyPoll = d } }
