package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/nomadconf"
	"github.com/gpumux/gpumux/nodeconfig"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad/helper/pluginutils/hclspecutils"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	"github.com/hashicorp/nomad/plugins/shared/structs"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/plugin"
)

// dialPlugin serves a fresh plugin over go-plugin's in-process gRPC, as
// Nomad talks to it, and returns the client side.
func dialPlugin(t *testing.T, opts ...plugin.Option) device.DevicePlugin {
	t.Helper()
	logger := hclog.NewNullLogger()
	if os.Getenv("GPUMUX_TEST_LOG") != "" {
		logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: os.Stderr})
	}
	impl := plugin.New(logger, opts...)
	client, _ := goplugin.TestPluginGRPCConn(t, true, map[string]goplugin.Plugin{
		base.PluginTypeBase:   &base.PluginBase{Impl: impl},
		base.PluginTypeDevice: &device.PluginDevice{Impl: impl},
	})
	// Closing the client makes go-plugin stop the server itself; stopping it
	// here as well races with that shutdown.
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(base.PluginTypeDevice)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(device.DevicePlugin)
}

// encodeConfig turns HCL1 plugin config into what a Nomad agent sends.
func encodeConfig(t *testing.T, src string) []byte {
	t.Helper()
	if !strings.Contains(src, "runtime_socket") {
		src += "\nruntime_socket = \"\"\n" // not the node's: tests serve gpumux-runtime only where they say
	}
	b, err := nomadconf.Encode(src)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nodeConfig is the plugin config of most tests: its first %s is the
// state directory, its second the limiter directory (see pluginConfig).
const nodeConfig = `
simulate = "dgxh200"
state_dir = "%s"
limiter_dir = "%s"
fingerprint_period = "1s"
gpu {
  match     = "0-3"
  mechanism = "timeslice"
  replicas  = 4
}
gpu {
  match     = "6,7"
  mechanism = "mig"
  mig_devices {
    "3g.71gb" = 1
    "2g.35gb" = 2
  }
}
`

// fingerprintWith configures p with plugin config text and starts its
// fingerprint stream; it returns the stream, the first fingerprint's groups
// (which must carry no error) and a cancel that ends the stream (also run at
// cleanup).
func fingerprintWith(t *testing.T, p device.DevicePlugin, cfg string) (<-chan *device.FingerprintResponse, []*device.DeviceGroup, context.CancelFunc) {
	t.Helper()
	if err := p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, cfg)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			t.Fatal(r.Error)
		}
		return ch, r.Devices, cancel
	case <-time.After(60 * time.Second):
		t.Fatal("no fingerprint")
	}
	return nil, nil, nil
}

func startPlugin(t *testing.T, stateDir string) (device.DevicePlugin, []*device.DeviceGroup, context.CancelFunc, <-chan *device.FingerprintResponse) {
	t.Helper()
	p := dialPlugin(t)
	ch, groups, cancel := fingerprintWith(t, p, pluginConfig(nodeConfig, stateDir, stubLimiter(t)))
	return p, groups, cancel, ch
}

// pluginConfig fills a config like nodeConfig: the state directory, then
// the limiter directory.
func pluginConfig(cfg, stateDir, limiterDir string) string {
	return strings.Replace(strings.Replace(cfg, "%s", stateDir, 1), "%s", limiterDir, 1)
}

