package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

// The fake is a Backend.
var _ server.Backend = (*fakecuda.Backend)(nil)

var testSecret = []byte("0123456789abcdef-test-secret")

// syncBuffer collects the server's log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if os.Getenv("GPUMUX_TEST_LOG") != "" {
		os.Stderr.Write(p)
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a server on a fake backend, served on a unix socket (or TCP).
type env struct {
	fake    *fakecuda.Backend
	srv     *server.Server
	network string
	addr    string
	logs    *syncBuffer
	// clientTLS, if set, is what dial and raw wrap connections in.
	clientTLS *tls.Config
	cancel    context.CancelFunc
	done      chan error
}

type envConfig struct {
	tcp  bool
	fake []fakecuda.Option
	srv  []server.Option
	// tls serves TCP with ServeTLS, and clientTLS is the env's.
	tls, clientTLS *tls.Config
	// wrap, if set, wraps the fake in the Backend the server calls.
	wrap func(server.Backend) server.Backend
}

func start(t testing.TB, cfg envConfig) *env {
	t.Helper()
	fake, err := fakecuda.New(cfg.fake...)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	opts := append([]server.Option{
		server.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
	}, cfg.srv...)
	if len(cfg.srv) == 0 {
		opts = append(opts, server.WithSecret(testSecret))
	}
	var be server.Backend = fake
	if cfg.wrap != nil {
		be = cfg.wrap(fake)
	}
	e := &env{fake: fake, srv: server.New(be, opts...), logs: logs, done: make(chan error, 1), clientTLS: cfg.clientTLS}
	var ln net.Listener
	if cfg.tcp {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		e.network = "tcp"
	} else {
		// Unix socket paths are short: not t.TempDir().
		dir, derr := os.MkdirTemp("", "gmx")
		if derr != nil {
			t.Fatal(derr)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		ln, err = server.ListenUnix(filepath.Join(dir, "s"), 0o660)
		e.network = "unix"
	}
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if cfg.tls != nil {
		go func() { e.done <- e.srv.ServeTLS(ctx, ln, cfg.tls) }()
	} else {
		go func() { e.done <- e.srv.Serve(ctx, ln) }()
	}
	t.Cleanup(func() { e.stop(t) })
	return e
}

// stop ends Serve and waits for it (idempotent).
func (e *env) stop(t testing.TB) {
	t.Helper()
	e.cancel()
	select {
	case err, ok := <-e.done:
		if ok {
			close(e.done)
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of its context ending")
	}
}

func (e *env) token(t testing.TB, id string, quota uint64) string {
	t.Helper()
	tok, err := token.Mint(testSecret, token.Claims{ID: id, Quota: quota, Device: 0, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (e *env) dial(t testing.TB, tok string) *proto.Client {
	t.Helper()
	cl, err := e.tryDial(tok)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// tryDial connects (over TLS if the env has a clientTLS) and shakes hands.
func (e *env) tryDial(tok string) (*proto.Client, error) {
	hello := proto.Hello{Token: tok, Identity: "test"}
	if e.clientTLS == nil {
		return proto.Dial(context.Background(), e.network, e.addr, hello, 10*time.Second)
	}
	conn, err := tls.Dial(e.network, e.addr, e.clientTLS)
	if err != nil {
		return nil, err
	}
	cl, err := proto.NewClient(conn, hello, 10*time.Second)
	if err != nil {
		conn.Close()
	}
	return cl, err
}

// raw connects without a handshake.
func (e *env) raw(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial(e.network, e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitClean waits until the fake holds nothing and checks that the server
// freed everything itself.
func (e *env) waitClean(t *testing.T) {
	t.Helper()
	var st fakecuda.Stats
	eventually(t, "the backend to hold nothing", func() bool {
		st = e.fake.Stats()
		return st.Contexts == 0 && st.Allocations == 0 && st.Modules == 0 && st.Streams == 0 && st.Events == 0 &&
			st.Physical == 0 && st.Mappings == 0 && st.Reservations == 0 && st.Pools == 0
	})
	if st.ImplicitFrees != 0 || st.ThreadsWithContext != 0 {
		t.Errorf("after cleanup: %+v; want no implicit frees and no thread with a context", st)
	}
}

// closedByPeer reports whether c's peer closed it (EOF or reset) within 5s,
// skipping what the peer sent before.
func closedByPeer(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err == nil || errors.Is(err, net.ErrClosed) {
		return nil
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("the server kept the connection open")
	}
	return nil // reset by peer
}

// ok fails the test unless a call's (result, error) is success:
// ok(t, "what")(cl.Call(...)).
func ok(t testing.TB, what string) func(proto.Result, error) {
	t.Helper()
	return func(r proto.Result, err error) {
		t.Helper()
		if err != nil || r != proto.Success {
			t.Fatalf("%s: %v, %v", what, r, err)
		}
	}
}

// is checks a call's result: is(t, "what", want)(cl.Call(...)).
func is(t *testing.T, what string, want proto.Result) func(proto.Result, error) {
	t.Helper()
	return func(r proto.Result, err error) {
		t.Helper()
		if err != nil || r != want {
			t.Errorf("%s: %v, %v; want %v", what, r, err, want)
		}
	}
}

// primary retains the client's primary context of device 0.
func primary(t testing.TB, cl *proto.Client) proto.Handle {
	t.Helper()
	h, r, err := cl.DevicePrimaryCtxRetain(0, 0)
	ok(t, "cuDevicePrimaryCtxRetain")(r, err)
	return h
}

func alloc(t testing.TB, cl *proto.Client, ctx proto.Handle, n uint64) proto.DevPtr {
	t.Helper()
	p, r, err := cl.MemAllocV2(ctx, n)
	ok(t, "cuMemAlloc")(r, err)
	return p
}

func upload(t testing.TB, cl *proto.Client, ctx proto.Handle, p proto.DevPtr, data []byte) {
	t.Helper()
	r, err := cl.MemcpyHtoDV2(ctx, p, data, uint64(len(data)))
	ok(t, "cuMemcpyHtoD")(r, err)
}

func download(t *testing.T, cl *proto.Client, ctx proto.Handle, p proto.DevPtr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	r, err := cl.MemcpyDtoHV2(ctx, b, p, uint64(n))
	ok(t, "cuMemcpyDtoH")(r, err)
	return b
}

var testImage = fakecuda.ModuleImage(
	[]fakecuda.Kernel{fakecuda.FillU32, fakecuda.VecAddF32, fakecuda.Fault, {Name: "noop"}},
	[]fakecuda.Global{{Name: "counter", Size: 64}})

// module loads testImage and returns it and its functions by name.
func module(t *testing.T, cl *proto.Client, ctx proto.Handle) (proto.Handle, map[string]proto.Handle) {
	t.Helper()
	m, r, err := cl.ModuleLoadData(ctx, testImage)
	ok(t, "cuModuleLoadData")(r, err)
	fns := map[string]proto.Handle{}
	for _, name := range []string{"fill_u32", "vecadd_f32", "fault", "noop"} {
		f, r, err := cl.ModuleGetFunction(ctx, m, name)
		ok(t, "cuModuleGetFunction "+name)(r, err)
		fns[name] = f
	}
	return m, fns
}

func fillParams(dst proto.DevPtr, v uint32, n uint64) []byte {
	p := make([]byte, 24)
	binary.LittleEndian.PutUint64(p[0:], uint64(dst))
	binary.LittleEndian.PutUint32(p[8:], v)
	binary.LittleEndian.PutUint64(p[16:], n)
	return p
}

func vecaddParams(a, b, c proto.DevPtr, n uint32) []byte {
	p := make([]byte, 28)
	binary.LittleEndian.PutUint64(p[0:], uint64(a))
	binary.LittleEndian.PutUint64(p[8:], uint64(b))
	binary.LittleEndian.PutUint64(p[16:], uint64(c))
	binary.LittleEndian.PutUint32(p[24:], n)
	return p
}

// launch1 launches f on one block of one thread.
func launch1(cl *proto.Client, ctx, f, stream proto.Handle, params []byte) (proto.Result, error) {
	return cl.LaunchKernel(ctx, f, 1, 1, 1, 1, 1, 1, 0, stream, params)
}

func fakeDevices(n int) []fakecuda.Option { return []fakecuda.Option{fakecuda.WithDevices(n)} }

func insecure() []server.Option { return []server.Option{server.WithInsecureNoAuth()} }
