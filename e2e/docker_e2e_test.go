//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/e2e/dockerd"
	"github.com/gpumux/gpumux/e2e/nomadagent"
	"github.com/gpumux/gpumux/ocicreate"
)

// startDocker starts a private Docker engine whose daemon.json gets the
// gpumux runtime from `gpumux runtime configure` (bin/gpumux, which by
// default registers the bin/gpumux-runtime next to it), with gpumux-runtime
// reading the node config (through the environment of the engine's
// containerd, which the runc shim and the runtime inherit).
func startDocker(t testing.TB, ctx context.Context, config string, env ...string) *dockerd.Daemon {
	t.Helper()
	gpumux := filepath.Join(repoRoot(t), "bin", "gpumux")
	runtime := filepath.Join(repoRoot(t), "bin", "gpumux-runtime")
	for _, b := range []string{gpumux, runtime} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%v (run make build)", err)
		}
	}
	d := dockerd.Start(ctx, t,
		dockerd.WithContainerdOptions(ctrd.WithEnv(append([]string{"GPUMUX_CONFIG=" + config}, env...)...)),
		dockerd.WithConfigure(func(daemonJSON string) error {
			out, err := exec.CommandContext(ctx, gpumux, "runtime", "configure", "--runtime=docker", "--config", daemonJSON).CombinedOutput()
			if err != nil {
				return fmt.Errorf("gpumux runtime configure: %w\n%s", err, out)
			}
			if want := `set "runtimes"."gpumux"."path" = "` + runtime + `"`; !strings.Contains(string(out), want) {
				return fmt.Errorf("gpumux runtime configure did not say %q:\n%s", want, out)
			}
			return nil
		}))
	out, _, err := d.Docker(ctx, "info", "--format", "{{json .Runtimes}}")
	if err != nil || !strings.Contains(out, `"gpumux":{"path":"`+runtime+`"`) {
		t.Fatalf("the engine does not list the gpumux runtime (%v): %s", err, out)
	}
	return d
}

// TestDockerRunsShares is `docker run --runtime gpumux` on a private Docker
// engine: each mechanism of a simulated node as GPUMUX_MECHANISM asks, the
// lease held while the container runs and released when it stops, and a bad
// request refused in docker run's error.
func TestDockerRunsShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir, config := runtimeNode(t)
	d := startDocker(t, ctx, config)
	image, err := d.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env       []string
		idPattern string
		caps, mps bool
	}{
		{[]string{"GPUMUX_MECHANISM=exclusive"}, `^GPU-[0-9a-f-]+$`, false, false},
		{[]string{"GPUMUX_MECHANISM=mig", "GPUMUX_MEMORY=60Gi"}, `^MIG-[0-9a-f-]+$`, true, false},
		{[]string{"GPUMUX_MECHANISM=mps"}, `^GPU-[0-9a-f-]+/mps/[0-3]$`, false, true},
		{[]string{"GPUMUX_MECHANISM=timeslice"}, `^GPU-[0-9a-f-]+/timeslice/[0-3]$`, false, false},
		{[]string{"GPUMUX_ISOLATION=standard"}, `^GPU-[0-9a-f-]+/mps/[0-3]$`, false, true},
	} {
		t.Run(strings.Join(tc.env, ","), func(t *testing.T) {
			args := []string{"run", "--rm", "--runtime", "gpumux"}
			for _, e := range tc.env {
				args = append(args, "-e", e)
			}
			out, _, err := d.Docker(ctx, append(args, image)...)
			if err != nil {
				t.Fatal(err)
			}
			checkShareProbe(t, ctrd.ParseProbe(out), regexp.MustCompile(tc.idPattern), tc.caps, tc.mps)
			if l := leases(t, ctx, stateDir); len(l) != 0 {
				t.Errorf("leases after the container exited: %v", l)
			}
		})
	}

	t.Run("lease held while the container runs", func(t *testing.T) {
		out, _, err := d.Docker(ctx, "run", "-d", "--runtime", "gpumux", "-e", "GPUMUX_MECHANISM=exclusive", image, ctrd.ProbePath, "-sleep")
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(out)
		l := leases(t, ctx, stateDir)
		if len(l) != 1 {
			t.Fatalf("leases while %s runs: %v, want one whole GPU", id, l)
		}
		for share, holder := range l {
			if holder != id || !strings.HasPrefix(share, "GPU-") {
				t.Errorf("lease %s → %s, want a whole GPU held by container %s", share, holder, id)
			}
		}
		if _, _, err := d.Docker(ctx, "stop", "-t", "1", id); err != nil {
			t.Fatal(err)
		}
		if l := leases(t, ctx, stateDir); len(l) != 0 {
			t.Errorf("leases after docker stop: %v", l)
		}
		if _, _, err := d.Docker(ctx, "rm", id); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("bad request", func(t *testing.T) {
		_, stderr, err := d.Docker(ctx, "run", "--rm", "--runtime", "gpumux", "-e", "GPUMUX_MECHANISM=vgpu", image)
		t.Logf("docker run's error: %s", stderr)
		want := `environment variable GPUMUX_MECHANISM = "vgpu": unknown mechanism (valid: auto, exclusive, mig, mps, timeslice, remote)`
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("docker run: %v\nstderr: %s\nwant an error saying %q", err, stderr, want)
		}
		if out, _, err := d.Docker(ctx, "ps", "-aq"); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("containers left after a refused start: %q (%v)", out, err)
		}
	})
}

