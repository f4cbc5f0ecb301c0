package server_test

import (
	"errors"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// loopback returns the i-th loopback address (127.0.0.1 for 0): on Linux
// every 127/8 address reaches a server listening on 127.0.0.1, so a test
// can have connections come from many peers.
func loopback(i int) net.IP { return net.IPv4(127, 0, byte(i>>8), byte(1+i%256)) }

// stallFrom opens a connection to e from peer (TCP only; nil: any) that
// sends send and then nothing: a handshake that never finishes.
func stallFrom(t *testing.T, e *env, peer net.IP, send []byte) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if peer != nil && e.network == "tcp" {
		d.LocalAddr = &net.TCPAddr{IP: peer}
	}
	c, err := d.Dial(e.network, e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if len(send) > 0 {
		if _, err := c.Write(send); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// settle waits until the server has taken in every connection opened
// before: it accepts in one loop, so once it answers a later handshake
// (a malformed one, refused at once), it has accepted the earlier ones.
func settle(t *testing.T, e *env) {
	t.Helper()
	c := stallFrom(t, e, nil, proto.AppendFrame(nil, proto.Header{Op: proto.OpHello}, make([]byte, 16)))
	if err := closedByPeer(c); err != nil {
		t.Fatalf("a malformed handshake: %v", err)
	}
}

// closed returns the indexes of the connections of cs that the server
// closed (it sends nothing on the others) within 50ms.
func closed(cs []net.Conn) []int {
	deadline := time.Now().Add(50 * time.Millisecond)
	var out []int
	for i, c := range cs {
		c.SetReadDeadline(deadline)
		_, err := c.Read(make([]byte, 1))
		if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
			out = append(out, i)
		}
	}
	return out
}

// TestStalledHandshakesLeaveRoomForTenants: 70 connections that never
// finish their handshake do not keep a tenant out of a server that serves
// 64 clients, whether they come from 70 addresses (then all stay open
// until their deadline) or from the tenant's own.
func TestStalledHandshakesLeaveRoomForTenants(t *testing.T) {
	hello := proto.AppendFrame(nil, proto.Header{Op: proto.OpHello}, proto.Hello{Version: proto.Version, Token: "gmx1.x.y"}.Encode())
	tests := []struct {
		name  string
		tcp   bool
		peers int    // the addresses the stalled connections come from (TCP)
		send  []byte // what each sends of a handshake
		// allOpen: every stalled connection is still open once the tenant
		// is in (none was closed to make room).
		allOpen bool
	}{
		{"silent, from 70 addresses", true, 70, nil, true},
		{"half a header, from 70 addresses", true, 70, hello[:10], true},
		{"a header without its payload, from 70 addresses", true, 70, hello[:proto.HeaderSize], true},
		{"silent, from the tenant's address", true, 1, nil, false},
		{"half a handshake, from the tenant's address", true, 1, hello[:len(hello)/2], false},
		{"silent, on the unix socket", false, 1, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, envConfig{tcp: tt.tcp, srv: []server.Option{server.WithSecret(testSecret),
				server.WithMaxClients(64), server.WithHandshakeTimeout(time.Minute)}})
			var stalled []net.Conn
			for i := range 70 {
				stalled = append(stalled, stallFrom(t, e, loopback(i%tt.peers), tt.send))
			}
			settle(t, e)
			cl, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: e.token(t, "job", 1<<20)}, 5*time.Second)
			if err != nil {
				t.Fatalf("a tenant beside 70 stalled handshakes: %v", err)
			}
			defer cl.Close()
			primary(t, cl)
			if !tt.allOpen {
				return
			}
			if gone := closed(stalled); len(gone) > 0 {
				t.Fatalf("stalled connections %v were closed; want all 70 open until their deadline", gone)
			}
		})
	}
}

