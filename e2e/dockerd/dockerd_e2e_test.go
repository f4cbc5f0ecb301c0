//go:build e2e

package dockerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

// TestDaemonRunsProbeAndLeavesNothing starts the engine, runs the probe
// image with runc, once to its end and once left running, stops the engine
// and checks that nothing of it is left.
func TestDaemonRunsProbeAndLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	configured := false
	d := Start(ctx, t, WithConfigure(func(path string) error {
		b, err := os.ReadFile(path)
		configured = err == nil && strings.Contains(string(b), "deprecated-key-path")
		return err
	}))
	if !configured {
		t.Error("WithConfigure did not see the harness's daemon.json")
	}
	image, err := d.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := d.Docker(ctx, "run", "--rm", "-e", "GPUMUX_X=1", image)
	if err != nil {
		t.Fatal(err)
	}
	p := ctrd.ParseProbe(out)
	if p.Env["GPUMUX_X"] != "1" || !p.HasMount("/") || len(p.Other) > 0 {
		t.Errorf("the probe saw %+v", p)
	}
	// A running container, left to Stop.
	if _, _, err := d.Docker(ctx, "run", "-d", image, ctrd.ProbePath, "-sleep"); err != nil {
		t.Fatal(err)
	}
	if cg, err := d.containerCgroups(); err != nil || len(cg) == 0 {
		t.Errorf("no container cgroup under %s while a container runs (%v)", d.CgroupParent, err)
	}
	if err := d.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, p := range []string{d.Dir, "/etc/docker/key.json"} {
		if _, err := os.Stat(p); err == nil && (p == d.Dir || !d.before[p]) {
			t.Errorf("%s is left", p)
		}
	}
	hier, _ := hostcheck.CgroupMounts()
	for _, h := range hier {
		if _, err := os.Stat(filepath.Join(h, d.CgroupParent)); err == nil {
			t.Errorf("cgroup %s left in %s", d.CgroupParent, h)
		}
	}
}
