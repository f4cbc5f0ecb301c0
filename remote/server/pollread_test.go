package server

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestPollingReader: the polling reader reads what comes while it polls
// and what comes after it parked, honours read deadlines, and reports the
// peer's close as EOF.
func TestPollingReader(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "unix" {
				dir, err := os.MkdirTemp("", "gmx")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				addr = dir + "/s"
			}
			ln, err := net.Listen(network, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			client, err := net.Dial(network, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			r := newPollingReader(conn, 200*time.Microsecond)
			if _, ok := r.(*pollingReader); !ok {
				t.Fatalf("newPollingReader(%T) = %T, want a *pollingReader", conn, r)
			}
			buf := make([]byte, 8)
			for _, wait := range []time.Duration{0, 100 * time.Microsecond, 20 * time.Millisecond} {
				go func() {
					time.Sleep(wait)
					client.Write([]byte("abc"))
				}()
				n, err := r.Read(buf)
				if err != nil || string(buf[:n]) != "abc" {
					t.Fatalf("written after %v: read %q, %v; want \"abc\"", wait, buf[:n], err)
				}
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
			}
			conn.SetReadDeadline(time.Time{})
			client.Close()
			if n, err := r.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("read after the peer closed: %d, %v; want 0, EOF", n, err)
			}
			if r := newPollingReader(conn, 0); r != io.Reader(conn) {
				t.Errorf("newPollingReader(conn, 0) = %T, want conn itself", r)
			}
		})
	}
}
