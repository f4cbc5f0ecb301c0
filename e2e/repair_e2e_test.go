//go:build e2e

package e2e

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/node/lease"
)

// TestRepairRebuildsLeasesOfRunningContainers: containers started through
// gpumux-runtime by a real containerd and runc hold whole GPUs; the lease
// store is then emptied (the finding: an empty leases.db once reset the
// store silently). Every user of the store refuses it, and `gpumux repair`
// asks the real runc what runs and gives each container its leases back,
// keeping the damaged file.
func TestRepairRebuildsLeasesOfRunningContainers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir, config := runtimeNode(t)
	d, runtime := startContainerd(t, ctx, config)
	whole := ctrd.RunOpts{BinaryName: runtime, Args: []string{ctrd.ProbePath, "-sleep"}, Annotations: map[string]string{"gpumux.io/mechanism": "exclusive"}}
	for _, id := range []string{"first", "second"} {
		if err := d.Create(ctx, id, whole); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if err := d.Start(ctx, id); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
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
	// The rebuilt store works: a released container gives its GPU back.
	if _, err := d.Delete(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if after := leases(t, ctx, stateDir); len(after) != 1 {
		t.Errorf("leases after deleting one container: %v, want the other's only", after)
	}
}
