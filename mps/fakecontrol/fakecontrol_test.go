package fakecontrol

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the fake: run with asMain set, it is Main.
const asMain = "GPUMUX_FAKE_MPS_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

type env struct {
	t             *testing.T
	pipe, logFile string
	vars          []string
}

func newEnv(t *testing.T) *env {
	dir, err := os.MkdirTemp("", "fk")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pipe: filepath.Join(dir, "pipe"), logFile: filepath.Join(dir, "log", "control.log")}
	// GORACE: a race-enabled binary otherwise sleeps 1s at exit.
	e.vars = append(os.Environ(), asMain+"=1", "GORACE=atexit_sleep_ms=0", "CUDA_MPS_PIPE_DIRECTORY="+e.pipe, "CUDA_MPS_LOG_DIRECTORY="+filepath.Join(dir, "log"))
	t.Cleanup(func() {
		if pid := e.pid(); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		os.RemoveAll(dir)
	})
	return e
}

// run runs the fake with args and stdin; it returns stdout, stderr and the
// exit status.
func (e *env) run(timeout time.Duration, stdin string, args ...string) (string, string, int) {
	e.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = e.vars
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		return stdout.String(), stderr.String(), -1
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	case err != nil:
		e.t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

func (e *env) pid() int {
	b, _ := os.ReadFile(filepath.Join(e.pipe, pidFileName))
	pid, _ := strconv.Atoi(string(b))
	return pid
}

func (e *env) start() int {
	e.t.Helper()
	if _, stderr, rc := e.run(10*time.Second, "", "-d"); rc != 0 {
		e.t.Fatalf("-d: exit %d: %s", rc, stderr)
	}
	return e.pid()
}

// alive reports whether any thread of pid has not exited (a Go program's
// main thread can be a zombie while others still hold its sockets).
func alive(pid int) bool {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && b[i+2] != 'Z' && b[i+2] != 'X' {
			return true
		}
	}
	return false
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
	}
}

func TestNoDaemon(t *testing.T) {
	e := newEnv(t)
	stdout, stderr, rc := e.run(5*time.Second, "get_server_list\n")
	if rc != 1 || stdout != "" || strings.TrimSpace(stderr) != msgNoDaemon {
		t.Errorf("= %q, %q, exit %d; want exit 1 and %q", stdout, stderr, rc, msgNoDaemon)
	}
}

func TestDaemonize(t *testing.T) {
	e := newEnv(t)
	pid := e.start()
	if pid <= 0 || !alive(pid) {
		t.Fatalf("daemon pid %d not running", pid)
	}
	sid, err := unix.Getsid(pid)
	if err != nil || sid != pid {
		t.Errorf("daemon session %d (%v), want its own (%d)", sid, err, pid)
	}
	if _, stderr, rc := e.run(5*time.Second, "", "-d"); rc != 1 || strings.TrimSpace(stderr) != msgRunning {
		t.Errorf("second -d: exit %d, %q; want exit 1, %q", rc, stderr, msgRunning)
	}
	fi, err := os.Stat(filepath.Join(e.pipe, socketName))
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("control socket: %v, %v", fi, err)
	}
}

