//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/ocicreate"
)

// TestRepairRebuildsLeasesOfRunningContainers: containers started through
// gpumux-runtime by a real containerd and runc hold whole GPUs, one
// prepared by gpumux agent (its bundle marked, no poststop hook), one by
// gpumux-runtime-core (its poststop hook); the lease store is then emptied
// (the finding: an empty leases.db once reset the store silently). Every
// user of the store refuses it, and `gpumux repair` asks the real runc
// what runs and gives each container its leases back, keeping the
// damaged file.
func TestRepairRebuildsLeasesOfRunningContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir, config := runtimeNode(t)
	a, socket := agentRuntimeSocket(t, ctx, config)
	d, runtime := startContainerd(t, ctx, config, ctrd.WithEnv(ocicreate.EnvSocket+"="+socket))
	whole := ctrd.RunOpts{BinaryName: runtime, Args: []string{ctrd.ProbePath, "-sleep"}, Annotations: map[string]string{"gpumux.io/mechanism": "exclusive"}}
	for _, id := range []string{"first", "second"} {
		if id == "second" { // no agent: the core's create
			if err := (agentSwitch{socket}).use(false); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Create(ctx, id, whole); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if err := d.Start(ctx, id); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	if err := (agentSwitch{socket}).use(true); err != nil {
		t.Fatal(err)
	}
	if log := a.log.String(); !strings.Contains(log, "prepared a container's create: container=first") || strings.Contains(log, "container=second") {
		t.Fatalf("the agent's log does not show it prepared first, and only first:\n%s", log)
	}
	before := leases(t, ctx, stateDir)
	if len(before) != 2 {
		t.Fatalf("leases before the damage: %v, want one per container", before)
	}

	path := lease.PathIn(stateDir)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	gpumux := filepath.Join(repoRoot(t), "bin", "gpumux")
	run := func(args ...string) (string, int) {
		out, err := exec.CommandContext(ctx, gpumux, args...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := run("status", "--config", config, "--nomad", "off"); code != 1 || !strings.Contains(out, path) || !strings.Contains(out, "gpumux repair") || strings.Contains(out, "goroutine") {
		t.Errorf("status on an empty leases.db: exit %d, output:\n%s\nwant exit 1 naming the file and gpumux repair", code, out)
	}
	runcRoot := filepath.Join(d.RuncRoot, ctrd.Namespace)
	if out, code := run("repair", "--config", config, "--nomad", "off", "--runc-root", runcRoot, "--dry-run"); code != 0 {
		t.Fatalf("repair --dry-run: exit %d:\n%s", code, out)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("repair --dry-run changed %s: %v %v", path, fi, err)
	}
	out, code := run("repair", "--config", config, "--nomad", "off", "--runc-root", runcRoot)
	t.Logf("gpumux repair:\n%s", out)
	if code != 0 {
		t.Fatalf("repair: exit %d", code)
	}
	if after := leases(t, ctx, stateDir); !maps.Equal(after, before) {
		t.Errorf("leases after repair %v, want those before the damage %v", after, before)
	}
	if kept, _ := filepath.Glob(path + ".damaged-*"); len(kept) != 1 {
		t.Errorf("damaged files kept: %v, want one", kept)
	}
	// The rebuilt store works: a released container gives its GPU back
	// (the agent's, at runc's delete: a moment after).
	if _, err := d.Delete(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, time.Minute, "first's lease given back", func() (bool, string) {
		after := leases(t, ctx, stateDir)
		return len(after) == 1, fmt.Sprint(after)
	})
}
