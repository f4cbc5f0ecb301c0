//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/internal/scrape"
	"github.com/gpumux/gpumux/internal/syncbuf"
)

// agentProc is a running `gpumux agent`.
type agentProc struct {
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan struct{}
}

// startAgent runs bin/gpumux agent on config; it is stopped (SIGTERM) when
// the test ends, if it still runs.
func startAgent(t testing.TB, config string, args ...string) *agentProc {
	t.Helper()
	bin := filepath.Join(repoRoot(t), "bin", "gpumux")
	a := &agentProc{log: &syncbuf.Buffer{}, exited: make(chan struct{})}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--runtime-socket") }) {
		// Not the machine's /run/gpumux/runtime.sock: tests that serve
		// gpumux-runtime name a socket of their own (agentRuntimeSocket).
		args = append(args, "--runtime-socket=")
	}
	a.cmd = exec.Command(bin, append([]string{"agent", "--config", config}, args...)...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("%v (run make build)", err)
	}
	go func() { a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		a.stop(t)
		if t.Failed() {
			t.Logf("gpumux agent's log:\n%s", a.log.String())
		}
	})
	agentCPUGroup(t, a.cmd.Process.Pid)
	return a
}

// stop ends the agent with SIGTERM and returns its exit code.
func (a *agentProc) stop(t testing.TB) int {
	t.Helper()
	select {
	case <-a.exited:
	default:
		a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(30 * time.Second):
			a.cmd.Process.Kill()
			<-a.exited
			t.Errorf("gpumux agent did not stop within 30s of SIGTERM")
		}
	}
	return a.cmd.ProcessState.ExitCode()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond until it holds or the deadline passes; what says what
