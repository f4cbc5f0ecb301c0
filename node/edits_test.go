package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mps"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
	"github.com/gpumux/gpumux/remote/token"
	"github.com/gpumux/gpumux/share"
)

func TestEdits(t *testing.T) {
	// limit = "off": this test is about the device edits of shares, two
	// replicas in one task and a replica with a whole GPU among them, which
	// a limited replica refuses (TestEditsLimitedReplica).
	n := openDGX(t, share.GPURule{Match: "2", Mechanism: share.TimeSlice, Replicas: 2, Limit: share.LimitOff})
	c, inv := dgxCatalog(t, n)
	stateDir := n.Config().StateDir
	big := bigInstance(t, inv)
	ctl := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
	tests := []struct {
		name    string
		ids     []string
		env     map[string]string
		devices []string // container paths
	}{
		{
			name:    "whole GPU",
			ids:     []string{inv.GPUs[3].UUID},
			env:     map[string]string{"NVIDIA_VISIBLE_DEVICES": inv.GPUs[3].UUID, "GPUMUX_SHARES": inv.GPUs[3].UUID},
			devices: append(slices.Clone(ctl), "/dev/nvidia3"),
		},
		{
			name: "two replicas of one GPU",
			ids:  []string{inv.GPUs[2].UUID + "/timeslice/0", inv.GPUs[2].UUID + "/timeslice/1"},
			env: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": inv.GPUs[2].UUID,
				"GPUMUX_SHARES":          inv.GPUs[2].UUID + "/timeslice/0," + inv.GPUs[2].UUID + "/timeslice/1",
			},
			devices: append(slices.Clone(ctl), "/dev/nvidia2"),
		},
		{
			name: "a replica and a whole GPU",
			ids:  []string{inv.GPUs[2].UUID + "/timeslice/1", inv.GPUs[4].UUID},
			env: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": inv.GPUs[2].UUID + "," + inv.GPUs[4].UUID,
				"GPUMUX_SHARES":          inv.GPUs[2].UUID + "/timeslice/1," + inv.GPUs[4].UUID,
			},
			devices: append(slices.Clone(ctl), "/dev/nvidia2", "/dev/nvidia4"),
		},
		{
			name: "MIG instance",
			ids:  []string{big.UUID},
			env:  map[string]string{"NVIDIA_VISIBLE_DEVICES": big.UUID, "CUDA_VISIBLE_DEVICES": big.UUID, "GPUMUX_SHARES": big.UUID},
			devices: append(slices.Clone(ctl), "/dev/nvidia7",
				"/dev/nvidia-caps/nvidia-cap"+strconv.Itoa(big.GICapMinor), "/dev/nvidia-caps/nvidia-cap"+strconv.Itoa(big.CICapMinor)),
		},
		{
			name:    "the T4",
			ids:     []string{"GPU-t4"},
			env:     map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-t4", "GPUMUX_SHARES": "GPU-t4"},
			devices: append(slices.Clone(ctl), "/dev/nvidia8"),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shares, err := c.Lookup(tc.ids...)
			if err != nil {
				t.Fatal(err)
			}
			e, err := n.Edits(shares)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(e.Env) != fmt.Sprint(tc.env) {
				t.Errorf("env\n got %v\nwant %v", e.Env, tc.env)
			}
			var got []string
			for _, d := range e.DeviceNodes {
				got = append(got, d.ContainerPath)
				name := strings.TrimPrefix(d.ContainerPath, "/dev/")
				if d.HostPath != n.Host().DevicePath(name) || !strings.HasPrefix(d.HostPath, stateDir+"/") || d.Permissions != "rw" {
					t.Errorf("device %s: host path %s (want the simulated node's, under %s), permissions %q", d.ContainerPath, d.HostPath, stateDir, d.Permissions)
				}
			}
			if !slices.Equal(got, tc.devices) {
				t.Errorf("devices\n got %v\nwant %v", got, tc.devices)
			}
			if len(driverMounts(n, e.Mounts)) == 0 || len(withoutDriver(n, e.Mounts)) != 0 {
				t.Errorf("mounts %+v, want the driver's files only", e.Mounts)
			}
		})
	}
	// The simulated node's device nodes are there.
	for _, name := range []string{"nvidiactl", "nvidia3"} {
		if _, err := os.Stat(n.Host().DevicePath(name)); err != nil {
			t.Errorf("device node %s: %v", name, err)
		}
	}
	// The GPU instance and compute instance minors follow the driver's table.
	if want := 3 + 7*135 + big.GIID*9; big.GICapMinor != want || big.CICapMinor != want+1+big.CIID {
		t.Errorf("cap minors %d/%d, want %d/%d", big.GICapMinor, big.CICapMinor, want, want+1+big.CIID)
	}
	if _, err := n.Edits(nil); err == nil {
		t.Error("Edits of no shares: no error")
	}
}

