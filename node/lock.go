package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LockFile is the file in a state directory that the node's agent — the
// Nomad plugin or gpumux agent — holds locked while it runs the node.
const LockFile = "agent.lock"

// ErrAgentRunning is wrapped by Start's error when another agent runs the
// node.
var ErrAgentRunning = errors.New("another gpumux agent runs this node")

// stateLock is an open, locked LockFile. The kernel drops the lock when
// the process ends, however it ends.
type stateLock struct{ f *os.File }

// acquireStateLock locks dir's LockFile without waiting, and writes who
// holds it there; a lock held by another process is an error that names
// it.
func acquireStateLock(dir, who string) (*stateLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state_dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("state_dir lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			h := strings.TrimSpace(string(holder))
			if h == "" {
				h = "another process"
			}
			return nil, fmt.Errorf("%w: %s holds %s; a node's GPUs are run by the gpumux Nomad plugin or by gpumux agent, never both at once: stop the other one first", ErrAgentRunning, h, path)
		}
		return nil, fmt.Errorf("state_dir lock %s: %w", path, err)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%s (pid %d, since %s)\n", who, os.Getpid(), time.Now().UTC().Format(time.RFC3339))
	return &stateLock{f: f}, nil
}

// release unlocks and closes the file; the next agent overwrites it.
func (l *stateLock) release() {
	unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
}
