package server

import (
	"fmt"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

// Token expiry. A connection's token is checked at its handshake, and its
// expiry holds for the connection's whole life. When it passes (a timer of
// the session's worker goes off, or a call comes after it) the session
// frees everything the client held, as when a client goes, logs that
// once, and from then on runs nothing: a synchronous call is answered
// CUDA_ERROR_NOT_PERMITTED without running (proto.Dispatch answers a
// pending deferred failure so, draining the call's host data), and an
// asynchronous one finds none of the objects it names and no context to
// run in (use refuses), leaving CUDA_ERROR_NOT_PERMITTED for the next
// synchronous call, as any asynchronous failure is. expiredLinger after
// the expiry the server closes the connection, so that a client that
// lingers keeps no login (limits.go) and no admission.

// expiredLinger is how long a connection stays open after its token has
// expired (WithExpiredLinger in tests).
const expiredLinger = time.Minute

// expiryTimer returns a timer that goes off when the session's token
// expires, or nil if it has no expiry (WithInsecureNoAuth).
func (s *session) expiryTimer() *time.Timer {
	if s.expires.IsZero() {
		return nil
	}
	return time.NewTimer(s.expires.Sub(s.now()))
}

// pastExpiry reports whether the session's token has expired.
func (s *session) pastExpiry() bool {
	return !s.expires.IsZero() && !s.now().Before(s.expires)
}

// expiryDue handles the expiry timer going off: it expires the session if
// its token has expired and arms the timer for the close, or arms it for
// the expiry again (the timer's clock ran ahead of s.now). After the close
// is due, it returns the error that closes the connection.
func (s *session) expiryDue(timer *time.Timer) error {
	switch {
	case s.expired:
		return fmt.Errorf("closing the connection %v after its token's expiry", s.linger)
	case s.pastExpiry():
		s.expire(timer)
	default:
		timer.Reset(s.expires.Sub(s.now()))
	}
	return nil
}

// expire frees everything the client held and refuses its calls from now
// on, and arms timer (if any) for the close.
func (s *session) expire(timer *time.Timer) {
	f := s.cleanup()
	s.freedEarly.add(f)
	s.expired = true
	if timer != nil {
		timer.Reset(s.linger)
	}
	s.log.Warn("token expired: freed everything the client held; its calls fail with CUDA_ERROR_NOT_PERMITTED until the connection closes",
		"expired", s.expires.UTC().Format(time.RFC3339), "freed_allocations", f.allocs, "freed_bytes", f.bytes,
		"destroyed_contexts", f.contexts, "closing_in", s.linger)
}

// refusal is what the session answers a call with instead of running it,
// or proto.Success to run it.
func (s *session) refusal() proto.Result {
	if s.expired {
		return proto.ErrNotPermitted
	}
	return proto.Success
}