func TestEditsMPS(t *testing.T) {
	n := openDGX(t,
		share.GPURule{Match: "4", Mechanism: share.MPS, Shares: 4},
		share.GPURule{Match: "5", Mechanism: share.MPS, ShareSizes: []string{"50%", "25%", "25%"}})
	c, inv := dgxCatalog(t, n)
	g4, g5 := inv.GPUs[4].UUID, inv.GPUs[5].UUID
	shares, err := c.Lookup(g4+"/mps/1", g4+"/mps/3")
	if err != nil {
		t.Fatal(err)
	}
	e, err := n.Edits(shares)
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]string{
		"NVIDIA_VISIBLE_DEVICES":            g4,
		"GPUMUX_SHARES":                     g4 + "/mps/1," + g4 + "/mps/3",
		"CUDA_MPS_PIPE_DIRECTORY":           "/run/gpumux/mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=71884M",
	}
	if fmt.Sprint(e.Env) != fmt.Sprint(wantEnv) {
		t.Errorf("env\n got %v\nwant %v", e.Env, wantEnv)
	}
	pipe := filepath.Join(n.Config().StateDir, "mps", g4, "pipe")
	if m := withoutDriver(n, e.Mounts); len(m) != 1 || m[0] != (share.Mount{HostPath: pipe, ContainerPath: mps.PipeMount}) {
		t.Errorf("mounts %+v, want the driver's files and %s at %s", e.Mounts, pipe, mps.PipeMount)
	}
	if len(e.DeviceNodes) != 4 || e.DeviceNodes[3].ContainerPath != "/dev/nvidia4" {
		t.Errorf("device nodes %+v", e.DeviceNodes)
	}

	// One task, two MPS daemons: refused, since a process talks to one server.
	two, _ := c.Lookup(g4+"/mps/0", g5+"/mps/1")
	if _, err := n.Edits(two); err == nil || !strings.Contains(err.Error(), "must come from one device") {
		t.Errorf("MPS shares of two GPUs in one task: %v", err)
	}
	// MPS with a whole GPU, in either order: refused.
	for _, ids := range [][]string{{g4 + "/mps/0", inv.GPUs[0].UUID}, {inv.GPUs[0].UUID, g4 + "/mps/0"}} {
		mixed, _ := c.Lookup(ids...)
		if _, err := n.Edits(mixed); err == nil || !strings.Contains(err.Error(), "mps shares cannot be combined with exclusive") {
			t.Errorf("MPS with an exclusive share %v: %v", ids, err)
		}
	}
}

