package node_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
	"github.com/gpumux/gpumux/timeslice"
)

// TestEditsLimitedReplica: through the node core, a limited replica's task
// gets the device edits and the limiter (the configured limiter_dir, the
// replica's limits and accounting under the node's state_dir); a task gets
// one limited replica and nothing else; the replica is unhealthy while the
// limiter is missing.
func TestEditsLimitedReplica(t *testing.T) {
	n := openDGX(t,
		share.GPURule{Match: "2", Mechanism: share.TimeSlice, ReplicaSizes: []string{"50%", "25%", "25%"}},
		share.GPURule{Match: "3", Mechanism: share.TimeSlice, Replicas: 2, Limit: share.LimitOff},
		share.GPURule{Match: "7", Mechanism: share.TimeSlice, Replicas: 2}) // in MIG mode: its instances are split
	c, inv := dgxCatalog(t, n)
	cfg := n.Config()
	g2, g3, g4 := inv.GPUs[2].UUID, inv.GPUs[3].UUID, inv.GPUs[4].UUID
	big := bigInstance(t, inv)

	groups := groupsByName(c)
	for name, iso := range map[string]share.Isolation{
		"H200-timeslice-50pct": share.Soft, "H200-timeslice-25pct": share.Soft, "H200-timeslice-2x-off": share.None,
		"H200-timeslice-3g.71gb-2x": share.Soft, "H200-timeslice-2g.35gb-2x": share.Soft,
	} {
		if g, ok := groups[name]; !ok || g.Attrs.MemoryIsolation != iso {
			t.Errorf("group %s: present %v, memory_isolation %q, want %q (groups %v)", name, ok, g.Attrs.MemoryIsolation, iso, groupNamesOf(c))
		}
	}

	edits := func(ids ...string) (share.Edits, error) {
		t.Helper()
		shares, err := c.Lookup(ids...)
		if err != nil {
			t.Fatal(err)
		}
		return n.Edits(shares)
	}
	id := g2 + "/timeslice/1" // a 25% replica
	e, err := edits(id)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.StateDir, "timeslice", g2, "1")
	wantEnv := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": g2, "GPUMUX_SHARES": id,
		"LD_LIBRARY_PATH": timeslice.LibMount, "GPUMUX_LIMITER_LIMITS": timeslice.LimitsMount, "GPUMUX_LIMITER_STATE": timeslice.StateMount,
		"GPUMUX_LIMITER_NODE": timeslice.NodeMount,
		// The real libraries behind the limiter's: the driver's, mounted.
		"GPUMUX_LIMITER_CUDA": driverfiles.ContainerLibDir + "/libcuda.so.1",
		"GPUMUX_LIMITER_NVML": driverfiles.ContainerLibDir + "/libnvidia-ml.so.1",
	}
	if fmt.Sprint(e.Env) != fmt.Sprint(wantEnv) {
		t.Errorf("env\n got %v\nwant %v", e.Env, wantEnv)
	}
	wantMounts := []share.Mount{
		{HostPath: cfg.LimiterDir, ContainerPath: "/run/gpumux/limiter/lib", ReadOnly: true},
		{HostPath: filepath.Join(dir, "state"), ContainerPath: "/run/gpumux/limiter/state"},
		{HostPath: filepath.Join(dir, "limits"), ContainerPath: "/run/gpumux/limiter/limits", ReadOnly: true},
		{HostPath: filepath.Join(cfg.StateDir, "timeslice", g2, "node"), ContainerPath: "/run/gpumux/limiter/node"},
	}
	if !slices.Equal(withoutDriver(n, e.Mounts), wantMounts) {
		t.Errorf("mounts\n got %+v\nwant the driver's and %+v", e.Mounts, wantMounts)
	}
	if len(e.DeviceNodes) != 4 || e.DeviceNodes[3].ContainerPath != "/dev/nvidia2" {
		t.Errorf("device nodes %+v", e.DeviceNodes)
	}
	b, err := os.ReadFile(filepath.Join(dir, "limits"))
	if want := fmt.Sprintf("version=1\nshare=%s\nmemory_bytes=%d\ncompute_percent=25\npolicy=cap\n", id, uint64(143771*25/100)<<20); err != nil || string(b) != want {
		t.Errorf("limits file %q (%v), want %q", b, err, want)
	}
	// The CDI form: the limiter and the limits read-only, the accounting not.
	ce := node.CDIEdits(share.Edits{Mounts: withoutDriver(n, e.Mounts)})
	for i, want := range []string{"rbind,nosuid,nodev,ro", "rbind,nosuid,nodev", "rbind,nosuid,nodev,ro", "rbind,nosuid,nodev"} {
		if got := strings.Join(ce.Mounts[i].Options, ","); got != want {
			t.Errorf("CDI mount %s: options %s, want %s", ce.Mounts[i].ContainerPath, got, want)
		}
	}

	// A replica of a MIG instance: the instance's edits, and the limiter
	// under the instance's UUID.
	migID := big.UUID + "/timeslice/0"
	if e, err := edits(migID); err != nil {
		t.Error(err)
	} else if m := withoutDriver(n, e.Mounts); e.Env["CUDA_VISIBLE_DEVICES"] != big.UUID || e.Env["LD_LIBRARY_PATH"] != timeslice.LibMount || len(m) != 4 ||
		m[2].HostPath != filepath.Join(cfg.StateDir, "timeslice", big.UUID, "0", "limits") || len(e.DeviceNodes) != 6 {
		t.Errorf("MIG replica %s: %+v", migID, e)
	}

	// What a task may not hold with a limited replica.
	for _, tc := range []struct {
		name string
		ids  []string
		want string
	}{
		{"two limited replicas", []string{g2 + "/timeslice/1", g2 + "/timeslice/2"}, "a limited time-slice replica is alone in its task"},
		{"limited replicas of a GPU and of a MIG instance", []string{g2 + "/timeslice/0", migID}, "a limited time-slice replica is alone in its task"},
		{"a limited replica and a whole GPU", []string{g2 + "/timeslice/0", g4}, "alone in its task"},
		{"a whole GPU and a limited replica", []string{g4, g2 + "/timeslice/0"}, "alone in its task"},
	} {
		if e, err := edits(tc.ids...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (edits %+v), want an error containing %q", tc.name, err, e, tc.want)
		}
	}
	// limit = "off": as before the limiter.
	for _, ids := range [][]string{{g3 + "/timeslice/0", g3 + "/timeslice/1"}, {g3 + "/timeslice/1", g4}} {
		if e, err := edits(ids...); err != nil || len(withoutDriver(n, e.Mounts)) != 0 || e.Env["LD_LIBRARY_PATH"] != "" || e.Env[timeslice.EnvCUDA] != "" {
			t.Errorf("unlimited %v: %v, edits %+v", ids, err, e)
		}
	}

	// Health follows the limiter's library, with no restart.
	shares, _ := c.Lookup(id, g3+"/timeslice/0")
	limited, unlimited := shares[0], shares[1]
	if ok, why := n.Health(limited); !ok {
		t.Errorf("limited replica with the limiter: %s", why)
	}
	lib := filepath.Join(cfg.LimiterDir, timeslice.Lib)
	if err := os.Rename(lib, lib+".away"); err != nil {
		t.Fatal(err)
	}
	if ok, why := n.Health(limited); ok || !strings.Contains(why, lib) {
		t.Errorf("limited replica without the limiter: healthy %v, %q; want the reason to name %s", ok, why, lib)
	}
	if ok, why := n.Health(unlimited); !ok {
		t.Errorf("unlimited replica without the limiter: %s", why)
	}
	if _, err := edits(id); err == nil || !strings.Contains(err.Error(), lib) {
		t.Errorf("Edits without the limiter: %v", err)
	}
	if err := os.Rename(lib+".away", lib); err != nil {
		t.Fatal(err)
	}
	if ok, why := n.Health(limited); !ok {
		t.Errorf("limited replica once the limiter is back: %s", why)
	}
}

