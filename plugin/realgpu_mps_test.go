//go:build gpu

package plugin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
)

// TestRealMPS proves MPS shares on a real GPU through the whole chain: the
// plugin on the real NVML starts a real nvidia-cuda-mps-control for GPU 0
// (private pipe and log directories; the card's settings are not touched),
// Reserve hands out each share's settings, and CUDA clients (e2e/gpu/mpsprobe,
// path in $MPSPROBE) run with exactly those. Run on a GPU machine:
//
//	MPSPROBE=/tmp/mpsprobe plugin.test -test.run RealMPS -test.v
func TestRealMPS(t *testing.T) {
	probe := os.Getenv("MPSPROBE")
	if probe == "" {
		t.Fatal("set MPSPROBE to the mpsprobe binary (nvcc -o mpsprobe e2e/gpu/mpsprobe.cu)")
	}
	stateDir := shortTempDir(t)
	p := dialPlugin(t)
	cfg := `state_dir = "` + stateDir + `"
fingerprint_period = "1s"
gpu {
  match       = "0"
  mechanism   = "mps"
  share_sizes = ["50%", "25%", "25%"]
}`
	start := time.Now()
	ch, groups, _ := fingerprintWith(t, p, cfg)
	t.Logf("first fingerprint, MPS control daemon started: %v", time.Since(start))
	var big, small *device.DeviceGroup
	for _, g := range groups { // named after the model: H200-mps-50pct, H100-80GB-HBM3-mps-50pct, …
		switch {
		case strings.HasSuffix(g.Name, "-mps-50pct"):
			big = g
		case strings.HasSuffix(g.Name, "-mps-25pct"):
			small = g
		}
	}
	if big != nil {
		t.Cleanup(func() { quitDaemon(t, stateDir, strings.SplitN(big.Devices[0].ID, "/", 2)[0]) })
	}
	if big == nil || small == nil || len(small.Devices) != 2 {
		t.Fatalf("groups %v", names(groups))
	}
	gpuUUID := strings.SplitN(big.Devices[0].ID, "/", 2)[0]
	pipe := filepath.Join(stateDir, "mps", gpuUUID, "pipe")

	// client runs mpsprobe with a share's reservation, as a task would.
	client := func(id string, args ...string) (string, error) {
		t.Helper()
		start := time.Now()
		res, err := p.Reserve([]string{id})
		if err != nil {
			return "", err
		}
		reserve := time.Since(start)
		cmd := exec.Command(probe, args...)
		cmd.Env = os.Environ()
		for k, v := range res.Envs {
			if k == "CUDA_MPS_PIPE_DIRECTORY" {
				v = hostPathOf(res.Mounts, v) // no container here: use the host side of the mount
			}
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		t.Logf("%s %v (reserve %v): %s", id, args, reserve, strings.TrimSpace(string(out)))
		return strings.TrimSpace(string(out)), err
	}
	shares := []struct {
		id     string
		sms    int
		memMiB int
	}{
		{big.Devices[0].ID, attrInt(big, "sm_count"), attrInt(big, "memory")},
		{small.Devices[0].ID, attrInt(small, "sm_count"), attrInt(small, "memory")},
	}

	t.Run("SMs match the share", func(t *testing.T) {
		for _, s := range shares {
			out, err := client(s.id, "sm")
			if err != nil || out != fmt.Sprintf("SM %d", s.sms) {
				t.Errorf("share %s: %q (%v), want SM %d as advertised", s.id, out, err, s.sms)
			}
		}
	})

	t.Run("a client can only lower the daemon's limits", func(t *testing.T) {
		// The daemon's defaults are the largest share's: 50% and its memory.
		run := func(env ...string) string {
			cmd := exec.Command(probe, "sm")
			cmd.Env = append(append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe), env...)
			out, _ := cmd.CombinedOutput()
			return strings.TrimSpace(string(out))
		}
		want := fmt.Sprintf("SM %d", shares[0].sms)
		if got := run(); got != want {
			t.Errorf("client without limits: %q, want the daemon default %q", got, want)
		}
		if got := run("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100"); got != want {
			t.Errorf("client asking for 100%%: %q, want no more than the daemon's %q", got, want)
		}
	})

	t.Run("memory limit holds", func(t *testing.T) {
		for _, s := range shares {
			within, over := s.memMiB-2048, s.memMiB+2048
			if out, err := client(s.id, "alloc", strconv.Itoa(within)); err != nil || !strings.HasSuffix(out, "OK") {
				t.Errorf("share %s: %d MiB within its %d MiB limit failed: %q", s.id, within, s.memMiB, out)
			}
			if out, _ := client(s.id, "alloc", strconv.Itoa(over)); strings.HasSuffix(out, "OK") {
				t.Errorf("share %s: %d MiB past its %d MiB limit succeeded", s.id, over, s.memMiB)
			}
		}
	})

	t.Run("a client's fault", func(t *testing.T) {
		// Measured, not asserted: what a neighbour's GPU fault does to a
		// running client of the same MPS server.
		spin := exec.Command(probe, "spin", "8")
		res, err := p.Reserve([]string{shares[0].id})
		if err != nil {
			t.Fatal(err)
		}
		spin.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe,
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+res.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"],
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+res.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"])
		var spinOut strings.Builder
		spin.Stdout, spin.Stderr = &spinOut, &spinOut
		if err := spin.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		faultOut, _ := client(shares[1].id, "fault")
		spinErr := spin.Wait()
		t.Logf("MEASURED: faulting client: %q; neighbour spinning at the time: %q (exit: %v)", faultOut, strings.TrimSpace(spinOut.String()), spinErr)
		// The manager's job: new clients work again.
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := client(shares[1].id, "sm")
			if err == nil && strings.HasPrefix(out, "SM ") {
				t.Logf("MEASURED: new clients work again %v after the fault", time.Since(deadline.Add(-60*time.Second)))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no new client works within 60s of the fault: %q", out)
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("daemon killed and restarted", func(t *testing.T) {
		pidFile := filepath.Join(pipe, "nvidia-cuda-mps-control.pid")
		oldPID := readPID(t, pidFile)
		// A client busy on the server while its control daemon dies.
		busy := exec.Command(probe, "spin", "6")
		busy.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
		var busyOut strings.Builder
		busy.Stdout, busy.Stderr = &busyOut, &busyOut
		if err := busy.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		before := mpsProcesses(t)
		if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		waitHealthy(t, ch, shares[0].id, oldPID, pidFile)
		t.Logf("MEASURED: control daemon %d killed; healthy again with pid %d after %v", oldPID, readPID(t, pidFile), time.Since(killed))
		if out, err := client(shares[0].id, "alloc", "1024"); err != nil || !strings.HasSuffix(out, "OK") {
			t.Errorf("new client after the restart: %q (%v)", out, err)
		}
		busyErr := busy.Wait()
		t.Logf("MEASURED: client running across the kill: %q (exit: %v)", strings.TrimSpace(busyOut.String()), busyErr)
		time.Sleep(time.Second)
		entries, _ := os.ReadDir(pipe)
		var files []string
		for _, e := range entries {
			files = append(files, e.Name())
		}
		after := mpsProcesses(t)
		t.Logf("MEASURED: live MPS processes before the kill %v; after the restart and the old client's exit %v; pipe dir: %v", before, after, files)
		if n := len(after["nvidia-cuda-mps-control"]); n != 1 {
			t.Errorf("%d live control daemons after the restart, want 1: %v", n, after)
		}
	})
}

// waitHealthy reads fingerprints until the share is healthy under a daemon
// other than oldPID.
func waitHealthy(t *testing.T, ch <-chan *device.FingerprintResponse, id string, oldPID int, pidFile string) {
	t.Helper()
	deadline := time.After(90 * time.Second)
	for {
		select {
		case r := <-ch:
			if d := findDevice(r.Devices, id); d != nil {
				if !d.Healthy {
					t.Logf("while down: %s", d.HealthDesc)
					continue
				}
				if b, err := os.ReadFile(pidFile); err == nil {
					if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid != oldPID && pid > 0 {
						return
					}
				}
			}
		case <-deadline:
			t.Fatal("the killed MPS control daemon was not replaced within 90s")
		}
	}
}

// mpsProcesses lists live (not zombie) MPS control daemons and servers by
// program name (comm is cut at 15 characters, so read the command line).
func mpsProcesses(t *testing.T) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		name := filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0])
		if strings.HasPrefix(name, "nvidia-cuda-mps") {
			out[name] = append(out[name], pid)
		}
	}
	return out
}

