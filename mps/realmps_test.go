//go:build gpu

package mps

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/syncbuf"
)

// These tests drive the real nvidia-cuda-mps-control on the first GPU (or
// GPUMUX_MPS_TEST_GPU). With GPUMUX_MPS_TEST_CLIENT naming a CUDA program
// that takes "<MiB to allocate> <seconds to sleep>" and prints the SM count
// it sees and the outcome of its allocation (mps/testdata/mpsclient.cu), they
// also check the limits on a client and the drain.

func realGPU(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath(DefaultControlBinary); err != nil {
		t.Skip("no nvidia-cuda-mps-control")
	}
	if uuid := os.Getenv("GPUMUX_MPS_TEST_GPU"); uuid != "" {
		return uuid
	}
	out, err := exec.Command("nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader").Output()
	if err != nil {
		t.Skipf("nvidia-smi: %v", err)
	}
	return strings.TrimSpace(strings.Split(string(out), "\n")[0])
}

// realStateDir is a short state directory whose MPS processes are killed at
// the end of the test.
func realStateDir(t *testing.T) string {
	t.Helper()
	dir := shortStateDir(t, mpsProcs)
	// Task users must be able to reach the pipe directory (MkdirTemp makes 0700).
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mpsProcs are the live processes whose CUDA_MPS_PIPE_DIRECTORY is under dir.
func mpsProcs(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !procAlive(pid) {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if bytes.Contains(environ, []byte(envPipeDir+"="+dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func realCtl(t *testing.T, m *Manager, uuid, command string) string {
	t.Helper()
	cmd := exec.Command(DefaultControlBinary)
	cmd.Env = m.env(uuid)
	cmd.Stdin = strings.NewReader(command + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", command, err)
	}
	return strings.TrimSpace(string(out))
}

func newRealManager(t *testing.T, dir string) *Manager {
	return NewManager(dir, WithLogger(testLogger(t)), WithCheckInterval(100*time.Millisecond),
		WithCommandTimeout(5*time.Second), WithRestartBackoff(300*time.Millisecond, time.Second))
}

func TestRealMPSDaemonLifecycle(t *testing.T) {
	uuid := realGPU(t)
	dir := realStateDir(t)
	ctx := context.Background()
	dev := Device{UUID: uuid, ThreadPercent: 25, PinnedMemLimitMiB: 3000}
	m := newRealManager(t, dir)
	if err := m.Reconcile(ctx, []Device{dev}); err != nil {
		t.Fatal(err)
	}
	if ok, why := m.Health(uuid); !ok {
		t.Fatalf("unhealthy: %s", why)
	}
	if got := realCtl(t, m, uuid, "get_default_active_thread_percentage"); got != "25.0" {
		t.Errorf("thread percentage %q", got)
	}
	if got := realCtl(t, m, uuid, "get_default_device_pinned_mem_limit 0"); got != "2G" {
		t.Errorf("pinned limit %q, want 2G (3000M rounded down)", got)
	}
	pipe := m.PipeDir(uuid)
	t.Logf("pipe directory after start: %v", listDir(t, pipe))
	first := pidOf(t, m, uuid)

	// Adoption by a new Manager: no second daemon, nothing set again but
	// the limit that cannot be compared (3000M).
	m = newRealManager(t, dir)
	if err := m.Reconcile(ctx, []Device{dev}); err != nil {
		t.Fatal(err)
	}
	if pidOf(t, m, uuid) != first {
		t.Errorf("adopted pid %d, want %d", pidOf(t, m, uuid), first)
	}
	log, _ := os.ReadFile(filepath.Join(m.LogDir(uuid), "control.log"))
	if n := strings.Count(string(log), "Starting control daemon"); n != 1 {
		t.Errorf("%d daemons started, want 1", n)
	}
	if n := countPrefix(received(t, m, uuid), "set_default_active_thread_percentage"); n != 1 {
		t.Errorf("thread percentage set %d times, want once", n)
	}

	client := os.Getenv("GPUMUX_MPS_TEST_CLIENT")
	if client != "" {
		out, err := runClient(m, uuid, client, "3500", "0")
		t.Logf("client: %s", out)
		if err != nil || !strings.Contains(out, "sms=32") || !strings.Contains(out, "malloc 3500 MiB: out of memory") {
			t.Errorf("client under 25%% and 3000M: %v\n%s", err, out)
		}
		// A task user that is not root reaches the daemon through the 0755
		// pipe directory (the 0700 log directory is the daemon's alone).
		if os.Getuid() == 0 {
			cmd := exec.Command(client, "100", "0")
			cmd.Env = m.env(uuid)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			t.Logf("client as uid 65534: %s", out)
			if err != nil || !strings.Contains(string(out), "sms=32") || !strings.Contains(string(out), "malloc 100 MiB: no error") {
				t.Errorf("client as uid 65534 not under MPS (132 SMs means it ran without): %v\n%s", err, out)
			}
		}
	}

	// kill -9: unhealthy, restarted with its defaults, stale files replaced.
	runManager(t, m)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var reason string
	eventually(t, "unhealthy", func() bool { ok, why := m.Health(uuid); reason = why; return !ok })
	t.Logf("reason: %s", reason)
	if !strings.Contains(reason, "Cannot find MPS control daemon process") || !strings.Contains(reason, "restarting (attempt 1)") {
		t.Errorf("reason %q", reason)
	}
	eventually(t, "healthy again", func() bool { ok, _ := m.Health(uuid); return ok })
	second := pidOf(t, m, uuid)
	if second == first || procAlive(first) || readPIDFile(pipe) != second {
		t.Errorf("pids: old %d (alive %v), new %d, pid file %d", first, procAlive(first), second, readPIDFile(pipe))
	}
	if got := realCtl(t, m, uuid, "get_default_active_thread_percentage"); got != "25.0" {
		t.Errorf("thread percentage %q after restart", got)
	}
	if got := realCtl(t, m, uuid, "get_default_device_pinned_mem_limit 0"); got != "2G" {
		t.Errorf("pinned limit %q after restart", got)
	}
	t.Logf("pipe directory after restart: %v", listDir(t, pipe))

	if client != "" {
		// Drain: a daemon with a client is not quit, then is once it leaves.
		cmd := exec.Command(client, "100", "6")
		cmd.Env = m.env(uuid)
		var out syncbuf.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the client to connect", func() bool { return strings.Contains(out.String(), "malloc") })
		if err := m.Reconcile(ctx, nil); err != nil {
			t.Fatal(err)
		}
		ok, why := m.Health(uuid)
		t.Logf("draining: %v %q", ok, why)
		if ok || !strings.Contains(why, "draining: 1 client(s)") {
			t.Errorf("Health = %v, %q; want draining with one client", ok, why)
		}
		if n := countPrefix(received(t, m, uuid), "quit"); n != 0 {
			t.Errorf("quit sent with a client connected")
		}
		cmd.Wait()
		t.Logf("client: %s", out.String())
		eventually(t, "quit", func() bool { _, found := statusOf(m, uuid); return !found })
	} else {
		if err := m.Reconcile(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, found := statusOf(m, uuid); found {
		t.Error("daemon still managed")
	}
	if procAlive(second) {
		t.Error("daemon still running after quit")
	}
	if left := mpsProcs(dir); len(left) != 0 {
		t.Errorf("MPS processes left: %v", left)
	}
	if _, err := os.Stat(pipe); !os.IsNotExist(err) {
		t.Errorf("pipe directory after quit: %v", err)
	}
	if n := countPrefix(received(t, m, uuid), "quit"); n != 1 {
		t.Errorf("quit sent %d times", n)
	}
}

func runClient(m *Manager, uuid, client string, args ...string) (string, error) {
	cmd := exec.Command(client, args...)
	cmd.Env = m.env(uuid)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