// TestLimiterDirDefault: with the default limiter_dir not installed (and
// no limiter next to the test binary) a limited replica is unhealthy, and
// the reason names the default's library.
func TestLimiterDirDefault(t *testing.T) {
	if _, err := os.Stat(nodeconfig.DefaultLimiterDir); err == nil {
		t.Skipf("%s is installed on this machine", nodeconfig.DefaultLimiterDir)
	}
	n, err := node.Open(&nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), LimiterDir: nodeconfig.DefaultLimiterDir,
		GPUs: []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := n.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g := groupsByName(c)["H200-timeslice-2x"]
	if len(g.Shares) != 2 {
		t.Fatalf("groups %v", groupNamesOf(c))
	}
	want := filepath.Join(nodeconfig.DefaultLimiterDir, timeslice.Lib)
	if ok, why := n.Health(g.Shares[0]); ok || !strings.Contains(why, want) {
		t.Errorf("healthy %v, %q; want unhealthy naming %s", ok, why, want)
	}
}

// envLimiterChild, set, makes TestLimiterDirNextToExecutable the child the
// parent runs: its value is the limiter directory the child must find.
const envLimiterChild = "GPUMUX_TEST_LIMITER_DIR"

// TestLimiterDirNextToExecutable: when the default limiter_dir is not
// installed, the node takes a "limiter" directory next to the running
// program (bin/gpumux-runtime beside bin/limiter) or one directory up
// (bin/plugins/nomad-device-gpumux). The test binary is run again from
// such places.
func TestLimiterDirNextToExecutable(t *testing.T) {
	if want := os.Getenv(envLimiterChild); want != "" {
		limiterChild(t, want)
		return
	}
	if _, err := os.Stat(nodeconfig.DefaultLimiterDir); err == nil {
		t.Skipf("%s is installed on this machine: it wins", nodeconfig.DefaultLimiterDir)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, exe string }{
		{"next to it", "bin/node.test"},
		{"one up", "bin/plugins/node.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			limiter := filepath.Join(root, "bin", "limiter")
			if err := os.MkdirAll(limiter, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(limiter, timeslice.Lib), []byte("stand-in"), 0o644); err != nil {
				t.Fatal(err)
			}
			exe := filepath.Join(root, tc.exe)
			linkOrCopy(t, self, exe)
			cmd := exec.Command(exe, "-test.run", "^TestLimiterDirNextToExecutable$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), envLimiterChild+"="+limiter)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestLimiterDirNextToExecutable") {
				t.Errorf("%s run from %s: %v\n%s", filepath.Base(self), exe, err, out)
			}
		})
	}
}

// limiterChild opens a node with the default limiter_dir and checks that a
// replica's edits mount want.
func limiterChild(t *testing.T, want string) {
	n, err := node.Open(&nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), LimiterDir: nodeconfig.DefaultLimiterDir,
		GPUs: []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := n.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := groupsByName(c)["H200-timeslice-2x"].Shares[1]
	if ok, why := n.Health(s); !ok {
		t.Errorf("replica unhealthy: %s", why)
	}
	e, err := n.Edits([]share.Share{s})
	if err != nil {
		t.Fatal(err)
	}
	if m := withoutDriver(n, e.Mounts); len(m) == 0 || m[0].HostPath != want || m[0].ContainerPath != timeslice.LibMount {
		t.Errorf("mounts %+v, want %s at %s after the driver's", e.Mounts, want, timeslice.LibMount)
	}
}

// linkOrCopy puts the program src at dst: a hard link where it can, a copy
// where not (another file system).
func linkOrCopy(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Link(src, dst) == nil {
		return
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("%s is not a program: %v", dst, err)
	}
}
