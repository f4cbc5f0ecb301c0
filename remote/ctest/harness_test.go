package ctest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/cbuild"
	"github.com/gpumux/gpumux/internal/syncbuf"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

var secret = []byte("ctest-secret-0123456789abcdef")

// The C test programs linked against the library (remote/interposer/tests).
var programs = []string{
	"basic", "ctx", "mem", "module", "dark", "threads", "fork", "unsupported",
	"quota", "cross", "dead", "unreachable", "protoerr", "torchcalls", "launchex", "peer", "wirebench", "graphs", "allocators", "libctx", "migrate",
}

// Environment variables of the server subprocess (TestMain).
const (
	serveEnv  = "GM_CTEST_SERVE_UNIX"
	secretEnv = "GM_CTEST_SECRET"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	if path := os.Getenv(serveEnv); path != "" {
		serveForever(path, []byte(os.Getenv(secretEnv)))
		return
	}
	if lib := os.Getenv(goNVMLEnv); lib != "" {
		os.Exit(goNVMLChild(lib))
	}
	if os.Getenv(workerEnv) != "" {
		os.Exit(serveTenant())
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// serveForever is the server subprocess: it serves a unix socket until it
// is killed, after printing SERVING.
func serveForever(path string, sec []byte) {
	fake, err := fakecuda.New(fakecuda.WithMemory(1 << 30))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := server.ListenUnix(path, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := server.New(fake, server.WithSecret(sec), server.WithLogger(slog.New(slog.DiscardHandler)))
	fmt.Println("SERVING")
	if err := srv.Serve(context.Background(), ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// workerEnv makes the test binary a tenant worker (tenantProcesses).
const workerEnv = "GM_CTEST_TENANT_WORKER"

// tenantProcesses runs each tenant in a worker process, as gpumux-remoted
// does by default: this test binary with workerEnv.
func tenantProcesses() server.Option {
	return server.WithTenantProcesses(func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=1")
		cmd.Stderr = os.Stderr
		return cmd
	})
}

// serveTenant is a tenant worker's main.
func serveTenant() int {
	fake, err := fakecuda.New(fakecuda.WithMemory(1 << 30))
	if err != nil {
		return 1
	}
	c, err := net.FileConn(os.NewFile(server.TenantFD, "ctrl"))
	if err != nil {
		return 1
	}
	srv := server.New(fake, server.WithSecret(secret), server.WithLogger(slog.New(slog.DiscardHandler)))
	if err := srv.ServeTenant(context.Background(), c.(*net.UnixConn)); err != nil {
		return 1
	}
	return 0
}

// repoRoot is the module's root.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := cbuild.Root()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// build makes the library with `make interposer` and the NVML library of
// remote shares with `make remote-nvml` (into a temporary directory, not
// bin/) and compiles the test programs against them, once per test
// binary. A missing compiler or make is a failure, not a skip:
// the interposer is part of the build.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { buildDir, buildErr = doBuild() })
	if buildErr != nil {
		t.Fatalf("building the interposer and its C tests: %v", buildErr)
	}
	return buildDir
}

func doBuild() (string, error) {
	e, err := cbuild.Setup()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "gpumux-ctest-")
	if err != nil {
		return "", err
	}
	if err := e.Make("interposer", "INTERPOSER_EXTRA_CFLAGS", "INTERPOSER_OUT="+filepath.Join(dir, "libcuda.so.1")); err != nil {
		return dir, err
	}
	// The NVML library of remote shares goes next to it, as in a container.
	if err := e.Make("remote-nvml", "NVML_EXTRA_CFLAGS", "NVML_OUT="+filepath.Join(dir, "libnvidia-ml.so.1")); err != nil {
		return dir, err
	}
	src := filepath.Join(e.Root, "remote", "interposer")
	var jobs [][]string
	for _, p := range programs {
		jobs = append(jobs, []string{"-o", filepath.Join(dir, p), filepath.Join(src, "tests", p+".c"),
			"-L", dir, "-l:libcuda.so.1", "-lpthread"})
	}
	nvml := filepath.Join(e.Root, "remote", "nvml")
	jobs = append(jobs, []string{"-I", nvml, "-I", filepath.Join(src, "tests"), "-o", filepath.Join(dir, "nvml"),
		filepath.Join(nvml, "tests", "nvml.c"), "-L", dir, "-l:libnvidia-ml.so.1", "-l:libcuda.so.1", "-lpthread"})
	// unit links the sources themselves: it tests hidden internals.
	srcs, _ := filepath.Glob(filepath.Join(src, "*.c"))
	unit := []string{"-fvisibility=hidden", "-o", filepath.Join(dir, "unit"), filepath.Join(src, "tests", "unit.c")}
	jobs = append(jobs, append(append(unit, srcs...), "-l:libbearssl.a", "-lpthread"))
	return dir, e.CompileAll([]string{"-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I", src}, jobs)
}

// env is gpumux-remoted on the fake backend, on a unix socket and on TCP
// loopback, with token authentication.
type env struct {
	fake *fakecuda.Backend
	srv  *server.Server
	unix string // GPUMUX_REMOTE_ADDR values
	tcp  string
	logs *syncbuf.Buffer
}

// gpu0 returns the fake's first device's name and its UUID as NVML
// writes it (GPU-xxxxxxxx-xxxx-…).
func (e *env) gpu0() (name, uuid string) {
	name, _ = e.fake.DeviceName(0)
	u, _ := e.fake.DeviceUUID(0)
	return name, fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func startServer(t *testing.T, opts ...server.Option) *env {
	t.Helper()
	return startServerOn(t, 1, nil, opts...)
}

// startServerTLS is startServer with TLS on its TCP listener.
func startServerTLS(t *testing.T, config *tls.Config, opts ...server.Option) *env {
	t.Helper()
	return startServerOn(t, 1, config, opts...)
}

// startServerOn is startServer with devices fake devices, and TLS on its
// TCP listener if config is set.
func startServerOn(t *testing.T, devices int, config *tls.Config, opts ...server.Option) *env {
	t.Helper()
	fake, err := fakecuda.New(fakecuda.WithMemory(1<<30), fakecuda.WithDevices(devices))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	opts = append([]server.Option{
		server.WithSecret(secret),
		server.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
	}, opts...)
	e := &env{fake: fake, srv: server.New(fake, opts...), logs: logs}
	sock := filepath.Join(shortTempDir(t), "remoted.sock")
	ul, err := server.ListenUnix(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ul.Close()
		t.Fatal(err)
	}
	e.unix, e.tcp = "unix:"+sock, tl.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	serve := map[net.Listener]func() error{
		ul: func() error { return e.srv.Serve(ctx, ul) },
		tl: func() error { return e.srv.Serve(ctx, tl) },
	}
	if config != nil {
		serve[tl] = func() error { return e.srv.ServeTLS(ctx, tl, config) }
	}
	for _, run := range serve {
		wg.Go(func() {
			if err := run(); err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return e
}

// shortTempDir is a temporary directory with a short path: a unix
// socket's path is limited to 107 bytes, and t.TempDir's can be longer.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// mint returns a token for id with a quota (0: none).
func mint(t *testing.T, id string, quota uint64) string {
	t.Helper()
	tok, err := token.Mint(secret, token.Claims{ID: id, Quota: quota, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// program is one run of a C test program.
type program struct {
	name    string
	args    []string
	addr    string // GPUMUX_REMOTE_ADDR; "" leaves it unset
	token   string
	timeout string // GPUMUX_REMOTE_TIMEOUT
	env     []string
}

func (p program) command(ctx context.Context, t *testing.T) *exec.Cmd {
	dir := build(t)
	cmd := exec.CommandContext(ctx, filepath.Join(dir, p.name), p.args...)
	env := []string{"LD_LIBRARY_PATH=" + dir, "PATH=" + os.Getenv("PATH")}
	if p.addr != "" {
		env = append(env, "GPUMUX_REMOTE_ADDR="+p.addr)
	}
	if p.token != "" {
		env = append(env, "GPUMUX_REMOTE_TOKEN="+p.token)
	}
	to := p.timeout
	if to == "" {
		to = "20"
	}
	env = append(env, "GPUMUX_REMOTE_TIMEOUT="+to)
	cmd.Env = append(env, p.env...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs the program to its end and fails the test if it failed;
// it returns stdout and stderr.
func (p program) run(t *testing.T) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := p.command(ctx, t)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if err != nil {
		t.Errorf("%s %s: %v (timed out: %v)\nstdout:\n%s\nstderr:\n%s", p.name, strings.Join(p.args, " "), err,
			ctx.Err() != nil, o.String(), e.String())
	}
	return o.String(), e.String()
}

// background is a program running while the test goes on, its stdin
// open.
type background struct {
	p      program
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	sc     *bufio.Scanner
	out    strings.Builder // stdout read so far
	stderr syncbuf.Buffer  // read while the program runs (migrate_test.go)
}

// start runs the program in the background and reads its stdout up to the
// first line that starts with prefix, whose rest it returns; the test ends
// if no such line comes. finish ends it.
func (p program) start(ctx context.Context, t *testing.T, prefix string) (*background, string) {
	t.Helper()
	b := &background{p: p, cmd: p.command(ctx, t)}
	var err error
	if b.stdin, err = b.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b.sc = bufio.NewScanner(stdout)
	for b.sc.Scan() {
		b.out.WriteString(b.sc.Text() + "\n")
		if rest, ok := strings.CutPrefix(b.sc.Text(), prefix); ok {
			return b, rest
		}
	}
	b.cmd.Process.Kill()
	b.cmd.Wait()
	t.Fatalf("%s %s printed no %q line:\n%s\nstderr:\n%s", p.name, strings.Join(p.args, " "), prefix, b.out.String(), b.stderr.String())
	return nil, ""
}

// finish sends the program a line ("go") and the end of its stdin, and
// fails the test if the program then fails.
func (b *background) finish(t *testing.T) {
	t.Helper()
	b.stdin.Write([]byte("go\n"))
	b.stdin.Close()
	for b.sc.Scan() {
		b.out.WriteString(b.sc.Text() + "\n")
	}
	if err := b.cmd.Wait(); err != nil {
		t.Errorf("%s %s: %v\n%s\nstderr:\n%s", b.p.name, strings.Join(b.p.args, " "), err, b.out.String(), b.stderr.String())
	}
}

// stubServer accepts connections and, if welcome, admits them
// (handshake) and then never answers; otherwise it does not even answer
// the handshake. It holds every connection open until the test ends.
func stubServer(t *testing.T, welcome bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				br := bufio.NewReader(c)
				if welcome {
					if _, _, err := proto.ReadFrame(br, nil); err != nil {
						return
					}
					w := proto.Welcome{Result: proto.Success}
					c.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpHello, Flags: proto.FlagReply}, w.Encode()))
				}
				io.Copy(io.Discard, br)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