// stubLimiter returns a limiter_dir holding a stand-in for the limiter's
// libcuda.so.1: the plugin only checks that it is there (a limited replica
// is unhealthy without it) and mounts the directory.
func stubLimiter(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libcuda.so.1"), []byte("not a library: a test's stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// withoutDriver are the mounts of a reservation other than the simulated
// driver's files (under <state_dir>/sim).
func withoutDriver(mounts []*device.Mount, stateDir string) []device.Mount {
	var out []device.Mount
	for _, m := range mounts {
		if !strings.HasPrefix(m.HostPath, filepath.Join(stateDir, "sim")+"/") {
			out = append(out, *m)
		}
	}
	return out
}

func groupsByName(groups []*device.DeviceGroup) map[string]*device.DeviceGroup {
	m := map[string]*device.DeviceGroup{}
	for _, g := range groups {
		m[g.Name] = g
	}
	return m
}

func TestFingerprint(t *testing.T) {
	stateDir := t.TempDir()
	_, groups, _, _ := startPlugin(t, stateDir)
	byName := groupsByName(groups)
	tests := []struct {
		group string
		count int
		attrs map[string]string
	}{
		{"H200", 2, map[string]string{"mechanism": "exclusive", "memory": "143771 MiB", "compute_percent": "100", "sm_count": "132", "memory_isolation": "hard", "fault_isolation": "true", "cuda_compute_capability": "9.0", "driver_version": "580.159.04"}},
		{"H200-timeslice-4x", 16, map[string]string{"mechanism": "timeslice", "memory": "35942 MiB", "compute_percent": "25", "memory_isolation": "soft", "fault_isolation": "false"}}, // limited (limit = "cap")
		{"H200-mig-3g.71gb", 2, map[string]string{"mechanism": "mig", "mig_profile": "3g.71gb", "memory": "71424 MiB", "sm_count": "60", "compute_percent": "45", "memory_isolation": "hard", "fault_isolation": "true"}},
		{"H200-mig-2g.35gb", 4, map[string]string{"mechanism": "mig", "mig_profile": "2g.35gb", "memory": "33280 MiB", "sm_count": "32"}},
	}
	if len(byName) != len(tests) {
		t.Errorf("got groups %v", names(groups))
	}
	for _, tc := range tests {
		g := byName[tc.group]
		if g == nil {
			t.Errorf("no group %s in %v", tc.group, names(groups))
			continue
		}
		if g.Vendor != "nvidia" || g.Type != "gpu" || len(g.Devices) != tc.count {
			t.Errorf("%s: %s/%s with %d devices, want nvidia/gpu with %d", tc.group, g.Vendor, g.Type, len(g.Devices), tc.count)
		}
		for k, want := range tc.attrs {
			if got := attrString(g.Attributes[k]); got != want {
				t.Errorf("%s: attribute %s = %v, want %s", tc.group, k, got, want)
			}
		}
		for _, d := range g.Devices {
			if !d.Healthy || d.HwLocality == nil || d.HwLocality.PciBusID == "" {
				t.Errorf("%s: device %+v", tc.group, d)
			}
		}
	}
}

func TestIDsStableAcrossRestarts(t *testing.T) {
	stateDir := t.TempDir()
	_, first, cancel, _ := startPlugin(t, stateDir)
	cancel()
	_, second, _, _ := startPlugin(t, stateDir)
	if a, b := ids(first), ids(second); strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("device IDs changed across a restart:\n%v\n%v", a, b)
	}
}

