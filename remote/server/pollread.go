package server

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// pollingReader reads a socket and, when the socket has nothing to read,
// polls it for up to d before it parks in Go's network poller. A parked
// reader is woken through epoll and the scheduler, a few microseconds on
// every call a client waits for (docs/benchmarks.md); the client's next
// call usually comes within microseconds of the last reply.
type pollingReader struct {
	rc syscall.RawConn
	d  time.Duration
}

// newPollingReader returns a reader of conn that polls for up to d, or
// conn itself where it cannot poll (d is 0, or conn has no descriptor,
// e.g. a TLS connection).
func newPollingReader(conn net.Conn, d time.Duration) io.Reader {
	sc, ok := conn.(syscall.Conn)
	if !ok || d <= 0 {
		return conn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	return &pollingReader{rc: rc, d: d}
}

func (r *pollingReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n     int
		errno error
		start time.Time
	)
	// RawConn.Read calls the function again each time the descriptor
	// turns readable after it returned false; deadlines and Close end the
	// wait as for conn.Read.
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			n, errno = syscall.Read(int(fd), p)
			switch {
			case errno == syscall.EINTR:
				continue
			case errno != syscall.EAGAIN:
				return true
			case start.IsZero():
				start = time.Now()
			case time.Since(start) > r.d:
				return false // park until readable
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != nil:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
