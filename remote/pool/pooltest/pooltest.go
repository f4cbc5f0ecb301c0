package pooltest

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// Secret is a pool secret for tests.
var Secret = []byte("0123456789abcdef-gpumux-test-pool-secret")

// Options configure a server.
type Options struct {
	// Addr is the TCP address to listen on (default 127.0.0.1:0); a busy
	// one is retried for a few seconds (a server restarted on its port).
	Addr string
	// Unix serves on a unix socket in a fresh directory instead.
	Unix bool
	// Seed changes the GPUs' UUIDs: every fakecuda derives them from the
	// device index alone, so two fakes serve "the same" GPUs.
	Seed byte
	// Fake and Server are the backend's and the server's options; without
	// Server options the server checks tokens against Secret.
	Fake   []fakecuda.Option
	Server []server.Option
	// TLS serves TCP with TLS.
	TLS *tls.Config
}

// Server is a running server.
type Server struct {
	// Addr is the server as the pool names it: "host:port" or "unix:/path".
	Addr   string
	cancel context.CancelFunc
	done   chan error
	t      testing.TB
}

// Start runs a server until the test ends (or Stop).
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	fake, err := fakecuda.New(o.Fake...)
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]server.Option{server.WithLogger(slog.New(slog.NewTextHandler(logOutput(), nil)))}, o.Server...)
	if len(o.Server) == 0 {
		opts = append(opts, server.WithSecret(Secret))
	}
	srv := server.New(seeded{fake, o.Seed}, opts...)
	var ln net.Listener
	addr := ""
	if o.Unix {
		dir, err := os.MkdirTemp("", "gmx") // socket paths are short: not t.TempDir()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if ln, err = server.ListenUnix(filepath.Join(dir, "s"), 0o600); err != nil {
			t.Fatal(err)
		}
		addr = "unix:" + ln.Addr().String()
	} else {
		a := o.Addr
		if a == "" {
			a = "127.0.0.1:0"
		}
		for i := 0; ; i++ {
			if ln, err = net.Listen("tcp", a); err == nil || i == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Addr: addr, cancel: cancel, done: make(chan error, 1), t: t}
	if o.TLS != nil && !o.Unix {
		go func() { s.done <- srv.ServeTLS(ctx, ln, o.TLS) }()
	} else {
		go func() { s.done <- srv.Serve(ctx, ln) }()
	}
	t.Cleanup(s.Stop)
	return s
}

// Stop ends the server and waits for it (idempotent).
func (s *Server) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	if err := <-s.done; err != nil {
		s.t.Errorf("Serve: %v", err)
	}
}

func logOutput() io.Writer {
	if os.Getenv("GPUMUX_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// seeded is a fake backend with UUIDs of its own.
type seeded struct {
	*fakecuda.Backend
	seed byte
}

func (b seeded) DeviceUUID(d int32) ([16]byte, proto.Result) {
	u, r := b.Backend.DeviceUUID(d)
	u[15] ^= b.seed
	return u, r
}

// WriteSecret writes Secret to a file of mode 0600 in dir and returns its path.
func WriteSecret(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "remote.key")
	if err := os.WriteFile(p, Secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteInterposer makes an interposer directory in dir holding stand-ins
// for the interposer (libcuda.so.1), the NVML library of remote shares
// (libnvidia-ml.so.1) and its nvidia-smi, and returns its path.
func WriteInterposer(t testing.TB, dir string) string {
	t.Helper()
	d := filepath.Join(dir, "interposer")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1", "nvidia-smi"} {
		if err := os.WriteFile(filepath.Join(d, lib), []byte("a stand-in for gpumux's "+lib), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
