//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/nomadagent"
	"github.com/gpumux/gpumux/gpu"
)

// simulatedUUIDs creates the simulated dgxh200 in a new state dir and returns
// the dir and its GPUs' UUIDs, which an operator reads with nvidia-smi -L to
// write ignored_gpu_ids.
func simulatedUUIDs(t *testing.T) (string, []string) {
	t.Helper()
	stateDir, err := os.MkdirTemp("", "gmx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	h, err := gpu.OpenSimulated("dgxh200", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	inv, err := h.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	return stateDir, uuids
}

// TestNomadDeviceNvidiaDropIn runs a node the way a nomad-device-nvidia user
// does after swapping plugins: the body of that plugin's block (Nomad's
// documentation) under gpumux's label, on a node of whole GPUs, with
// group_names = "nomad-device-nvidia"; a job written for that plugin places
// unchanged, never on an ignored GPU, and the node's stats carry its names.
// Then enabled = false: Nomad reports the plugin not enabled and the node
// has no GPUs.
func TestNomadDeviceNvidiaDropIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	stateDir, uuids := simulatedUUIDs(t)
	ignored := []string{uuids[2], uuids[5]}
	upstream := fmt.Sprintf(`
    enabled            = true
    ignored_gpu_ids    = [%q, %q]
    fingerprint_period = "1m"
    # gpumux's own keys: NVML's names for whole GPUs; a simulated node.
    group_names = "nomad-device-nvidia"
    simulate    = "dgxh200"
    state_dir   = %q`, ignored[0], ignored[1], stateDir)
	a := nomadagent.Start(ctx, t,
		nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
		nomadagent.WithPluginConfig(upstream),
		nomadagent.WaitForDevice("nvidia", "gpu"))

	devs, err := a.NodeDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Name != "NVIDIA H200" {
		t.Fatalf("node devices %v, want one group nvidia/gpu/NVIDIA H200", devs)
	}
	var offered []string
	for _, inst := range devs[0].Instances {
		offered = append(offered, inst.ID)
	}
	if len(offered) != 6 || slices.Contains(offered, ignored[0]) || slices.Contains(offered, ignored[1]) {
		t.Fatalf("node offers %v; want the 6 GPUs not in ignored_gpu_ids %v", offered, ignored)
	}
	for name, want := range map[string]string{"memory": "143771 MiB", "bar1": "262144 MiB", "power": "700 W",
		"cores_clock": "1980 MHz", "memory_clock": "3201 MHz", "pci_bandwidth": "49152 MB/s", "driver_version": "580.159.04",
		"persistence_mode": "1", "display_state": "1"} {
		if got := devs[0].Attributes[name]; got == nil || got.String() != want {
			t.Errorf("attribute %s = %v, want %s", name, got, want)
		}
	}

	jobID, err := a.RunJob(ctx, readJob(t, "nomad-device-nvidia"))
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := a.WaitAllocs(ctx, jobID, "complete")
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 3 {
		t.Fatalf("%d allocations, want 3 (group any: 2, group named: 1)", len(allocs))
	}
	var got []string
	for _, al := range allocs {
		devices, err := a.AllocDevices(ctx, al.ID)
		if err != nil {
			t.Fatal(err)
		}
		ids := devices["probe"]
		if len(ids) != 1 || !slices.Contains(offered, ids[0]) || slices.Contains(got, ids[0]) {
			t.Fatalf("allocation %s (group %s) got %v; want one GPU of %v not given to another", al.ID, al.TaskGroup, ids, offered)
		}
		got = append(got, ids[0])
		out, err := a.TaskLogs(ctx, al.ID, "probe", "stdout")
		if err != nil {
			t.Fatal(err)
		}
		if p := parseProbe(out); p.env["NVIDIA_VISIBLE_DEVICES"] != ids[0] {
			t.Errorf("task of group %s saw NVIDIA_VISIBLE_DEVICES=%q, want %s (as nomad-device-nvidia sets it)", al.TaskGroup, p.env["NVIDIA_VISIBLE_DEVICES"], ids[0])
		}
	}

	// Nomad's client stats carry nomad-device-nvidia's names.
	waitFor(t, ctx, 30*time.Second, "device stats under nomad-device-nvidia's names", func() (bool, string) {
		hs, err := a.Client.Nodes().Stats(a.NodeID, nil)
		if err != nil {
			return false, err.Error()
		}
		for _, g := range hs.DeviceStats {
			for id, s := range g.InstanceStats {
				if s == nil || s.Stats == nil {
					continue
				}
				var missing []string
				for _, name := range []string{"Memory state", "GPU utilization", "Memory utilization", "Temperature", "Power usage", "BAR1 buffer state"} {
					if s.Stats.Attributes[name] == nil {
						missing = append(missing, name)
					}
				}
				return len(missing) == 0 && g.Name == "NVIDIA H200", fmt.Sprintf("group %s, %s lacks %v", g.Name, id, missing)
			}
		}
		return false, "no device stats yet"
	})
	if err := a.StopJob(ctx, jobID, true); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}

	t.Run("enabled = false", func(t *testing.T) {
		off := nomadagent.Start(ctx, t,
			nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
			nomadagent.WithPluginConfig(strings.Replace(upstream, "enabled            = true", "enabled            = false", 1)))
		waitFor(t, ctx, 60*time.Second, "Nomad to report the plugin not enabled", func() (bool, string) {
			return strings.Contains(off.Log(), "device is not enabled"), "not in the agent log yet"
		})
		for _, line := range strings.Split(off.Log(), "\n") {
			if strings.Contains(line, "device is not enabled") {
				t.Logf("Nomad's log: %s", line)
			}
		}
		devs, err := off.NodeDevices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) != 0 {
			t.Errorf("a disabled plugin's node has devices %v", devs)
		}
	})
}