func TestReserve(t *testing.T) {
	stateDir := t.TempDir()
	p, groups, _, _ := startPlugin(t, stateDir)
	byName := groupsByName(groups)
	migID := byName["H200-mig-3g.71gb"].Devices[0].ID
	r, err := p.Reserve([]string{migID})
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs["NVIDIA_VISIBLE_DEVICES"] != migID || r.Envs["CUDA_VISIBLE_DEVICES"] != migID || r.Envs["GPUMUX_SHARES"] != migID {
		t.Errorf("envs %v", r.Envs)
	}
	// The reservation is recorded for gpumux-runtime under a fresh token.
	token := r.Envs["GPUMUX_RESERVATION"]
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(token) {
		t.Errorf("GPUMUX_RESERVATION = %q, want 32 hex digits", token)
	}
	if again, err := p.Reserve([]string{migID}); err != nil || again.Envs["GPUMUX_RESERVATION"] == token {
		t.Errorf("a second Reserve reused the token (%v)", err)
	}
	var paths []string
	for _, d := range r.Devices {
		paths = append(paths, d.TaskPath)
		if !strings.HasSuffix(d.HostPath, strings.TrimPrefix(d.TaskPath, "/dev")) || d.CgroupPerms != "rw" {
			t.Errorf("device %+v", d)
		}
	}
	if len(paths) != 6 || !strings.HasPrefix(paths[4], "/dev/nvidia-caps/nvidia-cap") {
		t.Errorf("MIG reservation devices %v: want ctl, uvm, uvm-tools, the parent and two caps nodes", paths)
	}
	// The driver's files, read-only, at their paths under the (simulated)
	// driver root; a reservation carries no hook.
	driver := filepath.Join(stateDir, "sim", "dgxh200", "driver")
	lib := "/" + sim.LibDir()
	want := map[string]string{
		lib + "/libcuda.so.1":      filepath.Join(driver, lib, "libcuda.so.580.159.04"),
		lib + "/libnvidia-ml.so.1": filepath.Join(driver, lib, "libnvidia-ml.so.580.159.04"),
		"/usr/bin/nvidia-smi":      filepath.Join(driver, "usr/bin/nvidia-smi"),
	}
	for _, m := range r.Mounts {
		if host, ok := want[m.TaskPath]; ok && host == m.HostPath && m.ReadOnly {
			delete(want, m.TaskPath)
		}
	}
	if len(want) != 0 || len(withoutDriver(r.Mounts, stateDir)) != 0 {
		t.Errorf("MIG reservation mounts %v: lack %v read-only, or have more than the driver's files", r.Mounts, want)
	}

	ts := byName["H200-timeslice-4x"].Devices
	r, err = p.Reserve([]string{ts[1].ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Envs["CUDA_VISIBLE_DEVICES"]; ok || !strings.HasPrefix(r.Envs["NVIDIA_VISIBLE_DEVICES"], "GPU-") {
		t.Errorf("time-slice envs %v", r.Envs)
	}
	// Two limited replicas in one task: refused (the limiter holds a
	// process to one replica), saying what to do instead.
	if _, err := p.Reserve([]string{ts[0].ID, ts[4].ID}); err == nil || !strings.Contains(err.Error(), "a limited time-slice replica is alone in its task") || !strings.Contains(err.Error(), "ask for one larger replica") {
		t.Errorf("Reserve of two limited replicas: %v", err)
	}

	_, err = p.Reserve([]string{ts[0].ID, "GPU-nonexistent", "MIG-stale"})
	if err == nil || !strings.Contains(err.Error(), "GPU-nonexistent, MIG-stale") {
		t.Errorf("Reserve of unknown IDs: %v", err)
	}
}

func TestXIDMarksSharesUnhealthy(t *testing.T) {
	stateDir := t.TempDir()
	p, groups, _, ch := startPlugin(t, stateDir)
	victim := groupsByName(groups)["H200"].Devices[0].ID // GPU 4 or 5
	node, err := sim.Open("dgxh200", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	idx := 4
	if !strings.Contains(victim, uuidOf(t, node, 4)) {
		idx = 5
	}
	if err := node.InjectXid(idx, 79); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-ch:
			for _, g := range r.Devices {
				for _, d := range g.Devices {
					if d.ID == victim && !d.Healthy {
						if !strings.Contains(d.HealthDesc, "XID 79") {
							t.Errorf("health description %q", d.HealthDesc)
						}
						_, err := p.Reserve([]string{victim})
						if err == nil || !strings.Contains(err.Error(), "XID 79") {
							t.Errorf("Reserve of an unhealthy share: %v", err)
						}
						return
					}
				}
			}
		case <-deadline:
			t.Fatal("the XID never made the share unhealthy")
		}
	}
}

func TestStats(t *testing.T) {
	p, groups, _, _ := startPlugin(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := p.Stats(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	found := 0
	for _, g := range r.Groups {
		for id, s := range g.InstanceStats {
			found++
			if s.Summary == nil || s.Summary.IntDenominatorVal == nil || *s.Summary.IntDenominatorVal == 0 || s.Summary.Unit != "MiB" {
				t.Errorf("%s: summary %+v", id, s.Summary)
			}
		}
	}
	if want := len(ids(groups)); found != want {
		t.Errorf("stats for %d instances, want %d", found, want)
	}
	cancel()
	for range ch { // closed after cancellation
	}
}

func TestFingerprintStopsOnCancel(t *testing.T) {
	_, _, cancel, ch := startPlugin(t, t.TempDir())
	cancel()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("fingerprint stream still open after cancel")
		}
	}
}

func TestNoDriverIsOneClearError(t *testing.T) {
	p := dialPlugin(t)
	if err := p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, `state_dir = "`+t.TempDir()+`"`)}); err != nil {
		t.Fatal(err)
	}
	ch, err := p.Fingerprint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Error == nil || !strings.Contains(r.Error.Error(), "NVIDIA driver not available") {
		t.Fatalf("want one clear no-driver error, got %+v", r)
	}
	if _, ok := <-ch; ok {
		t.Error("fingerprint stream stays open after a fatal error")
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		config string
		want   string
	}{
		{`simulate = "dgx9000"`, `simulate = "dgx9000": not a simulated node (valid: [dgxa100 dgxh100 dgxh200]`},
		{`fingerprint_period = "soon"`, `fingerprint_period = "soon"`},
		{"gpu {\n match = \"0\"\n mechanism = \"timeslice\"\n replicas = 1\n}", `gpu block 1 (match = "0"): replicas = 1`},
		{"gpu {\n match = \"0\"\n mechanism = \"remote\"\n}", `"remote" is not available`},
		{"gpu {\n match = \"0\"\n mechanism = \"mps\"\n share_sizes = [\"60%\", \"60%\"]\n}", `add up to 120%`},
		{"gpu {\n match = \"0\"\n mechanism = \"exclusive\"\n replica = 2\n}", `replica`},
		{"gpu {\n mechanism = \"exclusive\"\n}", `match`},
		{`driver_root = "run/nvidia/driver"`, `driver_root = "run/nvidia/driver": want a clean absolute path`},
		{`driver_root = "/run/nvidia/driver/"`, `driver_root = "/run/nvidia/driver/": want a clean absolute path`},
		{`runtime_socket = "runtime.sock"`, `runtime_socket = "runtime.sock": want a clean absolute path, e.g. "/run/gpumux/runtime.sock", or "" to serve none`},
	}
	for _, tc := range tests {
		_, err := nodeconfig.ParseConfig([]byte(tc.config))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v, want an error containing %q", tc.config, err, tc.want)
		}
	}
}

