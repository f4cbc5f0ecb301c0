package plugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/plugin"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

var remoteSecret = pooltest.Secret

// startRemoteServer runs a real gpumux-remoted server on a fake backend with
// two 141 GiB "NVIDIA H200"s, on a TCP port of its own (addr, if given).
func startRemoteServer(t *testing.T, addr string) *pooltest.Server {
	t.Helper()
	return pooltest.Start(t, pooltest.Options{Addr: addr,
		Fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(141 << 30), fakecuda.WithName("NVIDIA H200")}})
}

// remoteNode writes the pool secret and an interposer directory and
// returns a remote block for them, with body appended.
func remoteNode(t *testing.T, body string) (block, interposerDir string) {
	t.Helper()
	dir := t.TempDir()
	key := pooltest.WriteSecret(t, dir)
	interposerDir = pooltest.WriteInterposer(t, dir)
	return fmt.Sprintf("remote {\n  token_file = %q\n  interposer_dir = %q\n%s\n}\n", key, interposerDir, body), interposerDir
}

// noDriver opens no GPUs, as on a node without the NVIDIA driver.
func noDriver(*nodeconfig.Config) (plugin.Host, error) {
	return nil, fmt.Errorf("%w: NVML init: ERROR_LIBRARY_NOT_FOUND", gpu.ErrNoDriver)
}

// dialPluginWith is dialPlugin with options.
func dialPluginWith(t *testing.T, opts ...plugin.Option) device.DevicePlugin {
	t.Helper()
	impl := plugin.New(hclog.NewNullLogger(), opts...)
	client, _ := goplugin.TestPluginGRPCConn(t, true, map[string]goplugin.Plugin{
		base.PluginTypeBase:   &base.PluginBase{Impl: impl},
		base.PluginTypeDevice: &device.PluginDevice{Impl: impl},
	})
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(base.PluginTypeDevice)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(device.DevicePlugin)
}

func TestRemoteFingerprint(t *testing.T) {
	srv := startRemoteServer(t, "127.0.0.1:0")
	block, _ := remoteNode(t, fmt.Sprintf("servers = [%q]", srv.Addr))
	tests := []struct {
		name   string
		open   plugin.OpenFunc
		config string
		groups map[string]int // group → shares
	}{
		{"a node without GPUs", noDriver, block, map[string]int{"H200-remote-4x": 8}},
		{"a GPU node", nil, `simulate = "dgxh200"` + "\n" + block, map[string]int{"H200-remote-4x": 8, "H200": 8}},
		{"two shares per GPU", noDriver, strings.Replace(block, "\n}", "\n  shares = 2\n}", 1), map[string]int{"H200-remote-2x": 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts []plugin.Option
			if tc.open != nil {
				opts = append(opts, plugin.WithOpen(tc.open))
			}
			p := dialPluginWith(t, opts...)
			_, groups, _ := fingerprintWith(t, p, tc.config+"\nstate_dir = \""+t.TempDir()+"\"")
			byName := groupsByName(groups)
			if len(byName) != len(tc.groups) {
				t.Errorf("groups %v, want %v", names(groups), tc.groups)
			}
			for name, n := range tc.groups {
				if g := byName[name]; g == nil || len(g.Devices) != n {
					t.Fatalf("group %s: %+v, want %d shares (groups %v)", name, g, n, names(groups))
				}
			}
			for name, g := range byName {
				if !strings.Contains(name, "-remote-") {
					continue
				}
				shares := len(g.Devices) / 2
				want := map[string]string{
					"mechanism": "remote", "memory": fmt.Sprintf("%d MiB", 141<<10/shares), "compute_percent": fmt.Sprint(100 / shares), "sm_count": "132",
					"memory_isolation": "hard", "fault_isolation": "false", "cuda_compute_capability": "9.0", "cuda_version": "12.8",
					"remote_addr": srv.Addr, "model": "NVIDIA H200", "driver_version": "<missing>",
				}
				for k, v := range want {
					if got := attrString(g.Attributes[k]); got != v {
						t.Errorf("%s: attribute %s = %s, want %s", name, k, got, v)
					}
				}
				if g.Vendor != "nvidia" || g.Type != "gpu" {
					t.Errorf("%s: %s/%s", name, g.Vendor, g.Type)
				}
				idPattern := regexp.MustCompile(`^GPU-[0-9a-f-]{36}/remote/[0-9]+$`)
				for _, d := range g.Devices {
					if !d.Healthy || !idPattern.MatchString(d.ID) || d.HwLocality != nil {
						t.Errorf("%s: device %+v", name, d)
					}
				}
			}
		})
	}
}