func TestCommands(t *testing.T) {
	e := newEnv(t)
	e.start()
	srv := strconv.Itoa(firstServerPID)
	for _, tc := range []struct{ cmd, want string }{
		{"get_server_list", ""},
		{"get_default_active_thread_percentage", "100.0\n"},
		{"set_default_active_thread_percentage 25", "25.0\n"},
		{"set_default_active_thread_percentage 0", "25.0\n"}, // refused, as by the real daemon
		{"set_default_active_thread_percentage 150", "25.0\n"},
		{"set_default_active_thread_percentage abc", "25.0\n"},
		{"get_default_device_pinned_mem_limit 0", ""},
		{"set_default_device_pinned_mem_limit 0 4G", ""},
		{"get_default_device_pinned_mem_limit 0", "4G\n"},
		{"set_default_device_pinned_mem_limit 0 3000M", ""},
		{"get_default_device_pinned_mem_limit 0", "2G\n"}, // rounded down, as by the real daemon
		// Read as the real daemon reads them: anything but G after the
		// number is MiB, 0 is no limit, nothing is refused.
		{"set_default_device_pinned_mem_limit 0 4096", ""},
		{"get_default_device_pinned_mem_limit 0", "4G\n"},
		{"set_default_device_pinned_mem_limit 0 4K", ""},
		{"get_default_device_pinned_mem_limit 0", "4M\n"},
		{"set_default_device_pinned_mem_limit 0 0G", ""},
		{"get_default_device_pinned_mem_limit 0", ""},
		{"set_default_device_pinned_mem_limit 1 3G", ""},
		{"get_default_device_pinned_mem_limit 1", "3G\n"},
		{"set_default_device_pinned_mem_limit 1", ""}, // no value: refused
		{"get_default_device_pinned_mem_limit 1", "3G\n"},
		{"set_default_device_pinned_mem_limit 0 512M", ""},
		{"get_default_device_pinned_mem_limit 0", "512M\n"},
		{"get_client_list 12345", "Server 12345 not found\n"},
		{"fake_add_client 77", ""},
		{"fake_add_client 78", ""},
		{"get_server_list", srv + "\n"},
		{"get_client_list " + srv, "77\n78\n"},
		{"get_server_status " + srv, "ACTIVE\n"},
		{"get_active_thread_percentage " + srv, "25.0\n"},
		{"set_default_active_thread_percentage 50", "50.0\n"},
		{"get_active_thread_percentage " + srv, "25.0\n"}, // a running server keeps its value
		{"fake_remove_client 77", ""},
		{"fake_remove_client 77", "Client 77 not found\n"},
		{"get_client_list " + srv, "78\n"},
		{"bogus_command", "Unknown command \"bogus_command\"\n"},
		{"", "Unknown command \"\"\n"},
	} {
		stdout, stderr, rc := e.run(5*time.Second, tc.cmd+"\n")
		if rc != 0 || stdout != tc.want || stderr != "" {
			t.Errorf("%q = %q, %q, exit %d; want %q", tc.cmd, stdout, stderr, rc, tc.want)
		}
	}
	// Several commands in one invocation, as the real program takes them.
	stdout, _, _ := e.run(5*time.Second, "get_default_active_thread_percentage\nget_default_device_pinned_mem_limit 0\n")
	if stdout != "50.0\n512M\n" {
		t.Errorf("two commands = %q", stdout)
	}
	log, err := os.ReadFile(e.logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"] Cmd:set_default_active_thread_percentage 25\n", "] Cmd:bogus_command\n", "Invalid percentage", "CUDA_VISIBLE_DEVICES=",
		"] set_default_device_pinned_mem_limit 0 4K.\n", "] Invalid command format.\n"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("control.log lacks %q", want)
		}
	}
}

func TestQuitWaitsForClients(t *testing.T) {
	e := newEnv(t)
	pid := e.start()
	e.run(5*time.Second, "fake_add_client 5\n")
	if _, _, rc := e.run(300*time.Millisecond, "quit\n"); rc != -1 {
		t.Fatalf("quit with a client returned (exit %d); the real one waits", rc)
	}
	if !alive(pid) {
		t.Fatal("quit with a client ended the daemon")
	}
	e.run(5*time.Second, "fake_remove_client 5\n")
	waitGone(t, pid) // the pending quit goes through
	for _, name := range []string{socketName, pidFileName} {
		if _, err := os.Stat(filepath.Join(e.pipe, name)); !os.IsNotExist(err) {
			t.Errorf("%s after quit: %v", name, err)
		}
	}
	log, _ := os.ReadFile(e.logFile)
	if !strings.Contains(string(log), "quit waits for 1 client(s)") {
		t.Errorf("control.log does not say quit waited:\n%s", log)
	}
}

func TestQuitAndSignals(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(e *env, pid int)
	}{
		{"quit", func(e *env, pid int) {
			if stdout, stderr, rc := e.run(5*time.Second, "quit\n"); rc != 0 || stdout != "" {
				t.Errorf("quit = %q, %q, exit %d", stdout, stderr, rc)
			}
		}},
		{"SIGTERM", func(e *env, pid int) { syscall.Kill(pid, syscall.SIGTERM) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			pid := e.start()
			tc.stop(e, pid)
			waitGone(t, pid)
			if _, err := os.Stat(filepath.Join(e.pipe, socketName)); !os.IsNotExist(err) {
				t.Errorf("socket after %s: %v", tc.name, err)
			}
		})
	}
}

func TestStartsOverAKilledDaemonsFiles(t *testing.T) {
	e := newEnv(t)
	old := e.start()
	syscall.Kill(old, syscall.SIGKILL)
	waitGone(t, old)
	if _, err := os.Stat(filepath.Join(e.pipe, socketName)); err != nil {
		t.Fatalf("a killed daemon leaves its socket: %v", err)
	}
	if _, stderr, rc := e.run(5*time.Second, "get_server_list\n"); rc != 1 || strings.TrimSpace(stderr) != msgNoDaemon {
		t.Errorf("with a stale socket: exit %d, %q", rc, stderr)
	}
	if pid := e.start(); pid == old || !alive(pid) {
		t.Errorf("new daemon %d (old %d)", pid, old)
	}
}
