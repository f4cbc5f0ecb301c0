package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/device"
)

// TestReserveLimitedReplica: Nomad's reservation of a limited replica
// carries the limiter: its library directory and the replica's limits
// read-only, its accounting directory writable, and the variables that
// point the task at them; the limits file is on the host.
func TestReserveLimitedReplica(t *testing.T) {
	stateDir, limiter := t.TempDir(), stubLimiter(t)
	p := dialPlugin(t)
	_, groups, _ := fingerprintWith(t, p, pluginConfig(nodeConfig, stateDir, limiter))
	g := groupsByName(groups)["H200-timeslice-4x"]
	if g == nil {
		t.Fatalf("no H200-timeslice-4x in %v", names(groups))
	}
	id := g.Devices[2].ID
	uuid, n, _ := strings.Cut(id, "/timeslice/")
	r, err := p.Reserve([]string{id})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"GPUMUX_SHARES": id, "NVIDIA_VISIBLE_DEVICES": uuid,
		"LD_LIBRARY_PATH":       "/run/gpumux/limiter/lib",
		"GPUMUX_LIMITER_LIMITS": "/run/gpumux/limiter/limits",
		"GPUMUX_LIMITER_STATE":  "/run/gpumux/limiter/state",
	} {
		if got := r.Envs[k]; got != want {
			t.Errorf("env %s = %q, want %q", k, got, want)
		}
	}
	dir := filepath.Join(stateDir, "timeslice", uuid, n)
	want := []device.Mount{
		{TaskPath: "/run/gpumux/limiter/lib", HostPath: limiter, ReadOnly: true},
		{TaskPath: "/run/gpumux/limiter/state", HostPath: filepath.Join(dir, "state"), ReadOnly: false},
		{TaskPath: "/run/gpumux/limiter/limits", HostPath: filepath.Join(dir, "limits"), ReadOnly: true},
		{TaskPath: "/run/gpumux/limiter/node", HostPath: filepath.Join(stateDir, "timeslice", uuid, "node"), ReadOnly: false},
	}
	if got := withoutDriver(r.Mounts, stateDir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("mounts\n got %+v\nwant the driver's and %+v", got, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, "limits"))
	if wantLimits := fmt.Sprintf("version=1\nshare=%s\nmemory_bytes=%d\ncompute_percent=25\npolicy=cap\n", id, uint64(35942)<<20); err != nil || string(b) != wantLimits {
		t.Errorf("limits file %q (%v), want %q", b, err, wantLimits)
	}
	if fi, err := os.Stat(filepath.Join(dir, "state")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 {
		t.Errorf("state directory: %v, %v", fi, err)
	}
	if len(r.Devices) != 4 {
		t.Errorf("devices %+v: want ctl, uvm, uvm-tools and the GPU", r.Devices)
	}
}

// TestReplicasUnhealthyWithoutLimiter: while limiter_dir has no
// libcuda.so.1 the limited replicas are unhealthy, with the path and the
// remedy, and Reserve refuses them; other shares are not touched. Once the
// library is there the next fingerprint has them healthy.
func TestReplicasUnhealthyWithoutLimiter(t *testing.T) {
	limiter := t.TempDir() // empty
	p := dialPlugin(t)
	ch, groups, _ := fingerprintWith(t, p, pluginConfig(nodeConfig, t.TempDir(), limiter))
	lib := filepath.Join(limiter, "libcuda.so.1")
	replicas := 0
	for _, g := range groups {
		for _, d := range g.Devices {
			isReplica := strings.Contains(d.ID, "/timeslice/")
			switch {
			case isReplica && d.Healthy:
				t.Errorf("%s: healthy without the limiter", d.ID)
			case isReplica && !(strings.Contains(d.HealthDesc, "limiter "+lib) && strings.Contains(d.HealthDesc, "limiter_dir") && strings.Contains(d.HealthDesc, `limit = "off"`)):
				t.Errorf("%s: health %q does not name %s and the remedies", d.ID, d.HealthDesc, lib)
			case !isReplica && !d.Healthy:
				t.Errorf("%s (%s) unhealthy: %s", d.ID, g.Name, d.HealthDesc)
			}
			if isReplica {
				replicas++
			}
		}
	}
	if replicas != 16 {
		t.Fatalf("%d replicas, want 16 (groups %v)", replicas, names(groups))
	}
	id := groupsByName(groups)["H200-timeslice-4x"].Devices[0].ID
	if _, err := p.Reserve([]string{id}); err == nil || !strings.Contains(err.Error(), "unhealthy") || !strings.Contains(err.Error(), lib) {
		t.Errorf("Reserve of a replica without the limiter: %v", err)
	}

	if err := os.WriteFile(lib, []byte("stand-in"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-ch:
			healthy := true
			for _, g := range r.Devices {
				for _, d := range g.Devices {
					healthy = healthy && d.Healthy
				}
			}
			if !healthy {
				continue
			}
			if _, err := p.Reserve([]string{id}); err != nil {
				t.Errorf("Reserve once the limiter is installed: %v", err)
			}
			return
		case <-deadline:
			t.Fatal("the replicas did not become healthy once the limiter was installed")
		}
	}
}
