package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/quantity"
	"github.com/gpumux/gpumux/internal/syncbuf"
	"github.com/gpumux/gpumux/internal/tlstest"
	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/remote/control"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmxd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestMain lets the test binary be gpumux-remoted's tenant worker: the
// daemon started by run re-executes its own executable, which here is this
// binary, with --tenant-worker. Its context ends at SIGTERM or SIGINT, as
// cmd/gpumux-remoted's does.
func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], "--tenant-worker") {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestWorkerIgnoresSignals: a tenant worker lives as long as its front
// wants it: a SIGTERM or SIGINT that reaches it (a process group's, as a
// terminal's ^C or a service manager sends) leaves its sessions running,
// for a front with --drain-to to move them.
func TestWorkerIgnoresSignals(t *testing.T) {
	secretFile, secret := drainSecret(t)
	a := freeAddr(t)
	stderr, _ := serveFake(t, "--listen", a, "--token-file", secretFile, "--backend", "fake")
	cl, ctx, p, want := jobSession(t, a, secret, "signal")
	m := regexp.MustCompile(`msg="tenant worker started" tenant=job pid=(\d+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no worker of the job in the log:\n%s", stderr.String())
	}
	pid, _ := strconv.Atoi(m[1])
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	got := make([]byte, len(want))
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
		if r, err := cl.MemcpyDtoHV2(ctx, got, p, uint64(len(got))); err != nil || r != proto.Success || !bytes.Equal(got, want) {
			t.Fatalf("cuMemcpyDtoH after the worker got SIGTERM and SIGINT: %v %v\n%s", r, err, stderr.String())
		}
	}
}

func TestBadCommandLines(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "s")
	open := filepath.Join(dir, "open-secret")
	if err := os.WriteFile(open, []byte("0123456789abcdef0123"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	poolArgs := []string{"--unix", sock, "--token-file", secret, "--backend", "fake", "--tenant-processes=false", "--drain-to", "pool"}
	busy, err := net.Listen("tcp", "127.0.0.1:0") // a port in use
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		args []string
		code int
		want string // in stderr
	}{
		{nil, 2, "--listen or --unix is required"},
		{[]string{"--unix", sock}, 2, "--token-file is required"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--token-file", open}, 2, "exclude each other"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "tpu"}, 2, `--backend "tpu": want one of cuda`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--log-level", "loud"}, 2, `--log-level "loud"`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--fake-memory", "lots"}, 2, `--fake-memory "lots"`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--fake-memory", "99999999Ti"}, 2, `--fake-memory "99999999Ti": too large`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--fake-memory", "16G"}, 2, `--fake-memory "16G": unit "G" is ambiguous (want ` + quantity.Rule + ")"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--fake-devices", "2"}, 2, `--fake-devices applies only to --backend fake, not "cuda"`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--fake-uuids", "GPU-0a1b2c3d-4e5f-4a6b-8c7d-0123456789ab"}, 2, `--fake-uuids applies only to --backend fake, not "cuda"`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--fake-uuids", "GPU-1"}, 2, `--fake-uuids "GPU-1": fakecuda: UUID "GPU-1": want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--fake-devices", "2", "--fake-uuids", "GPU-0a1b2c3d-4e5f-4a6b-8c7d-0123456789ab"}, 2, "1 UUIDs for 2 devices"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--max-clients", "0"}, 2, "--max-clients 0"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--handshake-timeout", "0s"}, 2, "--handshake-timeout 0s"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--busy-poll", "20ms"}, 2, "--busy-poll 20ms: want 0 to 10ms"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--max-tenant-connections", "0"}, 2, "--max-tenant-connections 0"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--max-handshakes", "0"}, 2, "--max-handshakes 0"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--max-handshakes-per-peer", "0"}, 2, "--max-handshakes-per-peer 0"},
		{[]string{"--unix", sock, "--insecure-no-auth", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--tls-cert-file", open}, 2, "--tls-cert-file and --tls-key-file go together"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--tls-key-file", open}, 2, "--tls-cert-file and --tls-key-file go together"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--tls-client-ca-file", open}, 2, "--tls-client-ca-file needs --tls-cert-file"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--tls-cert-file", open, "--tls-key-file", open}, 2, "--tls-cert-file applies to --listen"},
		{[]string{"--listen", "127.0.0.1:0", "--insecure-no-auth", "--backend", "fake", "--tls-cert-file", open, "--tls-key-file", open}, 1, "TLS certificate " + open},
		{[]string{"--unix", sock, "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--tenant-processes=false", "--drain-to", "pool"}, 2, "--drain-to pool needs --token-file"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--nomad-addr", "http://10.0.0.1:4646"}, 2, "--nomad-addr applies only to --drain-to pool"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--tls-ca-file", open}, 2, "--tls-ca-file applies to --migratable and --drain-to"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--tenant-processes=false", "--migratable", "--tls-ca-file", open}, 2, "--tls-ca-file: " + open + ": no PEM certificate in it"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--tenant-processes=false", "--drain-to", "127.0.0.1:1", "--nomad-service", "x"}, 2, "--nomad-service applies only to --drain-to pool"},
		{slices.Concat(poolArgs, []string{"--nomad-addr", "10.0.0.1:4646"}), 2, `--nomad-addr "10.0.0.1:4646": want the Nomad agent's HTTP address, e.g. http://127.0.0.1:4646`},
		{slices.Concat(poolArgs, []string{"--nomad-service", ""}), 2, `--nomad-service: empty`},
		{slices.Concat(poolArgs, []string{"--nomad-token-file", filepath.Join(dir, "missing")}), 2, `--nomad-token-file: open`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--cuda-lib", "/nonexistent/libcuda.so.1"}, 1, "backend cuda: cudabackend: no CUDA driver"},
		{[]string{"--unix", sock, "--token-file", open, "--backend", "fake"}, 1, "lets others read it"},
		{[]string{"--unix", sock, "--token-file", filepath.Join(dir, "missing"), "--backend", "fake"}, 1, "--token-file"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--fake-devices", "0"}, 1, "0 devices"},
		{[]string{"--unix", filepath.Join(dir, "no", "such", "dir"), "--insecure-no-auth", "--backend", "fake"}, 1, "--unix"},
		{[]string{"--listen", "256.0.0.1:1", "--insecure-no-auth", "--backend", "fake"}, 1, "--listen 256.0.0.1:1"},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--metrics-addr", "9401"}, 2, `--metrics-addr "9401": listen tcp: address 9401: missing port in address`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--metrics-addr", "localhost:http-alt-nope"}, 2, `--metrics-addr "localhost:http-alt-nope"`},
		{[]string{"--unix", sock, "--insecure-no-auth", "--backend", "fake", "--metrics-addr", busy.Addr().String()}, 2, `--metrics-addr "` + busy.Addr().String() + `": listen tcp`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr syncbuf.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if code := Run(ctx, tt.args, io.Discard, &stderr); code != tt.code || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr.String(), tt.code, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stderr syncbuf.Buffer
	if code := Run(context.Background(), []string{"--help"}, io.Discard, &stderr); code != 0 {
		t.Errorf("--help exits %d", code)
	}
	for _, want := range []string{"--listen", "-unix", "-token-file", "-insecure-no-auth", "-backend", "-fake-devices",
		"-fake-memory", "-fake-uuids", "-max-clients", "-max-tenant-connections", "-max-handshakes", "-max-handshakes-per-peer", "-handshake-timeout", "-busy-poll", "-cpu-profile", "-log-level", "-cuda-lib", "-tenant-processes", "worker process of its own",
		"-metrics-addr", "Prometheus metrics", "/metrics", "every tenant worker", "off by default",
		"-tls-cert-file", "-tls-key-file", "-tls-client-ca-file", "mutual TLS", "SIGHUP", "in clear", "-version", "/healthz"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, stderr.String())
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr syncbuf.Buffer
	// --version wins over flags that would otherwise be missing.
	if code := Run(context.Background(), []string{"--version"}, &stdout, &stderr); code != ExitOK || stdout.String() != "gpumux-remoted "+version.String()+"\n" {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestHealthz: --metrics-addr serves /healthz while the server serves, and
// nothing once it stopped.
func TestHealthz(t *testing.T) {
	addr := freeAddr(t)
	_, stop := serveFake(t, "--unix", filepath.Join(shortDir(t), "s"), "--insecure-no-auth", "--backend", "fake", "--metrics-addr", addr)
	url := "http://" + addr + "/healthz"
	var body []byte
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /healthz: %s", resp.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /healthz: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if string(body) != "ok\n" {
		t.Errorf("/healthz says %q, want ok", body)
	}
	if code := stop(); code != ExitOK {
		t.Errorf("stopped with exit %d", code)
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("/healthz still answers %s after the server stopped", resp.Status)
	}
}

// serveFake runs the daemon with args until the test ends, and returns
// its stderr and a stop function that waits for the exit code.
func serveFake(t *testing.T, args ...string) (*syncbuf.Buffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, io.Discard, stderr) }()
	var once sync.Once
	code := -1
	stop := func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(10 * time.Second):
				t.Error("the daemon did not stop within 10s")
			}
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return stderr, stop
}

