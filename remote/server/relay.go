package server

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

// Relaying. A worker takes over a connection's file descriptor; a TLS
// connection's state (keys, sequence numbers) stays in the front's
// crypto/tls, so the worker gets one end of a socket pair instead, and the
// front copies plaintext between the TLS connection and the other end
// until either side ends. It costs a copy and a hop between processes
// per frame each way (docs/remote.md, "TLS").

// relayBuffer is the most one read of the relay takes, each way: a TLS
// read returns one record (16 KiB) at most, and a write of 64 KiB is four
// full records.
const relayBuffer = 64 << 10

// handOffFile returns the descriptor to hand a worker for conn: its own,
// or, for a connection whose descriptor cannot be handed over (TLS), the
// worker's end of a socket pair whose other end (relay) the front pipes
// to conn.
func handOffFile(conn net.Conn) (f *os.File, relay net.Conn, err error) {
	if fc, ok := conn.(interface{ File() (*os.File, error) }); ok {
		f, err = fc.File()
		return f, nil, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair for a relay: %w", err)
	}
	for _, fd := range fds { // room for a few chunks in flight, as on TCP
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<20)
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<20)
	}
	ours := os.NewFile(uintptr(fds[0]), "relay")
	defer ours.Close()
	if relay, err = net.FileConn(ours); err != nil {
		syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	return os.NewFile(uintptr(fds[1]), "relay-worker"), relay, nil
}

// pipe copies between a and b both ways until one way ends, then closes
// both (which ends the other way).
func pipe(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { a.Close(); b.Close() }
	var wg sync.WaitGroup
	for _, d := range [][2]net.Conn{{a, b}, {b, a}} {
		wg.Go(func() {
			defer once.Do(closeBoth)
			buf := make([]byte, relayBuffer)
			for {
				n, err := d[0].Read(buf)
				if n > 0 {
					if _, werr := d[1].Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}
