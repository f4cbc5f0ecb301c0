package plugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"

	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/plugin"
)

// simUUIDs creates the simulated dgxh200 under stateDir and returns its GPUs'
// UUIDs, as an operator reads them with nvidia-smi -L before writing
// ignored_gpu_ids.
func simUUIDs(t *testing.T, stateDir string) []string {
	t.Helper()
	node, err := sim.Open("dgxh200", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := 0; i < 8; i++ {
		out = append(out, uuidOf(t, node, i))
	}
	return out
}

// TestNomadDeviceNvidiaConfigBlock configures the plugin with the body of
// nomad-device-nvidia's plugin block (Nomad's documentation), and
// group_names = "nomad-device-nvidia": the node's whole GPUs are one group
// named as that plugin names it, with its attributes, less the ignored GPUs.
func TestNomadDeviceNvidiaConfigBlock(t *testing.T) {
	stateDir := t.TempDir()
	uuids := simUUIDs(t, stateDir)
	cfg := fmt.Sprintf(`
enabled            = true
ignored_gpu_ids    = [%q, %q]
fingerprint_period = "1m"
group_names        = "nomad-device-nvidia"
simulate           = "dgxh200"
state_dir          = %q
`, uuids[2], uuids[5], stateDir)
	_, groups, _ := fingerprintWith(t, dialPlugin(t), cfg)
	if len(groups) != 1 || groups[0].Name != "NVIDIA H200" || groups[0].Vendor != "nvidia" || groups[0].Type != "gpu" {
		t.Fatalf("groups %v, want one: nvidia/gpu/NVIDIA H200", names(groups))
	}
	got := ids(groups)
	want := slices.Concat(uuids[:2], uuids[3:5], uuids[6:])
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("offered %v, want every GPU but the ignored %s and %s: %v", got, uuids[2], uuids[5], want)
	}
	wantAttrs := map[string]string{
		"memory": "143771 MiB", "power": "700 W", "bar1": "262144 MiB", "driver_version": "580.159.04",
		"cores_clock": "1980 MHz", "memory_clock": "3201 MHz", "pci_bandwidth": "49152 MB/s",
		"display_state": "1", "persistence_mode": "1", "model": "NVIDIA H200", "mechanism": "exclusive",
	}
	for name, w := range wantAttrs {
		if a := attrString(groups[0].Attributes[name]); a != w {
			t.Errorf("attribute %s = %s, want %s", name, a, w)
		}
	}
}

