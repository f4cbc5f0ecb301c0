package server

import (
	"fmt"
	"net"
	"slices"
	"syscall"

	"github.com/gpumux/gpumux/remote/token"
)

// Connection limits. A connection is first a handshake: from its accept
// until its Hello has been read. Handshakes are bounded on their own, so
// that connections that never finish theirs cannot keep clients out:
// at most WithMaxHandshakes at once, at most WithMaxHandshakesPerPeer of
// one peer (peerKey), each within WithHandshakeTimeout. A connection past
// either bound closes the oldest handshake still waiting, of its peer or
// of all: a client sends its Hello as soon as it connects, so it is never
// the oldest for long, while a stalled connection soon is.
//
// Once its Hello checks out, a connection is logged in until it ends: it
// counts against WithMaxClients, and against WithMaxTenantConnections
// with the others presenting its token ID. With tenant processes the
// front keeps counting a connection it handed to a worker until the
// worker says it has ended ({"closed":…}) or exits.

// handshaking is a connection whose Hello has not been read yet.
type handshaking struct {
	conn    net.Conn
	peer    string // peerKey
	evicted bool   // closed to make room; guarded by Server.mu
}

// startHandshake counts a new connection's handshake, closing the oldest
// one waiting if the new one is past a bound.
func (s *Server) startHandshake(conn net.Conn) *handshaking {
	h := &handshaking{conn: conn, peer: peerKey(conn)}
	s.mu.Lock()
	var oldest *handshaking
	if s.handshakesByPeer[h.peer] >= s.maxHandshakesPerPeer {
		oldest = s.handshakes[slices.IndexFunc(s.handshakes, func(o *handshaking) bool { return o.peer == h.peer })]
	} else if len(s.handshakes) >= s.maxHandshakes {
		oldest = s.handshakes[0]
	}
	if oldest != nil {
		oldest.evicted = true
		s.dropHandshakeLocked(oldest)
	}
	s.handshakes = append(s.handshakes, h)
	s.handshakesByPeer[h.peer]++
	s.mu.Unlock()
	if oldest != nil {
		oldest.conn.Close() // its handshake's read fails; endHandshake says why
	}
	return h
}

// endHandshake stops counting h, and reports whether it was closed to make
// room for a newer one.
func (s *Server) endHandshake(h *handshaking) (evicted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.evicted {
		return true
	}
	s.dropHandshakeLocked(h)
	return false
}

func (s *Server) dropHandshakeLocked(h *handshaking) {
	if i := slices.Index(s.handshakes, h); i >= 0 {
		s.handshakes = slices.Delete(s.handshakes, i, i+1)
		if s.handshakesByPeer[h.peer]--; s.handshakesByPeer[h.peer] <= 0 {
			delete(s.handshakesByPeer, h.peer)
		}
	}
}

// peerKey names the peer a connection's handshake counts against: its IP
// address over TCP (IPv6: its /64, which one host usually has whole); its
// user ID over a unix socket (every unix client is "unix" where the kernel
// does not say).
func peerKey(conn net.Conn) string {
	switch a := conn.RemoteAddr().(type) {
	case *net.TCPAddr:
		if a.IP.To4() == nil && len(a.IP) == net.IPv6len {
			return a.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
		}
		return a.IP.String()
	}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			var cred *syscall.Ucred
			var credErr error
			if err := raw.Control(func(fd uintptr) {
				cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
			}); err == nil && credErr == nil {
				return fmt.Sprintf("unix uid %d", cred.Uid)
			}
		}
	}
	return "unix"
}

// login counts a connection whose handshake checked out, or says why it
// is refused.
func (s *Server) login(c token.Claims) (refusal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns >= s.maxClients {
		return refusedFull, fmt.Errorf("the server serves its limit of %d clients", s.maxClients)
	}
	if c.ID != "" && s.tenantConns[c.ID] >= s.maxTenantConns {
		return refusedTenantFull, fmt.Errorf("token ID %s has its limit of %d connections", c.ID, s.maxTenantConns)
	}
	s.conns++
	if c.ID != "" {
		s.tenantConns[c.ID]++
	}
	return 0, nil
}

// logout stops counting a logged-in connection presenting token ID id.
func (s *Server) logout(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logoutLocked(id)
}

func (s *Server) logoutLocked(id string) {
	s.conns--
	if id == "" {
		return
	}
	if s.tenantConns[id]--; s.tenantConns[id] <= 0 {
		delete(s.tenantConns, id)
		s.releaseLocked(id)
	}
}