// was awaited, and last what was seen.
func waitFor(t testing.TB, ctx context.Context, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		select {
		case <-ctx.Done():
			t.Fatalf("waiting %s for %s; last seen: %s", d, what, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestAgentRunsANodeWithoutNomad: on a containerd node with no Nomad,
// `gpumux agent` applies the config's MIG layout and runs the MPS daemons;
// gpumux-runtime hands out MPS and MIG shares; an MPS daemon killed while
// the agent cannot restart it makes the next create fail before runc with
// the reason, and once the agent restarted it, creates work again; leases
// of containers runc forgot are reclaimed; the metrics say all of it; a
// second agent on the same state dir is refused; SIGTERM stops the agent and
// leaves the daemons.
func TestAgentRunsANodeWithoutNomad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir, err := os.MkdirTemp("", "gmx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopMPSDaemons(t, stateDir); os.RemoveAll(stateDir) })
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	config := filepath.Join(stateDir, "node.hcl")
	body := fmt.Sprintf(`simulate           = "dgxh200"
state_dir          = %q
mps_control_binary = %q
fingerprint_period = "1s"
metrics_addr       = %q
gpu {
  match     = "4"
  mechanism = "mps"
  shares    = 2
}
gpu {
  match     = "6"
  mechanism = "mig"
  mig_devices {
    "3g.71gb" = 1
    "2g.35gb" = 2
  }
}
`, stateDir, filepath.Join(repoRoot(t), "bin", "gpumux-fake-mps-control"), metrics)
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, config, "--health-interval", "300ms")
	url := "http://" + metrics + "/metrics"

	// The agent applied the MIG layout and started GPU 4's daemon.
	var mpsGPU string
	waitFor(t, ctx, time.Minute, "the MIG layout and the MPS daemon, in the metrics", func() (bool, string) {
		f, err := scrape.Get(ctx, url)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range f.Samples("gpumux_gpu_info", map[string]string{"gpu": "4"}) {
			for _, l := range m.GetLabel() {
				if l.GetName() == "uuid" {
					mpsGPU = l.GetValue()
				}
			}
		}
		g3, _ := f.Value("gpumux_mig_instances", map[string]string{"gpu": "6", "profile": "3g.71gb"})
		g2, _ := f.Value("gpumux_mig_instances", map[string]string{"gpu": "6", "profile": "2g.35gb"})
		up, _ := f.Value("gpumux_mps_daemon_up", map[string]string{"device": mpsGPU})
		return mpsGPU != "" && g3 == 1 && g2 == 2 && up == 1, fmt.Sprintf("GPU 4 %q, 3g %v, 2g %v, daemon up %v", mpsGPU, g3, g2, up)
	})

	// A second agent on the same state dir is refused, naming the first.
	out, err := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "bin", "gpumux"), "agent", "--config", config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "gpumux agent (pid "+strconv.Itoa(agent.cmd.Process.Pid)) {
		t.Errorf("a second agent: %v: %s", err, out)
	}

	d, runtime := startContainerd(t, ctx, config)
	run := func(id, mechanism string) (ctrd.Probe, error) {
		res, err := d.Run(ctx, id, ctrd.RunOpts{BinaryName: runtime, Annotations: map[string]string{"gpumux.io/mechanism": mechanism}})
		if err != nil {
			return ctrd.Probe{}, err
		}
		if res.ExitCode != 0 {
			return ctrd.Probe{}, fmt.Errorf("probe exit %d: %s", res.ExitCode, res.Stderr)
		}
		return ctrd.ParseProbe(res.Stdout), nil
	}
	p, err := run("mps-1", "mps")
	if err != nil {
		t.Fatal(err)
	}
	if p.Env["CUDA_MPS_PIPE_DIRECTORY"] != "/run/gpumux/mps" || !p.HasMount("/run/gpumux/mps") || !strings.HasPrefix(p.Env["GPUMUX_SHARES"], mpsGPU+"/mps/") {
		t.Errorf("an MPS container got %v, mounts %v", p.Env, p.Mounts)
	}
	p, err = run("mig-1", "mig")
	if err != nil {
		t.Fatal(err)
	}
	caps := 0
	for dev := range p.Devices {
		if strings.HasPrefix(dev, "/dev/nvidia-caps/") {
			caps++
		}
	}
	if !strings.HasPrefix(p.Env["GPUMUX_SHARES"], "MIG-") || caps != 2 {
		t.Errorf("a MIG container got %v and %d caps devices", p.Env, caps)
	}

	// The daemon dies while the agent is stopped: the next create fails
	// before runc with the reason; the resumed agent restarts the daemon,
	// and creates work again.
	pidFile := filepath.Join(stateDir, "mps", mpsGPU, "pipe", "nvidia-cuda-mps-control.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	agent.cmd.Process.Signal(syscall.SIGSTOP)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, 10*time.Second, "the killed daemon to be gone", func() (bool, string) {
		return syscall.Kill(pid, 0) != nil, "still there"
	})
	_, err = run("mps-2", "mps")
	agent.cmd.Process.Signal(syscall.SIGCONT)
	if err == nil || !strings.Contains(err.Error(), "no MPS control daemon serves "+mpsGPU) || !strings.Contains(err.Error(), "gpumux agent") {
		t.Errorf("create with the daemon dead: %v", err)
	}
	waitFor(t, ctx, time.Minute, "the agent to restart the daemon", func() (bool, string) {
		f, err := scrape.Get(ctx, url)
		if err != nil {
			return false, err.Error()
		}
		up, _ := f.Value("gpumux_mps_daemon_up", map[string]string{"device": mpsGPU})
		restarts, _ := f.Value("gpumux_mps_daemon_restarts_total", map[string]string{"device": mpsGPU})
		return up == 1 && restarts >= 1, fmt.Sprintf("up %v, restarts %v", up, restarts)
	})
	if _, err := run("mps-3", "mps"); err != nil {
		t.Errorf("create after the agent restarted the daemon: %v", err)
	}

	// A container runc forgets (its state removed behind containerd's back)
	// loses its lease to the agent; a running one keeps its lease, and the
	// metrics name its holder.
	sleeper := ctrd.RunOpts{BinaryName: runtime, Args: []string{ctrd.ProbePath, "-sleep"}, Annotations: map[string]string{"gpumux.io/mechanism": "mig"}}
	for _, id := range []string{"kept", "forgotten"} {
		if err := d.Create(ctx, id, sleeper); err != nil {
			t.Fatal(err)
		}
	}
	held := func() map[string]string { return leases(t, ctx, stateDir) }
	var forgotten, kept string
	for id, c := range held() {
		switch c {
		case "forgotten":
			forgotten = id
		case "kept":
			kept = id
		}
	}
	runcRoot := filepath.Join(d.RuncRoot, ctrd.Namespace)
	if out, err := exec.CommandContext(ctx, "runc", "--root", runcRoot, "delete", "--force", "forgotten").CombinedOutput(); err != nil {
		t.Fatalf("runc delete: %v: %s", err, out)
	}
	waitFor(t, ctx, time.Minute, "the agent to reclaim the forgotten container's lease", func() (bool, string) {
		l := held()
		return l[forgotten] == "" && l[kept] == "kept", fmt.Sprint(l)
	})
	f, err := scrape.Get(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := f.Value("gpumux_share_held", map[string]string{"share": kept, "holder": "container kept"}); !ok || v != 1 {
		t.Errorf("gpumux_share_held for %s: %v %v", kept, v, ok)
	}
	if v, _ := f.Value("gpumux_leases_held", nil); v != float64(len(held())) {
		t.Errorf("gpumux_leases_held = %v, the store holds %d", v, len(held()))
	}
	if v, ok := f.Value("gpumux_share_info", map[string]string{"share": kept, "mechanism": "mig"}); !ok || v != 1 {
		t.Errorf("gpumux_share_info of %s: %v %v", kept, v, ok)
	}

	// SIGTERM: the agent stops cleanly, the daemon stays for the next one.
	if code := agent.stop(t); code != 0 {
		t.Errorf("gpumux agent exit %d after SIGTERM", code)
	}
	b, _ = os.ReadFile(pidFile)
	pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		t.Errorf("the MPS daemon did not outlive the agent (pid file %q)", bytes.TrimSpace(b))
	}
}