// TestGroupNamesOfMIGInstances: under group_names = "nomad-device-nvidia" a
// MIG instance's group is named as NVML names the MIG device; the other
// mechanisms keep gpumux's names.
func TestGroupNamesOfMIGInstances(t *testing.T) {
	stateDir := t.TempDir()
	cfg := pluginConfig(nodeConfig, stateDir, stubLimiter(t)) + `group_names = "nomad-device-nvidia"` + "\n"
	_, groups, _ := fingerprintWith(t, dialPlugin(t), cfg)
	got := names(groups)
	slices.Sort(got)
	want := []string{"NVIDIA H200", "NVIDIA H200 MIG 2g.35gb", "NVIDIA H200 MIG 3g.71gb", "H200-timeslice-4x"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
}

// TestIgnoredMIGInstanceIsNotOffered: a MIG UUID in ignored_gpu_ids takes
// that instance out of the offer, and only it; the layout keeps it.
func TestIgnoredMIGInstanceIsNotOffered(t *testing.T) {
	stateDir, limiter := t.TempDir(), stubLimiter(t)
	_, groups, cancel := fingerprintWith(t, dialPlugin(t), pluginConfig(nodeConfig, stateDir, limiter))
	var migs []string
	for _, id := range ids(groups) {
		if strings.HasPrefix(id, "MIG-") {
			migs = append(migs, id)
		}
	}
	if len(migs) != 6 {
		t.Fatalf("the layout made MIG instances %v, want 6", migs)
	}
	cancel() // the next plugin is the node's agent
	waitUnlocked(t, stateDir)

	ignored := migs[0]
	cfg := pluginConfig(nodeConfig, stateDir, limiter) + fmt.Sprintf("ignored_gpu_ids = [%q]\n", ignored)
	_, again, _ := fingerprintWith(t, dialPlugin(t), cfg)
	var still []string
	for _, id := range ids(again) {
		if strings.HasPrefix(id, "MIG-") {
			still = append(still, id)
		}
	}
	if want := migs[1:]; len(still) != len(want) || slices.Contains(still, ignored) {
		t.Errorf("with %s ignored the plugin offers MIG instances %v, want %v", ignored, still, want)
	}
	if len(ids(again)) != len(ids(groups))-1 {
		t.Errorf("ignoring one MIG instance changed the offer from %d to %d shares", len(ids(groups)), len(ids(again)))
	}
}

// TestDisabledPluginOpensNothing: enabled = false, as with
// nomad-device-nvidia, makes Fingerprint, Stats and Reserve answer that the
// device is not enabled, and the GPUs are never opened.
func TestDisabledPluginOpensNothing(t *testing.T) {
	stateDir := t.TempDir()
	p := dialPlugin(t)
	cfg := fmt.Sprintf("enabled = false\nsimulate = \"dgxh200\"\nstate_dir = %q\n", stateDir)
	if err := p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, cfg)}); err != nil {
		t.Fatal(err)
	}
	notEnabled := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), device.ErrPluginDisabled.Error()) {
			t.Errorf("%s of a disabled plugin: %v, want %q", what, err, device.ErrPluginDisabled)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err == nil {
		r := <-ch // over gRPC the error arrives on the stream
		err = r.Error
		if len(r.Devices) > 0 {
			t.Errorf("a disabled plugin fingerprinted %v", names(r.Devices))
		}
	}
	notEnabled("Fingerprint", err)
	if sch, err := p.Stats(ctx, time.Second); err == nil {
		notEnabled("Stats", (<-sch).Error)
	} else {
		notEnabled("Stats", err)
	}
	_, err = p.Reserve([]string{"GPU-0"})
	notEnabled("Reserve", err)
	if _, err := os.Stat(filepath.Join(stateDir, "sim")); !os.IsNotExist(err) {
		t.Errorf("a disabled plugin opened the simulated node (%v)", err)
	}
}

// TestStatsUseNomadDeviceNvidiaNames: a whole GPU's stats carry
// nomad-device-nvidia's names and units.
func TestStatsUseNomadDeviceNvidiaNames(t *testing.T) {
	p, groups, _, _ := startPlugin(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Stats(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	whole := groupsByName(groups)["H200"].Devices[0].ID
	for _, g := range r.Groups {
		s, ok := g.InstanceStats[whole]
		if !ok {
			continue
		}
		want := map[string]string{
			plugin.StatMemory: "MiB", plugin.StatGPUUtilization: "%", plugin.StatMemoryUtilization: "%", plugin.StatEncoder: "%",
			plugin.StatDecoder: "%", plugin.StatTemperature: "C", plugin.StatPower: "W", plugin.StatBAR1: "MiB",
		}
		for name, unit := range want {
			v := s.Stats.Attributes[name]
			if v == nil || v.Unit != unit {
				t.Errorf("stat %q = %+v, want one in %s", name, v, unit)
			}
		}
		if len(s.Stats.Attributes) != len(want) {
			t.Errorf("stats %v, want exactly %v", keysOf(s.Stats.Attributes), keysOf(want))
		}
		if b := s.Stats.Attributes[plugin.StatBAR1]; b == nil || b.IntDenominatorVal == nil || *b.IntDenominatorVal != 262144 {
			t.Errorf("BAR1 stat %+v, want a total of 262144 MiB", b)
		}
		if pw := s.Stats.Attributes[plugin.StatPower]; pw == nil || pw.FloatDenominatorVal == nil || *pw.FloatDenominatorVal != 700 {
			t.Errorf("power stat %+v, want the 700 W limit as its denominator", pw)
		}
		return
	}
	t.Fatalf("no stats for the whole GPU %s", whole)
}

// waitUnlocked waits until no agent holds stateDir's lock: a cancelled
// fingerprint closes its node in the background.
func waitUnlocked(t *testing.T, stateDir string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, err := os.OpenFile(filepath.Join(stateDir, node.LockFile), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		f.Close() // releases the lock taken here
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled plugin still holds %s: %v", stateDir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