// freeAddr returns a loopback TCP address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	return freeAddrOn(t, "127.0.0.1")
}

func dialUntil(t *testing.T, network, addr string, hello proto.Hello) *proto.Client {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cl, err := proto.Dial(context.Background(), network, addr, hello, 5*time.Second)
		if err == nil {
			t.Cleanup(func() { cl.Close() })
			return cl
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServesFakeOnUnixSocket(t *testing.T) {
	sock := filepath.Join(shortDir(t), "gpumux.sock")
	stderr, stop := serveFake(t, "--unix", sock, "--insecure-no-auth", "--backend", "fake",
		"--fake-devices", "2", "--fake-memory", "1GiB", "--log-level", "debug")
	cl := dialUntil(t, "unix", sock, proto.Hello{Identity: "main_test"})
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("socket: %v %v, want mode 0660", fi.Mode(), err)
	}
	n, r, err := cl.DeviceGetCount(0)
	if err != nil || r != proto.Success || n != 2 {
		t.Errorf("cuDeviceGetCount: %d %v %v, want 2 devices", n, r, err)
	}
	total, r, err := cl.DeviceTotalMemV2(0, 1)
	if err != nil || r != proto.Success || total != 1<<30 {
		t.Errorf("cuDeviceTotalMem: %d %v %v, want 1 GiB", total, r, err)
	}
	peerCopy(t, cl)
	if code := stop(); code != 0 {
		t.Errorf("exit %d after a signal, want 0; stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "WARNING: --insecure-no-auth") {
		t.Error("no loud warning for --insecure-no-auth")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after exit: %v", err)
	}
	if _, _, err := cl.DeviceGetName(0, 64, 0); err == nil {
		t.Error("a client call succeeded after the daemon stopped")
	}
}

// TestFakeUUIDs: --fake-uuids gives the fake GPUs those UUIDs (and their
// number), also in the tenant worker that serves the client.
func TestFakeUUIDs(t *testing.T) {
	uuids := []string{"GPU-0a1b2c3d-4e5f-4a6b-8c7d-0123456789ab", "GPU-ffffffff-0000-4000-8000-000000000001"}
	sock := filepath.Join(shortDir(t), "gpumux.sock")
	stderr, stop := serveFake(t, "--unix", sock, "--insecure-no-auth", "--backend", "fake", "--fake-uuids", strings.Join(uuids, ","))
	cl := dialUntil(t, "unix", sock, proto.Hello{Identity: "main_test"})
	n, r, err := cl.DeviceGetCount(0)
	if err != nil || r != proto.Success || n != 2 {
		t.Fatalf("cuDeviceGetCount: %d %v %v, want 2 devices", n, r, err)
	}
	for i, want := range uuids {
		u, r, err := cl.DeviceGetUuidV2(0, int32(i))
		if err != nil || r != proto.Success || pool.FormatUUID(u) != want {
			t.Errorf("device %d: UUID %s %v %v, want %s", i, pool.FormatUUID(u), r, err, want)
		}
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d after a signal, want 0; stderr:\n%s", code, stderr.String())
	}
}

// peerCopy copies bytes from the client's device 0 to its device 1 and
// reads them back.
func peerCopy(t *testing.T, cl *proto.Client) {
	t.Helper()
	var ctx [2]proto.Handle
	var mem [2]proto.DevPtr
	for dev := range 2 {
		h, r, err := cl.DevicePrimaryCtxRetain(0, int32(dev))
		if err != nil || r != proto.Success {
			t.Fatalf("cuDevicePrimaryCtxRetain(%d): %v %v", dev, r, err)
		}
		p, r, err := cl.MemAllocV2(h, 4096)
		if err != nil || r != proto.Success {
			t.Fatalf("cuMemAlloc on device %d: %v %v", dev, r, err)
		}
		ctx[dev], mem[dev] = h, p
	}
	data := bytes.Repeat([]byte("two GPUs"), 512)
	if r, err := cl.MemcpyHtoDV2(ctx[0], mem[0], data, 4096); err != nil || r != proto.Success {
		t.Fatalf("cuMemcpyHtoD: %v %v", r, err)
	}
	if r, err := cl.MemcpyPeer(ctx[0], mem[1], ctx[1], mem[0], ctx[0], 4096); err != nil || r != proto.Success {
		t.Fatalf("cuMemcpyPeer 0→1: %v %v", r, err)
	}
	got := make([]byte, 4096)
	if r, err := cl.MemcpyDtoHV2(ctx[1], got, mem[1], 4096); err != nil || r != proto.Success || !bytes.Equal(got, data) {
		t.Fatalf("device 1 after cuMemcpyPeer: %v %v, equal %v", r, err, bytes.Equal(got, data))
	}
}

func TestServesTokensOnTCP(t *testing.T) {
	dir := shortDir(t)
	secretFile := filepath.Join(dir, "secret")
	secret := "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	stderr, stop := serveFake(t, "--listen", addr, "--token-file", secretFile, "--backend", "fake")
	tok, err := token.Mint([]byte(secret), token.Claims{ID: "job", Quota: 1 << 20, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cl := dialUntil(t, "tcp", addr, proto.Hello{Token: tok})
	if cl.Welcome.Quota != 1<<20 {
		t.Errorf("welcome quota %d", cl.Welcome.Quota)
	}
	if _, err := proto.Dial(context.Background(), "tcp", addr, proto.Hello{}, 5*time.Second); err == nil {
		t.Error("a client without a token was admitted")
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "insecure-no-auth") || !strings.Contains(stderr.String(), "WARNING: --listen without --tls-cert-file: tokens and CUDA data cross the network in clear") {
		t.Errorf("want the warning that TCP without TLS is in clear, and only that one:\n%s", stderr.String())
	}
}

// TestServesTLS: --listen with TLS files serves TLS (to workers through
// the front's relay), the unix socket stays plain, SIGHUP reloads the
// files, and there is no warning.
func TestServesTLS(t *testing.T) {
	dir := shortDir(t)
	secretFile := filepath.Join(dir, "secret")
	secret := []byte("0123456789abcdef0123456789abcdef")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, dir, "ca")
	clients := tlstest.NewCA(t, dir, "clients")
	first := ca.Server(t, "first", []string{"127.0.0.1"}, tlstest.Options{})
	addr, sock := freeAddr(t), filepath.Join(dir, "s")
	stderr, stop := serveFake(t, "--listen", addr, "--unix", sock, "--token-file", secretFile, "--backend", "fake",
		"--tls-cert-file", first.CertFile, "--tls-key-file", first.KeyFile, "--tls-client-ca-file", clients.CertFile)
	tok, err := token.Mint(secret, token.Claims{ID: "job", Quota: 1 << 20, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	client := clients.Client(t, "node", tlstest.Options{})
	config := ca.ClientConfig(t, "127.0.0.1", &client)
	served := func() (string, error) {
		conn, err := tls.Dial("tcp", addr, config)
		if err != nil {
			return "", err
		}
		cl, err := proto.NewClient(conn, proto.Hello{Token: tok}, 5*time.Second)
		if err != nil {
			conn.Close()
			return "", err
		}
		defer cl.Close()
		if n, r, err := cl.DeviceGetCount(0); n != 1 || r != proto.Success || err != nil {
			return "", fmt.Errorf("cuDeviceGetCount over TLS: %d %v %v", n, r, err)
		}
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		name, err := served()
		if err == nil && name == "first" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serving %q, %v; want first", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	dialUntil(t, "unix", sock, proto.Hello{Token: tok})

	// Another certificate in the same files, then SIGHUP.
	second := ca.Server(t, "second", []string{"127.0.0.1"}, tlstest.Options{})
	for src, dst := range map[string]string{second.CertFile: first.CertFile, second.KeyFile: first.KeyFile} {
		if err := os.Rename(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for name, err := served(); name != "second"; name, err = served() {
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP serving %q, %v; want second", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "WARNING") || !strings.Contains(stderr.String(), "TLS files reloaded") {
		t.Errorf("want no warning and the reload logged:\n%s", stderr.String())
	}
}

// TestDrainTo: on SIGTERM a server with --drain-to moves its sessions to
// the other server before it exits; the client carries on there with its
// memory as it was.
func TestDrainTo(t *testing.T) {
	for _, procs := range tenantModes {
		t.Run("--tenant-processes="+procs, func(t *testing.T) {
			secretFile, secret := drainSecret(t)
			a, b := freeAddr(t), freeAddr(t)
			common := []string{"--token-file", secretFile, "--backend", "fake", "--tenant-processes=" + procs}
			stderrB, _ := serveFake(t, append([]string{"--listen", b, "--migratable"}, common...)...)
			stderrA, stopA := serveFake(t, append([]string{"--listen", a, "--drain-to", b}, common...)...)
			followDrain(t, a, secret, stopA, stderrA)
			if procs == "true" && !strings.Contains(stderrB.String(), `msg="tenant worker started" tenant=job`) {
				t.Errorf("no worker of the job on the target:\n%s", stderrB.String())
			}
		})
	}
}

// tenantModes are gpumux-remoted's two ways to run its tenants: each in a
// worker process (the default), or all in the server's.
var tenantModes = []string{"true", "false"}

// TestDrainToPool: with --drain-to pool, the server finds the others of
// its pool through Nomad's service (leaving its own allocation out), skips
// one that does not answer and one without room for the session's quota,
// and moves the session to the next.
func TestDrainToPool(t *testing.T) {
	for _, procs := range tenantModes {
		t.Run("--tenant-processes="+procs, func(t *testing.T) { drainToPool(t, procs) })
	}
}

func drainToPool(t *testing.T, procs string) {
	secretFile, secret := drainSecret(t)
	common := []string{"--token-file", secretFile, "--backend", "fake", "--tenant-processes=" + procs, "--migratable"}
	// The pool's order is by address: the dead server, the full one, the
	// one with room.
	dead := "127.0.0.1:1"
	full, roomy, self := freeAddr(t), freeAddrOn(t, "127.0.0.2"), freeAddr(t)
	_, _ = serveFake(t, append([]string{"--listen", full, "--fake-memory", "32MiB", "--fake-uuids", "GPU-00000000-0000-4000-8000-000000000001"}, common...)...)
	stderrRoomy, _ := serveFake(t, append([]string{"--listen", roomy, "--fake-uuids", "GPU-00000000-0000-4000-8000-000000000002"}, common...)...)
	reg := func(addr, alloc string) map[string]any {
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		return map[string]any{"Address": host, "Port": p, "AllocID": alloc, "NodeID": "n"}
	}
	var asked atomic.Int32
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/service/gpumux-remote" || r.URL.Query().Get("namespace") != "gpu" || r.Header.Get("X-Nomad-Token") != "acl" {
			http.Error(w, "not this", http.StatusNotFound)
			return
		}
		asked.Add(1)
		json.NewEncoder(w).Encode([]map[string]any{reg(self, "mine"), reg(dead, "a1"), reg(full, "a2"), reg(roomy, "a3")})
	}))
	defer nomad.Close()
	t.Setenv("NOMAD_ALLOC_ID", "mine")
	t.Setenv("NOMAD_NAMESPACE", "gpu")
	t.Setenv("NOMAD_TOKEN", "acl")
	// A server with no session stops at once, without asking Nomad.
	idle, stopIdle := serveFake(t, "--listen", freeAddr(t), "--token-file", secretFile, "--backend", "fake", "--tenant-processes="+procs,
		"--drain-to", "pool", "--nomad-addr", nomad.URL)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(idle.String(), "msg=serving"); {
		if time.Now().After(deadline) {
			t.Fatalf("the idle server did not start:\n%s", idle.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := stopIdle(); code != 0 || asked.Load() != 0 || !strings.Contains(idle.String(), "no session to move") {
		t.Errorf("an idle server's drain: exit %d, Nomad asked %d times:\n%s", code, asked.Load(), idle.String())
	}
	stderrA, stopA := serveFake(t, "--listen", self, "--token-file", secretFile, "--backend", "fake", "--tenant-processes="+procs,
		"--drain-to", "pool", "--nomad-addr", nomad.URL)
	followDrain(t, self, secret, stopA, stderrA)
	if asked.Load() != 1 {
		t.Errorf("Nomad was asked %d times for the service, want once (at SIGTERM)", asked.Load())
	}
	log := stderrA.String()
	for _, want := range []string{
		"a server of the pool did not answer", dead,
		"targets=" + full + "," + roomy,
		"the target refused the session", "cannot take a quota of 64 MiB",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the drained server's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "targets="+self) || strings.Contains(log, ","+self) {
		t.Errorf("the server offered its sessions to itself:\n%s", log)
	}
	if !strings.Contains(stderrRoomy.String(), "migrated session waiting for its client") {
		t.Errorf("the server with room did not take the session:\n%s", stderrRoomy.String())
	}
}

// drainSecret writes a pool secret for the drain tests.
func drainSecret(t *testing.T) (string, []byte) {
	t.Helper()
	f := filepath.Join(shortDir(t), "secret")
	secret := []byte("0123456789abcdef0123456789abcdef")
	if err := os.WriteFile(f, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return f, secret
}

// followDrain opens a session with 3 MiB of data on the server at addr,
// stops the server (its SIGTERM) and reads the data back until the session
// has moved; then checks it on the other server and that the drained one
// says so and exits 0.
func followDrain(t *testing.T, addr string, secret []byte, stop func() int, stderr *syncbuf.Buffer) {
	t.Helper()
	cl, ctx, p, want := jobSession(t, addr, secret, "drain")
	exited := make(chan int, 1)
	go func() { exited <- stop() }()
	got := make([]byte, len(want))
	for cl.Moves() == 0 {
		if r, err := cl.MemcpyDtoHV2(ctx, got, p, uint64(len(got))); err != nil || r != proto.Success {
			t.Fatalf("cuMemcpyDtoH while the server drains: %v %v\n%s", r, err, stderr.String())
		}
		if !bytes.Equal(got, want) {
			t.Fatal("the allocation changed")
		}
	}
	if code := <-exited; code != 0 {
		t.Errorf("the drained server exited %d:\n%s", code, stderr.String())
	}
	if r, err := cl.MemcpyDtoHV2(ctx, got, p, uint64(len(got))); err != nil || r != proto.Success || !bytes.Equal(got, want) {
		t.Fatalf("cuMemcpyDtoH on the other server: %v %v", r, err)
	}
	if !strings.Contains(stderr.String(), "drained") {
		t.Errorf("no word of the drain:\n%s", stderr.String())
	}
}

// freeAddrOn returns a TCP address of host that was free a moment ago.
func freeAddrOn(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMigrateTenantWorkers: gpumux-remoted with its default tenant worker
// processes and --migratable moves a session to another such server
// (gpumux remote migrate's request): the workers themselves are
// migratable, and the client carries on there with its memory as it was.
func TestMigrateTenantWorkers(t *testing.T) {
	secretFile, secret := drainSecret(t)
	a, b := freeAddr(t), freeAddr(t)
	common := []string{"--token-file", secretFile, "--backend", "fake", "--migratable"}
	stderrA, _ := serveFake(t, append([]string{"--listen", a}, common...)...)
	_, _ = serveFake(t, append([]string{"--listen", b}, common...)...)
	cl, ctx, p, want := jobSession(t, a, secret, "moved")
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc, err := control.Dial(cctx, a, secret, proto.Control{Kind: proto.ControlMigrate, Tenant: "job", Target: b})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	replies := make(chan proto.ControlReply, 1)
	go func() {
		rep, err := cc.Reply()
		if err != nil {
			rep.Message = err.Error()
		}
		replies <- rep
	}()
	got := make([]byte, len(want))
	var rep proto.ControlReply
	for done := false; !done; {
		select {
		case rep = <-replies:
			done = true
		default:
			if r, err := cl.MemcpyDtoHV2(ctx, got, p, uint64(len(got))); err != nil || r != proto.Success || !bytes.Equal(got, want) {
				t.Fatalf("cuMemcpyDtoH while the session moves: %v %v\n%s", r, err, stderrA.String())
			}
		}
	}
	if rep.Result != proto.Success || len(rep.Moved) != 1 {
		t.Fatalf("the migration: %+v\n%s", rep, stderrA.String())
	}
	if r, err := cl.MemcpyDtoHV2(ctx, got, p, uint64(len(got))); err != nil || r != proto.Success || !bytes.Equal(got, want) || cl.Moves() != 1 {
		t.Fatalf("cuMemcpyDtoH on the other server: %v %v (moves %d)", r, err, cl.Moves())
	}
}

// jobSession dials the server at addr as the job (a token of secret) and
// fills 3 MiB of its GPU with pattern: the client, its context, the
// allocation and its bytes.
func jobSession(t *testing.T, addr string, secret []byte, pattern string) (*proto.Client, proto.Handle, proto.DevPtr, []byte) {
	t.Helper()
	tok, err := token.Mint(secret, token.Claims{ID: "job", Quota: 64 << 20, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cl := dialUntil(t, "tcp", addr, proto.Hello{Token: tok})
	ctx, r, err := cl.DevicePrimaryCtxRetain(0, 0)
	if err != nil || r != proto.Success {
		t.Fatalf("cuDevicePrimaryCtxRetain: %v %v", r, err)
	}
	p, r, err := cl.MemAllocV2(ctx, 3<<20)
	if err != nil || r != proto.Success {
		t.Fatalf("cuMemAlloc: %v %v", r, err)
	}
	want := bytes.Repeat([]byte(pattern), 3<<20/len(pattern))
	if r, err := cl.MemcpyHtoDV2(ctx, p, want, uint64(len(want))); err != nil || r != proto.Success {
		t.Fatalf("cuMemcpyHtoD: %v %v", r, err)
	}
	return cl, ctx, p, want
}
