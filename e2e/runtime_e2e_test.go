//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/mps"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/plugin"
)

// runtimeNode is a simulated H200 node for gpumux-runtime: GPUs 0-1 as four
// time-slice replicas each, GPU 4 as four MPS shares (its stand-in daemon
// running, as the plugin would keep it), GPU 6 in MIG mode with one
// 3g.71gb and two 2g.35gb; the others whole.
func runtimeNode(t testing.TB) (stateDir, config string) {
	t.Helper()
	stateDir, err := os.MkdirTemp("", "gmx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopMPSDaemons(t, stateDir); os.RemoveAll(stateDir) })
	config = filepath.Join(stateDir, "node.hcl")
	body := `simulate = "dgxh200"
state_dir = "` + stateDir + `"
gpu {
  match     = "0-1"
  mechanism = "timeslice"
  replicas  = 4
}
gpu {
  match     = "4"
  mechanism = "mps"
  shares    = 4
}
`
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := gpu.OpenSimulated("dgxh200", stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := mig.Apply(ctx, h, 6, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := nodeconfig.ParseConfig([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := n.Catalog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := mps.NewManager(stateDir, mps.WithControlBinary(filepath.Join(repoRoot(t), "bin", "gpumux-fake-mps-control")))
	if err := m.Reconcile(ctx, mps.Daemons(c)); err != nil {
		t.Fatal(err)
	}
	return stateDir, config
}

func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func startContainerd(t *testing.T, ctx context.Context, config string, opts ...ctrd.Option) (*ctrd.Daemon, string) {
	t.Helper()
	runtime := filepath.Join(repoRoot(t), "bin", "gpumux-runtime")
	if _, err := os.Stat(runtime); err != nil {
		t.Fatalf("%v (run make build)", err)
	}
	return ctrd.Start(ctx, t, append([]ctrd.Option{ctrd.WithEnv("GPUMUX_CONFIG=" + config)}, opts...)...), runtime
}

var statDev = regexp.MustCompile(`^/dev/nvidia([0-9]+)$`)

func TestRuntimeInjectsShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, config := runtimeNode(t)
	d, runtime := startContainerd(t, ctx, config)
	tests := []struct {
		name        string
		annotations map[string]string
		env         []string
		idPattern   string // the share ID the container must get
		caps, mps   bool
	}{
		{"exclusive", map[string]string{"gpumux.io/mechanism": "exclusive"}, nil, `^GPU-[0-9a-f-]+$`, false, false},
		{"mig by memory", map[string]string{"gpumux.io/mechanism": "mig", "gpumux.io/memory": "60Gi"}, nil, `^MIG-[0-9a-f-]+$`, true, false},
		{"mps", map[string]string{"gpumux.io/mechanism": "mps"}, nil, `^GPU-[0-9a-f-]+/mps/[0-3]$`, false, true},
		{"timeslice", map[string]string{"gpumux.io/mechanism": "timeslice"}, nil, `^GPU-[0-9a-f-]+/timeslice/[0-3]$`, false, false},
		{"auto strict", map[string]string{"gpumux.io/isolation": "strict"}, nil, `^MIG-[0-9a-f-]+$`, true, false},
		{"auto standard", map[string]string{"gpumux.io/isolation": "standard"}, nil, `^GPU-[0-9a-f-]+/mps/[0-3]$`, false, true},
		{"auto none, by env", nil, []string{"GPUMUX_ISOLATION=none"}, `^GPU-[0-9a-f-]+/timeslice/[0-3]$`, false, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := d.Run(ctx, "c"+string(rune('a'+i)), ctrd.RunOpts{BinaryName: runtime, Annotations: tc.annotations, Env: tc.env})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 {
				t.Fatalf("probe exit %d: %s %s", res.ExitCode, res.Stdout, res.Stderr)
			}
			checkShareProbe(t, ctrd.ParseProbe(res.Stdout), regexp.MustCompile(tc.idPattern), tc.caps, tc.mps)
		})
	}
}

// checkShareProbe checks what the probe saw in a container that got one
// share of runtimeNode: the share ID (matching idPattern) in GPUMUX_SHARES
// and its GPU in NVIDIA_VISIBLE_DEVICES, the control device nodes and its
// one GPU node, two MIG capability nodes (caps), the MPS settings and pipe
// directory (mps), the limiter's mounts for a time-slice replica (and the
// real libraries it loads), and the driver's files (checkDriverFiles). It
// returns the share ID.
func checkShareProbe(t *testing.T, p ctrd.Probe, idPattern *regexp.Regexp, caps, mps bool) string {
	t.Helper()
	id := p.Env["GPUMUX_SHARES"]
	if !idPattern.MatchString(id) {
		t.Fatalf("container got share %q, want one matching %s\n%+v", id, idPattern, p)
	}
	if want := strings.SplitN(id, "/", 2)[0]; p.Env["NVIDIA_VISIBLE_DEVICES"] != want {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %q", p.Env["NVIDIA_VISIBLE_DEVICES"], want)
	}
	for path, want := range map[string]string{"/dev/nvidiactl": "195:255", "/dev/nvidia-uvm": "238:0", "/dev/nvidia-uvm-tools": "238:1"} {
		if p.Devices[path] != want {
			t.Errorf("%s is %q, want %s", path, p.Devices[path], want)
		}
	}
	gpus, capNodes := 0, 0
	for path, mm := range p.Devices {
		if m := statDev.FindStringSubmatch(path); m != nil {
			gpus++
			if mm != "195:"+m[1] {
				t.Errorf("%s is %s", path, mm)
			}
		}
		if strings.HasPrefix(path, "/dev/nvidia-caps/") {
			capNodes++
		}
	}
	if gpus != 1 || (capNodes == 2) != caps {
		t.Errorf("container sees %d GPU nodes and %d caps nodes; want 1 and caps=%v", gpus, capNodes, caps)
	}
	// A time-slice replica gets the limiter (limit = "cap", the default):
	// its library, its limits and accounting, its GPU's registry.
	limited := strings.Contains(id, "/timeslice/")
	for _, m := range []string{"/run/gpumux/limiter/lib", "/run/gpumux/limiter/limits", "/run/gpumux/limiter/state", "/run/gpumux/limiter/node"} {
		if p.HasMount(m) != limited {
			t.Errorf("mount %s: %v, want %v (share %s)", m, p.HasMount(m), limited, id)
		}
	}
	if got := p.Env["GPUMUX_LIMITER_LIMITS"]; (got == "/run/gpumux/limiter/limits") != limited {
		t.Errorf("GPUMUX_LIMITER_LIMITS=%q for share %s", got, id)
	}
	if _, ok := p.Env["CUDA_MPS_PIPE_DIRECTORY"]; ok != mps || (mps && !p.HasMount("/run/gpumux/mps")) {
		t.Errorf("MPS settings %v (pipe dir mounted: %v), want them: %v", ok, p.HasMount("/run/gpumux/mps"), mps)
	}
	checkDriverFiles(t, p)
	// The limiter loads the real libraries from the driver's tree.
	lib := driverfiles.ContainerLibDir
	if got := p.Env["GPUMUX_LIMITER_CUDA"]; (got == lib+"/libcuda.so.1") != limited || (limited && p.Env["GPUMUX_LIMITER_NVML"] != lib+"/libnvidia-ml.so.1") {
		t.Errorf("GPUMUX_LIMITER_CUDA=%q GPUMUX_LIMITER_NVML=%q for share %s", got, p.Env["GPUMUX_LIMITER_NVML"], id)
	}
	return id
}

// leases returns the node's leases: share ID → container.
func leases(t testing.TB, ctx context.Context, stateDir string) map[string]string {
	t.Helper()
	s, err := lease.Open(lease.PathIn(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkDriverFiles checks that a container got the simulated driver's
// files read-only (runtimeNode's node is simulated): the libraries and
// programs in the staged tree at /usr/local/nvidia and no library mounted
// by itself (a Nomad docker task's reservation mounts included), the
// libraries in its linker cache (the probe's root file system has no
// NVIDIA file of its own, nor a cache), the programs on its PATH, the
// socket at its path.
func checkDriverFiles(t *testing.T, p ctrd.Probe) {
	t.Helper()
	for _, f := range []string{driverfiles.ContainerDir, "/run/nvidia-persistenced/socket"} {
		if !p.HasMount(f) || !p.ReadOnly[f] {
			t.Errorf("%s: mounted %v, read-only %v; want the driver's read-only", f, p.HasMount(f), p.ReadOnly[f])
		}
	}
	if lib := "/" + sim.LibDir(); slices.ContainsFunc(p.Mounts, func(m string) bool { return strings.HasPrefix(m, lib+"/") }) {
		t.Errorf("mounts %v: a library of the driver has a mount of its own, not in the tree", p.Mounts)
	}
	for _, name := range []string{"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-nvvm.so.4", "libnvidia-ptxjitcompiler.so.1"} {
		if got, want := p.LdCache[name], driverfiles.ContainerLibDir+"/"+name; got != want {
			t.Errorf("the container's linker cache has %s at %q, want %s (cache %v)", name, got, want, p.LdCache)
		}
	}
	for _, name := range []string{"nvidia-smi", "nvidia-debugdump"} {
		if got, want := p.Programs[name], driverfiles.ContainerBinDir+"/"+name; got != want {
			t.Errorf("%s on the container's PATH is %q, want %s (programs %v, mounts %v, other output %q)", name, got, want, p.Programs, p.Mounts, p.Other)
		}
	}
}

func TestRuntimeLeases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir, config := runtimeNode(t)
	d, runtime := startContainerd(t, ctx, config)
	whole := ctrd.RunOpts{BinaryName: runtime, Args: []string{ctrd.ProbePath, "-sleep"}, Annotations: map[string]string{"gpumux.io/mechanism": "exclusive"}}
	leases := func() map[string]string { return leases(t, ctx, stateDir) }

	// The node has four whole GPUs: 2, 3, 5 and 7 (0-1 are replicas, 4 is MPS, 6 is MIG).
	var held []string
	for i := 0; ; i++ {
		id := "whole-" + string(rune('a'+i))
		err := d.Create(ctx, id, whole)
		if err != nil {
			if !strings.Contains(err.Error(), "no free") {
				t.Fatalf("create %s: %v", id, err)
			}
			t.Logf("after %d whole GPUs: %v", i, err)
			break
		}
		held = append(held, id)
	}
	l := leases()
	owners := map[string]bool{}
	for shareID, c := range l {
		if owners[c] {
			t.Errorf("container %s holds two whole GPUs", c)
		}
		owners[c] = true
		if !strings.HasPrefix(shareID, "GPU-") {
			t.Errorf("lease %s → %s", shareID, c)
		}
	}
	if len(held) != 4 || len(l) != 4 {
		t.Fatalf("%d containers created, %d leases %v; want the node's 4 whole GPUs, each once", len(held), len(l), l)
	}

	// Deleting a container releases its GPU; the next one gets it.
	if _, err := d.Delete(ctx, held[0]); err != nil {
		t.Fatal(err)
	}
	if _, ok := owners[held[0]]; !ok || len(leases()) != 3 {
		t.Fatalf("after deleting %s: leases %v", held[0], leases())
	}
	if err := d.Create(ctx, "whole-again", whole); err != nil {
		t.Fatalf("a freed GPU was not handed out again: %v", err)
	}
	if l := leases(); len(l) != 4 {
		t.Errorf("leases %v", l)
	}
}

func TestRuntimeRefusesBadRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, config := runtimeNode(t)
	d, runtime := startContainerd(t, ctx, config)
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{"gpumux.io/memroy": "16Gi"}, `gpumux.io/memroy`},
		{map[string]string{"gpumux.io/memory": "16G"}, `16G`},
		{map[string]string{"gpumux.io/mechanism": "mig", "gpumux.io/memory": "100Gi"}, `no free MIG instance with ≥ 100 GiB`},
	} {
		_, err := d.Run(ctx, "bad", ctrd.RunOpts{BinaryName: runtime, Annotations: tc.annotations})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.annotations, err, tc.want)
		}
	}
	// A container that asks for nothing runs as with runc.
	res, err := d.Run(ctx, "plain", ctrd.RunOpts{BinaryName: runtime})
	if err != nil || res.ExitCode != 0 || strings.Contains(res.Stdout, "nvidia") {
		t.Errorf("plain container: %v %+v", err, res)
	}
}