// remoteNode opens a node whose config has a remote block naming one real
// server with two 16 GiB fake H200s, split in 4 shares each.
func remoteNode(t *testing.T, opts ...node.Option) (*node.Node, *pooltest.Server, string) {
	t.Helper()
	srv := pooltest.Start(t, pooltest.Options{Fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(16 << 30), fakecuda.WithName("NVIDIA H200")}})
	dir := t.TempDir()
	interposer := pooltest.WriteInterposer(t, dir)
	src := fmt.Sprintf("simulate = \"dgxh200\"\nstate_dir = %q\nremote {\n servers = [%q]\n token_file = %q\n interposer_dir = %q\n}\n",
		filepath.Join(dir, "state"), srv.Addr, pooltest.WriteSecret(t, dir), interposer)
	cfg, err := nodeconfig.ParseConfig([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(cfg, append([]node.Option{node.WithOpen(openDGXHost)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, srv, interposer
}

func TestEditsRemote(t *testing.T) {
	n, srv, interposer := remoteNode(t, node.WithIssuer("nomad"))
	c, _ := dgxCatalog(t, n)
	var remoteIDs []string
	var gpus []string
	for _, g := range c.Groups {
		if g.Mechanism != share.Remote {
			continue
		}
		if g.Name != "H200-remote-4x" || g.Attrs.MemoryMiB != 4096 || g.Attrs.RemoteAddr != srv.Addr || g.Spread != share.SpreadOneDevice {
			t.Errorf("remote group %s: %+v, spread %d", g.Name, g.Attrs, g.Spread)
		}
		for _, s := range g.Shares {
			remoteIDs = append(remoteIDs, s.ID)
			if !slices.Contains(gpus, s.GPU.UUID) {
				gpus = append(gpus, s.GPU.UUID)
			}
		}
	}
	if len(remoteIDs) != 8 || len(gpus) != 2 {
		t.Fatalf("remote shares %v of GPUs %v, want 4 of each of 2", remoteIDs, gpus)
	}
	two, err := c.Lookup(gpus[1]+"/remote/0", gpus[1]+"/remote/2")
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := n.Health(two[0]); !ok {
		t.Errorf("remote share unhealthy: %s", why)
	}
	e, err := n.Edits(two)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.Env[remote.EnvToken]
	want := map[string]string{
		share.EnvShares:      gpus[1] + "/remote/0," + gpus[1] + "/remote/2",
		remote.EnvAddr:       srv.Addr,
		remote.EnvToken:      tok,
		share.EnvLibraryPath: remote.Mount,
	}
	if fmt.Sprint(e.Env) != fmt.Sprint(want) {
		t.Errorf("env\n got %v\nwant %v", e.Env, want)
	}
	claims, err := token.Check(pooltest.Secret, tok, time.Now())
	if err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	if claims.Quota != 8<<30 || claims.Device != two[0].Remote.Index || !strings.HasPrefix(claims.ID, "nomad-") || claims.Expires.Before(time.Now().Add(719*time.Hour)) {
		t.Errorf("token claims %+v: want two shares' 8 GiB on GPU %d, from nomad, for 720h", claims, two[0].Remote.Index)
	}
	// The interposer only, never the real driver: no driver file, no hook.
	if len(driverMounts(n, e.Mounts)) != 0 || len(e.Hooks) != 0 || e.DriverLibraries != nil {
		t.Errorf("remote shares got the driver's files: mounts %+v, hooks %+v, libraries %v", e.Mounts, e.Hooks, e.DriverLibraries)
	}
	if len(e.DeviceNodes) != 0 {
		t.Errorf("a remote share got device nodes %v", e.DeviceNodes)
	}
	if want := []share.Mount{
		{ContainerPath: share.ScratchDir, Scratch: true},
		{HostPath: interposer, ContainerPath: remote.Mount, ReadOnly: true},
		{HostPath: filepath.Join(interposer, "nvidia-smi"), ContainerPath: remote.SMIPath, ReadOnly: true},
	}; !slices.Equal(e.Mounts, want) {
		t.Errorf("mounts %+v", e.Mounts)
	}
	// Each reservation gets a token of its own.
	if e2, err := n.Edits(two); err != nil || e2.Env[remote.EnvToken] == tok {
		t.Errorf("a second reservation: %v, token reused: %v", err, e2.Env[remote.EnvToken] == tok)
	}

	local, _ := c.Lookup(c.Groups[0].Shares[0].ID)
	for _, tc := range []struct {
		name string
		ids  []string
		with []share.Share
		want string
	}{
		{"two GPUs", []string{gpus[0] + "/remote/0", gpus[1] + "/remote/0"}, nil, "must come from one GPU"},
		{"mixed with local", []string{gpus[0] + "/remote/0"}, local, "cannot be combined with exclusive shares"},
		{"local first", nil, append(slices.Clone(local), two...), "cannot be combined with exclusive shares"},
	} {
		ss, err := c.Lookup(tc.ids...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Edits(append(ss, tc.with...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	// A node without a remote block cannot hand out remote shares.
	plain := openDGX(t)
	if _, err := plain.Edits(two); err == nil || !strings.Contains(err.Error(), "has no remote block") {
		t.Errorf("remote shares on a node without a remote block: %v", err)
	}
	if ok, why := plain.Health(two[0]); ok || !strings.Contains(why, "remote block") {
		t.Errorf("Health of a remote share on a node without a remote block: %v %q", ok, why)
	}
}

func TestCatalogSkipRemote(t *testing.T) {
	n, _, _ := remoteNode(t)
	c, _ := dgxCatalog(t, n, node.Skip(share.Remote))
	for _, s := range c.Shares() {
		if s.Mechanism == share.Remote {
			t.Fatalf("Skip(remote) offered %s", s.ID)
		}
	}
	// The pool was not scanned: the provider has no secret to mint with.
	rs := []share.Share{{ID: "GPU-r/remote/0", Mechanism: share.Remote, GPU: share.GPURef{UUID: "GPU-r", Minor: -1},
		Remote: &share.RemoteGPU{Addr: "10.0.0.5:7070", UUID: "GPU-r"}, MemoryMiB: 4096}}
	if _, err := n.Edits(rs); err == nil || !strings.Contains(err.Error(), "pool secret was not read") {
		t.Errorf("Edits before a scan: %v", err)
	}
}

// TestOpenWithoutDriver: a node without an NVIDIA driver whose config has
// a remote block offers the remote GPUs only; without the block Open fails.
func TestOpenWithoutDriver(t *testing.T) {
	noDriver := node.WithOpen(func(*nodeconfig.Config) (node.Host, error) {
		return nil, fmt.Errorf("%w: NVML init: ERROR_LIBRARY_NOT_FOUND", gpu.ErrNoDriver)
	})
	if _, err := node.Open(&nodeconfig.Config{StateDir: t.TempDir()}, noDriver); err == nil {
		t.Error("Open without a driver nor a remote block: no error")
	}
	n, srv, _ := remoteNode(t, noDriver)
	c, err := n.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 8 || len(c.Groups) != 1 || c.Groups[0].Mechanism != share.Remote {
		t.Fatalf("catalog of a node without GPUs: %v, %d shares", groupNamesOf(c), c.Len())
	}
	ss := c.Groups[0].Shares[:1]
	e, err := n.Edits(ss)
	if err != nil {
		t.Fatal(err)
	}
	if e.Env[remote.EnvAddr] != srv.Addr || len(e.DeviceNodes) != 0 || len(e.Hooks) != 0 || len(e.Mounts) != 3 || !e.Mounts[0].Scratch ||
		e.Mounts[1].ContainerPath != remote.Mount || e.Mounts[2].ContainerPath != remote.SMIPath || len(e.DriverLibraries) != 0 {
		t.Errorf("edits %+v, want the interposer (and its nvidia-smi) only", e)
	}
}

func TestCDIEdits(t *testing.T) {
	e := share.Edits{
		Env: map[string]string{"B": "2", "A": "1"},
		DeviceNodes: []share.DeviceNode{
			{HostPath: "/sim/dev/nvidia3", ContainerPath: "/dev/nvidia3", Permissions: "rw"},
		},
		Mounts: []share.Mount{
			{HostPath: "/state/mps/GPU-a/pipe", ContainerPath: mps.PipeMount},
			{HostPath: "/usr/lib/gpumux/remote", ContainerPath: remote.Mount, ReadOnly: true},
		},
	}
	out := node.CDIEdits(e)
	if !slices.Equal(out.Env, []string{"A=1", "B=2"}) {
		t.Errorf("env %v, want sorted", out.Env)
	}
	if len(out.DeviceNodes) != 1 || out.DeviceNodes[0].Path != "/dev/nvidia3" || out.DeviceNodes[0].HostPath != "/sim/dev/nvidia3" || out.DeviceNodes[0].Permissions != "rw" {
		t.Errorf("device nodes %+v", out.DeviceNodes)
	}
	if len(out.Mounts) != 2 {
		t.Fatalf("mounts %+v", out.Mounts)
	}
	for i, want := range []string{"rbind,nosuid,nodev", "rbind,nosuid,nodev,ro"} {
		m := out.Mounts[i]
		if got := strings.Join(m.Options, ","); got != want || m.Type != "bind" || m.HostPath != e.Mounts[i].HostPath || m.ContainerPath != e.Mounts[i].ContainerPath {
			t.Errorf("mount %d: %+v, want options %s", i, m, want)
		}
	}
}

// TestEditsScratch: a share whose pieces are mounted under gpumux's
// directory (an MPS share's pipe directory) gets a tmpfs there first, in
// CDI form a small tmpfs, so that runc makes the mountpoints below it in
// memory; a share with nothing there (a whole GPU) gets none.
func TestEditsScratch(t *testing.T) {
	n := openDGX(t,
		share.GPURule{Match: "0", Mechanism: share.Exclusive},
		share.GPURule{Match: "4", Mechanism: share.MPS, Shares: 2})
	c, inv := dgxCatalog(t, n)
	for _, tc := range []struct {
		id      string
		scratch bool
	}{
		{inv.GPUs[0].UUID, false},
		{inv.GPUs[4].UUID + "/mps/0", true},
	} {
		e := editsOf(t, n, c, tc.id)
		got := slices.IndexFunc(e.Mounts, func(m share.Mount) bool { return m.Scratch })
		if (got >= 0) != tc.scratch || tc.scratch && (got != 0 || e.Mounts[0].ContainerPath != share.ScratchDir) {
			t.Errorf("%s: scratch mount at %d in %+v; want one first at %s: %v", tc.id, got, e.Mounts, share.ScratchDir, tc.scratch)
		}
		if !tc.scratch {
			continue
		}
		m := node.CDIEdits(e).Mounts[0]
		if m.Type != "tmpfs" || m.ContainerPath != share.ScratchDir || !slices.Contains(m.Options, "size=64k") {
			t.Errorf("the scratch mount in CDI form: %+v; want a small tmpfs at %s", m, share.ScratchDir)
		}
	}
}

// editsOf are n's edits for the shares of c with these IDs.
func editsOf(t *testing.T, n *node.Node, c *share.Catalog, ids ...string) share.Edits {
	t.Helper()
	shares, err := c.Lookup(ids...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := n.Edits(shares)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