// TestHandshakeLimits: past WithMaxHandshakesPerPeer handshakes of one
// peer, or WithMaxHandshakes of all, a new connection closes the oldest
// one waiting (of that peer, or of all); the others wait out their
// deadline, and a client still gets in.
func TestHandshakeLimits(t *testing.T) {
	tests := []struct {
		name    string
		opt     server.Option
		perPeer bool // the limit of 4 is per peer, not in all
		tcp     bool
		peers   int // the 10 connections come from peers 0, 1, … in turn
	}{
		{"per peer", server.WithMaxHandshakesPerPeer(4), true, true, 1},
		{"per peer, unix", server.WithMaxHandshakesPerPeer(4), true, false, 1},
		{"per peer, beside another peer", server.WithMaxHandshakesPerPeer(4), true, true, 2},
		{"in all", server.WithMaxHandshakes(4), false, true, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, envConfig{tcp: tt.tcp, srv: []server.Option{server.WithSecret(testSecret),
				server.WithHandshakeTimeout(time.Minute), tt.opt}})
			const n, limit = 10, 4
			var conns []net.Conn
			var want []int // the connections closed to make room
			for i := range n {
				conns = append(conns, stallFrom(t, e, loopback(i%tt.peers), nil))
				newer := n - 1 - i // connections after this one
				if tt.perPeer {
					newer = (n - 1 - i) / tt.peers // of its peer
				}
				if newer >= limit {
					want = append(want, i)
				}
			}
			eventually(t, "the oldest handshakes to be closed", func() bool { return slices.Equal(closed(conns), want) })
			if got := e.srv.Stats().Handshakes; got != n-len(want) {
				t.Errorf("%d handshakes under way, want %d", got, n-len(want))
			}
			if got := e.srv.Stats().Refused["evicted"]; got != uint64(len(want)) {
				t.Errorf("%d handshakes counted as evicted, want %d", got, len(want))
			}
			primary(t, e.dial(t, e.token(t, "job", 0)))
		})
	}
}

// withMode returns the options of a server in mode (modes), with opts.
func withMode(srv []server.Option, opts ...server.Option) []server.Option {
	if srv == nil {
		srv = []server.Option{server.WithSecret(testSecret)}
	}
	return slices.Concat(srv, opts)
}

// TestMaxClients: WithMaxClients bounds the logged-in connections, in
// both modes; a client's slot frees when it goes.
func TestMaxClients(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := start(t, envConfig{srv: withMode(mode.srv, server.WithMaxClients(2))})
			a := e.dial(t, e.token(t, "a", 0))
			e.dial(t, e.token(t, "b", 0))
			_, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: e.token(t, "c", 0)}, 5*time.Second)
			if !errors.Is(err, proto.ErrRefused) || !strings.Contains(err.Error(), "limit of 2") {
				t.Fatalf("third client: %v, want refused at the limit of 2", err)
			}
			a.Close()
			eventually(t, "a slot to free up", func() bool {
				c, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: e.token(t, "c", 0)}, 5*time.Second)
				if err == nil {
					c.Close()
				}
				return err == nil
			})
		})
	}
}

// TestMaxTenantConnections: WithMaxTenantConnections bounds the logged-in
// connections of one token ID, in both modes, beside other IDs'; an ID's
// slots free when its clients go, or when its worker dies.
func TestMaxTenantConnections(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := start(t, envConfig{srv: withMode(mode.srv, server.WithMaxTenantConnections(2))})
			dial := func(id string) (*proto.Client, error) {
				cl, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: e.token(t, id, 1<<20)}, 5*time.Second)
				if err == nil {
					t.Cleanup(func() { cl.Close() })
				}
				return cl, err
			}
			a1, err1 := dial("a")
			_, err2 := dial("a")
			if err := errors.Join(err1, err2); err != nil {
				t.Fatalf("two clients of a: %v", err)
			}
			_, err := dial("a")
			if !errors.Is(err, proto.ErrRefused) || !strings.Contains(err.Error(), "token ID a has its limit of 2 connections") {
				t.Fatalf("a third client of a: %v, want refused at a's limit of 2", err)
			}
			if _, err := dial("b"); err != nil {
				t.Fatalf("a client of b beside a's two: %v", err)
			}
			if got := e.srv.Stats().Refused["too_many_tenant_connections"]; got != 1 {
				t.Errorf("%d refusals counted for the tenant limit, want 1", got)
			}
			a1.Close()
			eventually(t, "a's slot to free up", func() bool {
				cl, err := dial("a")
				if err == nil {
					primary(t, cl)
				}
				return err == nil
			})
			if mode.srv == nil {
				return
			}
			if err := syscall.Kill(e.srv.Tenants()["a"], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a's slots to go with its worker", func() bool {
				cl1, err1 := dial("a")
				cl2, err2 := dial("a")
				for _, cl := range []*proto.Client{cl1, cl2} {
					if cl != nil {
						cl.Close()
					}
				}
				return err1 == nil && err2 == nil
			})
		})
	}
}
