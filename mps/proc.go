package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpumux/gpumux/internal/procstat"
)

// readPIDFile returns the pid in a pipe directory's pid file, 0 if none.
func readPIDFile(pipeDir string) int {
	b, err := os.ReadFile(filepath.Join(pipeDir, pidFileName))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// procAlive reports whether pid is a process that has not exited. A zombie
// has: daemons are reparented to init, which may reap them late or never.
// The main thread of a multi-threaded process can be a zombie while its
// other threads still exit, holding its sockets open, so every thread counts.
func procAlive(pid int) bool {
	if running(fmt.Sprintf("/proc/%d/stat", pid)) {
		return true
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false
	}
	for _, t := range tasks {
		if running(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name())) {
			return true
		}
	}
	return false
}

// running reports whether a /proc stat file names a task that has not exited.
func running(statFile string) bool {
	st, err := procstat.ReadFile(statFile)
	return err == nil && !st.Gone()
}

// daemonAlive reports whether the process in pipeDir's pid file is alive and
// is that directory's control daemon: its program is binary, and when its
// environment can be read, its CUDA_MPS_PIPE_DIRECTORY is pipeDir. The
// checks keep a recycled pid from being taken for the daemon (or killed).
func daemonAlive(pipeDir, binary string) (pid int, alive bool) {
	pid = readPIDFile(pipeDir)
	if pid == 0 || !procAlive(pid) {
		return pid, false
	}
	name := filepath.Base(binary)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return pid, false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	exe = strings.TrimSuffix(exe, " (deleted)")
	if filepath.Base(string(argv0)) != name && filepath.Base(exe) != name {
		return pid, false
	}
	if environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil {
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte(envPipeDir+"=")); ok {
				return pid, filepath.Clean(string(v)) == filepath.Clean(pipeDir)
			}
		}
	}
	return pid, true
}

// killAndWait sends SIGKILL to pid and waits until it has exited.
func killAndWait(ctx context.Context, pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	return waitExit(ctx, pid)
}

// waitExit polls until pid has exited or ctx is done.
func waitExit(ctx context.Context, pid int) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for procAlive(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d still running: %w", pid, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// removeStale removes what a dead control daemon left in its pipe directory.
// Only the daemon's own files go, and only once no daemon lives there: the
// pid file names a dead (maybe soon recycled) pid, and clients that find a
// socket nobody listens on fall back to running without MPS.
func removeStale(pipeDir string) error {
	var errs []error
	for _, name := range daemonPipeFiles {
		if err := os.Remove(filepath.Join(pipeDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensureDir creates dir with mode perm, or sets perm on an existing one.
func ensureDir(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	return os.Chmod(dir, perm)
}

// closedAncestor returns the first directory from dir up to / that others
// may not search (no o+x), or "" if there is none. A client that runs as
// another user than the daemon's and cannot reach the pipe directory gets no
// error: CUDA runs it WITHOUT MPS, on the whole GPU with no limit (seen on
// driver 580 with a 0700 state directory: 132 SMs instead of 32).
func closedAncestor(dir string) string {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}