// dockerJob is a batch job of Nomad's docker driver running the probe
// image, with its args.
type dockerJob struct {
	name, image string
	args        []string
	// mechanism: one nvidia/gpu device of this mechanism.
	mechanism string
	// runtime and env: the task's own docker runtime and environment.
	runtime string
	env     map[string]string
}

func (j dockerJob) hcl() string {
	var b strings.Builder
	fmt.Fprintf(&b, `job %q {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "probe" {
      driver = "docker"
      config {
        image      = %q
        force_pull = false
        command    = %q
`, j.name, j.image, ctrd.ProbePath)
	if len(j.args) > 0 {
		fmt.Fprintf(&b, "        args       = [%q]\n", strings.Join(j.args, `", "`))
	}
	if j.runtime != "" {
		fmt.Fprintf(&b, "        runtime    = %q\n", j.runtime)
	}
	b.WriteString("      }\n")
	if len(j.env) > 0 {
		b.WriteString("      env {\n")
		for k, v := range j.env {
			fmt.Fprintf(&b, "        %s = %q\n", k, v)
		}
		b.WriteString("      }\n")
	}
	b.WriteString("      resources {\n        cpu    = 100\n        memory = 64\n")
	if j.mechanism != "" {
		fmt.Fprintf(&b, `        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = %q
          }
        }
`, j.mechanism)
	}
	b.WriteString("      }\n    }\n  }\n}\n")
	return b.String()
}

