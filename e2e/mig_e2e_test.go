//go:build e2e

package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/nomadagent"
)

const holderJob = `
job "holder" {
  type = "service"
  group "g" {
    task "hold" {
      driver = "exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mig_profile}"
            value     = "2g.35gb"
          }
        }
      }
    }
  }
}
`

const smallMIGJob = `
job "small" {
  type = "batch"
  group "g" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(NVIDIA|GPUMUX)_' | sort"]
      }
      resources {
        cpu    = 50
        memory = 32
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mig_profile}"
            value     = "1g.18gb"
          }
        }
      }
    }
  }
}
`

// TestMIGLayoutChangeWhileAJobHoldsAnInstance changes the MIG layout of the
// node with gpumux mig apply while a Nomad job holds a 2g.35gb: the held
// instance survives (same UUID, the job keeps running), and the new 1g.18gb
// instances become schedulable without restarting the agent.
func TestMIGLayoutChangeWhileAJobHoldsAnInstance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cfg, stateDir := exampleAgentConfig(t)
	a := nomadagent.Start(ctx, t,
		nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
		nomadagent.WithAgentConfig(cfg),
		nomadagent.WithAfterStop(func() { stopMPSDaemons(t, stateDir) }),
		nomadagent.WaitForDevice("nvidia", "gpu"))

	holder, err := a.RunJob(ctx, holderJob)
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := a.WaitAllocs(ctx, holder, "running")
	if err != nil {
		t.Fatal(err)
	}
	devices, err := a.AllocDevices(ctx, allocs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	held := devices["hold"][0]

	// GPUs 6 and 7: drop the 3g.71gb, keep both 2g.35gb, add two 1g.18gb.
	layout := filepath.Join(t.TempDir(), "layout.yaml")
	os.WriteFile(layout, []byte(`version: gpumux.io/v1
gpus:
  - match: "6,7"
    mig-enabled: true
    mig-devices:
      2g.35gb: 2
      1g.18gb: 2
`), 0o644)
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "bin", "gpumux"), "mig", "apply", "-f", layout, "--simulate", "dgxh200", "--state-dir", stateDir, "--nomad", a.HTTPAddr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpumux mig apply: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "2 GPUs changed") || strings.Contains(string(out), "destroying 2g.35gb") {
		t.Fatalf("apply should change GPUs 6 and 7 around their 2g.35gb instances:\n%s", out)
	}

	// The plugin offers the new instances at its next fingerprint (5s).
	deadline := time.Now().Add(time.Minute)
	for {
		devs, err := a.NodeDevices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		groups := map[string][]string{}
		for _, d := range devs {
			for _, inst := range d.Instances {
				groups[d.Name] = append(groups[d.Name], inst.ID)
			}
		}
		if len(groups["H200-mig-1g.18gb"]) == 4 {
			if len(groups["H200-mig-3g.71gb"]) != 0 || !contains(groups["H200-mig-2g.35gb"], held) {
				t.Fatalf("after the change: 3g.71gb %v, 2g.35gb %v (held %s)", groups["H200-mig-3g.71gb"], groups["H200-mig-2g.35gb"], held)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new 1g.18gb instances were never offered: %v", groups)
		}
		time.Sleep(time.Second)
	}
	if al, err := a.Allocs(ctx, holder); err != nil || len(al) != 1 || al[0].ClientStatus != "running" {
		t.Fatalf("the job holding %s: %v (%v)", held, al, err)
	}

	// A layout without room for the held 2g.35gb: the other GPU changes,
	// the held one's is refused because the Nomad allocation holding its
	// instance makes it busy (exit 4), and keeps its layout.
	greedy := filepath.Join(t.TempDir(), "greedy.yaml")
	os.WriteFile(greedy, []byte(`version: gpumux.io/v1
gpus:
  - match: "6,7"
    mig-enabled: true
    mig-devices:
      1g.18gb: 7
`), 0o644)
	cmd = exec.CommandContext(ctx, filepath.Join(repoRoot(t), "bin", "gpumux"), "mig", "apply", "-f", greedy, "--simulate", "dgxh200", "--state-dir", stateDir, "--nomad", a.HTTPAddr)
	out, err = cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 || !strings.Contains(string(out), "Nomad allocation") {
		t.Fatalf("apply over a Nomad-held instance: %v, want exit 4 naming the allocation:\n%s", err, out)
	}
	status, err := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "bin", "gpumux"), "status", "--output", "json",
		"--simulate", "dgxh200", "--state-dir", stateDir).CombinedOutput()
	if err != nil || !strings.Contains(string(status), held) || !strings.Contains(string(out), "1 refused as busy") {
		t.Fatalf("after the refused apply the held instance %s must still exist (%v):\n%s\n%s", held, err, out, status)
	}

	small, err := a.RunJob(ctx, smallMIGJob)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := a.WaitAllocs(ctx, small, "complete")
	if err != nil {
		t.Fatal(err)
	}
	logs, err := a.TaskLogs(ctx, sa[0].ID, "probe", "stdout")
	if err != nil || !strings.Contains(logs, "NVIDIA_VISIBLE_DEVICES=MIG-") {
		t.Errorf("a job on a new 1g.18gb saw %q (%v)", logs, err)
	}
	for _, j := range []string{small, holder} {
		if err := a.StopJob(ctx, j, true); err != nil {
			t.Fatal(err)
		}
	}
}
