package mps

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/internal/testbin"
)

// fakeBin is gpumux-fake-mps-control, built once by TestMain (testbin).
var fakeBin string

func TestMain(m *testing.M) {
	bin, err := testbin.BuildFakeMPS()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBin = bin
	os.Exit(testbin.Main(m))
}

// The UUIDs of the two test devices.
const (
	gpuA = "GPU-00000000-0000-0000-0000-00000000000a"
	gpuB = "GPU-00000000-0000-0000-0000-00000000000b"
)

// stateDir returns a short state directory whose fake daemons are killed at
// the end of the test.
func stateDir(t *testing.T) string { return shortStateDir(t, fakes) }

// shortStateDir returns a short state directory (pipe directories have a
// length limit; t.TempDir's names are long); at the end of the test the
// processes procs finds under it are killed and it is removed.
func shortStateDir(t *testing.T, procs func(dir string) []int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range procs(dir) {
			syscall.Kill(pid, syscall.SIGKILL)
			waitExit(context.Background(), pid)
		}
		os.RemoveAll(dir)
	})
	return dir
}

// fakes returns the live fake daemons (the -f processes that -d starts;
// not the short-lived command invocations) whose pipe directory is under
// dir, by reading /proc: what the tests started (fakeBin, or a copy of it in
// dir), and nothing else.
func fakes(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !procAlive(pid) {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		exe = strings.TrimSuffix(exe, " (deleted)")
		if exe != fakeBin && !strings.HasPrefix(exe, dir+"/") {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !slices.Contains(strings.Split(string(cmdline), "\x00"), "-f") {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if bytes.Contains(environ, []byte(envPipeDir+"="+dir+"/")) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// testLogger logs to t until the test ends.
func testLogger(t *testing.T) hclog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Debug})
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func newManager(t *testing.T, dir string, opts ...Option) *Manager {
	opts = append([]Option{
		WithControlBinary(fakeBin), WithLogger(testLogger(t)),
		WithCheckInterval(50 * time.Millisecond), WithCommandTimeout(2 * time.Second),
		WithRestartBackoff(300*time.Millisecond, time.Second),
	}, opts...)
	return NewManager(dir, opts...)
}

// ctl sends one command to a device's daemon through the fake binary, as an
// operator would, and returns its stdout.
func ctl(t *testing.T, m *Manager, uuid, command string) string {
	t.Helper()
	cmd := exec.Command(fakeBin)
	cmd.Env = m.env(uuid)
	cmd.Stdin = strings.NewReader(command + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s for %s: %v", command, uuid, err)
	}
	return strings.TrimSpace(string(out))
}

// received returns the commands a device's daemon logged, in order.
func received(t *testing.T, m *Manager, uuid string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.LogDir(uuid), "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, line := range strings.Split(string(b), "\n") {
		if _, c, ok := strings.Cut(line, "] Cmd:"); ok {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

func countPrefix(cmds []string, prefix string) int {
	n := 0
	for _, c := range cmds {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runManager runs m.Run until the test ends.
func runManager(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func pidOf(t *testing.T, m *Manager, uuid string) int {
	t.Helper()
	for _, s := range m.Status() {
		if s.Device.UUID == uuid {
			return s.PID
		}
	}
	t.Fatalf("%s is not managed", uuid)
	return 0
}

func statusOf(m *Manager, uuid string) (Status, bool) {
	for _, s := range m.Status() {
		if s.Device.UUID == uuid {
			return s, true
		}
	}
	return Status{}, false
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestStartTwoDevicesAppliesDefaults(t *testing.T) {
	dir := stateDir(t)
	m := newManager(t, dir)
	devs := []Device{
		{UUID: gpuA, ThreadPercent: 25, PinnedMemLimitMiB: 4096},
		{UUID: gpuB, ThreadPercent: 50, PinnedMemLimitMiB: 3000},
	}
	if err := m.Reconcile(context.Background(), devs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uuid, percent, limit string
	}{
		{gpuA, "25.0", "4G"},
		{gpuB, "50.0", "2G"}, // 3000M reads back rounded down, as on a real daemon
	} {
		t.Run(tc.uuid, func(t *testing.T) {
			if ok, why := m.Health(tc.uuid); !ok {
				t.Errorf("unhealthy: %s", why)
			}
			if got := ctl(t, m, tc.uuid, "get_default_active_thread_percentage"); got != tc.percent {
				t.Errorf("thread percentage %q, want %q", got, tc.percent)
			}
			if got := ctl(t, m, tc.uuid, "get_default_device_pinned_mem_limit 0"); got != tc.limit {
				t.Errorf("pinned limit %q, want %q", got, tc.limit)
			}
			for _, d := range []struct {
				path string
				perm os.FileMode
			}{{m.PipeDir(tc.uuid), 0o755}, {m.LogDir(tc.uuid), 0o700}} {
				fi, err := os.Stat(d.path)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != d.perm {
					t.Errorf("%s has mode %v, want %v", d.path, fi.Mode().Perm(), d.perm)
				}
			}
			log, err := os.ReadFile(filepath.Join(m.LogDir(tc.uuid), "control.log"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(log), "CUDA_VISIBLE_DEVICES="+tc.uuid+"\n") {
				t.Errorf("the daemon was not restricted to its device:\n%s", log)
			}
			if pid := pidOf(t, m, tc.uuid); pid == 0 || !procAlive(pid) {
				t.Errorf("daemon pid %d not running", pid)
			}
		})
	}
	if m.PipeDir(gpuA) == m.PipeDir(gpuB) || m.LogDir(gpuA) == m.LogDir(gpuB) {
		t.Error("devices share directories")
	}
	if got := fakes(dir); len(got) != 2 {
		t.Errorf("%d daemons running, want 2: %v", len(got), got)
	}
	select {
	case <-m.Changed():
	default:
		t.Error("Changed did not tick when the daemons became healthy")
	}

	// A second Reconcile with the same devices sends no set_ command for
	// defaults that read back as wanted.
	if err := m.Reconcile(context.Background(), devs); err != nil {
		t.Fatal(err)
	}
	if n := countPrefix(received(t, m, gpuA), "set_"); n != 2 {
		t.Errorf("%s got %d set commands in two Reconciles, want 2 (the first one's)", gpuA, n)
	}
}

func TestAdoptAfterManagerRestart(t *testing.T) {
	dir := stateDir(t)
	devs := []Device{
		{UUID: gpuA, ThreadPercent: 25, PinnedMemLimitMiB: 4096},
		{UUID: gpuB, ThreadPercent: 50, PinnedMemLimitMiB: 8192},
	}
	first := newManager(t, dir)
	if err := first.Reconcile(context.Background(), devs); err != nil {
		t.Fatal(err)
	}
	before := fakes(dir)
	pidA, pidB := pidOf(t, first, gpuA), pidOf(t, first, gpuB)

	// A new Manager on the same state directory, as after a plugin restart.
	second := newManager(t, dir)
	if err := second.Reconcile(context.Background(), devs); err != nil {
		t.Fatal(err)
	}
	if got := fakes(dir); !slices.Equal(got, before) {
		t.Errorf("daemons %v after adoption, want the same %v", got, before)
	}
	if pidOf(t, second, gpuA) != pidA || pidOf(t, second, gpuB) != pidB {
		t.Errorf("adopted pids %d, %d; want %d, %d", pidOf(t, second, gpuA), pidOf(t, second, gpuB), pidA, pidB)
	}
	for _, uuid := range []string{gpuA, gpuB} {
		if ok, why := second.Health(uuid); !ok {
			t.Errorf("%s unhealthy after adoption: %s", uuid, why)
		}
		cmds := received(t, second, uuid)
		if n := countPrefix(cmds, "set_"); n != 2 {
			t.Errorf("%s got %d set commands, want the 2 of its start (adoption sets nothing equal): %v", uuid, n, cmds)
		}
		if n := countPrefix(cmds, "quit"); n != 0 {
			t.Errorf("%s got quit", uuid)
		}
		log, _ := os.ReadFile(filepath.Join(second.LogDir(uuid), "control.log"))
		if n := strings.Count(string(log), "Starting control daemon"); n != 1 {
			t.Errorf("%s started %d times, want once", uuid, n)
		}
	}

	// Changed defaults are set in the adopted daemon, without a restart.
	devs[0].ThreadPercent = 30
	if err := second.Reconcile(context.Background(), devs); err != nil {
		t.Fatal(err)
	}
	if got := ctl(t, second, gpuA, "get_default_active_thread_percentage"); got != "30.0" {
		t.Errorf("thread percentage %q after the change, want 30.0", got)
	}
	if pidOf(t, second, gpuA) != pidA {
		t.Error("the daemon was restarted to change a default")
	}
}

func TestKilledDaemonIsRestarted(t *testing.T) {
	dir := stateDir(t)
	m := newManager(t, dir)
	dev := Device{UUID: gpuA, ThreadPercent: 25, PinnedMemLimitMiB: 3000}
	if err := m.Reconcile(context.Background(), []Device{dev}); err != nil {
		t.Fatal(err)
	}
	old := pidOf(t, m, gpuA)
	pipe := m.PipeDir(gpuA)
	// What a killed real daemon leaves besides its socket and pid file
	// (driver 580); the fake makes only those two.
	for _, name := range []string{"control_lock", "control_privileged"} {
		if err := os.WriteFile(filepath.Join(pipe, name), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(pipe, "log"), 0o777); err != nil {
		t.Fatal(err)
	}
	runManager(t, m)
	select {
	case <-m.Changed(): // the tick of the start
	default:
	}

	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var reason string
	eventually(t, "unhealthy", func() bool {
		ok, why := m.Health(gpuA)
		reason = why
		return !ok
	})
	select {
	case <-m.Changed():
	case <-time.After(time.Second):
		t.Error("Changed did not tick when the daemon became unhealthy")
	}
	for _, want := range []string{"MPS control daemon for " + gpuA + " not answering", "Cannot find MPS control daemon process", "restarting (attempt 1)"} {
		if !strings.Contains(reason, want) {
			t.Errorf("reason %q does not say %q", reason, want)
		}
	}
	eventually(t, "healthy again", func() bool { ok, _ := m.Health(gpuA); return ok })

	s, _ := statusOf(m, gpuA)
	if s.PID == old || !procAlive(s.PID) {
		t.Errorf("daemon pid %d after restart (old %d)", s.PID, old)
	}
	if s.Restarts != 1 || !strings.Contains(s.LastFailure, "not answering") || s.LastFailureAt.IsZero() {
		t.Errorf("status after restart: %+v", s)
	}
	if got := ctl(t, m, gpuA, "get_default_active_thread_percentage"); got != "25.0" {
		t.Errorf("thread percentage %q after restart, want 25.0", got)
	}
	if got := ctl(t, m, gpuA, "get_default_device_pinned_mem_limit 0"); got != "2G" {
		t.Errorf("pinned limit %q after restart, want 2G (3000M)", got)
	}
	if got := fakes(dir); !slices.Equal(got, []int{s.PID}) {
		t.Errorf("daemons running %v, want only %d", got, s.PID)
	}
	if got, want := listDir(t, pipe), []string{"control", pidFileName}; !slices.Equal(got, want) {
		t.Errorf("pipe directory holds %v, want %v: the dead daemon's files were not all removed", got, want)
	}
	if got := readPIDFile(pipe); got != s.PID {
		t.Errorf("pid file names %d, want %d", got, s.PID)
	}
}

func TestHungDaemonIsKilledAfterHangTimeout(t *testing.T) {
	dir := stateDir(t)
	m := newManager(t, dir, WithCommandTimeout(200*time.Millisecond), WithHangTimeout(time.Second))
	if err := m.Reconcile(context.Background(), []Device{{UUID: gpuA, ThreadPercent: 40}}); err != nil {
		t.Fatal(err)
	}
	old := pidOf(t, m, gpuA)
	runManager(t, m)
	if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var reason string
	eventually(t, "unhealthy", func() bool {
		ok, why := m.Health(gpuA)
		reason = why
		return !ok
	})
	if want := fmt.Sprintf("its process %d still runs", old); !strings.Contains(reason, want) || !strings.Contains(reason, "no reply within 200ms") {
		t.Errorf("reason %q does not say %q and the timeout", reason, want)
	}
	eventually(t, "healthy again", func() bool { ok, _ := m.Health(gpuA); return ok })
	if since := time.Since(stopped); since < time.Second {
		t.Errorf("the stalled daemon was replaced after %v, before the hang timeout", since)
	}
	if procAlive(old) {
		t.Errorf("the stalled daemon %d still runs", old)
	}
	if got := ctl(t, m, gpuA, "get_default_active_thread_percentage"); got != "40.0" {
		t.Errorf("thread percentage %q after restart, want 40.0", got)
	}
	if got := fakes(dir); len(got) != 1 {
		t.Errorf("daemons running %v, want one", got)
	}
}

func TestDrainNeverQuitsWithClients(t *testing.T) {
	dir := stateDir(t)
	m := newManager(t, dir)
	ctx := context.Background()
	a := Device{UUID: gpuA, ThreadPercent: 50, PinnedMemLimitMiB: 1024}
	b := Device{UUID: gpuB, ThreadPercent: 50, PinnedMemLimitMiB: 1024}
	if err := m.Reconcile(ctx, []Device{a, b}); err != nil {
		t.Fatal(err)
	}
	pidB := pidOf(t, m, gpuB)
	ctl(t, m, gpuB, "fake_add_client 4242")

	if err := m.Reconcile(ctx, []Device{a}); err != nil {
		t.Fatal(err)
	}
	ok, why := m.Health(gpuB)
	if ok || !strings.Contains(why, "draining") || !strings.Contains(why, "4242") {
		t.Errorf("Health(%s) = %v, %q; want draining with client 4242", gpuB, ok, why)
	}
	if s, _ := statusOf(m, gpuB); !s.Draining || !slices.Equal(s.Clients, []int{4242}) {
		t.Errorf("status %+v, want draining with client 4242", s)
	}
	if ok, why := m.Health(gpuA); !ok {
		t.Errorf("%s unhealthy: %s", gpuA, why)
	}

	// Health passes see the client too, and leave the daemon alone.
	runManager(t, m)
	time.Sleep(300 * time.Millisecond)
	if err := m.Reconcile(ctx, []Device{a}); err != nil {
		t.Fatal(err)
	}
	if !procAlive(pidB) {
		t.Fatal("the daemon with a client was stopped")
	}
	if n := countPrefix(received(t, m, gpuB), "quit"); n != 0 {
		t.Fatalf("quit sent %d times to a daemon with a client", n)
	}

	ctl(t, m, gpuB, "fake_remove_client 4242")
	eventually(t, "the idle daemon to be quit", func() bool { _, found := statusOf(m, gpuB); return !found })
	if err := waitExit(ctx, pidB); err != nil {
		t.Fatal(err)
	}
	cmds := received(t, m, gpuB)
	if n := countPrefix(cmds, "quit"); n != 1 {
		t.Errorf("quit sent %d times, want once: %v", n, cmds)
	}
	// Every quit came after the client left.
	if i, j := slices.Index(cmds, "fake_remove_client 4242"), slices.Index(cmds, "quit"); j < i {
		t.Errorf("quit sent before the client left: %v", cmds)
	}
	if ok, why := m.Health(gpuB); ok || !strings.Contains(why, "no MPS control daemon is managed") {
		t.Errorf("Health(%s) = %v, %q after quit", gpuB, ok, why)
	}
	if _, err := os.Stat(m.PipeDir(gpuB)); !os.IsNotExist(err) {
		t.Errorf("pipe directory of the quit daemon: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.LogDir(gpuB), "control.log")); err != nil {
		t.Errorf("the quit daemon's log is gone: %v", err)
	}
	if got := fakes(dir); !slices.Equal(got, []int{pidOf(t, m, gpuA)}) {
		t.Errorf("daemons running %v, want only %s's", got, gpuA)
	}
}

func TestDaemonOfAPreviousConfigIsDrained(t *testing.T) {
	dir := stateDir(t)
	ctx := context.Background()
	a, b := Device{UUID: gpuA, ThreadPercent: 50}, Device{UUID: gpuB, ThreadPercent: 50}
	if err := newManager(t, dir).Reconcile(ctx, []Device{a, b}); err != nil {
		t.Fatal(err)
	}
	// The plugin restarts with a config that has only a.
	m := newManager(t, dir)
	if err := m.Reconcile(ctx, []Device{a}); err != nil {
		t.Fatal(err)
	}
	if _, found := statusOf(m, gpuB); found {
		t.Errorf("%s still managed", gpuB)
	}
	if n := countPrefix(received(t, m, gpuB), "quit"); n != 1 {
		t.Errorf("quit sent %d times to the idle daemon of the old config, want once", n)
	}
	if got := fakes(dir); len(got) != 1 {
		t.Errorf("daemons running %v, want one", got)
	}
}

func TestCancelledRunLeavesDaemonsRunning(t *testing.T) {
	dir := stateDir(t)
	m := newManager(t, dir)
	if err := m.Reconcile(context.Background(), []Device{{UUID: gpuA}, {UUID: gpuB}}); err != nil {
		t.Fatal(err)
	}
	before := fakes(dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if got := fakes(dir); !slices.Equal(got, before) || len(got) != 2 {
		t.Errorf("daemons %v after Run ended, want %v", got, before)
	}
	for _, uuid := range []string{gpuA, gpuB} {
		if n := countPrefix(received(t, m, uuid), "quit"); n != 0 {
			t.Errorf("%s got quit", uuid)
		}
		if got := ctl(t, m, uuid, "get_server_list"); got != "" {
			t.Errorf("%s: get_server_list = %q", uuid, got)
		}
	}
}

func TestStartFailureIsReportedAndRetried(t *testing.T) {
	dir := stateDir(t)
	bin := filepath.Join(dir, "control")
	m := newManager(t, dir, WithControlBinary(bin), WithRestartBackoff(50*time.Millisecond, 100*time.Millisecond))
	err := m.Reconcile(context.Background(), []Device{{UUID: gpuA}})
	if err == nil || !strings.Contains(err.Error(), gpuA) || !strings.Contains(err.Error(), bin) {
		t.Fatalf("Reconcile = %v, want an error naming the device and the binary", err)
	}
	ok, why := m.Health(gpuA)
	if ok || !strings.Contains(why, "starting (attempt 1) failed: start: "+bin+" -d: fork/exec") || !strings.Contains(why, "next attempt in 100ms") {
		t.Errorf("Health = %v, %q", ok, why)
	}
	// The binary appears (the driver is installed): Run starts the daemon.
	if err := copyFile(fakeBin, bin); err != nil {
		t.Fatal(err)
	}
	runManager(t, m)
	eventually(t, "healthy", func() bool { ok, _ := m.Health(gpuA); return ok })
	if s, _ := statusOf(m, gpuA); s.Restarts != 0 {
		t.Errorf("a first start counted as restart: %+v", s)
	}
	if got := fakes(dir); !slices.Equal(got, []int{pidOf(t, m, gpuA)}) {
		t.Errorf("daemons running %v, want only %d", got, pidOf(t, m, gpuA))
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to+".tmp", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(to+".tmp", to)
}

func TestReconcileRejectsBadInputBeforeStarting(t *testing.T) {
	dir := stateDir(t)
	m := newManager(t, dir)
	err := m.Reconcile(context.Background(), []Device{{UUID: gpuA}, {UUID: "GPU-../x"}})
	if err == nil {
		t.Fatal("Reconcile accepted a UUID with a path separator")
	}
	if got := fakes(dir); len(got) != 0 {
		t.Errorf("daemons %v started despite the error", got)
	}
}

func TestWarnsWhenClientsCannotReachThePipeDirectory(t *testing.T) {
	dir := stateDir(t) // MkdirTemp makes it 0700
	var buf bytes.Buffer
	var mu sync.Mutex
	log := hclog.New(&hclog.LoggerOptions{Output: writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})})
	m := newManager(t, dir, WithLogger(log))
	if err := m.Reconcile(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if strings.Contains(out, "WITHOUT MPS") {
		t.Errorf("warned about the pipe directory on a node with no MPS GPU:\n%s", out)
	}
	if err := m.Reconcile(context.Background(), []Device{{UUID: gpuA}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out = buf.String()
	mu.Unlock()
	if !strings.Contains(out, "WITHOUT MPS") || !strings.Contains(out, "directory="+dir) {
		t.Errorf("no warning about %s (0700):\n%s", dir, out)
	}
	if got := closedAncestor(m.PipeDir(gpuA)); got != dir {
		t.Errorf("closedAncestor = %q, want %q", got, dir)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := closedAncestor(m.PipeDir(gpuA)); got != "" {
		t.Errorf("closedAncestor = %q after chmod 0755, want none", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
