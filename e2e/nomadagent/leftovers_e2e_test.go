//go:build e2e

package nomadagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

// TestLeftoversFindsProcessesAndMounts checks the leftover detection used by
// Stop without a Nomad agent: a stand-in "agent" process group, a process in
// its own session that only carries the marker environment (like `nomad
// executor`), and a tmpfs mounted under the data dir.
func TestLeftoversFindsProcessesAndMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (mount)")
	}
	dataDir := t.TempDir()

	agent, err := hostcheck.StartProcess("agent", exec.Command("sleep", "300"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(agent.Pid(), syscall.SIGKILL); <-agent.Exited() })
	grouped := exec.Command("sleep", "301")
	grouped.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: agent.Pid()}
	if err := grouped.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { grouped.Process.Kill(); grouped.Wait() })
	marked := exec.Command("sleep", "302")
	marked.Env = append(os.Environ(), markerEnv+"="+dataDir)
	marked.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := marked.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { marked.Process.Kill(); marked.Wait() })
	other := exec.Command("sleep", "303")
	other.Env = append(os.Environ(), markerEnv+"="+dataDir+"-other")
	other.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })

	mnt := filepath.Join(dataDir, "alloc", "x y", "secrets")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })

	a := &Agent{DataDir: dataDir, proc: agent}
	procs, mounts, err := a.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	found := map[int]string{}
	for _, p := range procs {
		found[p.PID] = p.Why
		t.Logf("found %s", p)
	}
	for what, pid := range map[string]int{"the agent": agent.Pid(), "its process group": grouped.Process.Pid, "a marked process": marked.Process.Pid} {
		if _, ok := found[pid]; !ok {
			t.Errorf("pid %d (%s) not found", pid, what)
		}
	}
	if why, ok := found[other.Process.Pid]; ok {
		t.Errorf("unrelated pid %d reported (%s)", other.Process.Pid, why)
	}
	if len(mounts) != 1 || mounts[0] != mnt {
		t.Errorf("mounts = %q, want [%q]", mounts, mnt)
	}
}
