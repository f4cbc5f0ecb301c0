//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpumux/gpumux/e2e/nomadagent"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/mountinfo"
	"github.com/gpumux/gpumux/internal/scrape"
)

// exampleAgentConfig returns examples/gpumux-plugin.hcl with its state
// directory moved into the test's temp dir and a short fingerprint period.
func exampleAgentConfig(t *testing.T) (string, string) {
	t.Helper()
	src, err := os.ReadFile("../examples/gpumux-plugin.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// MPS daemons keep their unix sockets under the state dir: keep it short.
	stateDir, err := os.MkdirTemp("", "gmx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	cfg := strings.Replace(string(src), `state_dir          = "/var/lib/gpumux"`, `state_dir          = "`+stateDir+`"`, 1)
	cfg = strings.Replace(cfg, `fingerprint_period = "1m"`, `fingerprint_period = "5s"`, 1)
	if cfg == string(src) {
		t.Fatal("examples/gpumux-plugin.hcl no longer has the state_dir line this test rewrites")
	}
	return cfg, stateDir
}

// stopMPSDaemons kills the stand-in MPS daemons under stateDir, which the
// plugin leaves running on purpose (their clients outlive a plugin restart),
// and fails the test if one does not go away.
func stopMPSDaemons(t testing.TB, stateDir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(stateDir, "mps", "*", "pipe", "nvidia-cuda-mps-control.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		syscall.Kill(pid, syscall.SIGKILL)
		for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("MPS daemon %d (%s) survived SIGKILL", pid, f)
		}
	}
}

func readJob(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../examples/jobs/" + name + ".nomad.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// probe is what a task printed: its gpumux env and device nodes, and its
// mounts where the job prints them (withMountinfo).
type probe struct {
	env     map[string]string
	devices map[string]string // path → "major:minor" (decimal) of character devices
	mounts  map[string]bool   // mount point → read-only
}

var statLine = regexp.MustCompile(`^(/dev/\S+) character special file ([0-9a-f]+):([0-9a-f]+)$`)

// mountinfoPrefix starts the lines of /proc/self/mountinfo that a job
// rewritten by withMountinfo prints.
const mountinfoPrefix = "MOUNTINFO "

// withMountinfo makes an example job's shell command also print the task's
// mounts.
func withMountinfo(t *testing.T, job string) string {
	t.Helper()
	args := regexp.MustCompile(`(args\s+=\s+\["-c", ".*)"\]`)
	if !args.MatchString(job) {
		t.Fatalf("the job has no args = [\"-c\", \"…\"] line to extend:\n%s", job)
	}
	return args.ReplaceAllString(job, `${1}; sed 's/^/`+mountinfoPrefix+`/' /proc/self/mountinfo"]`)
}

func parseProbe(out string) probe {
	p := probe{env: map[string]string{}, devices: map[string]string{}, mounts: map[string]bool{}}
	for _, line := range strings.Split(out, "\n") {
		if mi, ok := strings.CutPrefix(line, mountinfoPrefix); ok {
			for _, m := range mountinfo.Parse([]byte(mi)) {
				p.mounts[m.Point] = m.ReadOnly
			}
		} else if m := statLine.FindStringSubmatch(line); m != nil {
			maj, _ := strconv.ParseInt(m[2], 16, 64)
			min, _ := strconv.ParseInt(m[3], 16, 64)
			p.devices[m[1]] = strconv.FormatInt(maj, 10) + ":" + strconv.FormatInt(min, 10)
		} else if k, v, ok := strings.Cut(line, "="); ok {
			p.env[k] = v
		}
	}
	return p
}

func TestPluginSchedulesShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg, stateDir := exampleAgentConfig(t)
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	withMetrics := strings.Replace(cfg, `fingerprint_period = "5s"`, `fingerprint_period = "5s"
    metrics_addr       = "`+metrics+`"`, 1)
	if withMetrics == cfg {
		t.Fatal("the example config no longer has the fingerprint_period line this test extends")
	}
	a := nomadagent.Start(ctx, t,
		nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
		nomadagent.WithAgentConfig(withMetrics),
		nomadagent.WithAfterStop(func() { stopMPSDaemons(t, stateDir) }),
		nomadagent.WaitForDevice("nvidia", "gpu"))

	// The node advertises the example layout.
	devs, err := a.NodeDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]*api.NodeDeviceResource{}
	for _, d := range devs {
		groups[d.Name] = d
	}
	wantGroups := map[string]struct {
		n         int
		mechanism string
	}{
		"H200": {1, "exclusive"}, "H200-timeslice-4x": {12, "timeslice"},
		"H200-mig-3g.71gb": {2, "mig"}, "H200-mig-2g.35gb": {4, "mig"},
		"H200-mps-25pct": {6, "mps"}, "H200-mps-50pct": {1, "mps"},
	}
	for name, w := range wantGroups {
		g := groups[name]
		if g == nil {
			t.Fatalf("node has no device group %s; has %v", name, keys(groups))
		}
		if len(g.Instances) != w.n || g.Vendor != "nvidia" || g.Type != "gpu" || g.Attributes["mechanism"].StringVal == nil || *g.Attributes["mechanism"].StringVal != w.mechanism {
			t.Errorf("group %s: %s/%s, %d instances, mechanism %v; want nvidia/gpu, %d, %s", name, g.Vendor, g.Type, len(g.Instances), g.Attributes["mechanism"], w.n, w.mechanism)
		}
	}
	if len(groups) != len(wantGroups) {
		t.Errorf("groups %v, want %d", keys(groups), len(wantGroups))
	}
	groupOf := map[string]string{}
	for name, g := range groups {
		for _, inst := range g.Instances {
			groupOf[inst.ID] = name
		}
	}

	// The plugin serves the node's metrics: every share Nomad sees, healthy,
	// in its group; the MIG layout; the two MPS daemons up.
	t.Run("metrics", func(t *testing.T) {
		f, err := scrape.Get(ctx, "http://"+metrics+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for id, group := range groupOf {
			if v, ok := f.Value("gpumux_share_info", map[string]string{"share": id, "group": group}); !ok || v != 1 {
				t.Errorf("gpumux_share_info{share=%q,group=%q} = %v, %v", id, group, v, ok)
			}
			if v, ok := f.Value("gpumux_share_healthy", map[string]string{"share": id}); !ok || v != 1 {
				t.Errorf("gpumux_share_healthy{share=%q} = %v, %v", id, v, ok)
			}
		}
		if n := len(f.Samples("gpumux_share_info", nil)); n != len(groupOf) {
			t.Errorf("%d shares in the metrics, Nomad sees %d", n, len(groupOf))
		}
		for _, gpu := range []string{"6", "7"} {
			if v, _ := f.Value("gpumux_mig_instances", map[string]string{"gpu": gpu, "profile": "2g.35gb"}); v != 2 {
				t.Errorf("GPU %s: %v 2g.35gb instances in the metrics, want 2", gpu, v)
			}
		}
		up := 0.0
		for _, m := range f.Samples("gpumux_mps_daemon_up", nil) {
			up += m.GetGauge().GetValue()
		}
		if up != 2 {
			t.Errorf("%v MPS daemons up in the metrics, want 2 (GPUs 4 and 5)", up)
		}
	})

	// A second MPS job, rewritten from the example: at most 40 GiB, which only
	// the 25% shares satisfy.
	smallMPS := func(hcl string) string {
		return strings.NewReplacer(`job "mps"`, `job "mps-small"`,
			`operator  = ">="
            value     = "60 GiB"`, `operator  = "<="
            value     = "40 GiB"`).Replace(hcl)
	}
	tests := []struct {
		name, job string
		rewrite   func(string) string
		wantGroup []string // groups the share may come from
		caps      bool     // MIG: two nvidia-caps nodes and CUDA_VISIBLE_DEVICES
		mps       []string // MPS: the share's thread percentage and memory limit
	}{
		{"timeslice", "timeslice", nil, []string{"H200-timeslice-4x"}, false, nil},
		{"mig", "mig", nil, []string{"H200-mig-2g.35gb"}, true, nil}, // 30–40 GiB: only 2g.35gb (32.5 GiB) on this node
		{"exclusive", "exclusive", nil, []string{"H200"}, false, nil},
		{"mps", "mps", nil, []string{"H200-mps-50pct"}, false, []string{"50", "0=71885M"}},            // ≥ 60 GiB: the 50% share of GPU 5
		{"mps small", "mps", smallMPS, []string{"H200-mps-25pct"}, false, []string{"25", "0=35942M"}}, // ≤ 40 GiB: a 25% share
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hcl := readJob(t, tc.job)
			if tc.rewrite != nil {
				if hcl = tc.rewrite(hcl); hcl == readJob(t, tc.job) {
					t.Fatal("the rewrite of the example job changed nothing")
				}
			}
			hcl = withMountinfo(t, hcl)
			jobID, err := a.RunJob(ctx, hcl)
			if err != nil {
				t.Fatal(err)
			}
			allocs, err := a.WaitAllocs(ctx, jobID, "complete")
			if err != nil {
				t.Fatal(err)
			}
			alloc := allocs[0]
			devices, err := a.AllocDevices(ctx, alloc.ID)
			if err != nil {
				t.Fatal(err)
			}
			ids := devices["probe"]
			if len(ids) != 1 || !contains(tc.wantGroup, groupOf[ids[0]]) {
				t.Fatalf("allocated %v (group %s), want one share of %v", ids, groupOf[first(ids)], tc.wantGroup)
			}
			out, err := a.TaskLogs(ctx, alloc.ID, "probe", "stdout")
			if err != nil {
				t.Fatal(err)
			}
			p := parseProbe(out)
			id := ids[0]
			if p.env["GPUMUX_SHARES"] != id {
				t.Errorf("task saw GPUMUX_SHARES=%q, want %q\n%s", p.env["GPUMUX_SHARES"], id, out)
			}
			uuid := strings.SplitN(id, "/", 2)[0] // replicas are "<GPU UUID>/timeslice/<n>"
			if p.env["NVIDIA_VISIBLE_DEVICES"] != uuid {
				t.Errorf("task saw NVIDIA_VISIBLE_DEVICES=%q, want %q", p.env["NVIDIA_VISIBLE_DEVICES"], uuid)
			}
			if cuda, ok := p.env["CUDA_VISIBLE_DEVICES"]; tc.caps != ok || (ok && cuda != uuid) {
				t.Errorf("task saw CUDA_VISIBLE_DEVICES=%q (set: %v), want it set to the MIG UUID only for MIG", cuda, ok)
			}
			for path, want := range map[string]string{"/dev/nvidiactl": "195:255", "/dev/nvidia-uvm": "238:0", "/dev/nvidia-uvm-tools": "238:1"} {
				if p.devices[path] != want {
					t.Errorf("task saw %s as %q, want character device %s\n%s", path, p.devices[path], want, out)
				}
			}
			var gpus, caps []string
			for path, mm := range p.devices {
				switch {
				case regexp.MustCompile(`^/dev/nvidia[0-9]+$`).MatchString(path):
					gpus = append(gpus, path+"="+mm)
					if "195:"+strings.TrimPrefix(path, "/dev/nvidia") != mm {
						t.Errorf("%s is %s, want 195:<minor>", path, mm)
					}
				case strings.HasPrefix(path, "/dev/nvidia-caps/"):
					caps = append(caps, path)
					if !strings.HasPrefix(mm, "241:") || "241:"+strings.TrimPrefix(path, "/dev/nvidia-caps/nvidia-cap") != mm {
						t.Errorf("%s is %s, want 241:<N>", path, mm)
					}
				}
			}
			if len(gpus) != 1 {
				t.Errorf("task saw GPU device nodes %v, want exactly its own", gpus)
			}
			if wantCaps := map[bool]int{true: 2, false: 0}[tc.caps]; len(caps) != wantCaps {
				t.Errorf("task saw caps nodes %v, want %d", caps, wantCaps)
			}
			if tc.mps != nil {
				want := map[string]string{
					"CUDA_MPS_PIPE_DIRECTORY":           "/run/gpumux/mps",
					"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": tc.mps[0],
					"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  tc.mps[1],
				}
				for k, v := range want {
					if p.env[k] != v {
						t.Errorf("task saw %s=%q, want %q", k, p.env[k], v)
					}
				}
				// The daemon's pipe directory is mounted where the env says.
				if !strings.Contains(out, "/run/gpumux/mps directory") {
					t.Errorf("task did not see the MPS pipe directory mounted:\n%s", out)
				}
			} else if _, ok := p.env["CUDA_MPS_PIPE_DIRECTORY"]; ok {
				t.Errorf("a %s task got MPS settings", tc.job)
			}
			// A time-slice replica gets the limiter (limit = "cap", the
			// default): its library and its limits, read-only.
			if tc.job == "timeslice" {
				for _, want := range []string{"GPUMUX_LIMITER_LIMITS=/run/gpumux/limiter/limits", "GPUMUX_LIMITER_STATE=/run/gpumux/limiter/state",
					"share=" + id + "\n", "policy=cap\n", "memory_bytes=37687918592\n", "compute_percent=25\n", "libcuda.so.1\nlibnvidia-ml.so.1"} {
					if !strings.Contains(out, want) {
						t.Errorf("the time-slice task's output lacks %q:\n%s", want, out)
					}
				}
			} else if _, ok := p.env["GPUMUX_LIMITER_LIMITS"]; ok {
				t.Errorf("a %s task got the limiter", tc.job)
			}
			// The (simulated) driver's files, read-only, at their paths;
			// a limited replica's limiter loads the real libraries there.
			lib := "/" + sim.LibDir()
			for _, f := range []string{lib + "/libcuda.so.1", lib + "/libnvidia-ml.so.1", "/usr/bin/nvidia-smi"} {
				if ro, ok := p.mounts[f]; !ok || !ro {
					t.Errorf("task's %s: mounted %v, read-only %v; want the driver's file read-only", f, ok, ro)
				}
			}
			if tc.job == "timeslice" && p.env["GPUMUX_LIMITER_CUDA"] != lib+"/libcuda.so.1" {
				t.Errorf("the time-slice task's GPUMUX_LIMITER_CUDA=%q, want the driver's %s/libcuda.so.1", p.env["GPUMUX_LIMITER_CUDA"], lib)
			}
			if err := a.StopJob(ctx, jobID, true); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("too big stays unplaced", func(t *testing.T) {
		jobID, err := a.RunJob(ctx, readJob(t, "too-big"))
		if err != nil {
			t.Fatal(err)
		}
		fails, err := a.PlacementFailures(ctx, jobID)
		if err != nil {
			t.Fatal(err)
		}
		reason := nomadagent.FormatPlacementFailures(fails)
		t.Logf("Nomad's reason:\n%s", reason)
		if len(fails) == 0 || !strings.Contains(reason, "devices") {
			t.Fatalf("want a placement failure naming devices, got %q", reason)
		}
		if allocs, err := a.Allocs(ctx, jobID); err != nil || len(allocs) != 0 {
			t.Fatalf("an unplaceable job got allocations %v (%v)", allocs, err)
		}
		if err := a.StopJob(ctx, jobID, true); err != nil {
			t.Fatal(err)
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