// quitDaemon ends the test's MPS daemon (the plugin leaves daemons running on
// purpose) and checks that no MPS process is left.
func quitDaemon(t *testing.T, stateDir, uuid string) {
	cmd := exec.Command("nvidia-cuda-mps-control")
	cmd.Env = append(os.Environ(),
		"CUDA_MPS_PIPE_DIRECTORY="+filepath.Join(stateDir, "mps", uuid, "pipe"),
		"CUDA_MPS_LOG_DIRECTORY="+filepath.Join(stateDir, "mps", uuid, "log"))
	cmd.Stdin = strings.NewReader("quit\n")
	out, err := cmd.CombinedOutput()
	t.Logf("quit: %q %v", out, err)
	for i := 0; i < 50 && len(mpsProcesses(t)) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if left := mpsProcesses(t); len(left) > 0 {
		t.Errorf("MPS processes left after quit: %v", left)
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, "mps", uuid, "log", "control.log")); err == nil {
		t.Logf("control.log (last 2 KiB):\n%s", tail(string(b), 2048))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func attrInt(g *device.DeviceGroup, name string) int {
	if a := g.Attributes[name]; a != nil && a.Int != nil {
		return int(*a.Int)
	}
	return -1
}

// hostPathOf is the host side of the mount at taskPath ("" if none).
func hostPathOf(mounts []*device.Mount, taskPath string) string {
	for _, m := range mounts {
		if m.TaskPath == taskPath {
			return m.HostPath
		}
	}
	return ""
}