func TestContainerdRuntimeClassSnippet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snippet, err := os.ReadFile("../examples/containerd/gpumux.toml")
	if err != nil {
		t.Fatal(err)
	}
	d := ctrd.Start(ctx, t, ctrd.WithCRI(), ctrd.WithConfig(string(snippet)))
	dump, err := d.ConfigDump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(dump, `.runtimes.gpumux]`)
	if i < 0 || !strings.Contains(dump[i:], `BinaryName = "/usr/bin/gpumux-runtime"`) || !strings.Contains(dump[i:], `runtime_type = "io.containerd.runc.v2"`) {
		t.Fatalf("containerd config dump does not show the gpumux runtime class:\n%s", dump)
	}
}

// TestRuntimeHonoursNomadReservation is Nomad's docker path
// (nvidia_runtime = "gpumux"): the plugin reserves a share and the task's
// container carries the reservation's environment. gpumux-runtime honours it
// with the plugin's single-use token, and refuses the same request without
// the token or a second time.
func TestRuntimeHonoursNomadReservation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, config := runtimeNode(t)
	src, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nodeconfig.ParseConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeSocket = "" // the path under test is gpumux-runtime-core's
	var packed []byte
	if err := base.MsgPackEncode(&packed, cfg); err != nil {
		t.Fatal(err)
	}
	p := plugin.New(hclog.NewNullLogger())
	if err := p.SetConfig(&base.Config{PluginConfig: packed}); err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := p.Fingerprint(fctx)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, g := range (<-ch).Devices {
		if g.Name == "H200" {
			id = g.Devices[0].ID
		}
	}
	res, err := p.Reserve([]string{id})
	if err != nil {
		t.Fatal(err)
	}
	var env, forged []string
	for k, v := range res.Envs {
		env = append(env, k+"="+v)
		if k != "GPUMUX_RESERVATION" {
			forged = append(forged, k+"="+v)
		}
	}
	d, runtime := startContainerd(t, ctx, config)
	if _, err := d.Run(ctx, "copied", ctrd.RunOpts{BinaryName: runtime, Env: forged}); err == nil || !strings.Contains(err.Error(), "not reserved on this node") {
		t.Errorf("GPUMUX_SHARES without the token: %v", err)
	}
	out, err := d.Run(ctx, "task", ctrd.RunOpts{BinaryName: runtime, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	probe := ctrd.ParseProbe(out.Stdout)
	if probe.Env["NVIDIA_VISIBLE_DEVICES"] != id || probe.Env["GPUMUX_SHARES"] != id {
		t.Errorf("the task's container saw %v, want the reserved %s", probe.Env, id)
	}
	checkDriverFiles(t, probe)
	if _, err := d.Run(ctx, "again", ctrd.RunOpts{BinaryName: runtime, Env: env}); err == nil || !strings.Contains(err.Error(), "used already") {
		t.Errorf("the token a second time: %v", err)
	}
}

// TestRuntimeConfigureContainerdConfig runs `gpumux runtime configure
// --runtime=containerd` on the config `containerd config default` writes
// and asks containerd how it reads the result: the gpumux runtime class,
// with runc's settings, and every other setting as before.
func TestRuntimeConfigureContainerdConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	containerd := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, ctrd.DefaultContainerdBin(), args...).Output()
		if err != nil {
			t.Fatalf("containerd %v: %v", args, err)
		}
		return string(out)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(containerd("config", "default")), 0o644); err != nil {
		t.Fatal(err)
	}
	before := containerd("--config", path, "config", "dump")
	runtime := filepath.Join(repoRoot(t), "bin", "gpumux-runtime")
	out, err := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "bin", "gpumux"), "runtime", "configure", "--runtime=containerd", "--config", path).CombinedOutput()
	if err != nil {
		t.Fatalf("gpumux runtime configure: %v\n%s", err, out)
	}
	after := containerd("--config", path, "config", "dump")

	// The dump's gpumux tables, and the rest.
	var gpumux, rest []string
	in := false
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "[") {
			in = strings.Contains(line, ".runtimes.gpumux]") || strings.Contains(line, ".runtimes.gpumux.")
		}
		if in {
			gpumux = append(gpumux, strings.TrimSpace(line))
		} else {
			rest = append(rest, line)
		}
	}
	if strings.Join(rest, "\n") != before {
		t.Errorf("settings other than the gpumux runtime changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	got := strings.Join(gpumux, "\n")
	for _, want := range []string{
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpumux]`,
		`runtime_type = "io.containerd.runc.v2"`,
		`BinaryName = "` + runtime + `"`,
		`SystemdCgroup = false`, // runc's, copied
	} {
		if !strings.Contains(got, want) {
			t.Errorf("containerd reads no %s in the gpumux runtime:\n%s\n(gpumux runtime configure said:\n%s)", want, got, out)
		}
	}
}