func TestRemoteReserve(t *testing.T) {
	srv := startRemoteServer(t, "127.0.0.1:0")
	block, interposerDir := remoteNode(t, fmt.Sprintf("servers = [%q]\n  token_ttl = \"2h\"", srv.Addr))
	p := dialPluginWith(t, plugin.WithOpen(noDriver))
	_, groups, _ := fingerprintWith(t, p, block+"\nstate_dir = \""+t.TempDir()+"\"")
	g := groupsByName(groups)["H200-remote-4x"]
	if g == nil {
		t.Fatalf("groups %v", names(groups))
	}
	// Shares by GPU: IDs are "<GPU UUID>/remote/<n>", two GPUs of four.
	byGPU := map[string][]string{}
	var gpus []string
	for _, d := range g.Devices {
		uuid := strings.SplitN(d.ID, "/", 2)[0]
		if byGPU[uuid] == nil {
			gpus = append(gpus, uuid)
		}
		byGPU[uuid] = append(byGPU[uuid], d.ID)
	}
	if len(gpus) != 2 {
		t.Fatalf("shares of %d GPUs, want 2: %v", len(gpus), byGPU)
	}
	share := uint64(141<<10/4) << 20 // bytes
	tests := []struct {
		name  string
		ids   []string
		quota uint64 // bytes; 0: Reserve fails
		want  string // error substring
	}{
		{"one share", byGPU[gpus[0]][:1], share, ""},
		{"two shares of one GPU add up", byGPU[gpus[1]][1:3], 2 * share, ""},
		{"shares of two GPUs", []string{byGPU[gpus[0]][1], byGPU[gpus[1]][0]}, 0, "must come from one GPU"},
		{"unknown share", []string{gpus[0] + "/remote/9"}, 0, "unknown share"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := p.Reserve(tc.ids)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Reserve(%v) = %v, want an error containing %q", tc.ids, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Devices) != 0 {
				t.Errorf("a remote share got device nodes %+v", r.Devices)
			}
			if len(r.Mounts) != 2 || r.Mounts[0].HostPath != interposerDir || r.Mounts[0].TaskPath != "/run/gpumux/remote" || !r.Mounts[0].ReadOnly ||
				r.Mounts[1].HostPath != filepath.Join(interposerDir, "nvidia-smi") || r.Mounts[1].TaskPath != "/usr/bin/nvidia-smi" || !r.Mounts[1].ReadOnly {
				for _, m := range r.Mounts {
					t.Errorf("mount %+v", *m)
				}
			}
			env := r.Envs
			if env["GPUMUX_REMOTE_ADDR"] != srv.Addr || env["LD_LIBRARY_PATH"] != "/run/gpumux/remote" || env["GPUMUX_SHARES"] != strings.Join(tc.ids, ",") ||
				env["GPUMUX_RESERVATION"] == "" {
				t.Errorf("envs %v", env)
			}
			if _, ok := env["NVIDIA_VISIBLE_DEVICES"]; ok {
				t.Errorf("NVIDIA_VISIBLE_DEVICES set for a remote share: %v", env)
			}
			c, err := token.Check(remoteSecret, env["GPUMUX_REMOTE_TOKEN"], time.Now())
			if err != nil {
				t.Fatal(err)
			}
			wantDev := 0
			if strings.HasPrefix(tc.ids[0], gpus[1]) {
				wantDev = 1
			}
			if c.Quota != tc.quota || c.Device != wantDev || !strings.HasPrefix(c.ID, "nomad-") ||
				c.Expires.Before(time.Now().Add(119*time.Minute)) || c.Expires.After(time.Now().Add(121*time.Minute)) {
				t.Errorf("token claims %+v, want quota %d on GPU %d, expiring in 2h", c, tc.quota, wantDev)
			}

			// The server admits the token, with its quota, on its GPU.
			cl, err := proto.Dial(context.Background(), "tcp", env["GPUMUX_REMOTE_ADDR"], proto.Hello{Token: env["GPUMUX_REMOTE_TOKEN"], Identity: "test"}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if cl.Welcome.Quota != tc.quota {
				t.Errorf("server's quota %d, want %d", cl.Welcome.Quota, tc.quota)
			}
			if r, err := cl.Init(0, 0); err != nil || r != proto.Success {
				t.Fatal(r, err)
			}
			uuid, r2, err := cl.DeviceGetUuidV2(0, 0)
			if err != nil || r2 != proto.Success || !strings.HasPrefix(tc.ids[0], formatUUID(uuid)) {
				t.Errorf("the token's client sees GPU %s, want the share's (%s): %v %v", formatUUID(uuid), tc.ids[0], r2, err)
			}
		})
	}
}

func formatUUID(u [16]byte) string {
	h := fmt.Sprintf("%x", u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// nextFingerprint waits for a fingerprint whose devices satisfy ok.
func nextFingerprint(t *testing.T, ch <-chan *device.FingerprintResponse, what string, ok func([]*device.DeviceGroup) bool) []*device.DeviceGroup {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r, open := <-ch:
			if !open {
				t.Fatal("fingerprint stream closed")
			}
			if r.Error != nil {
				t.Fatal(r.Error)
			}
			if ok(r.Devices) {
				return r.Devices
			}
		case <-deadline:
			t.Fatalf("no fingerprint with %s within 30s", what)
		}
	}
}