func TestParseConfigReadsAgentConfig(t *testing.T) {
	src, err := os.ReadFile("../examples/gpumux-plugin.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nodeconfig.ParseConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Simulate != "dgxh200" || len(cfg.GPUs) != 4 || cfg.GPUs[3].MIGDevices["2g.35gb"] != 2 || len(cfg.GPUs[2].ShareSizes) != 3 {
		t.Errorf("examples/gpumux-plugin.hcl parsed as %+v", cfg)
	}
	if _, err := nodeconfig.ParseConfig([]byte(`plugin "nomad-device-gpumux" {}`)); err != nil {
		t.Errorf("a plugin block without config: %v", err)
	}
}

func TestConfigSchemaIsValidHCLSpec(t *testing.T) {
	p := plugin.New(hclog.NewNullLogger())
	schema, err := p.ConfigSchema()
	if err != nil {
		t.Fatal(err)
	}
	if _, diags := hclspecutils.Convert(schema); diags.HasErrors() {
		t.Fatal(diags)
	}
	var _ *hclspec.Spec = schema
}

// attrString prints an attribute as a job author writes it: "9.0", "25",
// "true", "143771 MiB".
func attrString(a *structs.Attribute) string {
	switch {
	case a == nil:
		return "<missing>"
	case a.Int != nil && a.Unit != "":
		return fmt.Sprintf("%d %s", *a.Int, a.Unit)
	case a.Int != nil:
		return fmt.Sprint(*a.Int)
	case a.Bool != nil:
		return fmt.Sprint(*a.Bool)
	case a.String != nil:
		return *a.String
	}
	return a.GoString()
}

func names(groups []*device.DeviceGroup) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g.Name)
	}
	return out
}

func ids(groups []*device.DeviceGroup) []string {
	var out []string
	for _, g := range groups {
		for _, d := range g.Devices {
			out = append(out, d.ID)
		}
	}
	return out
}

func uuidOf(t *testing.T, n *sim.Node, index int) string {
	t.Helper()
	lib := n.NVML()
	lib.Init()
	defer lib.Shutdown()
	dev, _ := lib.DeviceGetHandleByIndex(index)
	u, _ := dev.GetUUID()
	return u
}

func TestMIGXIDMarksOnlyThatInstance(t *testing.T) {
	stateDir := t.TempDir()
	_, groups, _, ch := startPlugin(t, stateDir)
	node, err := sim.Open("dgxh200", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	// GPU 7's 3g.71gb instance sits at 4:4, which is GPU instance 2.
	if err := node.InjectMigXid(7, 2, 0, 94); err != nil {
		t.Fatal(err)
	}
	healthyBefore := 0
	for _, g := range groups {
		healthyBefore += len(g.Devices)
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-ch:
			var sick []*device.Device
			healthy := 0
			for _, g := range r.Devices {
				for _, d := range g.Devices {
					if d.Healthy {
						healthy++
					} else {
						sick = append(sick, d)
					}
				}
			}
			if len(sick) == 0 {
				continue
			}
			if len(sick) != 1 || healthy != healthyBefore-1 || !strings.Contains(sick[0].HealthDesc, "XID 94 on MIG GPU instance 2") {
				t.Fatalf("after a MIG XID: %d unhealthy (%+v), %d healthy of %d", len(sick), sick, healthy, healthyBefore)
			}
			if !strings.HasPrefix(sick[0].ID, "MIG-") {
				t.Errorf("unhealthy share %s is not the MIG instance", sick[0].ID)
			}
			return
		case <-deadline:
			t.Fatal("the MIG XID never made its instance unhealthy")
		}
	}
}

