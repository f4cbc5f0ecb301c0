package server

import (
	"log/slog"
	"time"
)

// Defaults of New.
const (
	DefaultMaxClients       = 256
	DefaultHandshakeTimeout = 10 * time.Second
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

// WithMaxClients bounds the connections served at once, handshakes
// included (default DefaultMaxClients); one more is refused at its
// handshake.
func WithMaxClients(n int) Option { return func(s *Server) { s.maxClients = n } }

// WithHandshakeTimeout bounds the wait for a connection's handshake
// (default DefaultHandshakeTimeout).
func WithHandshakeTimeout(d time.Duration) Option { return func(s *Server) { s.handshakeTimeout = d } }