func allHealthy(groups []*device.DeviceGroup, want bool) bool {
	n := 0
	for _, g := range groups {
		for _, d := range g.Devices {
			if d.Healthy != want {
				return false
			}
			n++
		}
	}
	return n > 0
}

func TestRemoteServerDownAndBack(t *testing.T) {
	srv := startRemoteServer(t, "127.0.0.1:0")
	block, interposerDir := remoteNode(t, fmt.Sprintf("servers = [%q]", srv.Addr))
	p := dialPluginWith(t, plugin.WithOpen(noDriver))
	ch, first, _ := fingerprintWith(t, p, block+"\nstate_dir = \""+t.TempDir()+"\"\nfingerprint_period = \"1s\"")
	ids0 := ids(first)

	srv.Stop()
	down := nextFingerprint(t, ch, "unhealthy shares", func(g []*device.DeviceGroup) bool { return allHealthy(g, false) })
	if strings.Join(ids(down), ",") != strings.Join(ids0, ",") {
		t.Errorf("the shares of a server that went down changed: %v, was %v", ids(down), ids0)
	}
	d := down[0].Devices[0]
	if !strings.Contains(d.HealthDesc, "remote server "+srv.Addr) || !strings.Contains(d.HealthDesc, "connection refused") {
		t.Errorf("health %q", d.HealthDesc)
	}
	if _, err := p.Reserve([]string{d.ID}); err == nil || !strings.Contains(err.Error(), "unhealthy") || !strings.Contains(err.Error(), srv.Addr) {
		t.Errorf("Reserve of a share whose server is down: %v", err)
	}

	startRemoteServer(t, srv.Addr)
	back := nextFingerprint(t, ch, "healthy shares again", func(g []*device.DeviceGroup) bool { return allHealthy(g, true) })
	if strings.Join(ids(back), ",") != strings.Join(ids0, ",") {
		t.Errorf("shares after the server came back: %v, were %v", ids(back), ids0)
	}
	if _, err := p.Reserve([]string{ids0[0]}); err != nil {
		t.Errorf("Reserve after the server came back: %v", err)
	}

	// Without the NVML library of remote shares, or the interposer, remote
	// shares cannot be used.
	os.Remove(filepath.Join(interposerDir, "libnvidia-ml.so.1"))
	noNVML := nextFingerprint(t, ch, "unhealthy shares", func(g []*device.DeviceGroup) bool { return allHealthy(g, false) })
	if desc := noNVML[0].Devices[0].HealthDesc; !strings.Contains(desc, "NVML library of remote shares "+interposerDir+"/libnvidia-ml.so.1") {
		t.Errorf("health without the NVML library: %q", desc)
	}
	pooltest.WriteInterposer(t, filepath.Dir(interposerDir))
	nextFingerprint(t, ch, "healthy shares again", func(g []*device.DeviceGroup) bool { return allHealthy(g, true) })
	os.Remove(filepath.Join(interposerDir, "libcuda.so.1"))
	gone := nextFingerprint(t, ch, "unhealthy shares", func(g []*device.DeviceGroup) bool { return allHealthy(g, false) })
	if desc := gone[0].Devices[0].HealthDesc; !strings.Contains(desc, "interposer "+interposerDir+"/libcuda.so.1") {
		t.Errorf("health without the interposer: %q", desc)
	}
}

func TestRemoteStartErrors(t *testing.T) {
	block, _ := remoteNode(t, `servers = ["127.0.0.1:1"]`)
	for _, tc := range []struct {
		name, config string
		open         plugin.OpenFunc
		want         string
	}{
		{"secret missing", strings.Replace(block, "remote.key", "missing.key", 1), noDriver, "remote block: token_file: token secret: stat"},
		{"no driver and no remote block", "", noDriver, "NVIDIA driver not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := dialPluginWith(t, plugin.WithOpen(tc.open))
			if err := p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, tc.config+"\nstate_dir = \""+t.TempDir()+"\"")}); err != nil {
				t.Fatal(err)
			}
			ch, err := p.Fingerprint(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if r := <-ch; r.Error == nil || !strings.Contains(r.Error.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %+v", tc.want, r)
			}
		})
	}
	// A server that cannot be reached is not fatal: the node offers nothing yet.
	p := dialPluginWith(t, plugin.WithOpen(noDriver))
	if _, groups, _ := fingerprintWith(t, p, block+"\nstate_dir = \""+t.TempDir()+"\""); len(groups) != 0 {
		t.Errorf("groups %v", names(groups))
	}
}