func TestPeriodicFingerprintSendsEverything(t *testing.T) {
	_, first, _, ch := startPlugin(t, t.TempDir()) // fingerprint_period = "1s"
	for i := 0; i < 2; i++ {
		select {
		case r := <-ch:
			if r.Error != nil {
				t.Fatal(r.Error)
			}
			if a, b := ids(first), ids(r.Devices); strings.Join(a, ",") != strings.Join(b, ",") {
				t.Fatalf("periodic fingerprint %d sent %d devices, the first sent %d", i+1, len(b), len(a))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no periodic fingerprint within 10s of a 1s period")
		}
	}
}

// flakyHost fails its inventory while broken is set.
type flakyHost struct {
	plugin.Host
	broken atomic.Bool
}

func (f *flakyHost) Inventory(ctx context.Context) (*gpu.Node, error) {
	if f.broken.Load() {
		return nil, errors.New("NVML: ERROR_GPU_IS_LOST")
	}
	return f.Host.Inventory(ctx)
}

func TestFailedRefreshKeepsDevicesUnhealthy(t *testing.T) {
	var host *flakyHost
	open := func(cfg *nodeconfig.Config) (plugin.Host, error) {
		h, err := gpu.OpenSimulated(cfg.Simulate, cfg.StateDir)
		host = &flakyHost{Host: h}
		return host, err
	}
	p := plugin.New(hclog.NewNullLogger(), plugin.WithOpen(open))
	cfg := `simulate = "dgxh200"` + "\n" + `fingerprint_period = "1s"` + "\n" + `state_dir = "` + t.TempDir() + `"`
	if err := p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, cfg)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() *device.FingerprintResponse {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatal("fingerprint stream closed")
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no fingerprint")
		}
		return nil
	}
	first := next()
	if first.Error != nil || len(ids(first.Devices)) != 8 {
		t.Fatalf("first fingerprint %+v", first)
	}
	host.broken.Store(true)
	r := next()
	if r.Error != nil {
		t.Fatalf("a failed refresh after a good one sent an error, which makes Nomad stop the plugin: %v", r.Error)
	}
	for _, g := range r.Devices {
		for _, d := range g.Devices {
			if d.Healthy || !strings.Contains(d.HealthDesc, "ERROR_GPU_IS_LOST") {
				t.Fatalf("device %s during the failure: healthy %v, %q", d.ID, d.Healthy, d.HealthDesc)
			}
		}
	}
	host.broken.Store(false)
	for r = next(); !r.Devices[0].Devices[0].Healthy; r = next() {
	}
	if len(ids(r.Devices)) != 8 {
		t.Errorf("after recovery: %v", ids(r.Devices))
	}
}

// TestFingerprintFollowsLayoutChanges changes a GPU's MIG layout behind the
// running plugin's back (as gpumux mig apply does) and checks the next
// fingerprints offer the new instances, with the old shares still there.
func TestFingerprintFollowsLayoutChanges(t *testing.T) {
	stateDir := t.TempDir()
	_, first, _, ch := startPlugin(t, stateDir) // fingerprint_period = "1s"
	if g := groupsByName(first)["H200-mig-1g.18gb"]; g != nil {
		t.Fatalf("1g.18gb offered before the change: %d", len(g.Devices))
	}
	h, err := gpu.OpenSimulated("dgxh200", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := mig.Apply(context.Background(), h, 5, map[string]int{"1g.18gb": 7}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case r := <-ch:
			byName := groupsByName(r.Devices)
			g := byName["H200-mig-1g.18gb"]
			if g == nil {
				continue
			}
			if len(g.Devices) != 7 || byName["H200"] == nil || len(byName["H200"].Devices) != 1 || len(byName["H200-mig-3g.71gb"].Devices) != 2 {
				t.Fatalf("after the change: %v", names(r.Devices))
			}
			return
		case <-deadline:
			t.Fatal("the new MIG instances were never offered")
		}
	}
}
