//go:build e2e

package nomadagent

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

const envJob = `
job "smoke-env" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo GPUMUX_SMOKE_MARKER=$GPUMUX_SMOKE; env; ls -l /dev"]
      }
      env {
        GPUMUX_SMOKE = "hello-from-exec"
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

// TestAgentRunsExecJob starts a dev agent without the gpumux plugin, runs
// an exec-driver batch job printing its environment, checks the output,
// stops the job and the agent and checks that nothing is left behind.
func TestAgentRunsExecJob(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	a := Start(ctx, t)

	node, err := a.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s ready; exec driver: %s", node.ID, node.Drivers["exec"].HealthDescription)

	jobID, err := a.RunJob(ctx, envJob)
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := a.WaitAllocs(ctx, jobID, "complete")
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 1 {
		t.Fatalf("got %d allocations, want 1", len(allocs))
	}
	out, err := a.TaskLogs(ctx, allocs[0].ID, "t", "stdout")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("task stdout:\n%s", out)
	for _, want := range []string{
		"GPUMUX_SMOKE_MARKER=hello-from-exec",
		"NOMAD_ALLOC_ID=" + allocs[0].ID,
		"NOMAD_TASK_NAME=t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("task stdout lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^c.* 1, +3 .* null$`).MatchString(out) {
		t.Errorf("ls -l /dev in the task shows no /dev/null (char 1,3)")
	}
	if devs, err := a.AllocDevices(ctx, allocs[0].ID); err != nil {
		t.Error(err)
	} else if len(devs) != 0 {
		t.Errorf("job without device requests got devices %v", devs)
	}
	if fails, err := a.PlacementFailures(ctx, jobID); err != nil {
		t.Error(err)
	} else if len(fails) != 0 {
		t.Errorf("unexpected placement failures: %s", FormatPlacementFailures(fails))
	}

	if err := a.StopJob(ctx, jobID, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestAgentPlacementFailure checks that a job asking for a device the node
// does not have is reported as a placement failure with a reason.
func TestAgentPlacementFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	a := Start(ctx, t)
	jobID, err := a.RunJob(ctx, `
job "smoke-nodevice" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      resources {
        cpu    = 50
        memory = 32
        device "gpumux/gpu" {
          count = 1
        }
      }
    }
  }
}
`)
	if err != nil {
		t.Fatal(err)
	}
	fails, err := a.PlacementFailures(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	m := fails["g"]
	if m == nil {
		t.Fatalf("no placement failure for group g: %v", fails)
	}
	reason := FormatPlacementFailures(fails)
	t.Logf("placement failure: %s", reason)
	if !strings.Contains(reason, "devices") {
		t.Errorf("placement failure %q does not mention devices", reason)
	}
	if _, err := a.WaitAllocs(ctx, jobID, "running"); err == nil || !strings.Contains(err.Error(), "could not be placed") {
		t.Errorf("WaitAllocs on unplaceable job: err = %v, want 'could not be placed'", err)
	}
	if err := a.StopJob(ctx, jobID, true); err != nil {
		t.Fatal(err)
	}
}

// TestAgentStopCleansRunningTasks leaves a service job running and checks
// that stopping the agent kills its task, executor and logmon and unmounts
// its alloc dir (Stop fails otherwise).
func TestAgentStopCleansRunningTasks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	a := Start(ctx, t)
	jobID, err := a.RunJob(ctx, `
job "smoke-sleep" {
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitAllocs(ctx, jobID, "running"); err != nil {
		t.Fatal(err)
	}
	procs, mounts, err := a.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	var sawSleep, sawExecutor bool
	for _, p := range procs {
		t.Logf("running: %s", p)
		sawSleep = sawSleep || strings.HasPrefix(p.Cmdline, "/bin/sleep 3600")
		sawExecutor = sawExecutor || strings.Contains(p.Cmdline, " executor ")
	}
	if !sawSleep || !sawExecutor {
		t.Errorf("Leftovers while running did not find the task (%v) and its executor (%v)", sawSleep, sawExecutor)
	}
	if len(mounts) == 0 {
		t.Errorf("Leftovers while running found no mounts under %s", a.DataDir)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
}
