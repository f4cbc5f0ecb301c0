package hostcheck

import (
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Settle gives what a stopped daemon leaves to its children time to go:
// it calls check every 200ms until check says nothing is left or fails
// (its error is returned), or timeout has passed.
func Settle(timeout time.Duration, check func() (empty bool, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		empty, err := check()
		if err != nil {
			return err
		}
		if empty || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// KillProcs SIGKILLs the processes left behind, then waits up to wait for
// them to be gone (not at all when wait is 0), and returns the error that
// reports them, one per line; nil when there are none.
func KillProcs[P ProcType](procs []P, wait time.Duration) error {
	if len(procs) == 0 {
		return nil
	}
	var lines []string
	var pids []int
	for _, p := range procs {
		p := Proc(p)
		lines = append(lines, p.String())
		pids = append(pids, p.PID)
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	if wait > 0 {
		WaitGone(pids, wait)
	}
	return fmt.Errorf("%d process(es) left behind (now killed):\n  %s", len(procs), strings.Join(lines, "\n  "))
}

// DetachMounts lazily unmounts the mount points left under dir (in
// mountinfo order, as MountsUnder returns them), deepest first so that
// removing dir cannot reach through a bind mount, and returns the error
// that reports them; nil when there are none.
func DetachMounts(mounts []string, dir string) error {
	if len(mounts) == 0 {
		return nil
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
	return fmt.Errorf("%d mount(s) left under %s (now detached):\n  %s", len(mounts), dir, strings.Join(mounts, "\n  "))
}
