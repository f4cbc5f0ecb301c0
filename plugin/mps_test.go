package plugin_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/nodeconfig"

	"github.com/hashicorp/nomad/plugins/device"
)

const mpsConfig = `
simulate           = "dgxh200"
state_dir          = "%s"
fingerprint_period = "1s"
mps_control_binary = "%s"
gpu {
  match     = "4"
  mechanism = "mps"
  shares    = 4
}
gpu {
  match       = "5"
  mechanism   = "mps"
  share_sizes = ["50%%", "25%%", "25%%"]
}
`

func startMPSPlugin(t *testing.T) (device.DevicePlugin, string, <-chan *device.FingerprintResponse, []*device.DeviceGroup) {
	t.Helper()
	return startMPSPluginWith(t, fakeMPS(t))
}

func startMPSPluginWith(t *testing.T, control string) (device.DevicePlugin, string, <-chan *device.FingerprintResponse, []*device.DeviceGroup) {
	t.Helper()
	stateDir := shortTempDir(t) // MPS sockets live under it: unix socket paths are short
	t.Cleanup(func() { killDaemons(t, stateDir) })
	p := dialPlugin(t)
	cfg := strings.Replace(strings.Replace(mpsConfig, "%s", stateDir, 1), "%s", control, 1)
	ch, groups, _ := fingerprintWith(t, p, strings.ReplaceAll(cfg, "%%", "%"))
	return p, stateDir, ch, groups
}

