package ocicreate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/internal/syncbuf"
	"github.com/gpumux/gpumux/internal/testbin"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/node/lease/leasetest"
	"github.com/gpumux/gpumux/nodeconfig"
)

// server is a Server of a simulated H200 node (GPU 0 in 2 time-slice
// replicas) listening on a socket of its own.
type server struct {
	socket, config, state string
	// stop ends Serve and returns its error once it has returned (after
	// the work it does after its answers).
	stop func() error
}

// timesliceNode is the node config of most tests: GPU 0 of a simulated
// DGX H200 in two time-slice replicas, without the limiter.
const timesliceNode = `simulate = "dgxh200"
gpu {
  match     = "0"
  mechanism = "timeslice"
  replicas  = 2
  limit     = "off"
}
`

func newServer(t testing.TB) *server {
	return newServerOf(t, timesliceNode)
}

// newServerOf is newServer of the node config body (its state_dir added).
func newServerOf(t testing.TB, body string) *server {
	t.Helper()
	return newServerMatching(t, body, false)
}

// newServerMatching is newServerOf; with byContent, the server has no
// config file of its own and answers for files of the same config
// (MatchConfig), as the Nomad plugin's.
func newServerMatching(t testing.TB, body string, byContent bool, extra ...ServerOption) *server {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmx") // short: a unix socket's path is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &server{socket: filepath.Join(dir, "run", "runtime.sock"), config: filepath.Join(dir, "node.hcl"), state: filepath.Join(dir, "state")}
	if err := os.WriteFile(s.config, []byte(body+"state_dir = \""+s.state+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.serve(t, byContent, extra...)
	return s
}

// serve opens s's node and serves it on s's socket until the test ends or
// s.stop; after a stop, serve starts another server on the same node, as
// an agent started again.
func (s *server) serve(t testing.TB, byContent bool, opts ...ServerOption) {
	t.Helper()
	src, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nodeconfig.ParseConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ln, err := Listen(s.socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(s.socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v, %v; want mode 0600", fi, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	file := s.config
	if byContent {
		file, opts = "", append(opts, MatchConfig(cfg))
	}
	go func() {
		done <- NewServer(n, file, s.state, func(lease.Record) (bool, error) { return true, nil }, opts...).Serve(ctx, ln)
	}()
	s.stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	stop := s.stop
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	// Answered once Serve accepts, after what it does before (the leases'
	// containers watched).
	if got := s.ask(t, []byte("hello\x00")); got != answerCore {
		t.Fatalf("a request of no protocol: %q", got)
	}
}

// records are the node's leases.
func (s *server) records(t testing.TB) []lease.Record {
	t.Helper()
	st, err := lease.Open(lease.PathIn(s.state))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// ask sends a request as gpumux-runtime's C entry does and returns the
// answer's line.
func (s *server) ask(t testing.TB, req []byte) string {
	t.Helper()
	answer, err := askSocket(s.socket, req)
	if err != nil {
		t.Fatal(err)
	}
	return answer
}

func askSocket(socket string, req []byte) (string, error) {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		return "", err
	}
	c.(*net.UnixConn).CloseWrite()
	b, err := io.ReadAll(c)
	return strings.TrimSuffix(string(b), "\n"), err
}

// askFromAnotherProcess asks as ask does, from a process of its own (this
// test binary, running TestAskingProcess), and returns the answer and that
// process's PID.
func (s *server) askFromAnotherProcess(t *testing.T, req []byte) (string, int) {
	t.Helper()
	return s.askFrom(t, askingProcess(t), req)
}

// askingProcess is the command of a process of this test binary that runs
// TestAskingProcess (its path absolute: the command may run elsewhere).
func askingProcess(t *testing.T) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command(self, "-test.run=^TestAskingProcess$")
}

// askFromRuncInit asks as askFromAnotherProcess does, from a child of a
// stand-in of runc's init, both in directory dir, as runc's init runs a
// createContainer hook in the container's root.
func (s *server) askFromRuncInit(t *testing.T, dir string, req []byte) string {
	t.Helper()
	init, err := testbin.RuncInit(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := askingProcess(t)
	cmd = exec.Command(init, cmd.Args...)
	cmd.Dir = dir
	answer, _ := s.askFrom(t, cmd, req)
	return answer
}

// askFrom asks as ask does, from cmd (running TestAskingProcess).
func (s *server) askFrom(t *testing.T, cmd *exec.Cmd, req []byte) (string, int) {
	t.Helper()
	cmd.Env = append(os.Environ(), "GPUMUX_TEST_ASK_SOCKET="+s.socket)
	cmd.Stdin = bytes.NewReader(req)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the asking process: %v\n%s", err, out)
	}
	answer, _, _ := strings.Cut(string(out), "\n")
	return answer, cmd.Process.Pid
}

// TestAskingProcess is askFromAnotherProcess's process: the request on
// stdin, the answer on stdout.
func TestAskingProcess(t *testing.T) {
	socket := os.Getenv("GPUMUX_TEST_ASK_SOCKET")
	if socket == "" {
		t.Skip("run by askFromAnotherProcess")
	}
	req, err := io.ReadAll(os.Stdin)
	if err == nil {
		var answer string
		answer, err = askSocket(socket, req)
		fmt.Println(answer)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// encodeRequest is the request gpumux-runtime's C entry sends (doc.go).
func encodeRequest(fields ...string) []byte {
	var b bytes.Buffer
	for _, f := range append([]string{protocol}, fields...) {
		b.WriteString(f)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// bundle writes a bundle whose spec has annotations and env.
func bundle(t testing.TB, annotations map[string]string, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	spec := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/probe"}, Env: append([]string{"PATH=/bin"}, env...)},
		Root: &specs.Root{Path: "rootfs"}, Annotations: annotations, Linux: &specs.Linux{}}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readSpec(t testing.TB, dir string) specs.Spec {
	t.Helper()
	var spec specs.Spec
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestServerPreparesACreate: a create that asks gets its share leased (the
// asking process its owner, runc's root and the bundle recorded) and its
// edits in the bundle, and the answer to run runc. Under runc's default
// root (no --root) its spec also gets the poststop hook that gives the
// share back (elsewhere the server watches runc's deletes:
// TestReleaseAtRuncDelete).
func TestServerPreparesACreate(t *testing.T) {
	s := newServer(t)
	const entryPath = "/opt/gpumux/bin/gpumux-runtime"
	root := filepath.Join(t.TempDir(), "runc")
	for _, tc := range []struct {
		id   string
		root []string
	}{{"c1", []string{"--root", root}}, {"c2", nil}} {
		b := bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"})
		args := append(append([]string{s.config, "", entryPath}, tc.root...), "create", "--bundle", b, tc.id)
		got, pid := s.askFromAnotherProcess(t, encodeRequest(args...))
		if got != answerRunc {
			t.Fatalf("%s: answer %q, want %q", tc.id, got, answerRunc)
		}
		i := slices.IndexFunc(s.records(t), func(r lease.Record) bool { return r.Container == tc.id })
		if i < 0 {
			t.Fatalf("%s: no lease: %+v", tc.id, s.records(t))
		}
		r := s.records(t)[i]
		if wantRoot := strings.Join(tc.root[min(1, len(tc.root)):], ""); r.Root != wantRoot || r.Bundle != b || r.Owner == nil || r.Owner.PID != pid {
			t.Errorf("lease %+v (owner %+v); want %s's, runc root %q and bundle recorded, the asking process (%d) its owner", r, r.Owner, tc.id, wantRoot, pid)
		}
		spec := readSpec(t, b)
		if !slices.ContainsFunc(spec.Process.Env, func(kv string) bool { return strings.HasPrefix(kv, "GPUMUX_SHARES=") }) {
			t.Errorf("%s: the spec's env lacks GPUMUX_SHARES: %q", tc.id, spec.Process.Env)
		}
		hooked := spec.Hooks != nil && len(spec.Hooks.Poststop) == 1 && spec.Hooks.Poststop[0].Path == entryPath &&
			slices.Contains(spec.Hooks.Poststop[0].Env, ociruntime.EnvStateDir+"="+s.state)
		if hooked != (tc.root == nil) {
			t.Errorf("%s: poststop hooks %+v; want the entry, which asks the agent, with the state directory, only under runc's default root", tc.id, spec.Hooks)
		}
	}
}

// TestServerAnswers: what is not this agent's to decide goes to the core,
// a container that asks for nothing to runc untouched, a refused request
// is an error the agent also writes into runc's log, and nothing is leased
// for any of them.
func TestServerAnswers(t *testing.T) {
	s := newServer(t)
	plain := bundle(t, map[string]string{"io.kubernetes.cri.container-type": "container"})
	bad := bundle(t, map[string]string{node.AnnotationMechanism: "warp"})
	other := filepath.Join(t.TempDir(), "other.hcl")
	if err := os.WriteFile(other, []byte("state_dir = \"/x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "runc.log")
	create := func(b string) []string { return []string{"--log", log, "create", "--bundle", b, "c2"} }
	self := "/usr/local/bin/gpumux-runtime"
	for _, tc := range []struct {
		name string
		req  []byte
		want string
	}{
		{"nothing asked", encodeRequest(append([]string{s.config, "", self}, create(plain)...)...), answerRunc},
		{"another node config", encodeRequest(append([]string{other, "", self}, create(plain)...)...), answerCore},
		{"another state directory", encodeRequest(append([]string{s.config, "/var/lib/other", self}, create(plain)...)...), answerCore},
		{"a relative bundle", encodeRequest(s.config, "", self, "create", "--bundle", "bundle", "c2"), answerCore},
		{"another protocol", append([]byte("gpumux-create/9\x00"), encodeRequest(s.config, "", self, "create", "c2")[len(protocol)+1:]...), answerCore},
		{"a request cut short", encodeRequest(s.config, "", self)[:20], answerCore},
		{"not a create", encodeRequest(s.config, "", self, "start", "c2"), answerError + "gpumux agent: not the create"},
		{"a refused request", encodeRequest(append([]string{s.config, "", self}, create(bad)...)...), answerError + "gpumux-runtime: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.ask(t, tc.req); !strings.HasPrefix(got, tc.want) {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(log); err != nil || !strings.Contains(string(b), `"level":"error"`) || !strings.Contains(string(b), "warp") {
		t.Errorf("runc's log %q (%v); want the refusal as an error line", b, err)
	}
	if recs := s.records(t); len(recs) != 0 {
		t.Errorf("leases %+v; want none", recs)
	}
	if spec := readSpec(t, plain); spec.Hooks != nil {
		t.Errorf("a container that asks for nothing got hooks: %+v", spec.Hooks)
	}
}

// TestListenRefusesAnotherAgent: a socket another agent answers on is not
// taken over, nor a file that is not a socket; a stale socket is.
func TestListenRefusesAnotherAgent(t *testing.T) {
	s := newServer(t)
	if _, err := Listen(s.socket); err == nil || !strings.Contains(err.Error(), "another agent answers") {
		t.Errorf("Listen on a served socket: %v", err)
	}
	stale := filepath.Join(filepath.Dir(s.socket), "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	ln, err = Listen(stale)
	if err != nil {
		t.Fatalf("Listen on a stale socket: %v", err)
	}
	ln.Close()
	file := filepath.Join(filepath.Dir(s.socket), "node.hcl")
	if err := os.WriteFile(file, []byte("keep me\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a regular file: %v", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me\n" {
		t.Errorf("the file at the socket's path became %q (%v)", b, err)
	}
}

func TestParseRequest(t *testing.T) {
	r, ok := parseRequest(encodeRequest("/etc/gpumux/node.hcl", "", "/bin/gpumux-runtime", "create", "c1"))
	if !ok || r.config != "/etc/gpumux/node.hcl" || r.stateDir != "" || r.entry != "/bin/gpumux-runtime" || !slices.Equal(r.args, []string{"create", "c1"}) {
		t.Errorf("parsed %+v, %v", r, ok)
	}
	for _, raw := range [][]byte{nil, []byte("gpumux-create/1"), encodeRequest("a", "b", "c")} {
		if _, ok := parseRequest(raw); ok {
			t.Errorf("parseRequest(%q) took it", raw)
		}
	}
}

// FuzzParseRequest: what the C entry encodes, with fields that hold no
// NUL, parses back to the same fields.
func FuzzParseRequest(f *testing.F) {
	f.Add("/etc/gpumux/node.hcl", "", "/bin/gpumux-runtime", "create\nc1")
	f.Fuzz(func(t *testing.T, config, stateDir, entry, args string) {
		if strings.ContainsRune(config+stateDir+entry+args, 0) {
			return
		}
		argv := strings.Split(args, "\n")
		r, ok := parseRequest(encodeRequest(append([]string{config, stateDir, entry}, argv...)...))
		if !ok || r.hook || r.config != config || r.stateDir != stateDir || r.entry != entry || !slices.Equal(r.args, argv) {
			t.Fatalf("%q %q %q %q parsed as %+v, %v", config, stateDir, entry, argv, r, ok)
		}
	})
}

// encodeHook is the request gpumux-runtime run as a hook sends (doc.go).
func encodeHook(stateDir string, st specs.State, args ...string) []byte {
	state, _ := json.Marshal(st)
	return encodeHookState(stateDir, string(state), args...)
}

// encodeHookState is encodeHook with the state as sent: "" where runc's
// init runs the hook.
func encodeHookState(stateDir, state string, args ...string) []byte {
	var b bytes.Buffer
	for _, f := range append([]string{protocolHook, "/etc/gpumux/node.hcl", stateDir, "/usr/bin/gpumux-runtime", state, "hook"}, args...) {
		b.WriteString(f)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// hookBundle is a bundle whose root has "the driver's" library directory
// (a library built from the simulated driver's stub, under its SONAME)
// and, where conf, an /etc/ld.so.conf without a cache.
func hookBundle(t testing.TB, conf bool) (bundleDir, rootfs string) {
	t.Helper()
	n, err := sim.Open("dgxh200", t.TempDir())
	if err == nil {
		err = n.EnsureDriverFiles()
	}
	if err != nil {
		t.Fatal(err)
	}
	lib, err := os.ReadFile(filepath.Join(n.DriverRoot(), sim.LibDir(), "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	bundleDir = t.TempDir()
	rootfs = filepath.Join(bundleDir, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "usr/local/nvidia/lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "usr/local/nvidia/lib64/libcuda.so.1"), lib, 0o644); err != nil {
		t.Fatal(err)
	}
	if conf {
		if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rootfs, "etc/ld.so.conf"), []byte("/opt/lib\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(specs.Spec{Version: specs.Version, Root: &specs.Root{Path: "rootfs"}})
	if err := os.WriteFile(filepath.Join(bundleDir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return bundleDir, rootfs
}

// TestServerHooks: the agent does update-ldcache in the root the hook's
// process sees (links and the cache written), the state's bundle's or,
// where runc's init runs the hook and the state is not sent, its working
// directory, and gives a container's shares back at poststop when the
// state directory is its own; what it would need ldconfig for, another
// state directory, another hook or a state it cannot read is left to
// gpumux-runtime-hook.
func TestServerHooks(t *testing.T) {
	var logs syncbuf.Buffer
	s := newServerMatching(t, timesliceNode, false, WithLogger(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})))
	ldArgs := []string{ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "/usr/bin/nvidia-smi=/usr/local/nvidia/bin/nvidia-smi", "/usr/local/nvidia/lib64"}

	b, _ := hookBundle(t, false)
	for _, way := range []struct {
		name string
		ask  func(bundle, rootfs string) string
	}{
		{"the state's bundle", func(bundle, _ string) string {
			got, _ := s.askFromAnotherProcess(t, encodeHook("", specs.State{ID: "c1", Bundle: bundle}, ldArgs...))
			return got
		}},
		{"no state: the working directory", func(_, rootfs string) string {
			return s.askFromRuncInit(t, rootfs, encodeHookState("", "", ldArgs...))
		}},
	} {
		bundle, rootfs := hookBundle(t, false)
		if got := way.ask(bundle, rootfs); got != answerOK {
			t.Fatalf("update-ldcache, %s: answer %q, want %q", way.name, got, answerOK)
		}
		raw, err := os.ReadFile(filepath.Join(rootfs, "etc/ld.so.cache"))
		if err != nil {
			t.Fatalf("update-ldcache, %s: %v", way.name, err)
		}
		c, err := ldcache.Parse(raw)
		if err != nil || !slices.ContainsFunc(c.Entries, func(e ldcache.Entry) bool {
			return e.Key == "libcuda.so.1" && e.Value == "/usr/local/nvidia/lib64/libcuda.so.1"
		}) {
			t.Errorf("update-ldcache, %s: the container's cache: %+v, %v; want libcuda.so.1 in /usr/local/nvidia/lib64", way.name, c, err)
		}
		if target, err := os.Readlink(filepath.Join(rootfs, "usr/bin/nvidia-smi")); err != nil || target != "/usr/local/nvidia/bin/nvidia-smi" {
			t.Errorf("update-ldcache, %s: /usr/bin/nvidia-smi -> %q (%v)", way.name, target, err)
		}
	}
	// No state where the working directory cannot be the container's
	// root: the hook's own root (the host's here), a process that runc's
	// init did not start, a directory without the driver's. Where a
	// directory is not a container's, the driver's directory asked for is
	// nowhere: nothing could be written. (A hook whose root is not the
	// agent's: TestBeforeSwitch.)
	nowhere := encodeHookState("", "", ociruntime.HookUpdateLdcache, "/nonexistent-gpumux-test/lib64")
	for _, tc := range []struct {
		name, reason string
		ask          func() string
	}{
		{"from runc's init in its root", "working directory is its root", func() string { return s.askFromRuncInit(t, "/", nowhere) }},
		{"from a process runc's init did not start, in a container's root", "is not runc's init", func() string {
			_, rootfs := hookBundle(t, false)
			cmd := askingProcess(t)
			cmd.Dir = rootfs
			got, _ := s.askFrom(t, cmd, encodeHookState("", "", ldArgs...))
			return got
		}},
		{"from runc's init, no driver there", "nonexistent-gpumux-test", func() string { return s.askFromRuncInit(t, t.TempDir(), nowhere) }},
	} {
		if got := tc.ask(); got != answerFallback {
			t.Errorf("update-ldcache without a state %s: answer %q, want %q", tc.name, got, answerFallback)
		}
		// Answered after the log line: the last one is this ask's.
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, "left a hook") || !strings.Contains(last, tc.reason) {
			t.Errorf("update-ldcache without a state %s: the agent's log ends %q, want the hook left, %q", tc.name, last, tc.reason)
		}
	}

	confBundle, confRoot := hookBundle(t, true)
	// A bundle whose root path goes through an absolute link: followed
	// from /proc/PID/root it would lead into the agent's own namespace.
	linked, _ := hookBundle(t, false)
	if err := os.Rename(filepath.Join(linked, "rootfs"), filepath.Join(linked, "real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(linked, "real"), filepath.Join(linked, "rootfs")); err != nil {
		t.Fatal(err)
	}
	spec := bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"})
	if got := s.ask(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", spec, "c2")); got != answerRunc {
		t.Fatalf("create: %q", got)
	}
	for _, tc := range []struct {
		name string
		req  []byte
		want string
	}{
		{"update-ldcache where ldconfig is needed", encodeHook("", specs.State{ID: "c3", Bundle: confBundle}, ldArgs...), answerFallback},
		{"update-ldcache through an absolute link", encodeHook("", specs.State{ID: "c3", Bundle: linked}, ldArgs...), answerFallback},
		{"update-ldcache with bad arguments", encodeHook("", specs.State{ID: "c3", Bundle: b}, ociruntime.HookUpdateLdcache, "lib"), answerFallback},
		{"poststop of another state directory", encodeHook("/var/lib/other", specs.State{ID: "c2"}, ociruntime.HookPoststop), answerFallback},
		{"another hook", encodeHook(s.state, specs.State{ID: "c2"}, "prestart"), answerFallback},
		{"no state", encodeHook(s.state, specs.State{}, ociruntime.HookPoststop), answerFallback},
		{"poststop, the state not sent", encodeHookState(s.state, "", ociruntime.HookPoststop), answerFallback},
		{"update-ldcache, a state without a bundle", encodeHook("", specs.State{ID: "c3"}, ldArgs...), answerFallback},
		{"poststop", encodeHook(s.state, specs.State{ID: "c2"}, ociruntime.HookPoststop), answerOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.ask(t, tc.req); got != tc.want {
				t.Errorf("answer %q, want %q", got, tc.want)
			}
		})
	}
	// The release follows the answer; Serve waits for it.
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if recs := s.records(t); len(recs) != 0 {
		t.Errorf("leases after poststop: %+v", recs)
	}
	if _, err := os.Stat(filepath.Join(confRoot, "etc/ld.so.cache")); err == nil {
		t.Error("the agent wrote a cache where ldconfig was needed")
	}
}

// TestBeforeSwitch: a hook's root that is the agent's is before runc's
// switch to the container's root; another is not.
func TestBeforeSwitch(t *testing.T) {
	for _, tc := range []struct {
		name, dir string
		ok        bool
	}{
		{"the agent's root", "/", true},
		{"a container's root", t.TempDir(), false},
	} {
		root, err := os.Stat(tc.dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := beforeSwitch(root); (err == nil) != tc.ok {
			t.Errorf("%s: %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}

// BenchmarkServerCreate measures a create gpumux agent decides for
// gpumux-runtime, as the C entry asks it over the socket: the request
// read, the bundle's spec read, the share leased (reclaim, choose, acquire
// in the lease store), the edits and the poststop hook written back; the
// lease is given back after each iteration, outside the timing. The node
// is open, as in a running agent (BenchmarkCreateDecision in runtimehook
// is the same create in a fresh process). Profile it with
//
//	go test -run '^$' -bench ServerCreate -cpuprofile /tmp/agent.prof ./ocicreate/
//
// "busy" is a whole GPU's create on a node where 60 other containers hold
// leases (the reclaim before each create checks every one of them: the
// processes that took them have ended, runc has their state).
func BenchmarkServerCreate(b *testing.B) {
	for _, mech := range []string{"exclusive", "timeslice"} {
		b.Run(mech, func(b *testing.B) { benchCreate(b, newServer(b), mech) })
	}
	b.Run("busy", func(b *testing.B) {
		s := newServer(b)
		others(b, s, 60)
		benchCreate(b, s, "exclusive")
	})
}

// others leases a share each to n containers runc has (their state under
// a root of their own), taken by processes that have ended.
func others(b *testing.B, s *server, n int) {
	root := b.TempDir()
	st, err := lease.Open(lease.PathIn(s.state))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := range n {
		id := fmt.Sprintf("other-%d", i)
		leasetest.RuncState(b, root, id)
		owner := leasetest.EndedOwner(b)
		choose := func(map[string]string) ([]string, error) { return []string{"share-of-" + id}, nil }
		if _, err := st.Acquire(context.Background(), id, choose, lease.WithRuncRoot(root), owner); err != nil {
			b.Fatal(err)
		}
	}
}

// benchCreate is BenchmarkServerCreate's loop: a create of mech asked of
// s, its lease given back and its spec restored outside the timing.
func benchCreate(b *testing.B, s *server, mech string) {
	spec := bundle(b, map[string]string{node.AnnotationMechanism: mech})
	orig, err := os.ReadFile(filepath.Join(spec, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	release := node.LeasesIn(s.state)
	for b.Loop() {
		if got := s.ask(b, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", spec, "c1")); got != answerRunc {
			b.Fatalf("answer %q", got)
		}
		b.StopTimer()
		if _, err := release.Release(context.Background(), "c1"); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(spec, "config.json"), orig, 0o600); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkServerHook measures the update-ldcache hook gpumux agent does
// for gpumux-runtime run as a hook, as asked over the socket: the state
// and the bundle's spec read, the links and the cache written in the
// container's root seen through /proc/PID/root (this process's own here).
//
//	go test -run '^$' -bench ServerHook ./ocicreate/
func BenchmarkServerHook(b *testing.B) {
	s := newServer(b)
	bundleDir, _ := hookBundle(b, false)
	req := encodeHook("", specs.State{ID: "c1", Bundle: bundleDir}, ociruntime.HookUpdateLdcache,
		ldcache.LinkFlag, "/usr/bin/nvidia-smi=/usr/local/nvidia/bin/nvidia-smi", "/usr/local/nvidia/lib64")
	for b.Loop() {
		if got := s.ask(b, req); got != answerOK {
			b.Fatalf("answer %q", got)
		}
	}
}

// TestServerMatchesConfigByContent: a server whose config is not a file
// (the Nomad plugin's) answers a gpumux-runtime whose node config file
// decodes to its config, whatever the file's name, and no other: another
// body, a file changed since (read again), a relative path. The poststop
// hook names the file gpumux-runtime read.
func TestServerMatchesConfigByContent(t *testing.T) {
	s := newServerMatching(t, timesliceNode, true)
	src, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	same := filepath.Join(dir, "nomad-client.hcl")
	// The same body inside a Nomad client config's plugin block.
	if err := os.WriteFile(same, []byte("plugin \"nomad-device-gpumux\" {\n  config {\n"+string(src)+"  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.hcl")
	if err := os.WriteFile(other, append(slices.Clone(src), "fingerprint_period = \"30s\"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	create := func(config, id string) string {
		t.Helper()
		b := bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"})
		got := s.ask(t, encodeRequest(config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", b, id))
		if got == answerRunc {
			spec := readSpec(t, b)
			if !slices.Contains(spec.Hooks.Poststop[0].Env, "GPUMUX_CONFIG="+config) {
				t.Errorf("the poststop hook's env %q does not name %s", spec.Hooks.Poststop[0].Env, config)
			}
			if _, err := node.LeasesIn(s.state).Release(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
		return got
	}
	for _, tc := range []struct {
		name, config, want string
	}{
		{"the same file", s.config, answerRunc},
		{"the same body in a Nomad client config", same, answerRunc},
		{"another body", other, answerCore},
		{"a relative path", "node.hcl", answerCore},
		{"no such file", filepath.Join(dir, "none.hcl"), answerCore},
	} {
		if got := create(tc.config, "c1"); got != tc.want {
			t.Errorf("%s: answer %q, want %q", tc.name, got, tc.want)
		}
	}
	// The same file changed: read again.
	if err := os.WriteFile(same, append(slices.Clone(src), "fingerprint_period = \"30s\"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := create(same, "c1"); got != answerCore {
		t.Errorf("a file changed since it matched: answer %q, want %q", got, answerCore)
	}
}

// TestCreateWaitsForTheRelease: a create of a container ID whose poststop
// release is still to be done (docker restart reuses the ID) waits for it;
// the release would otherwise give back the new container's lease.
func TestCreateWaitsForTheRelease(t *testing.T) {
	created := make(chan struct{})
	s := newServerMatching(t, timesliceNode, false, func(s *Server) {
		s.beforeRelease = func() {
			select { // the release holds back until the create is done, or a while
			case <-created:
			case <-time.After(300 * time.Millisecond):
			}
		}
	})
	ask := func(b string) {
		t.Helper()
		if got := s.ask(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", b, "c1")); got != answerRunc {
			t.Fatalf("create: %q", got)
		}
	}
	ask(bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"}))
	if got := s.ask(t, encodeHook(s.state, specs.State{ID: "c1"}, ociruntime.HookPoststop)); got != answerOK {
		t.Fatalf("poststop: %q", got)
	}
	ask(bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"}))
	close(created)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if recs := s.records(t); len(recs) != 1 || recs[0].Container != "c1" {
		t.Errorf("leases after the second create: %+v; want the new c1's", recs)
	}
}