// TestDockerDriverJobs is Nomad's docker driver on a private Docker engine
// with nvidia_runtime = "gpumux": a job of each mechanism gets the share the
// plugin reserved, through gpumux-runtime, which leases it to the task's
// container until the allocation stops; a task whose request gpumux-runtime
// refuses fails with the reason in its events. The plugin serves
// gpumux-runtime on its runtime_socket (the node config file gpumux-runtime
// reads has the plugin block's body), so the creates are decided in the
// plugin, not in a gpumux-runtime-core of each container.
func TestDockerDriverJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	stateDir, config := runtimeNode(t)
	socket := runtimeSocketPath(t)
	body, err := os.ReadFile(config)
	if err == nil {
		body = append(body, fmt.Sprintf("runtime_socket = %q\n", socket)...)
		err = os.WriteFile(config, body, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	d := startDocker(t, ctx, config, ocicreate.EnvSocket+"="+socket)
	image, err := d.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := nomadagent.Start(ctx, t,
		nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
		nomadagent.WithPluginConfig(string(body)),
		nomadagent.WithAgentConfig(fmt.Sprintf(`plugin "docker" {
  config {
    endpoint       = %q
    nvidia_runtime = "gpumux"
    allow_runtimes = ["runc", "gpumux"]
    gc {
      image = false
    }
  }
}`, d.Host)),
		nomadagent.WithAfterStop(func() { stopMPSDaemons(t, stateDir) }),
		nomadagent.WithDrivers("docker"),
		nomadagent.WaitForDevice("nvidia", "gpu"))
	node, err := a.Node(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rt := node.Attributes["driver.docker.runtimes"]; !strings.Contains(rt, "gpumux") {
		t.Fatalf("Nomad's docker driver sees runtimes %q, want gpumux among them", rt)
	}

	for _, tc := range []struct {
		mechanism string
		caps, mps bool
	}{
		{"exclusive", false, false},
		{"mig", true, false},
		{"mps", false, true},
		{"timeslice", false, false},
	} {
		t.Run(tc.mechanism, func(t *testing.T) {
			jobID, err := a.RunJob(ctx, dockerJob{name: "docker-" + tc.mechanism, image: image, mechanism: tc.mechanism, args: []string{"-sleep"}}.hcl())
			if err != nil {
				t.Fatal(err)
			}
			allocs, err := a.WaitAllocs(ctx, jobID, "running")
			if err != nil {
				t.Fatal(err)
			}
			alloc := allocs[0].ID
			devices, err := a.AllocDevices(ctx, alloc)
			if err != nil {
				t.Fatal(err)
			}
			ids := devices["probe"]
			if len(ids) != 1 {
				t.Fatalf("allocated %v, want one share", ids)
			}
			p := ctrd.ParseProbe(taskOutput(t, ctx, a, alloc))
			checkShareProbe(t, p, regexp.MustCompile("^"+regexp.QuoteMeta(ids[0])+"$"), tc.caps, tc.mps)
			// gpumux-runtime, not runc, started the task's container: it
			// claimed the plugin's reservation and leased the share to it.
			out, _, err := d.Docker(ctx, "ps", "-q", "--no-trunc", "--filter", "label=com.hashicorp.nomad.alloc_id="+alloc)
			if err != nil {
				t.Fatal(err)
			}
			container := strings.TrimSpace(out)
			if l := leases(t, ctx, stateDir); len(l) != 1 || container == "" || l[ids[0]] != container {
				t.Errorf("leases %v while the task runs, want %s held by its container %q", l, ids[0], container)
			}
			if err := a.StopJob(ctx, jobID, true); err != nil {
				t.Fatal(err)
			}
			waitNoLeases(t, ctx, stateDir)
			// The plugin decided the create, gpumux-runtime asked it.
			if !regexp.MustCompile(`prepared a container's create: .*container=` + container).MatchString(a.Log()) {
				t.Errorf("the plugin did not prepare %s's create (Nomad's log: %s)", container, a.LogPath)
			}
		})
	}

	t.Run("bad request in the allocation's events", func(t *testing.T) {
		// No device: the task asks gpumux-runtime itself, for a mechanism
		// that does not exist.
		job := dockerJob{name: "docker-bad", image: image, runtime: "gpumux", env: map[string]string{"GPUMUX_MECHANISM": "vgpu"}}.hcl()
		jobID, err := a.RunJob(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		allocs, err := a.WaitAllocs(ctx, jobID, "failed")
		if err != nil {
			t.Fatal(err)
		}
		events := nomadagent.TaskEvents(allocs[0])
		t.Logf("the refused task's events:\n%s", events)
		if want := `GPUMUX_MECHANISM = "vgpu": unknown mechanism`; !strings.Contains(events, want) {
			t.Errorf("the failed allocation's events do not say %q:\n%s", want, events)
		}
		if err := a.StopJob(ctx, jobID, true); err != nil {
			t.Fatal(err)
		}
	})
}

// taskOutput waits until the probe task of the allocation has written its
// report (it then sleeps) and returns it.
func taskOutput(t *testing.T, ctx context.Context, a *nomadagent.Agent, alloc string) string {
	t.Helper()
	for {
		out, err := a.TaskLogs(ctx, alloc, "probe", "stdout")
		if err == nil && strings.Contains(out, "MOUNT /") {
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the task wrote no report: %q (%v)", out, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitNoLeases waits until the node holds no lease: a container's shares
// go back when runc deletes it (the agent watching runc's root, or
// gpumux-runtime's poststop hook), which Docker does as the container
// exits.
func waitNoLeases(t *testing.T, ctx context.Context, stateDir string) {
	t.Helper()
	for {
		l := leases(t, ctx, stateDir)
		if len(l) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("leases not released: %v", l)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