// killDaemons ends every stand-in MPS daemon under stateDir: the plugin
// leaves them running on purpose, a test must not.
func killDaemons(t *testing.T, stateDir string) {
	pids, _ := filepath.Glob(filepath.Join(stateDir, "mps", "*", "pipe", "nvidia-cuda-mps-control.pid"))
	for _, f := range pids {
		if b, err := os.ReadFile(f); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

func TestMPSShares(t *testing.T) {
	p, stateDir, _, groups := startMPSPlugin(t)
	byName := groupsByName(groups)
	for name, want := range map[string]struct {
		n     int
		attrs map[string]string
	}{
		"H200-mps-25pct": {6, map[string]string{"mechanism": "mps", "memory": "35942 MiB", "compute_percent": "25", "sm_count": "32", "memory_isolation": "hard", "fault_isolation": "false"}},
		"H200-mps-50pct": {1, map[string]string{"mechanism": "mps", "memory": "71885 MiB", "compute_percent": "50", "sm_count": "66"}},
	} {
		g := byName[name]
		if g == nil || len(g.Devices) != want.n {
			t.Fatalf("group %s: %+v (groups %v)", name, g, names(groups))
		}
		for k, v := range want.attrs {
			if got := attrString(g.Attributes[k]); got != v {
				t.Errorf("%s: %s = %s, want %s", name, k, got, v)
			}
		}
		for _, d := range g.Devices {
			if !d.Healthy {
				t.Errorf("%s: %s unhealthy: %s", name, d.ID, d.HealthDesc)
			}
		}
	}
	id := byName["H200-mps-50pct"].Devices[0].ID
	r, err := p.Reserve([]string{id})
	if err != nil {
		t.Fatal(err)
	}
	gpuUUID := strings.SplitN(id, "/", 2)[0]
	for k, v := range map[string]string{
		"CUDA_MPS_PIPE_DIRECTORY":           "/run/gpumux/mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=71885M",
		"NVIDIA_VISIBLE_DEVICES":            gpuUUID,
		"GPUMUX_SHARES":                     id,
	} {
		if r.Envs[k] != v {
			t.Errorf("env %s = %q, want %q", k, r.Envs[k], v)
		}
	}
	pipe := filepath.Join(stateDir, "mps", gpuUUID, "pipe")
	if m := withoutDriver(r.Mounts, stateDir); len(m) != 1 || m[0].HostPath != pipe || m[0].TaskPath != "/run/gpumux/mps" {
		t.Fatalf("mounts %+v, want the driver's and %s at /run/gpumux/mps", r.Mounts, pipe)
	}
	readPID(t, filepath.Join(pipe, "nvidia-cuda-mps-control.pid")) // a daemon serves the mounted directory
}

func TestMPSDaemonKilledIsReportedAndRestarted(t *testing.T) {
	// The plugin runs its own copy of the stand-in, which the test takes away
	// to keep the daemon down, then gives back.
	bin := filepath.Join(shortTempDir(t), "mpsctl")
	copyFile(t, fakeMPS(t), bin)
	p, stateDir, ch, groups := startMPSPluginWith(t, bin)
	id := groupsByName(groups)["H200-mps-50pct"].Devices[0].ID
	gpuUUID := strings.SplitN(id, "/", 2)[0]
	pidFile := filepath.Join(stateDir, "mps", gpuUUID, "pipe", "nvidia-cuda-mps-control.pid")
	oldPID := readPID(t, pidFile)

	if err := os.Rename(bin, bin+".away"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d := waitFor(t, ch, id, func(d *device.Device) bool { return !d.Healthy })
	t.Logf("while the daemon is down: %s", d.HealthDesc)
	if !strings.Contains(d.HealthDesc, gpuUUID) {
		t.Errorf("health description %q does not name the device", d.HealthDesc)
	}
	if _, err := p.Reserve([]string{id}); err == nil || !strings.Contains(err.Error(), id) {
		t.Errorf("Reserve of a share whose daemon is down: %v", err)
	}

	if err := os.Rename(bin+".away", bin); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, id, func(d *device.Device) bool { return d.Healthy })
	if newPID := readPID(t, pidFile); newPID == oldPID {
		t.Errorf("healthy again with the killed daemon's pid %d", oldPID)
	}
	if _, err := p.Reserve([]string{id}); err != nil {
		t.Errorf("Reserve after the restart: %v", err)
	}
}

// waitFor reads fingerprints until share id satisfies ok.
func waitFor(t *testing.T, ch <-chan *device.FingerprintResponse, id string, ok func(*device.Device) bool) *device.Device {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case r := <-ch:
			if d := findDevice(r.Devices, id); d != nil && ok(d) {
				return d
			}
		case <-deadline:
			t.Fatalf("share %s never reached the expected health", id)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// readPID waits for a control daemon's pid file (a daemonising process
// writes it just after it starts answering) and returns the pid.
func readPID(t *testing.T, path string) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "gmx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestLongStateDirIsRefusedForMPS(t *testing.T) {
	long := "/var/lib/" + strings.Repeat("x", 30) // 39 bytes: one too many
	cfg := strings.Replace(strings.Replace(mpsConfig, "%s", long, 1), "%s", fakeMPS(t), 1)
	_, err := nodeconfig.ParseConfig([]byte(strings.ReplaceAll(cfg, "%%", "%")))
	if err == nil || !strings.Contains(err.Error(), "too long for MPS") || !strings.Contains(err.Error(), "at most 38 bytes") {
		t.Fatalf("want a clear error about the socket path, got %v", err)
	}
}

func findDevice(groups []*device.DeviceGroup, id string) *device.Device {
	for _, g := range groups {
		for _, d := range g.Devices {
			if d.ID == id {
				return d
			}
		}
	}
	return nil
}

func TestMPSOnMIG(t *testing.T) {
	stateDir := shortTempDir(t)
	t.Cleanup(func() { killDaemons(t, stateDir) })
	p := dialPlugin(t)
	cfg := `simulate = "dgxh200"
state_dir = "` + stateDir + `"
mps_control_binary = "` + fakeMPS(t) + `"
gpu {
  match     = "6"
  mechanism = "mps"
  shares    = 2
  mig_devices {
    "3g.71gb" = 2
  }
}`
	_, groups, _ := fingerprintWith(t, p, cfg)
	g := groupsByName(groups)["H200-mps-3g.71gb-50pct"]
	if g == nil || len(g.Devices) != 4 {
		t.Fatalf("groups %v: want 4 MPS shares of two 3g.71gb instances", names(groups))
	}
	daemons, _ := filepath.Glob(filepath.Join(stateDir, "mps", "MIG-*", "pipe"))
	if len(daemons) != 2 {
		t.Errorf("MPS pipe directories %v: want one per MIG instance", daemons)
	}
	res, err := p.Reserve([]string{g.Devices[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	mig := strings.SplitN(g.Devices[0].ID, "/", 2)[0]
	if res.Envs["CUDA_VISIBLE_DEVICES"] != mig || res.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" || withoutDriver(res.Mounts, stateDir)[0].HostPath != filepath.Join(stateDir, "mps", mig, "pipe") {
		t.Errorf("reservation %+v %+v", res.Envs, res.Mounts)
	}
	readPID(t, filepath.Join(stateDir, "mps", mig, "pipe", "nvidia-cuda-mps-control.pid"))
}
