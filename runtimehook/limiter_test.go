package runtimehook

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// stubLimiter returns a limiter_dir holding a stand-in for the limiter's
// libcuda.so.1, which gpumux only checks is there and mounts.
func stubLimiter(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libcuda.so.1"), []byte("not a library: a test's stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCreateLimitedReplica: on a node whose H200s are split by
// replica_sizes = ["50%", "25%", "25%"], a container asking memory or
// compute gets the smallest replica that fits, with the limiter: its
// mounts in config.json, its library first on LD_LIBRARY_PATH (before the
// image's own), and the replica's limits written on the host.
func TestCreateLimitedReplica(t *testing.T) {
	limiter := stubLimiter(t)
	f := newFixture(t, `limiter_dir = "`+limiter+`"
gpu {
  match         = "0-1"
  mechanism     = "timeslice"
  replica_sizes = ["50%", "25%", "25%"]
}`, 0) // the fake runc says every container is alive: leases stay held
	const image = "/usr/local/cuda/lib64:/usr/local/nvidia/lib64"
	create := func(id string, ann map[string]string) (specs.Spec, error) {
		t.Helper()
		f.stderr.Reset()
		f.writeSpec(t, ann, "LD_LIBRARY_PATH="+image)
		if code := f.create(id); code != 0 {
			return specs.Spec{}, fmt.Errorf("exit %d: %s", code, f.stderr.String())
		}
		return f.readSpec(t), nil
	}
	for _, tc := range []struct {
		id      string
		ann     map[string]string
		replica []string // the replicas it may get
		mem     uint64   // MiB
		pct     int
	}{
		// 40 GiB: more than a 25% replica (35942 MiB), so a 50% one.
		{"big", map[string]string{"gpumux.io/mechanism": "timeslice", "gpumux.io/memory": "40Gi"}, []string{"/timeslice/0"}, 71885, 50},
		// 20% compute: a 25% replica is the smallest that fits.
		{"small", map[string]string{"gpumux.io/mechanism": "timeslice", "gpumux.io/compute": "20"}, []string{"/timeslice/1", "/timeslice/2"}, 35942, 25},
		// The other GPU's 50% replica, the first being held.
		{"big2", map[string]string{"gpumux.io/mechanism": "timeslice", "gpumux.io/memory": "40Gi"}, []string{"/timeslice/0"}, 71885, 50},
		// Auto at isolation none tries timeslice first.
		{"auto", map[string]string{"gpumux.io/isolation": "none", "gpumux.io/memory": "30Gi"}, []string{"/timeslice/1", "/timeslice/2"}, 35942, 25},
	} {
		t.Run(tc.id, func(t *testing.T) {
			spec, err := create(tc.id, tc.ann)
			if err != nil {
				t.Fatal(err)
			}
			env := specEnv(spec)
			id := env["GPUMUX_SHARES"]
			uuid, n, ok := strings.Cut(id, "/timeslice/")
			if !ok || !strings.HasSuffix(id, tc.replica[0]) && !strings.HasSuffix(id, tc.replica[len(tc.replica)-1]) {
				t.Fatalf("got share %q, want a replica %v", id, tc.replica)
			}
			if held, _ := f.rt.store().Held(t.Context(), tc.id); len(held) != 1 || held[0] != id {
				t.Errorf("leases of %s: %v, want %s", tc.id, held, id)
			}
			for k, want := range map[string]string{
				"NVIDIA_VISIBLE_DEVICES": uuid,
				"LD_LIBRARY_PATH":        "/run/gpumux/limiter/lib:" + image,
				"GPUMUX_LIMITER_LIMITS":  "/run/gpumux/limiter/limits",
				"GPUMUX_LIMITER_STATE":   "/run/gpumux/limiter/state",
			} {
				if env[k] != want {
					t.Errorf("%s = %q, want %q", k, env[k], want)
				}
			}
			if n := strings.Count(strings.Join(spec.Process.Env, "\n")+"\n", "LD_LIBRARY_PATH="); n != 1 {
				t.Errorf("%d LD_LIBRARY_PATH entries: %v", n, spec.Process.Env)
			}
			dir := filepath.Join(f.stateDir, "timeslice", uuid, n)
			wantMounts := map[string]string{
				"/run/gpumux/limiter/lib":    limiter + " ro",
				"/run/gpumux/limiter/state":  filepath.Join(dir, "state") + " rw",
				"/run/gpumux/limiter/limits": filepath.Join(dir, "limits") + " ro",
				"/run/gpumux/limiter/node":   filepath.Join(filepath.Dir(dir), "node") + " rw",
			}
			got := map[string]string{}
			for _, m := range spec.Mounts {
				if strings.HasPrefix(m.Destination, "/run/gpumux/limiter/") {
					mode := "rw"
					for _, o := range m.Options {
						if o == "ro" {
							mode = "ro"
						}
					}
					got[m.Destination] = m.Source + " " + mode
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(wantMounts) {
				t.Errorf("limiter mounts\n got %v\nwant %v", got, wantMounts)
			}
			b, err := os.ReadFile(filepath.Join(dir, "limits"))
			want := fmt.Sprintf("version=1\nshare=%s\nmemory_bytes=%d\ncompute_percent=%d\npolicy=cap\n", id, tc.mem<<20, tc.pct)
			if err != nil || string(b) != want {
				t.Errorf("limits file %q (%v), want %q", b, err, want)
			}
			if len(spec.Linux.Devices) != 4 {
				t.Errorf("devices %+v: want ctl, uvm, uvm-tools and the GPU", spec.Linux.Devices)
			}
		})
	}
	// Both 50% replicas are held: 40 GiB no longer fits.
	if _, err := create("big3", map[string]string{"gpumux.io/mechanism": "timeslice", "gpumux.io/memory": "40Gi"}); err == nil ||
		!strings.Contains(err.Error(), "no free timeslice replica with ≥ 40 GiB") {
		t.Errorf("a third 40 GiB replica: %v", err)
	}
}

// TestCreateLimitedReplicaWithoutLimiter: replicas whose limiter is not
// installed are not handed out: the refusal, before runc runs, says they
// are unusable and names the library; nothing stays leased.
func TestCreateLimitedReplicaWithoutLimiter(t *testing.T) {
	limiter := t.TempDir() // empty
	f := newFixture(t, `limiter_dir = "`+limiter+`"
gpu {
  match     = "0"
  mechanism = "timeslice"
  replicas  = 2
}`, 0)
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "timeslice"})
	if code := f.create("c1"); code == 0 || !strings.Contains(f.stderr.String(), "no free timeslice replica") ||
		!strings.Contains(f.stderr.String(), "unusable now: limiter "+filepath.Join(limiter, "libcuda.so.1")) {
		t.Errorf("exit %d: %s", code, f.stderr.String())
	}
	if held, _ := f.rt.store().Held(t.Context(), "c1"); len(held) != 0 {
		t.Errorf("a refused create holds %v", held)
	}
	if log, _ := os.ReadFile(f.runcLog); len(log) != 0 {
		t.Errorf("runc was called: %q", log)
	}
}
